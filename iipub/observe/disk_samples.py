"""The free space of the filesystems iipub writes to, over time: `relay` records it every ten
minutes (`disk_samples`, written by `store.disk_samples`), `status` reads the growth from it (how
soon a filesystem fills)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from iipub.core.timefmt import naive_utc
from iipub.store import clock, db
from iipub.store import disk_samples as disk_rows
from iipub.store.handles import Connection, Engine, OperationalError, ProgrammingError

EVERY_MINUTES = 10  # one sample per filesystem this often (by the database clock)
KEEP_DAYS = 8


def next_due(conn: Connection) -> dt.datetime | None:
    """When the relay records the next sample: EVERY_MINUTES after the newest (database clock);
    None when there is none yet (due now)."""
    newest = disk_rows.newest(conn)
    return None if newest is None else newest + dt.timedelta(minutes=EVERY_MINUTES)


def due(engine: Engine) -> bool:
    """Whether this relay run records a sample (nine minutes in ten it does not). By the
    database clock and the newest sample, so a minute answered by the wake-up check alone
    does not lose the sample: the relay's wake-up row wakes it when the next one is due."""
    try:
        with engine.connect() as conn:
            nxt = next_due(conn)
            now = clock.read_now(conn)
    except (OperationalError, ProgrammingError) as exc:
        if db.is_missing_table(exc):  # before migration 0013
            return False
        raise
    return nxt is None or naive_utc(now) >= nxt


def record(engine: Engine, samples: Iterable[tuple[str, int, int]]) -> None:
    """(path, free bytes, size bytes) of each filesystem now; rows past KEEP_DAYS go."""
    rows = [{"path": path[:1024], "free_bytes": free, "size_bytes": size} for path, free, size in samples]
    if not rows:
        return
    disk_rows.record(engine, rows, KEEP_DAYS)
