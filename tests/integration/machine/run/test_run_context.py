"""A run's context as the sweep and a webhook delivery build it (`run_context`): the cool-downs
shared through the gate rows, the write batch of a claimed chunk, and a delivery that cannot
create because its context has no create pieces at all. The provider is the in-memory one
(`FakeProvider`): every call it was asked is recorded."""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import standardwebhooks

from iipub.machine import steps, sweep
from iipub.machine.run import run_context
from iipub.machine.run.run_context import RunContext, SweepContext
from iipub.model.jobs import Job
from iipub.model.states import Reason, State
from iipub.money.gate import CreateGate
from iipub.provider.fake import FakeProvider
from iipub.settings.config import Settings, WebhookSettings
from iipub.store import clock, tables
from iipub.store.job_store import Store
from iipub.webhooks import receiver
from tests.support.offline import offline_cfg
from tests.support.rows import job_events, job_rows, row_count
from tests.support.settings import without_auto_schedule


def db_today(engine: sa.Engine) -> dt.date:
    with engine.connect() as conn:
        return clock.read_now(conn).date()


@pytest.fixture
def cfg(db_url: str, tmp_path: Path) -> Settings:
    # Ticks work on the slots a test made only: they schedule nothing of their own.
    return without_auto_schedule(offline_cfg(db_url, tmp_path / "public"))


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    with FakeProvider() as p:
        yield p


def sweep_of(cfg: Settings, engine: sa.Engine, provider: FakeProvider, worker: str) -> SweepContext:
    return run_context.for_sweep(cfg, Store(engine, worker, 15), provider, time.monotonic() + 30, random.Random(1))


def delivery_of(cfg: Settings, engine: sa.Engine, provider: FakeProvider, worker: str) -> RunContext:
    return run_context.for_delivery(cfg, Store(engine, worker, 15), provider, time.monotonic() + 10,
                                    random.Random(1))


def leased_slots(store: Store, cfg: Settings, engine: sa.Engine, days: int = 1) -> list[Job]:
    """`days` slots of daily-brief, from today back, scheduled (NO_JOB) and leased by `store`."""
    today = db_today(engine)
    for back in range(days):
        assert store.schedule(cfg.products["daily-brief"], today - dt.timedelta(days=back))
    leased = [store.acquire_lease(row["id"], row["version"]) for row in job_rows(engine)]
    assert all(job is not None for job in leased)
    return [job for job in leased if job is not None]


# -- the cool-downs, shared through the gate rows ----------------------------------------------


def test_a_reads_429_holds_every_later_runs_reads_and_never_their_creates(
        cfg: Settings, engine: sa.Engine, provider: FakeProvider) -> None:
    first = sweep_of(cfg, engine, provider, "worker-a")
    assert not first.reads.cooling()
    first.reads.cool_down(30)
    assert first.reads.cooling() and not first.creates.cool_down.cooling()
    later = sweep_of(cfg, engine, provider, "worker-b")  # another process, started after the 429
    assert later.reads.cooling() and not later.creates.cool_down.cooling()
    assert delivery_of(cfg, engine, provider, "webhook-c").reads.cooling()  # a delivery's reads wait too
    with engine.connect() as conn:  # shared for the hint, capped at a minute
        until, now = conn.execute(sa.select(tables.read_cooldown.c.until_at)).scalar_one(), clock.read_now(conn)
    assert 0 < (until - now).total_seconds() <= 60


def test_a_creates_429_holds_every_later_runs_creates_and_never_their_reads(
        cfg: Settings, engine: sa.Engine, provider: FakeProvider) -> None:
    first = sweep_of(cfg, engine, provider, "worker-a")
    first.creates.cool_down.cool_down(30)
    assert first.creates.cool_down.cooling() and not first.reads.cooling()
    later = sweep_of(cfg, engine, provider, "worker-b")
    assert later.creates.cool_down.cooling() and not later.reads.cooling()
    assert not later.creates.blocked  # a cool-down is not a pause: the creates are leased when it ends


def test_a_paused_gate_blocks_the_runs_creates_from_its_start(
        cfg: Settings, engine: sa.Engine, provider: FakeProvider) -> None:
    sweep_of(cfg, engine, provider, "operator").creates.gate.pause("alice", "maintenance")
    assert sweep_of(cfg, engine, provider, "worker-a").creates.blocked


# -- the write batch of a claimed chunk ---------------------------------------------------------


def _commits(engine: sa.Engine) -> list[int]:
    seen = [0]

    def count(_: Any) -> None:
        seen[0] += 1

    sa.event.listen(engine, "commit", count)
    return seen


def test_a_chunks_deferred_writes_wait_for_its_last_job_and_commit_once(
        cfg: Settings, engine: sa.Engine, provider: FakeProvider) -> None:
    ctx = sweep_of(cfg, engine, provider, "worker-a")
    a, b, c = leased_slots(ctx.store, cfg, engine, days=3)
    batch = ctx.batches.open([a.id, b.id, c.id])
    assert ctx.batches.of(b.id) is batch
    for job in (a, b):
        batch.defer(ctx.store.plan(job, State.CREATE_ELIGIBLE, reason=Reason.WINDOW_OPEN))
    commits = _commits(engine)
    batch.done(a.id)
    batch.done(b.id)
    assert {r["state"] for r in job_rows(engine)} == {"NO_JOB"} and commits == [0]  # c is still running
    batch.done(c.id)  # the last job (it deferred nothing): the chunk's writes go, in one commit
    assert commits == [1]
    states = {r["id"]: r["state"] for r in job_rows(engine)}
    assert (states[a.id], states[b.id], states[c.id]) == ("CREATE_ELIGIBLE", "CREATE_ELIGIBLE", "NO_JOB")
    assert dict(ctx.counters.report.transitions) == {"CREATE_ELIGIBLE": 2}


