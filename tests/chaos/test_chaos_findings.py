"""Regression tests for what the chaos runs turned up outside the invariants (see
docs/reliability.md, "What the campaign found")."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest
import sqlalchemy as sa

from iipub.machine import sweep
from iipub.model.states import Reason, State
from iipub.provider.openai.simulator import Simulator
from iipub.settings.config import Settings
from iipub.store import clock, db, tables
from iipub.store.job_store import Store

DAY = dt.date(2026, 11, 28)
pytestmark = pytest.mark.no_auto_schedule


def versions(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.select(tables.jobs.c.id, tables.jobs.c.version)).all())


def test_a_cooled_down_tick_leaves_the_jobs_it_cannot_work_on_alone(settings: Settings, engine: sa.Engine,
                                                                   sim: Simulator) -> None:
    p = replace(settings.products["daily-brief"], items=3, opens_at=dt.time(0, 0))
    s = replace(settings, products={p.name: p}, reconcile=replace(settings.reconcile, concurrency=1))
    store = Store(engine, "test")
    for i in range(20):
        store.schedule(p, DAY - dt.timedelta(days=i))
    for job in store.list_jobs():  # windows open; nothing sent yet
        leased = store.acquire_lease(job.id, job.version)
        assert leased is not None
        store.transition(leased, State.CREATE_ELIGIBLE, reason=Reason.WINDOW_OPEN,
                         changes={"config_fingerprint": p.fingerprint()})
    before = versions(engine)
    sim.add_faults([{"op": "create", "fault": "rate_limit"}])  # the first create of the tick: 429
    report = sweep.run(s, engine)
    assert sim.stats()["requests"]["create"] == 1 and report.transitions["CREATE_ELIGIBLE"] == 1
    touched = {j for j, v in versions(engine).items() if v != before[j]}
    assert len(touched) == 1, f"{len(touched)} jobs written, {report.leased} leased for one refused create"


@pytest.mark.mysql
def test_advancing_the_drill_clock_does_not_wait_for_open_transactions(engine: sa.Engine, settings: Settings) -> None:
    import threading
    import time

    store = Store(engine, "test")
    store.schedule(settings.products["daily-brief"], DAY)
    (job,) = store.list_jobs()
    conn = engine.connect()
    tx = conn.begin()
    done: list[float] = []
    try:
        # A worker's transition, open (as if the worker were paused before its commit): the fenced
        # update and the journal row, both stamped with the database clock, as Store.transition does.
        conn.execute(tables.jobs.update().where(tables.jobs.c.id == job.id).values(updated_at=clock.now(conn)))
        conn.execute(tables.job_events.insert().values(job_id=job.id, from_state="NO_JOB", to_state="NO_JOB",
                                                   version=99, worker="paused", reason="x", at=clock.now(conn)))
        start = time.monotonic()

        def advance() -> None:
            clock.advance_clock(engine, 1)
            done.append(time.monotonic() - start)

        t = threading.Thread(target=advance)
        t.start()
        t.join(timeout=3)
        finished_while_open = bool(done)
    finally:
        tx.rollback()
        conn.close()
        t.join(timeout=60)
    assert finished_while_open, "advance_clock waited for an unrelated open write transaction"


def test_a_database_that_cannot_be_reached_is_unavailable_not_a_bug() -> None:
    from iipub.core.errors import DatabaseUnavailable

    engine = db.make_engine("mysql+pymysql://root@127.0.0.1:9/none")
    try:
        with pytest.raises(DatabaseUnavailable):
            Store(engine, "reconcile:test").acquire_lease("00000000-0000-0000-0000-000000000000", 1)
    finally:
        engine.dispose()
