"""The only writer of `disk_samples`: the free space of each filesystem iipub writes to, one row
per filesystem per sample; and its queries. When a sample is taken is `observe.disk_samples`'s."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from iipub.core.timefmt import naive_utc
from iipub.store import clock, db, tables

t = tables.disk_samples


def newest(conn: Connection) -> dt.datetime | None:
    """When the newest sample was taken (None: there is none yet)."""
    found = conn.execute(sa.select(sa.func.max(t.c.at))).scalar()
    return None if found is None else naive_utc(found)


def record(engine: Engine, rows: Iterable[Mapping[str, object]], keep_days: float) -> None:
    """The rows of one sample, stamped now; rows past `keep_days` go."""
    with engine.begin() as conn:
        now = clock.now(conn)
        for r in rows:
            conn.execute(t.insert().values(at=now, **r))
        conn.execute(t.delete().where(t.c.at < clock.now(conn, -keep_days * 86400)))


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
