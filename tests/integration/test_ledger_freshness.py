"""The ledger view is as fresh as the fenced read it is compared with: worker B, whose tick read
the spend ledger while worker A's create was out, leases the slot after A's refund and compares
the fresh row with what the ledger says now, not with the copy it read before (issue 37, item 7:
a refunded slot parked `restored_behind_ledger` with no restore)."""

from __future__ import annotations

import datetime as dt
import random
import time

import pytest
import sqlalchemy as sa

from iipub.machine import steps, sweep
from iipub.machine.tick import Tick
from iipub.money.ledger import slot_of
from iipub.provider.adapter import Provider
from iipub.provider.outcomes import CreateOutcome, CreateRequest
from iipub.provider.simulator import Simulator
from iipub.settings.config import Settings
from iipub.store import clock
from iipub.store.job_store import Store
from tests.support.rows import job_events, job_rows

DAY = dt.date(2026, 11, 29)
SLOT = slot_of("daily-brief", DAY.isoformat())
pytestmark = pytest.mark.no_auto_schedule


class _Interleaved(Provider):
    """Worker A's provider: while A's create is out (its intent on the ledger, no outcome yet),
    worker B's tick reads the ledger."""

    def __init__(self, settings: Settings, other: Tick) -> None:
        super().__init__(settings.provider, "sk-test")
        self.other = other

    def create(self, request: CreateRequest) -> CreateOutcome:
        seen = self.other.spend(SLOT)
        assert seen is not None and seen.charged == 1  # B saw A's intent: a copy that would go stale
        return super().create(request)


def test_a_worker_that_read_the_ledger_before_anothers_refund_pays_once_and_parks_nothing(
    cfg: Settings, engine: sa.Engine, sim: Simulator
) -> None:
    Store(engine, "test").schedule(cfg.products["daily-brief"], DAY)
    worker_b = Tick(cfg, Store(engine, "worker-b", cfg.reconcile.lease_seconds), Provider(cfg.provider, "sk-test"),
                    time.monotonic() + 60, random.Random(1))
    sim.add_faults([{"fault": "rate_limit", "op": "create", "times": 1}])  # A's create: 429, refunded
    provider_a = _Interleaved(cfg, worker_b)
    try:
        sweep.run(cfg, engine, provider=provider_a, worker="worker-a")
    finally:
        provider_a.close()
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
    stats = sim.stats()
    assert stats["creates_total"] == 1 and stats["faults_fired"]["rate_limit"] == 1  # one paid create, one refused
    assert worker_b.spend(SLOT).charged == 1  # type: ignore[union-attr]
