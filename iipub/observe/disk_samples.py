"""The free space of the filesystems iipub writes to, over time: `relay` records it every ten
minutes (`disk_samples`), `status` reads the growth from it (how soon a filesystem fills)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from iipub.core.timefmt import naive_utc
from iipub.store import clock, db, tables

EVERY_MINUTES = 10  # one sample per filesystem this often (by the database clock)
KEEP_DAYS = 8

t = tables.disk_samples


def next_due(conn: Connection) -> dt.datetime | None:
    """When the relay records the next sample: EVERY_MINUTES after the newest (database clock);
    None when there is none yet (due now)."""
    newest = conn.execute(sa.select(sa.func.max(t.c.at))).scalar()
    return None if newest is None else naive_utc(newest) + dt.timedelta(minutes=EVERY_MINUTES)


def due(engine: Engine) -> bool:
    """Whether this relay run records a sample (nine minutes in ten it does not). By the
    database clock and the newest sample, so a minute answered by the wake-up check alone
    does not lose the sample: the relay's wake-up row wakes it when the next one is due."""
    try:
        with engine.connect() as conn:
            nxt = next_due(conn)
            now = clock.read_now(conn)
    except (sa.exc.OperationalError, sa.exc.ProgrammingError) as exc:
        if db.is_missing_table(exc):  # before migration 0013
            return False
        raise
    return nxt is None or naive_utc(now) >= nxt


def record(engine: Engine, samples: Iterable[tuple[str, int, int]]) -> None:
    """(path, free bytes, size bytes) of each filesystem now; rows past KEEP_DAYS go."""
    rows = [{"path": path[:1024], "free_bytes": free, "size_bytes": size} for path, free, size in samples]
    if not rows:
        return
    with engine.begin() as conn:
        now = clock.now(conn)
        for r in rows:
            conn.execute(t.insert().values(at=now, **r))
        conn.execute(t.delete().where(t.c.at < clock.now(conn, -KEEP_DAYS * 86400)))


def oldest_since(conn: Connection, since: dt.datetime) -> dict[str, tuple[dt.datetime, int]]:
    """path -> (when, free bytes) of its oldest sample since `since` (an empty dict before
    migration 0013: growth is then unknown, never an error)."""
    first = (sa.select(t.c.path, sa.func.min(t.c.id).label("id")).where(t.c.at >= since)
             .group_by(t.c.path).subquery())
    try:
        rows = conn.execute(sa.select(t.c.path, t.c.at, t.c.free_bytes).join(first, first.c.id == t.c.id)).all()
    except (sa.exc.OperationalError, sa.exc.ProgrammingError) as exc:
        if db.is_missing_table(exc):
            return {}
        raise
    return {path: (naive_utc(at), int(free)) for path, at, free in rows}
