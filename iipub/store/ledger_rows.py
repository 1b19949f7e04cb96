"""The only writer of the `ledger_book` rows: every spend ledger this database was written to
(migration 0016: one row per ledger, each host's own or one shared file), with its id, its path,
the host it belongs to and the last paid create before it was opened (`base_spend_id`); and the
count of paid creates whose intent line went to each. What the rows mean against the ledger files
is `money.ledger_book`'s."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from iipub.store import clock, db, spend_rows, tables

LEGACY = "this"  # the one row of a database from before 0016 (its host claims it)


@dataclass(frozen=True)
class BookRow:
    name: str
    ledger_id: str
    path: str
    base_spend_id: int
    host: str | None


def key_of(host: str, path: str) -> str:
    """The row name of the ledger at `path` on `host` (resolved paths)."""
    return hashlib.sha256(f"{host}\0{path}".encode()).hexdigest()[:16]


def read_all(conn: Connection) -> list[BookRow]:
    t = tables.ledger_book.c
    rows = conn.execute(sa.select(t.name, t.ledger_id, t.path, t.base_spend_id, t.host).order_by(t.opened_at)).all()
    return [BookRow(str(r[0]), str(r[1]), str(r[2]), int(r[3]), r[4]) for r in rows]


def dispatches_of(conn: Connection, book: BookRow) -> int:
    """The paid creates whose intent line went to `book`'s ledger: those tagged with its id, and
    for the row from before 0016 the untagged ones after its position."""
    return spend_rows.dispatches_to(conn, book.ledger_id, book.base_spend_id if book.name == LEGACY else None)


def open_book(engine: Engine, name: str, ledger_id: str, path: str, host: str, *,
              replace: bool) -> BookRow | None:
    """Record `ledger_id` at `path` for `host` from the newest paid create on, as row `name`: the
    first process to open it wins (unless `replace`); the row as it is afterwards."""
    t = tables.ledger_book
    with db.transaction(engine) as conn:
        values = {"ledger_id": ledger_id, "path": path[:1024], "base_spend_id": spend_rows.max_id(conn),
                  "opened_at": clock.now(conn, drill_offset=False), "host": host[:255]}
        if _read(conn, name) is None:
            try:
                with conn.begin_nested():
                    conn.execute(t.insert().values(name=name, **values))
            except sa.exc.IntegrityError:
                pass  # another process opened it first: its identity is the one (its line precedes its position)
        elif replace:
            conn.execute(t.update().where(t.c.name == name).values(**values))
        return _read(conn, name)


def claim(engine: Engine, name: str, host: str, path: str) -> None:
    """The ledger of row `name` is the one at `path` on `host` now (an unclaimed row from before
    0016, or a ledger file that moved with its installation)."""
    t = tables.ledger_book
    with db.transaction(engine) as conn:
        conn.execute(t.update().where(t.c.name == name).values(host=host[:255], path=path[:1024]))


def _read(conn: Connection, name: str) -> BookRow | None:
    found: Sequence[BookRow] = [b for b in read_all(conn) if b.name == name]
    return found[0] if found else None
