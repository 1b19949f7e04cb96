"""The only writer of the create gate's rows: the one `create_gate` row every reconcile process
reads before a paid create (written fenced on its version), `gate_events` (the journal of its
changes and of the operator's acts on money), and `read_cooldown` (the reads' shared
cool-down). The rules are `money.breaker`'s, the decisions `money.gate`'s."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, RowMapping

from iipub.core.timefmt import naive_utc
from iipub.store import clock, db, tables

gate_table, gate_events_table = tables.create_gate, tables.gate_events


def read(conn: Connection, fields: Sequence[str]) -> RowMapping:
    """The gate row's `fields`."""
    return conn.execute(
        sa.select(*[gate_table.c[name] for name in fields]).where(gate_table.c.id == 1)
    ).mappings().one()


def write(conn: Connection, seen_version: int, changes: Mapping[str, Any]) -> bool:
    """The gate row changed, fenced on the version it was read at: False when another process
    changed it first."""
    values: dict[str, Any] = {**changes, "version": gate_table.c.version + 1,
                              "updated_at": clock.now(conn)}
    res = conn.execute(gate_table.update()
                       .where(gate_table.c.id == 1, gate_table.c.version == seen_version).values(**values))
    return bool(res.rowcount == 1)


def record_event(conn: Connection, kind: str, worker: str, detail: str) -> None:
    """A `gate_events` line, in the caller's transaction (`detail`: its JSON)."""
    conn.execute(gate_events_table.insert().values(kind=kind, worker=worker, at=clock.now(conn), detail=detail))


def read_cool_down(conn: Connection) -> dt.datetime | None:
    """Until when provider reads wait (a 429 on a read, shared by every process), if it is ahead."""
    t = tables.read_cooldown
    until = conn.execute(sa.select(t.c.until_at).where(t.c.name == "reads",
                                                        t.c.until_at > clock.now(conn))).scalar()
    return naive_utc(until) if until is not None else None


def share_read_cool_down(engine: Engine, wait: float, worker: str) -> None:
    """Every process's reads wait `wait` seconds from now (unless they already wait longer)."""
    t = tables.read_cooldown
    with db.transaction(engine) as conn:
        until = clock.now(conn, wait)
        if conn.execute(t.update().where(t.c.name == "reads", t.c.until_at < until)
                        .values(until_at=until, worker=worker[:128], set_at=clock.now(conn))).rowcount:
            return
        if conn.execute(sa.select(t.c.name).where(t.c.name == "reads")).first() is None:
            with contextlib.suppress(sa.exc.IntegrityError), conn.begin_nested():
                conn.execute(t.insert().values(name="reads", until_at=until, worker=worker[:128],
                                               set_at=clock.now(conn)))
