"""The log lines that are operational signals carry what an operator greps for: a lost fence
(`lease_lost`), a write rolled back by a lock (`contention`), a completion the webhooks missed
(`webhook_missed`), a provider's trouble (`provider_trouble`). Asserted with structlog's
`capture_logs` on single-threaded paths."""

from __future__ import annotations

import datetime as dt
import logging
import random
import time
from collections.abc import MutableMapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import structlog
from structlog.testing import capture_logs

from iipub.machine import steps, sweep
from iipub.machine.run import run_context
from iipub.model.jobs import Job
from iipub.model.states import Reason, State
from iipub.provider.fake import FakeProvider
from iipub.provider.openai.simulator import Simulator
from iipub.settings.config import Settings
from iipub.store import clock, db, tables
from iipub.store.job_store import Store
from tests.support.offline import offline_cfg
from tests.support.rows import job_rows


@pytest.fixture
def quiet_cfg(db_url: str, tmp_path: Path) -> Settings:
    """`cfg` with no simulator behind it, for the tests whose provider is never called."""
    return offline_cfg(db_url, tmp_path / "public")


def db_today(engine: sa.Engine) -> dt.date:
    with engine.connect() as conn:
        return clock.read_now(conn).date()


def _one_at_a_time(cfg: Settings) -> Settings:
    return replace(cfg, reconcile=replace(cfg.reconcile, concurrency=1))


def _events(logs: list[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == name]


def _one_leased_job(store: Store, cfg: Settings, engine: sa.Engine) -> Job:
    """Today's daily-brief slot, scheduled and leased by `store`."""
    assert store.schedule(cfg.products["daily-brief"], db_today(engine))
    (row,) = job_rows(engine)
    leased = store.acquire_lease(row["id"], row["version"])
    assert leased is not None
    return leased


def test_a_poll_write_that_lost_its_fence_is_logged_lease_lost_and_counted(quiet_cfg: Settings,
                                                                          engine: sa.Engine) -> None:
    store = Store(engine, "w-lost")
    leased = _one_leased_job(store, quiet_cfg, engine)
    with FakeProvider() as provider:
        tick = run_context.for_sweep(quiet_cfg, store, provider, time.monotonic() + 30, random.Random(1))
        batch = tick.batches.open([leased.id])
        batch.defer(store.plan(leased, State.CREATE_ELIGIBLE, reason=Reason.WINDOW_OPEN))
        with engine.begin() as conn:  # another writer moves the job on meanwhile
            conn.execute(tables.jobs.update().where(tables.jobs.c.id == leased.id)
                         .values(version=tables.jobs.c.version + 1))
        with capture_logs() as logs:
            batch.done(leased.id)
    lost = _events(logs, "lease_lost")
    assert [(e["job_id"], e["worker"], e["log_level"]) for e in lost] == [(leased.id, "w-lost", "warning")]
    assert tick.counters.report.lease_lost == 1 and dict(tick.counters.report.transitions) == {}
    assert job_rows(engine)[0]["state"] == "NO_JOB"  # the stale write changed nothing
    assert provider.calls == []


@pytest.mark.no_auto_schedule
def test_a_completion_found_by_a_poll_before_any_webhook_is_logged_webhook_missed(
        cfg: Settings, engine: sa.Engine, sim: Simulator) -> None:
    hooked = _one_at_a_time(replace(cfg, webhooks=replace(cfg.webhooks, enabled=True)))
    Store(engine, "t").schedule(hooked.products["daily-brief"], db_today(engine))
    sweep.run(hooked, engine)  # dispatched
    (job,) = job_rows(engine)
    assert job["response_id"]
    sim.advance(5)
    clock.advance_clock(engine, 600)
    with capture_logs() as logs:
        sweep.run(hooked, engine)
    missed = _events(logs, "webhook_missed")
    assert [(e["job_id"], e["response_id"], e["log_level"]) for e in missed] == [
        (job["id"], job["response_id"], "info")]
    assert job_rows(engine)[0]["payload"] is not None  # and custody was taken all the same


@pytest.mark.no_auto_schedule
def test_a_rate_limited_poll_is_logged_provider_trouble_with_its_status(
        cfg: Settings, engine: sa.Engine, sim: Simulator) -> None:
    s = _one_at_a_time(cfg)
    Store(engine, "t").schedule(s.products["daily-brief"], db_today(engine))
    sweep.run(s, engine)
    sim.add_faults([{"op": "retrieve", "fault": "rate_limit"}])
    clock.advance_clock(engine, 60)
    with capture_logs() as logs:
        sweep.run(s, engine)
    trouble = _events(logs, "provider_trouble")
    assert [(e["op"], e["status"], e["log_level"]) for e in trouble] == [("read", 429, "warning")]
    assert job_rows(engine)[0]["generation_attempts"] == 1  # a read's trouble never costs a create


@pytest.mark.slow
def test_a_step_that_waited_out_a_lock_is_logged_contention_and_changes_nothing(
    quiet_cfg: Settings, engine: sa.Engine, db_url: str
) -> None:
    """Another transaction holds the job's row (MariaDB) or the write lock (SQLite) past the
    store's lock wait: the step's write is rolled back as `Contention`, logged and counted."""
    waits_a_second = db.make_engine(db_url, lock_wait_seconds=1)
    try:
        store = Store(waits_a_second, "w-contended")
        leased = _one_leased_job(store, quiet_cfg, engine)
        with FakeProvider() as provider:
            tick = run_context.for_sweep(quiet_cfg, store, provider, time.monotonic() + 30, random.Random(1))
            with engine.connect() as blocker, blocker.begin():
                blocker.execute(sa.select(tables.jobs.c.id).where(tables.jobs.c.id == leased.id).with_for_update())
                with capture_logs() as logs:
                    steps.run(tick, leased)
    finally:
        waits_a_second.dispose()
    contended = _events(logs, "contention")
    assert [(e["job_id"], e["worker"], e["log_level"]) for e in contended] == [(leased.id, "w-contended", "warning")]
    assert tick.counters.report.contention == 1 and dict(tick.counters.report.transitions) == {}
    (after,) = job_rows(engine)
    assert (after["state"], after["version"]) == ("NO_JOB", leased.version)  # the write was rolled back
    assert provider.calls == []


def test_a_write_that_keeps_the_state_is_a_debug_line_and_a_move_is_info(quiet_cfg: Settings,
                                                                         engine: sa.Engine) -> None:
    """A poll that found the response still running (the same state again) is journaled but logged
    at debug, so 10,000 polls a minute are not 10,000 info lines; a move to another state is info."""
    store = Store(engine, "w-log")
    leased = _one_leased_job(store, quiet_cfg, engine)
    # Debug lines pass (a command run earlier in this process may have configured info), and are captured.
    level = structlog.get_config()["wrapper_class"]
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with capture_logs() as logs:
            kept = store.transition(leased, State.NO_JOB, reason=Reason.POLL, keep_lease=True)
            store.transition(kept, State.CREATE_ELIGIBLE, reason=Reason.WINDOW_OPEN)
    finally:
        structlog.configure(wrapper_class=level)
    lines = [(e["from_state"], e["to_state"], e["log_level"]) for e in _events(logs, "transition")]
    assert lines == [("NO_JOB", "NO_JOB", "debug"), ("NO_JOB", "CREATE_ELIGIBLE", "info")]
    with engine.connect() as conn:  # both are in the journal all the same
        reasons = conn.execute(sa.select(tables.job_events.c.reason).where(tables.job_events.c.job_id == leased.id)
                               .order_by(tables.job_events.c.id)).scalars().all()
    assert reasons[-2:] == ["poll", "window_open"]
