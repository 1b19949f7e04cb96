"""The free space of the filesystems iipub writes to, over time: `relay` records it every ten
minutes (`disk_samples`), `status` reads the growth from it (how soon a filesystem fills)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from . import clock, db, tables
from .timefmt import naive_utc

EVERY_MINUTES = 10  # one sample per filesystem this often (the relay's minute, by the host clock)
KEEP_DAYS = 8

t = tables.disk_samples


def due(minute: int) -> bool:
    """Whether the run of this UTC minute records a sample (nine runs in ten do nothing)."""
    return minute % EVERY_MINUTES == 0


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
