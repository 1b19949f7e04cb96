"""This database's installation id, and the record of every DELETE sent to the provider.

`iipub db migrate` gives a database a random installation id when it has none (insert-if-absent,
under the migration lock: created exactly once, also on several Galera nodes). It is kept in
the database, so a restore of this database keeps it and another database has another. Every
paid create carries it in its metadata (`iipub_installation`); a response whose metadata names
another installation, or carries no iipub metadata, is someone else's (`owners`).

`record_delete` journals each provider DELETE with its authority (`custody`: the job's output is
stored; `kill`: an operator killed the job; `discard`: an operator discarded a kept orphan), so
`iipub check` can prove that nothing without an owner in custody or kill was deleted.
"""

from __future__ import annotations

import secrets
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from iipub.core.errors import SchemaNotReady
from iipub.model.owners import METADATA_KEY
from iipub.store import clock, db, tables

__all__ = ["METADATA_KEY", "deletes", "ensure", "new_id", "read", "record_delete"]

_ROW = "this"
BASES = ("custody", "kill", "discard")


def new_id() -> str:
    return "inst_" + secrets.token_hex(16)


def ensure(conn: Connection) -> str:
    """This database's installation id, created when absent (inside the caller's transaction)."""
    t = tables.installation
    found = conn.execute(sa.select(t.c.installation_id).where(t.c.name == _ROW)).scalar()
    if found is not None:
        return str(found)
    try:
        with conn.begin_nested():
            conn.execute(t.insert().values(name=_ROW, installation_id=new_id(),
                                           created_at=clock.now(conn, drill_offset=False)))
    except sa.exc.IntegrityError:
        pass  # another migrator's row won: it is the one
    return str(conn.execute(sa.select(t.c.installation_id).where(t.c.name == _ROW)).scalar_one())


def read(engine: Engine | Connection) -> str:
    """This database's installation id; SchemaNotReady when `iipub db migrate` never gave it one."""
    t = tables.installation
    query = sa.select(t.c.installation_id).where(t.c.name == _ROW)
    try:
        if isinstance(engine, Connection):
            found = engine.execute(query).scalar()
        else:
            with engine.connect() as conn:
                found = conn.execute(query).scalar()
    except (sa.exc.OperationalError, sa.exc.ProgrammingError) as exc:
        if not db.is_missing_table(exc):
            raise  # a lost connection is not a missing installation id: the caller's error handling says it
        found = None
    if found is None:
        raise SchemaNotReady("this database has no installation id; run `iipub db migrate`")
    return str(found)


def record_delete(engine: Engine, response_id: str, job_id: str | None, basis: str, worker: str) -> None:
    """Journal a DELETE about to be sent (committed first: a crash after the call still shows it)."""
    assert basis in BASES
    with db.transaction(engine) as conn:
        conn.execute(tables.provider_deletes.insert().values(response_id=response_id, job_id=job_id, basis=basis,
                                                         worker=worker[:128], at=clock.now(conn)))


def deletes(conn: Connection) -> list[dict[str, Any]]:
    t = tables.provider_deletes
    return [dict(r) for r in conn.execute(sa.select(t).order_by(t.c.id)).mappings()]
