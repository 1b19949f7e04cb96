"""The ledger view is as fresh as the fenced read it is compared with: worker B, whose tick read
the spend ledger while worker A's create was out, leases the slot after A's refund and compares
the fresh row with what the ledger says now, not with the copy it read before (issue 37, item 7:
a refunded slot parked `restored_behind_ledger` with no restore)."""

from __future__ import annotations

import datetime as dt
import random
import time
from pathlib import Path

import sqlalchemy as sa

from iipub.machine import steps, sweep
from iipub.machine.run import run_context
from iipub.money.ledger import slot_of
from iipub.provider.fake import Call, FakeProvider
from iipub.provider.outcomes import RefusalKind, Refused
from iipub.store import clock
from iipub.store.job_store import Store
from tests.support.offline import offline_cfg
from tests.support.rows import job_events, job_rows
from tests.support.settings import without_auto_schedule

DAY = dt.date(2026, 11, 29)
SLOT = slot_of("daily-brief", DAY.isoformat())


def test_a_worker_that_read_the_ledger_before_anothers_refund_pays_once_and_parks_nothing(
    db_url: str, engine: sa.Engine, tmp_path: Path
) -> None:
    cfg = without_auto_schedule(offline_cfg(db_url, tmp_path / "public"))  # the test's slots only
    Store(engine, "test").schedule(cfg.products["daily-brief"], DAY)
    seen_by_b: list[int | None] = []

    def while_a_creates(call: Call) -> None:
        """Worker A's create is out (its intent on the ledger, no outcome yet): worker B's tick
        reads the ledger."""
        if call.op == "create" and not seen_by_b:
            spend = worker_b.ledger.spend(SLOT)
            seen_by_b.append(spend.charged if spend is not None else None)

    provider = FakeProvider(on_call=while_a_creates)
    worker_b = run_context.for_sweep(cfg, Store(engine, "worker-b", cfg.reconcile.lease_seconds), provider,
                                     time.monotonic() + 60, random.Random(1))
    provider.script_create(Refused(2.0, "HTTP 429: Rate limit reached for requests. Please try again in 2s.",
                                   "rate_limit_exceeded", kind=RefusalKind.RATE))  # A's create: 429, refunded
    sweep.run(cfg, engine, provider=provider, worker="worker-a")
    assert seen_by_b == [1]  # B saw A's intent: a copy that would go stale
    (row,) = job_rows(engine)
    assert (row["state"], row["generation_attempts"]) == ("CREATE_ELIGIBLE", 0)  # refunded
    assert any(e["reason"] == "create_refused" for e in job_events(engine, row["id"]))

    clock.advance_clock(engine, 600)  # past the refund's backoff
    (due,) = worker_b.store.due_candidates(10)
    (leased,) = worker_b.store.claim([(due[0], due[1])])
    steps.run(worker_b, leased)
    worker_b.provider.close()

    (row,) = job_rows(engine)
    assert row["quarantine_reason"] is None, row  # no false restored_behind_ledger
    assert (row["state"], row["generation_attempts"]) == ("ACCEPTED", 1)
    assert provider.count("create") == 2 and provider.accepted == 1  # one paid create, one refused
    assert worker_b.ledger.spend(SLOT).charged == 1  # type: ignore[union-attr]
