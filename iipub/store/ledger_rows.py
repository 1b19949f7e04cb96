"""The only writer of the `ledger_book` row: which spend ledger this database opened (its id and
path) and the last paid create before it (`base_spend_id`). What the row means against the
ledger file is `money.ledger_book`'s."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from iipub.store import clock, db, spend_rows, tables

_ROW = "this"


def read(conn: Connection) -> tuple[str, str, int] | None:
    """(ledger id, path, base spend id) of the ledger this database opened, or None."""
    t = tables.ledger_book.c
    row = conn.execute(sa.select(t.ledger_id, t.path, t.base_spend_id).where(t.name == _ROW)).first()
    return (str(row[0]), str(row[1]), int(row[2])) if row is not None else None


def open_book(engine: Engine, ledger_id: str, path: str, *, replace: bool) -> tuple[str, str, int] | None:
    """Record `ledger_id` at `path` from the newest paid create on: the first process to open one
    wins (unless `replace`); the row as it is afterwards."""
    t = tables.ledger_book
    with db.transaction(engine) as conn:
        base = spend_rows.max_id(conn)
        values = {"ledger_id": ledger_id, "path": path[:1024], "base_spend_id": base,
                  "opened_at": clock.now(conn, drill_offset=False)}
        if read(conn) is None:
            try:
                with conn.begin_nested():
                    conn.execute(t.insert().values(name=_ROW, **values))
            except sa.exc.IntegrityError:
                pass  # another process opened it first: its identity is the one (its line precedes its position)
        elif replace:
            conn.execute(t.update().where(t.c.name == _ROW).values(**values))
        return read(conn)