def test_a_write_whose_fence_failed_is_dropped_and_the_rest_of_the_chunk_commits(
        cfg: Settings, engine: sa.Engine, provider: FakeProvider) -> None:
    ctx = sweep_of(cfg, engine, provider, "worker-a")
    a, b = leased_slots(ctx.store, cfg, engine, days=2)
    batch = ctx.batches.open([a.id, b.id])
    for job in (a, b):
        batch.defer(ctx.store.plan(job, State.CREATE_ELIGIBLE, reason=Reason.WINDOW_OPEN))
    with engine.begin() as conn:  # another writer moves a on meanwhile
        conn.execute(tables.jobs.update().where(tables.jobs.c.id == a.id).values(version=tables.jobs.c.version + 1))
    batch.done(a.id)
    batch.done(b.id)
    states = {r["id"]: r["state"] for r in job_rows(engine)}
    assert (states[a.id], states[b.id]) == ("NO_JOB", "CREATE_ELIGIBLE")
    report = ctx.counters.report
    assert report.lease_lost == 1 and dict(report.transitions) == {"CREATE_ELIGIBLE": 1}


# -- a webhook delivery cannot create ------------------------------------------------------------


def test_a_deliverys_context_has_no_create_pieces(cfg: Settings, engine: sa.Engine, provider: FakeProvider) -> None:
    ctx = delivery_of(cfg, engine, provider, "webhook-a")
    assert not isinstance(ctx, SweepContext)
    assert not hasattr(ctx, "creates") and not hasattr(ctx, "batches")
    assert isinstance(sweep_of(cfg, engine, provider, "worker-a").creates.gate, CreateGate)  # the sweep's has them


def test_a_job_that_reaches_create_eligible_on_a_delivery_is_handed_back_unpaid_for_the_sweep(
        cfg: Settings, engine: sa.Engine, provider: FakeProvider) -> None:
    ctx = delivery_of(cfg, engine, provider, "webhook-a")
    (job,) = leased_slots(ctx.store, cfg, engine)
    steps.run(ctx, job)  # NO_JOB -> CREATE_ELIGIBLE, then the create step: nothing it can send
    (row,) = job_rows(engine)
    assert (row["state"], row["generation_attempts"], row["lease_owner"]) == ("CREATE_ELIGIBLE", 0, None)
    assert [e["reason"] for e in job_events(engine, job.id)][-1] == "window_open"
    assert provider.calls == [] and row_count(engine, tables.spend) == 0
    ledger = cfg.ledger_path()
    assert ledger is not None and (not ledger.exists() or '"intent"' not in ledger.read_text())
    # The same job under a sweep's context is created: what differs is the create pieces alone.
    sweeping = sweep_of(cfg, engine, provider, "worker-a")
    (again,) = sweeping.store.claim([(row["id"], row["version"])])
    steps.run(sweeping, again)
    assert provider.count("create") == 1 and job_rows(engine)[0]["state"] == "ACCEPTED"


SECRET = "whsec_" + base64.b64encode(b"iipub-test-webhook-secret-0123456789").decode()


def test_a_webhook_whose_read_confirms_the_loss_leaves_the_recreate_to_the_sweep(
        cfg: Settings, engine: sa.Engine, provider: FakeProvider) -> None:
    """The delivery's poll confirms the loss (one read is enough here), the job goes to
    PROVIDER_EXPIRED_OR_MISSING and on to CREATE_ELIGIBLE in the delivery's thread: the recreate
    waits for the sweep, which sends it."""
    hooked = replace(cfg, provider_webhook_secret=SECRET,
                     provider=replace(cfg.provider, loss_confirm_reads=1),
                     reconcile=replace(cfg.reconcile, poll_interval_seconds=250),
                     webhooks=WebhookSettings(enabled=True, poll_interval_seconds=300, lease_wait_seconds=0.3,
                                              request_seconds=10))
    Store(engine, "test").schedule(hooked.products["daily-brief"], db_today(engine))
    sweep.run(hooked, engine, provider=provider)
    (job,) = job_rows(engine)
    assert job["state"] == "ACCEPTED" and provider.count("create") == 1
    provider.finish(job["response_id"], ending="failed")
    body = json.dumps({"id": "evt_1", "object": "event", "created_at": 1764547200, "type": "response.failed",
                       "data": {"id": job["response_id"]}}).encode()
    now = dt.datetime.now(dt.UTC)
    headers = {"webhook-id": "wh_loss", "webhook-timestamp": str(int(now.timestamp())),
               "webhook-signature": standardwebhooks.Webhook(SECRET).sign("wh_loss", now, body.decode()),
               "content-type": "application/json"}
    r = receiver.Receiver(hooked, engine=engine, provider=provider)
    try:
        answer = r.receive(body, headers)
    finally:
        r.close()
    assert answer.status == 200, answer.message
    (row,) = job_rows(engine)
    reasons = [e["reason"] for e in job_events(engine, job["id"])]
    assert "recreate_after_loss" in reasons  # the delivery took it to CREATE_ELIGIBLE ...
    assert (row["state"], row["generation_attempts"], row["lease_owner"]) == ("CREATE_ELIGIBLE", 1, None)
    assert provider.count("create") == 1 and row_count(engine, tables.spend) == 1  # ... and sent nothing
    clock.advance_clock(engine, 300)  # past the due time the poll had set
    sweep.run(hooked, engine, provider=provider)  # the sweep recreates it
    assert provider.count("create") == 2 and job_rows(engine)[0]["generation_attempts"] == 2
