"""Engines, connections and what a database error means.

The tables are in `tables`, the database clock in `clock`; this module makes engines (PyMySQL
or SQLite, with each dialect's session set-up), runs one transaction, and classifies errors
(unreachable, contention, a missing table, a slot taken)."""

from __future__ import annotations

import functools
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from iipub.core.errors import ConfigError, Contention, DatabaseUnavailable, SchemaNotReady, UnknownId
from iipub.store import mysql_driver
from iipub.store.tables import clock

# MySQL error codes that mean "rolled back by contention", not "broken".
MYSQL_CONTENTION = {1205, 1213, 1020}


def dialect_family(engine_or_conn: Engine | Connection) -> str:
    name = engine_or_conn.dialect.name
    return "mysql" if name in ("mysql", "mariadb") else name


# MySQL and MariaDB always go through PyMySQL (pure Python, a declared dependency): the
# plain spelling and the one naming mysqlclient's module mean it too.
MYSQL_DRIVERS = (None, "pymysql", "mysqldb")
URL_HELP = "use mysql://user:pass@host/db (also mariadb://, mysql+pymysql://) or sqlite:///path"


def engine_url(url: str) -> sa.URL:
    """The SQLAlchemy URL iipub connects with: MySQL/MariaDB through PyMySQL, SQLite through the
    standard library. Any other database or driver is a ConfigError (exit 78), one line that
    does not repeat the URL (it may hold a password)."""
    if not isinstance(url, str):
        raise ConfigError(f"IIPUB_DATABASE_URL is not a database URL ({URL_HELP})")
    try:
        parsed = sa.engine.make_url(url)
        parsed.port  # noqa: B018  (a port that is not a number fails here, not at the first connect)
    except (sa.exc.ArgumentError, ValueError):
        raise ConfigError(f"IIPUB_DATABASE_URL is not a database URL ({URL_HELP})") from None
    backend, driver = parsed.get_backend_name(), parsed.drivername.partition("+")[2] or None
    if backend == "sqlite" and driver in (None, "pysqlite"):
        if parsed.host or parsed.username or parsed.port:
            raise ConfigError(f"IIPUB_DATABASE_URL names a SQLite file with a host part; a file's URL has three "
                              f"slashes (sqlite:///relative/path, sqlite:////absolute/path) ({URL_HELP})")
        return parsed
    if backend in ("mysql", "mariadb") and driver in MYSQL_DRIVERS:
        _check_mysql_options(parsed)
        return parsed.set(drivername=f"{backend}+pymysql")
    what = "database driver" if backend in ("sqlite", "mysql", "mariadb") else "database"
    raise ConfigError(f"unsupported {what} {parsed.drivername!r} in IIPUB_DATABASE_URL ({URL_HELP})")


@functools.cache
def _pymysql_options() -> frozenset[str]:
    """The keyword arguments the installed PyMySQL's connection takes (read once per process)."""
    import inspect

    import pymysql

    return frozenset(inspect.signature(pymysql.connections.Connection.__init__).parameters) - {"self", "args",
                                                                                               "kwargs"}


def _check_mysql_options(parsed: sa.URL) -> None:
    """A query option PyMySQL does not take would fail every connect with a TypeError; one whose
    value SQLAlchemy cannot convert fails when the engine is made. Both are refused here, in one
    line that names the option, not the URL (it may hold a password)."""
    unknown = sorted(set(parsed.query) - _pymysql_options() - {"charset"})
    if unknown:
        raise ConfigError(f"IIPUB_DATABASE_URL has option(s) {', '.join(unknown)} that the MySQL driver does not "
                          f"take ({URL_HELP})")
    from sqlalchemy.dialects.mysql.pymysql import MySQLDialect_pymysql

    try:
        MySQLDialect_pymysql().create_connect_args(parsed.set(drivername="mysql+pymysql"))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"IIPUB_DATABASE_URL has an option value the MySQL driver cannot use: {exc} "
                          f"({URL_HELP})") from None


def sqlite_file(url: str | sa.URL) -> str | None:
    """The file a SQLite URL names (None: not SQLite, or in memory)."""
    parsed = engine_url(url) if isinstance(url, str) else url
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return parsed.database if not parsed.database.startswith("file:") else None


def require_existing(url: str) -> None:
    """Refuse a SQLite URL whose file does not exist, before connecting would create it empty:
    only `iipub db migrate` (and the demo) make a database."""
    path = sqlite_file(url)
    if path is not None and not os.path.exists(path):
        # Not "run db migrate": with cron's environment missing (IIPUB_ENV_FILE unset or pointing
        # elsewhere) that would make a stray, empty database here.
        raise SchemaNotReady(f"no database at {os.path.abspath(path)} (SQLite file missing): is IIPUB_DATABASE_URL "
                             "set as cron sets it (IIPUB_ENV_FILE naming cron's env file)? Only for a new "
                             "installation, `iipub db migrate` makes an empty database there")


