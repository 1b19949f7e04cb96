"""In-process reconcile ticks (`sweep.run`), once or until the slots are saved."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa

from iipub.machine import sweep
from iipub.provider.openai.simulator import Simulator
from iipub.settings.config import Settings
from iipub.store import tables
from iipub.store.job_store import Store


def drive_to_saved(settings: Settings, engine: sa.Engine, sim: Simulator, last_day: dt.date, days: int = 1) -> None:
    """Schedule every product for `days` dates up to `last_day` and tick until every job is
    SAVED_NOT_PUBLIC (editions and outbox rows written, nothing delivered yet)."""
    store = Store(engine, "test")
    for i in range(days):
        for p in settings.products.values():
            store.schedule(p, last_day - dt.timedelta(days=i))
    states: set[str] = set()
    for _ in range(6):
        sweep.run(settings, engine)
        sim.advance(5)
        with engine.connect() as conn:
            states = set(conn.execute(sa.select(tables.jobs.c.state)).scalars())
        if states == {"SAVED_NOT_PUBLIC"}:
            return
    raise AssertionError(f"jobs did not reach SAVED_NOT_PUBLIC: {states}")


def tick(settings: Settings, engine: sa.Engine, **kw: Any) -> sweep.SweepReport:
    """One in-process reconcile tick (`reconcile.run`)."""
    return sweep.run(settings, engine, **kw)
