"""The only writer of the `runs` table: one row per cron run (`reconcile`, `relay`), recorded at
its start and end and pruned after a week; and the queries `status` reads its heartbeats with.
What a run records and how `status` judges it are `observe.heartbeat`'s."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, RowMapping

from iipub.store import clock, db, tables

runs = tables.runs


def start(engine: Engine, command: str, host: str, pid: int, worker: str) -> int:
    """A run that starts now; its id."""
    with db.transaction(engine) as conn:
        res = conn.execute(runs.insert().values(
            command=command, host=host, pid=pid, worker=worker[:128], started_at=clock.now(conn)))
        assert res.inserted_primary_key is not None
        return int(res.inserted_primary_key[0])


def finish(engine: Engine, run_id: int | None, values: dict[str, Any], *, command: str, host: str, pid: int,
           worker: str, elapsed: float) -> int:
    """How run `run_id` ended; a run whose start was not recorded (None) gets its whole row now,
    its start reckoned back `elapsed` seconds. Its id."""
    with db.transaction(engine) as conn:
        values["finished_at"] = clock.now(conn)
        if run_id is not None:
            conn.execute(runs.update().where(runs.c.id == run_id).values(**values))
            return run_id
        res = conn.execute(runs.insert().values(
            command=command, host=host, pid=pid, worker=worker[:128],
            started_at=clock.now(conn, -elapsed), **values))
        assert res.inserted_primary_key is not None
        return int(res.inserted_primary_key[0])


def prune(engine: Engine, newest_id: int, keep_rows: int, keep_days: float) -> int:
    """Delete runs older than `keep_days` or beyond the newest `keep_rows`."""
    with db.transaction(engine) as conn:
        n = conn.execute(runs.delete().where(runs.c.id <= newest_id - keep_rows)).rowcount
        n += conn.execute(runs.delete().where(runs.c.started_at < clock.now(conn, -keep_days * 86_400.0))).rowcount
        return int(n)


def reconcile_summaries(conn: Connection, look_back: int) -> list[str | None]:
    """The summaries of the newest `look_back` finished reconcile runs, newest first."""
    return list(conn.execute(sa.select(runs.c.summary).where(runs.c.command == "reconcile",
                                                             runs.c.finished_at.is_not(None))
                             .order_by(runs.c.id.desc()).limit(look_back)).scalars())


def counts(conn: Connection, window_hours: float, stale_after_seconds: float) -> list[tuple[str, Any, Any, Any, int]]:
    """(command, ok, unfinished, started before `stale_after_seconds` ago, runs) of the runs
    started in the window."""
    window_start = clock.now(conn, -window_hours * 3600)
    stale = clock.now(conn, -stale_after_seconds)
    opened = runs.c.finished_at.is_(None)
    old = sa.case((runs.c.started_at < stale, 1), else_=0)
    q = (sa.select(runs.c.command, runs.c.ok, opened.label("open"), old.label("old"), sa.func.count())
         .where(runs.c.started_at >= window_start)
         .group_by(runs.c.command, runs.c.ok, opened, old))
    return [(command, ok, is_open, is_old, int(n)) for command, ok, is_open, is_old, n in conn.execute(q)]


def last_finished(conn: Connection, command: str, *, ok: bool = False) -> RowMapping | None:
    """The newest finished run of `command` (with `ok`: the newest that went well)."""
    finished = (sa.select(runs).where(runs.c.command == command, runs.c.finished_at.is_not(None))
                .order_by(runs.c.finished_at.desc(), runs.c.id.desc()).limit(1))
    if ok:
        finished = finished.where(runs.c.ok == sa.true())
    return conn.execute(finished).mappings().first()


def any_recorded(conn: Connection) -> bool:
    return conn.execute(sa.select(runs.c.id).limit(1)).first() is not None
