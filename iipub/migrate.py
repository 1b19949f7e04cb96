"""Applies the numbered migrations in `sql/migrations/<dialect>/`, once each.

Safe when two run at once: MySQL serialises on `GET_LOCK`, SQLite on its write lock
(`BEGIN IMMEDIATE`). Every statement is idempotent, so a migration cut short by a crash
re-runs cleanly.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import re
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from . import db
from .errors import DatabaseUnavailable, MigrationError

_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LOCK_NAME = "iipub_migrate"


def sql_dir() -> Traversable:
    """The package resource `iipub/sql` of an installed wheel; the checkout's top-level `sql/`
    when running from a source tree."""
    packaged = importlib.resources.files("iipub").joinpath("sql")
    if packaged.joinpath("migrations").is_dir():
        return packaged
    checkout = Path(__file__).resolve().parent.parent / "sql"
    if (checkout / "migrations").is_dir():
        return checkout
    raise MigrationError("the sql/ migrations directory is missing from this installation")


@dataclass(frozen=True)
class Migration:
    version: str
    name: str
    path: Traversable

    @property
    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def statements(self) -> list[str]:
        lines = [line.split("--", 1)[0] for line in self.text.splitlines()]
        return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


@dataclass(frozen=True)
class MigrationStatus:
    version: str
    name: str
    applied_at: str | None
    checksum_ok: bool


def available(family: str) -> list[Migration]:
    folder = sql_dir().joinpath("migrations", family)
    found = []
    for path in sorted((p for p in folder.iterdir() if p.name.endswith(".sql")), key=lambda p: p.name):
        m = _FILE_RE.match(path.name)
        if m:
            found.append(Migration(m.group(1), m.group(2), path))
    return found


def _applied(conn: Connection) -> dict[str, tuple[str, str]]:
    t = db.schema_migrations
    try:
        rows = conn.execute(sa.select(t.c.version, t.c.checksum, t.c.applied_at)).all()
    except (sa.exc.OperationalError, sa.exc.ProgrammingError) as exc:
        if "schema_migrations" in str(exc.orig) or "no such table" in str(exc.orig).lower():
            return {}
        raise
    return {r.version: (r.checksum, str(r.applied_at)) for r in rows}


def status(engine: Engine) -> list[MigrationStatus]:
    family = db.dialect_family(engine)
    try:
        with engine.connect() as conn:
            applied = _applied(conn)
    except sa.exc.OperationalError as exc:
        raise DatabaseUnavailable(f"database unreachable: {db.describe_error(exc)}") from None
    return [
        MigrationStatus(
            m.version,
            m.name,
            applied[m.version][1] if m.version in applied else None,
            m.version not in applied or applied[m.version][0] == m.checksum,
        )
        for m in available(family)
    ]


def migrate(engine: Engine) -> list[Migration]:
    """Apply pending migrations; returns those this call applied (empty: nothing to do)."""
    family = db.dialect_family(engine)
    migrations = available(family)
    try:
        if family == "mysql":
            return _migrate_mysql(engine, migrations)
        with engine.begin() as conn:  # BEGIN IMMEDIATE: one migrator at a time
            return _apply_pending(conn, migrations)
    except sa.exc.OperationalError as exc:
        raise DatabaseUnavailable(f"database unreachable: {db.describe_error(exc)}") from None
    except sa.exc.DBAPIError as exc:
        raise MigrationError(f"migration failed: {db.describe_error(exc)}") from None


def _migrate_mysql(engine: Engine, migrations: list[Migration]) -> list[Migration]:
    with engine.connect() as conn:
        got = conn.execute(sa.text("SELECT GET_LOCK(:n, 120)"), {"n": _LOCK_NAME}).scalar()
        if got != 1:
            raise MigrationError("another `iipub db migrate` holds the migration lock")
        try:
            done = _apply_pending(conn, migrations)
            conn.commit()
            return done
        finally:
            conn.execute(sa.text("SELECT RELEASE_LOCK(:n)"), {"n": _LOCK_NAME})
            conn.commit()


def _apply_pending(conn: Connection, migrations: list[Migration]) -> list[Migration]:
    bootstrap = [m for m in migrations if m.version == "0000"]
    for m in bootstrap:
        for stmt in m.statements():
            conn.exec_driver_sql(stmt)
    applied = _applied(conn)
    done = []
    for m in migrations:
        if m.version in applied:
            continue
        for stmt in m.statements():
            conn.exec_driver_sql(stmt.replace("%", "%%") if db.dialect_family(conn) == "mysql" else stmt)
        conn.execute(
            db.schema_migrations.insert().values(
                version=m.version, name=m.name, checksum=m.checksum, applied_at=db.now(conn, drill_offset=False)
            )
        )
        done.append(m)
    return done
