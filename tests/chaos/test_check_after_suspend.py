"""Regression: `iipub check` stays silent for healthy jobs that were suspended and resumed.

A resume re-enters SAVED_NOT_PUBLIC, PUBLISHED or VALIDATION_FAILED_RETAINED through an
`operator_resume` entry; the checker once counted that as a second save, publication or
validation (`published_twice`, `not_published`, `parked_without_reason`)."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest
import sqlalchemy as sa

from iipub.machine import sweep
from iipub.observe import invariants
from iipub.operate.executor import Operator
from iipub.provider.openai.simulator import Simulator
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import tables
from iipub.store.job_store import Store
from tests.support.suite import fast_first

DAY = dt.date(2026, 11, 28)
pytestmark = pytest.mark.no_auto_schedule


def _state(engine: sa.Engine) -> str:
    with engine.connect() as conn:
        return str(conn.execute(sa.select(tables.jobs.c.state)).scalar_one())


def _job_id(engine: sa.Engine) -> str:
    with engine.connect() as conn:
        return str(conn.execute(sa.select(tables.jobs.c.id)).scalar_one())


def _drive_until(s: Settings, engine: sa.Engine, sim: Simulator, wanted: str, *, relay_too: bool) -> None:
    for _ in range(10):
        if _state(engine) == wanted:
            return
        sweep.run(s, engine)
        if _state(engine) == wanted:
            return
        if relay_too:
            relay.run(s, engine)
        sim.advance(5)
    assert _state(engine) == wanted


def _suspend_and_resume(s: Settings, engine: sa.Engine) -> None:
    job_id = _job_id(engine)
    with Operator(s, engine) as op:
        before = op.get(job_id).state
        assert op.suspend(job_id, "incident drill", "alice").state == "MANUALLY_SUSPENDED"
        assert op.resume(job_id, "alice", "drill over").state == before


@pytest.mark.parametrize("where", fast_first(["SAVED_NOT_PUBLIC", "PUBLISHED"]))
def test_suspend_and_resume_of_a_saved_or_published_edition_is_no_violation(
    settings: Settings, engine: sa.Engine, sim: Simulator, where: str
) -> None:
    s = replace(settings, webhook_sink=None)
    Store(engine, "test").schedule(s.products["daily-brief"], DAY)
    _drive_until(s, engine, sim, where, relay_too=where == "PUBLISHED")
    _suspend_and_resume(s, engine)
    assert _state(engine) == where
    for _ in range(4):  # let it finish: published once, cleaned up
        relay.run(s, engine)
        sweep.run(s, engine)
        sim.advance(5)
    assert _state(engine) == "DELETED"
    found = invariants.check(engine, settings=s, sim_stats=sim.stats(), settled=True)
    assert found == [], [str(v) for v in found]
    assert sim.stats()["creates_total"] == 1


def test_suspend_and_resume_of_a_validation_failure_is_no_violation(
    settings: Settings, engine: sa.Engine, sim: Simulator
) -> None:
    narrow = replace(settings.products["daily-brief"], allowed_domains=("bbc.co.uk",))
    s = replace(settings, products={"daily-brief": narrow}, webhook_sink=None)
    Store(engine, "test").schedule(narrow, DAY)
    _drive_until(s, engine, sim, "VALIDATION_FAILED_RETAINED", relay_too=False)
    _suspend_and_resume(s, engine)
    found = invariants.check(engine, settings=s, sim_stats=sim.stats(), settled=True)
    assert found == [], [str(v) for v in found]
