"""The `wakeups` rows and the queries a full run's recorder asks (`observe.wakeup_store` decides;
the texts the check shares are `store.wakeup_sql`): the marks of every table, when anything next
falls due, and the row itself. Every query reads through an index (tests/integration/store/
test_query_plans.py holds them to it), so recording costs the same whatever the age of the
database.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from iipub.store import clock, db, tables, wakeup_sql

wakeups = tables.wakeups


def marks(engine: Engine) -> tuple[Any, ...]:
    """The signature's values now (the statement the check runs, on the same driver)."""
    with engine.connect() as conn:
        return tuple(conn.exec_driver_sql(wakeup_sql.signature_sql(db.dialect_family(conn))).one())


def write(engine: Engine, command: str, place: str, values: Mapping[str, Any]) -> None:
    """Leave `command`'s row at `place` (by primary key). A row that already holds `values` is
    left as it is (`recorded_at` is when it last changed): a busy minute after a busy minute
    reads one row and writes nothing."""
    where = (wakeups.c.command == command) & (wakeups.c.place == place)
    with db.transaction(engine) as conn:
        seen = conn.execute(sa.select(*(wakeups.c[k] for k in values)).where(where)).mappings().first()
        if seen is not None and all(_same(seen[k], v) for k, v in values.items()):
            return
        row = {**values, "recorded_at": clock.now(conn)}
        if seen is not None:
            conn.execute(wakeups.update().where(where).values(**row))
        else:
            conn.execute(wakeups.insert().values(command=command, place=place, **row))


def _same(stored: Any, value: Any) -> bool:
    if isinstance(stored, dt.datetime) or isinstance(value, dt.datetime):
        return stored is not None and value is not None and _naive(stored) == _naive(value)
    return bool(stored == value)


def _naive(value: Any) -> dt.datetime:
    """A stored or computed time as a naive UTC datetime."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    assert isinstance(value, dt.datetime)
    return value.replace(tzinfo=None)


def now(engine: Engine) -> dt.datetime:
    """The database clock now (with the drill offset), as a naive UTC time."""
    with engine.connect() as conn:
        return clock.read_now(conn)


def reconcile_future(engine: Engine) -> list[Any]:
    """The earliest future time a job or track falls due, a lease ends, the custody watch reads a
    parked job, or a cool-down of the create gate or of reads ends. Each through the due index
    (state first): a lease or a watch of a DELETED job or a PUBLISHED track means nothing."""
    j, t, g, r = tables.jobs.c, tables.tracks.c, tables.create_gate.c, tables.read_cooldown.c
    with engine.connect() as conn:
        now = clock.now(conn)
        q = sa.select(
            sa.select(sa.func.min(j.next_attempt_at))
            .where(j.state.in_(wakeup_sql.ACTIVE_STATES), j.next_attempt_at > now).scalar_subquery(),
            sa.select(sa.func.min(j.lease_expiry))
            .where(j.state.in_(wakeup_sql.LIVE_JOB_STATES), j.lease_expiry > now).scalar_subquery(),
            sa.select(sa.func.min(j.custody_watch_at))
            .where(j.state.in_(wakeup_sql.CUSTODY_WATCHED_STATES), j.custody_watch_at > now).scalar_subquery(),
            sa.select(sa.func.min(t.next_attempt_at))
            .where(t.state.in_(wakeup_sql.TRACK_ACTIVE_STATES), t.next_attempt_at > now).scalar_subquery(),
            sa.select(sa.func.min(t.lease_expiry))
            .where(t.state.in_(wakeup_sql.LIVE_TRACK_STATES), t.lease_expiry > now).scalar_subquery(),
            sa.select(sa.func.min(g.cooldown_until)).where(g.cooldown_until > now).scalar_subquery(),
            sa.select(sa.func.min(g.probe_after)).where(g.probe_after > now).scalar_subquery(),
            sa.select(sa.func.min(g.probe_expiry)).where(g.probe_expiry > now).scalar_subquery(),
            sa.select(sa.func.min(r.until_at)).where(r.until_at > now).scalar_subquery(),
        )
        return list(conn.execute(q).one())


def relay_future(engine: Engine) -> list[Any]:
    """The earliest future time an unpublished outbox event falls due or its lease ends, or the
    lease ends of a saved job or track the relay moves to PUBLISHED (a relay killed holding it)."""
    o, j, t = tables.outbox.c, tables.jobs.c, tables.tracks.c
    with engine.connect() as conn:
        now = clock.now(conn)
        q = sa.select(
            sa.select(sa.func.min(o.next_attempt_at)).where(o.published_at.is_(None), o.next_attempt_at > now)
            .scalar_subquery(),
            sa.select(sa.func.min(o.lease_expiry)).where(o.published_at.is_(None), o.lease_expiry > now)
            .scalar_subquery(),
            sa.select(sa.func.min(j.lease_expiry)).where(j.state == wakeup_sql.RELAY_STATE, j.lease_expiry > now)
            .scalar_subquery(),
            sa.select(sa.func.min(t.lease_expiry)).where(t.state == wakeup_sql.RELAY_STATE, t.lease_expiry > now)
            .scalar_subquery(),
        )
        return list(conn.execute(q).one())