def make_engine(url: str, pool_size: int = 8, lock_wait_seconds: int | None = None) -> Engine:
    """An engine for `url`: SQLite in WAL mode with a busy timeout and IMMEDIATE
    transactions (an overlapping tick waits instead of failing), or MySQL/MariaDB
    with READ COMMITTED (the fence is the version check, not the isolation level).
    `lock_wait_seconds` bounds a wait for a lock (then `Contention`; default: 30 s on SQLite,
    the server's own setting on MySQL): the webhook receiver asks for less than its budget."""
    parsed = engine_url(url)
    if parsed.get_backend_name() == "sqlite":
        wait = 30 if lock_wait_seconds is None else lock_wait_seconds
        engine = sa.create_engine(parsed, connect_args={"timeout": wait})
        _sqlite_setup(engine, wait)
        return engine
    init = "SET time_zone = '+00:00'"
    if lock_wait_seconds is not None:
        init += f", innodb_lock_wait_timeout = {int(lock_wait_seconds)}"
    engine = sa.create_engine(
        parsed,
        isolation_level="READ COMMITTED",
        pool_recycle=3600,
        pool_size=pool_size,
        max_overflow=pool_size,
        # Every `Connection` ends its own transaction (commit, or rollback on close), so
        # the pool's extra ROLLBACK at check-in would be one more round trip for nothing.
        pool_reset_on_return=None,
        connect_args={"connect_timeout": 10, "charset": "utf8mb4", "init_command": init},
    )
    _ping_when_idle(engine)
    event.listen(engine, "do_connect", _connect_with_shared_tls)
    return engine


def _connect_with_shared_tls(dialect: Any, rec: Any, cargs: Any, cparams: Any) -> Any:
    return mysql_driver.connection_class()(*cargs, **cparams)


# A pooled connection that sat idle this long is pinged before use (a server restart or
# a dropped link is found before a statement fails); one handed back milliseconds ago in
# a busy tick is not, which saves a round trip per checkout.
IDLE_PING_SECONDS = 5.0


