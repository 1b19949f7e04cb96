"""Applies the numbered migrations in `sql/migrations/<dialect>/`, once each.

Safe when two run at once, on one server or on several nodes of a Galera cluster. SQLite
serialises on its write lock (`BEGIN IMMEDIATE`). MySQL/MariaDB serialises on a lock *row*
in `schema_migrations` (version `!lock`, the holder in `name`, the expiry in `applied_at`),
not on `GET_LOCK`: a named lock lives on one server only and Galera does not replicate it,
so two nodes could migrate at once. A row is certified like any other write: a second
migrator's INSERT fails with a duplicate key (1062) once the row has replicated, or with a
certification conflict (1213) when both commit at the same moment on different nodes; either
way it waits and retries until `LOCK_WAIT_SECONDS`. The holder refreshes the expiry from a
heartbeat thread (its own connection) while it migrates, so a long ALTER keeps the lock and
a crashed migrator's lock expires after `LOCK_TTL_SECONDS`; it is deleted on release. Every
statement is idempotent, so a migration cut short by a crash re-runs cleanly.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import re
import threading
import time
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from iipub.core.errors import DatabaseUnavailable, MigrationError
from iipub.model import states
from iipub.model.jobs import new_worker_id
from iipub.store import clock, db, installation, tables

_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LOCK_VERSION = "!lock"  # sorts before every "NNNN" version; never a migration's own
LOCK_TTL_SECONDS = 120.0  # a crashed migrator's lock is free again after this
LOCK_WAIT_SECONDS = 180.0  # how long a second migrator waits for the lock
_HEARTBEAT_SECONDS = 10.0
# 1062 duplicate key: the lock row exists (replicated); 1213/1205/1020: contention, including a
# Galera certification failure when two nodes insert the row at once.
_LOCK_TAKEN = {1062} | db.MYSQL_CONTENTION


def sql_dir() -> Traversable:
    """The package resource `iipub/sql` of an installed wheel; the checkout's top-level `sql/`
    when running from a source tree."""
    packaged = importlib.resources.files("iipub").joinpath("sql")
    if packaged.joinpath("migrations").is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / "sql"
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
        m = _FILE_RE.fullmatch(path.name)
        if m:
            found.append(Migration(m.group(1), m.group(2), path))
    return found


def _applied(conn: Connection) -> dict[str, tuple[str, str]]:
    t = tables.schema_migrations
    try:
        rows = conn.execute(sa.select(t.c.version, t.c.checksum, t.c.applied_at)).all()
    except (sa.exc.OperationalError, sa.exc.ProgrammingError) as exc:
        if "schema_migrations" in str(exc.orig) or "no such table" in str(exc.orig).lower():
            return {}
        raise
    return {r.version: (r.checksum, str(r.applied_at)) for r in rows if r.version != _LOCK_VERSION}


def behind(engine: Engine) -> str | None:
    """One line when migrations this release ships are not applied yet (a new release installed
    before `iipub db migrate`: its commands would read and write columns the database does not
    have yet, so they stop here and write nothing), else None."""
    with engine.connect() as conn:
        applied = _applied(conn)
    pending = [m.version for m in available(db.dialect_family(engine)) if m.version not in applied]
    if not pending:
        return None
    return (f"the database's schema is behind this iipub: migration(s) {', '.join(pending)} not applied yet; run "
            "`iipub db migrate` (runbook \"Upgrading on one host\"); nothing was written")


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
            done = _migrate_mysql(engine, migrations)
        else:
            with engine.begin() as conn:  # BEGIN IMMEDIATE: one migrator at a time
                _bootstrap(conn, migrations)
                done = _apply_pending(conn, migrations)
        if any(m.version == "0009" for m in available(family)):
            _convert_to_tracks(engine)
        return done
    except sa.exc.OperationalError as exc:
        raise db.unavailable(engine, exc) from None
    except sa.exc.DBAPIError as exc:
        raise MigrationError(f"migration failed: {db.describe_error(exc)}") from None


def _convert_to_tracks(engine: Engine) -> None:
    """The data step of 0009, idempotent: slots past the fork get their language tracks (the
    conversion's machinery loads only when some slot needs it)."""
    j, t = tables.jobs.c, tables.tracks.c
    past = [s.value for s in states.TRACK_OF_UNFORKED_SLOT] + [states.State.MANUALLY_SUSPENDED.value]
    with engine.connect() as conn:
        some = conn.execute(sa.select(j.id).where(j.state.in_(past), ~sa.select(t.id).where(
            t.job_id == j.id).exists()).limit(1)).first()
        if some is None:
            return
        from iipub.store import track_store

        ids = track_store.unconverted(conn)
    track_store.convert_all(engine, ids)


def _migrate_mysql(engine: Engine, migrations: list[Migration]) -> list[Migration]:
    holder = new_worker_id("migrate")
    with engine.connect() as conn:
        _galera_session(conn)
        # The bookkeeping table first (idempotent DDL; on Galera it runs in total order).
        _bootstrap(conn, migrations)
        conn.commit()
        _take_lock(conn, holder)
        beat = _Heartbeat(engine, holder)
        beat.start()
        try:
            done = _apply_pending(conn, migrations)
            conn.commit()
            if beat.lost:
                raise MigrationError("the migration lock expired while migrating (another migrate may have run)")
            return done
        finally:
            beat.stop()
            conn.rollback()
            _release_lock(conn, holder)


def _galera_session(conn: Connection) -> None:
    """On a Galera node, make every read of this session wait until the node has applied
    everything committed cluster-wide before it (the lock row, another node's migrations)."""
    row = conn.exec_driver_sql("SHOW VARIABLES LIKE 'wsrep_on'").first()
    if row is not None and str(row[1]).upper() == "ON":
        conn.exec_driver_sql("SET SESSION wsrep_sync_wait = 15")
    conn.commit()


def _take_lock(conn: Connection, holder: str) -> None:
    t = tables.schema_migrations
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    delay = 0.2
    while True:
        try:
            expiry = clock.now(conn, LOCK_TTL_SECONDS, drill_offset=False)
            got = conn.execute(
                t.update()
                .where(t.c.version == _LOCK_VERSION, t.c.applied_at < clock.now(conn, drill_offset=False))
                .values(name=holder, checksum="lock", applied_at=expiry)
            ).rowcount
            if not got:
                conn.execute(t.insert().values(version=_LOCK_VERSION, name=holder, checksum="lock", applied_at=expiry))
            conn.commit()  # certification happens here on Galera
            return
        except sa.exc.DBAPIError as exc:
            conn.rollback()
            if db.mysql_error_code(exc) not in _LOCK_TAKEN:
                raise
        if time.monotonic() >= deadline:
            row = conn.execute(sa.select(t.c.name, t.c.applied_at).where(t.c.version == _LOCK_VERSION)).first()
            conn.rollback()
            who = f" ({row.name}, until {row.applied_at})" if row is not None else ""
            raise MigrationError(f"another `iipub db migrate` holds the migration lock{who}")
        time.sleep(delay)
        delay = min(2.0, delay * 1.5)


def _release_lock(conn: Connection, holder: str) -> None:
    t = tables.schema_migrations
    for _ in range(5):
        try:
            conn.execute(t.delete().where(t.c.version == _LOCK_VERSION, t.c.name == holder))
            conn.commit()
            return
        except sa.exc.DBAPIError as exc:
            conn.rollback()
            if not db.is_contention(exc):
                raise
            time.sleep(0.2)
    # Still held: it expires after LOCK_TTL_SECONDS.


class _Heartbeat:
    """Pushes the lock's expiry forward from its own connection while the migration runs."""

    def __init__(self, engine: Engine, holder: str) -> None:
        self.engine = engine
        self.holder = holder
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="migrate-lock-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        t = tables.schema_migrations
        while not self._stop.wait(_HEARTBEAT_SECONDS):
            try:
                with self.engine.begin() as conn:
                    n = conn.execute(
                        t.update()
                        .where(t.c.version == _LOCK_VERSION, t.c.name == self.holder)
                        .values(applied_at=clock.now(conn, LOCK_TTL_SECONDS, drill_offset=False))
                    ).rowcount
                if n == 0:
                    self.lost = True
                    return
            except sa.exc.DBAPIError:
                continue  # contention or a lost connection: the next beat tries again


def _bootstrap(conn: Connection, migrations: list[Migration]) -> None:
    """Migration 0000, the bookkeeping table: idempotent DDL, run before anything is read."""
    for m in migrations:
        if m.version == "0000":
            for stmt in m.statements():
                conn.exec_driver_sql(stmt)


def _apply_pending(conn: Connection, migrations: list[Migration]) -> list[Migration]:
    applied = _applied(conn)
    done = []
    for m in migrations:
        if m.version in applied:
            continue
        for stmt in m.statements():
            conn.exec_driver_sql(stmt.replace("%", "%%") if db.dialect_family(conn) == "mysql" else stmt)
        conn.execute(
            tables.schema_migrations.insert().values(
                version=m.version, name=m.name, checksum=m.checksum, applied_at=clock.now(conn, drill_offset=False)
            )
        )
        done.append(m)
    if "0006" in applied or any(m.version == "0006" for m in done):
        installation.ensure(conn)  # every `db migrate` makes sure the id exists, once
    return done