def _ping_when_idle(engine: Engine) -> None:
    @event.listens_for(engine.pool, "checkin")
    def _stamp(_dbapi_conn: Any, record: Any) -> None:
        if record is not None:
            record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine.pool, "checkout")
    def _ping(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("idle_since")
        if since is None or time.monotonic() - since < IDLE_PING_SECONDS:
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as exc:
            # The pool discards this connection and checks out a fresh one.
            raise sa.exc.DisconnectionError(describe_error(exc)) from exc


def _switch_to_wal(cur: Any) -> None:
    # WAL is a property of the file: once one connection has switched it, the others find
    # it set. The first switch of a new file needs a moment alone with it, and SQLite
    # answers "locked" at once (no busy wait) to a second connection trying meanwhile.
    give_up = time.monotonic() + 30.0
    while True:
        try:
            if str(cur.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                cur.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc).lower() or time.monotonic() > give_up:
                raise
            time.sleep(0.01)


def _sqlite_setup(engine: Engine, lock_wait_seconds: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(lock_wait_seconds) * 1000}")
        _switch_to_wal(cur)
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Take the write lock up front: a deferred transaction that reads and then
        # writes can fail with SQLITE_BUSY instead of waiting.
        conn.exec_driver_sql("BEGIN IMMEDIATE")


MYSQL_UNKNOWN_DATABASE = 1049


def where(engine: Engine) -> str:
    """Where the engine connects, for a person: host:port (MySQL), or the SQLite file."""
    url = engine.url
    if url.get_backend_name() == "sqlite":
        return f"SQLite file {url.database or ':memory:'}"
    return f"{url.host or 'localhost'}:{url.port or 3306}"


def unavailable(engine: Engine, exc: sa.exc.DBAPIError) -> DatabaseUnavailable:
    """The one line for a database that cannot be used: an unknown database names the statement
    that creates it; any other failure says where it tried to connect."""
    if mysql_error_code(exc) == MYSQL_UNKNOWN_DATABASE:
        name = engine.url.database or "iipub"
        return DatabaseUnavailable(
            f"database {name!r} does not exist on {where(engine)}: create it (`CREATE DATABASE `{name}` CHARACTER "
            f"SET utf8mb4 COLLATE utf8mb4_bin;` as an administrator, and grant the user access), then run `iipub db "
            "migrate`")
    return DatabaseUnavailable(f"database unreachable at {where(engine)}: {describe_error(exc)}")


def reach(engine: Engine) -> None:
    """One round trip, or the one line `unavailable` gives (the commands that make the schema
    connect with this before they start)."""
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.OperationalError as exc:
        raise unavailable(engine, exc) from None


def ping(engine: Engine) -> None:
    """Fail with one clear error if the database is unreachable or not migrated."""
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
            conn.execute(sa.select(clock.c.offset_us).where(clock.c.id == 1)).one()
    except sa.exc.OperationalError as exc:
        if is_missing_table(exc):
            raise SchemaNotReady() from None
        raise unavailable(engine, exc) from None
    except sa.exc.NoResultFound:
        raise SchemaNotReady() from None
    except sa.exc.ProgrammingError as exc:
        if is_missing_table(exc):
            raise SchemaNotReady() from None
        raise


def is_missing_table(exc: sa.exc.DBAPIError) -> bool:
    text = str(exc.orig).lower()
    return "no such table" in text or "1146" in text or "doesn't exist" in text


_UUID_PREFIX_CHARS = re.compile(r"[0-9a-f-]{1,35}")
_MIN_PREFIX = 4


def by_id_or_prefix(conn: Connection, table: sa.Table, column: sa.Column[str], text: str,
                    noun: str = "job") -> sa.Row[Any] | None:
    """The row whose id (a UUID) is `text`, or the one row whose id starts with it (at least four
    characters, id characters only, so no LIKE wildcard slips in); None if there is none. A
    prefix that is too short or matches several rows raises UnknownId saying so."""
    row = conn.execute(sa.select(table).where(column == text)).first()
    if row is None and text != text.lower():  # ids are lower case; a pasted upper-case one still finds its row
        return by_id_or_prefix(conn, table, column, text.lower(), noun)
    if row is not None or not _UUID_PREFIX_CHARS.fullmatch(text):
        return row
    if len(text) < _MIN_PREFIX:
        raise UnknownId(f"{noun} id prefix {text!r} is too short: give at least {_MIN_PREFIX} characters "
                        "(or the whole id)")
    rows = conn.execute(sa.select(column).where(column.like(text + "%")).order_by(column).limit(4)).all()
    if len(rows) > 1:
        shown = ", ".join(str(r[0]) for r in rows[:3]) + (", …" if len(rows) > 3 else "")
        many = f"{len(rows)}" if len(rows) < 4 else "4 or more"
        raise UnknownId(f"{noun} id prefix {text!r} is ambiguous: it matches {many} {noun}s ({shown}); give more "
                        "characters")
    return conn.execute(sa.select(table).where(column == rows[0][0])).first() if rows else None


def describe_error(exc: BaseException) -> str:
    """One line for a driver error, without the SQL or parameters."""
    orig = getattr(exc, "orig", exc)
    return " ".join(str(orig).split())[:300]


def mysql_error_code(exc: BaseException) -> int | None:
    orig = getattr(exc, "orig", None)
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    return None


# Client-side MySQL errors: the server cannot be reached or the connection died.
MYSQL_UNREACHABLE = {2002, 2003, 2005, 2006, 2013, 2055}
# Galera node outside the primary component (partitioned, evicted after a pause, still joining):
# 1047 "WSREP has not yet prepared node for application use" on any statement, 1180 "Error
# while appending streaming replication fragment (... Not connected to Primary Component)" at
# COMMIT. The transaction is rolled back and nothing is written: the database is unavailable
# from this node, not a fault of the job (seen in bench/cluster/galera.py; docs/scale-out.md).
WSREP_NOT_PRIMARY = {1047, 1180}


def is_unreachable(exc: BaseException) -> bool:
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return True
    code = mysql_error_code(exc)
    return code in MYSQL_UNREACHABLE or code in WSREP_NOT_PRIMARY


def is_contention(exc: BaseException) -> bool:
    """Deadlock, lock-wait timeout or snapshot conflict (MySQL), or SQLite busy/locked."""
    if mysql_error_code(exc) in MYSQL_CONTENTION:
        return True
    text = str(getattr(exc, "orig", exc)).lower()
    return "database is locked" in text or "database is busy" in text


def slot_taken(exc: BaseException) -> bool:
    """An INSERT of a row with a unique key lost to another writer of the same key: a duplicate
    key (1062, SQLite's UNIQUE), or on Galera a certification conflict at COMMIT (1213, which a
    single server would have reported as 1062; `Contention` wraps it). Either way nothing was
    written and the row is, or is about to be, someone else's."""
    if isinstance(exc, Contention):
        return is_contention(exc.__cause__ if exc.__cause__ is not None else exc)
    return isinstance(exc, sa.exc.IntegrityError)


@contextmanager
def transaction(engine: Engine) -> Iterator[Connection]:
    """One transaction; deadlocks and lock waits surface as `Contention` and a lost server as
    `DatabaseUnavailable`, after the rollback."""
    try:
        with engine.begin() as conn:
            yield conn
    except sa.exc.DBAPIError as exc:
        if is_contention(exc):
            raise Contention(f"database contention: {describe_error(exc)}") from exc
        if is_unreachable(exc):
            raise DatabaseUnavailable(f"database unavailable: {describe_error(exc)}") from exc
        raise
