"""Engines, table definitions and the database clock.

The DDL lives in `sql/migrations/<dialect>/`; the tables below describe the same schema
for SQLAlchemy Core (a test proves the two agree). All times come from the database:
`now(delay)` is a SQL expression, never a host-clock value.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.types import TypeDecorator, TypeEngine

from .errors import ConfigError, Contention, DatabaseUnavailable, SchemaNotReady

metadata = sa.MetaData()



def _for(dialect: Dialect, generic: TypeEngine[Any], mysql_type: str, **args: Any) -> TypeEngine[Any]:
    """`generic`, or on MySQL/MariaDB the named type of that dialect: imported on a MySQL
    connection only, so a SQLite run never loads the MySQL dialect."""
    if dialect.name not in ("mysql", "mariadb"):
        return dialect.type_descriptor(generic)
    from sqlalchemy.dialects import mysql

    return dialect.type_descriptor(getattr(mysql, mysql_type)(**args))


class _Time(TypeDecorator[dt.datetime]):
    """DATETIME(6) on MySQL (microseconds); six-digit text on SQLite (SQLAlchemy's own format)."""

    impl = sa.DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        return _for(dialect, sa.DateTime(), "DATETIME", fsp=6)


class _LongText(TypeDecorator[str]):
    """LONGTEXT on MySQL (payloads past TEXT's 64 KiB); TEXT elsewhere."""

    impl = sa.Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        return _for(dialect, sa.Text(), "LONGTEXT")


Time = _Time()
LongText = _LongText()

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("product", sa.String(64), nullable=False),
    sa.Column("edition_date", sa.Date, nullable=False),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("is_backfill", sa.Boolean, nullable=False),
    sa.Column("opens_at", Time, nullable=False),
    sa.Column("next_attempt_at", Time, nullable=False),
    sa.Column("lease_owner", sa.String(128)),
    sa.Column("lease_expiry", Time),
    sa.Column("generation_attempts", sa.Integer, nullable=False),
    sa.Column("poll_count", sa.Integer, nullable=False),
    sa.Column("retry_count", sa.Integer, nullable=False),
    sa.Column("response_id", sa.String(128)),
    sa.Column("config_fingerprint", sa.String(64)),
    sa.Column("payload", LongText),
    sa.Column("payload_sha256", sa.String(64)),
    sa.Column("composed", LongText),
    sa.Column("composed_sha256", sa.String(64)),
    sa.Column("input_tokens", sa.BigInteger, nullable=False),
    sa.Column("output_tokens", sa.BigInteger, nullable=False),
    sa.Column("total_tokens", sa.BigInteger, nullable=False),
    sa.Column("quarantine_reason", sa.String(64)),
    sa.Column("last_error", sa.Text),
    sa.Column("suspended_from", sa.String(32)),
    sa.Column("kill_requested", sa.Boolean, nullable=False),
    sa.Column("created_at", Time, nullable=False),
    sa.Column("updated_at", Time, nullable=False),
    sa.Column("state_entered_at", Time, nullable=False),
    # `adopted` when `iipub adopt` took the slot's response over from a legacy system (the
    # response carries no iipub metadata: this row is what makes iipub its owner); NULL otherwise.
    sa.Column("origin", sa.String(16)),
    sa.Column("adopted_at", Time),
    sa.UniqueConstraint("product", "edition_date", name="uq_jobs_slot"),
    sa.Index("ix_jobs_due", "state", "next_attempt_at"),
    sa.Index("ix_jobs_response", "response_id"),
)

job_events = sa.Table(
    "job_events",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(36), nullable=False),
    sa.Column("from_state", sa.String(32)),
    sa.Column("to_state", sa.String(32), nullable=False),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("worker", sa.String(128), nullable=False),
    sa.Column("reason", sa.String(64), nullable=False),
    sa.Column("detail", sa.Text),
    sa.Column("at", Time, nullable=False),
    sa.Index("ix_job_events_job", "job_id", "id"),
    sa.Index("ix_job_events_at", "at"),
)

editions = sa.Table(
    "editions",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(36), nullable=False),
    sa.Column("product", sa.String(64), nullable=False),
    sa.Column("edition_date", sa.Date, nullable=False),
    sa.Column("lang", sa.String(8), nullable=False),
    sa.Column("title", sa.String(400), nullable=False),
    sa.Column("content", LongText, nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("created_at", Time, nullable=False),
    sa.UniqueConstraint("product", "edition_date", "lang", name="uq_editions_slot_lang"),
    sa.Index("ix_editions_job", "job_id"),
)

outbox = sa.Table(
    "outbox",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("event_id", sa.String(36), nullable=False),
    sa.Column("job_id", sa.String(36), nullable=False),
    sa.Column("edition_id", sa.BigInteger, nullable=False),
    sa.Column("event_type", sa.String(64), nullable=False),
    sa.Column("payload", LongText, nullable=False),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("lease_owner", sa.String(128)),
    sa.Column("lease_expiry", Time),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("next_attempt_at", Time, nullable=False),
    sa.Column("first_failed_at", Time),
    sa.Column("published_at", Time),
    sa.Column("last_error", sa.Text),
    sa.Column("created_at", Time, nullable=False),
    sa.UniqueConstraint("event_id", name="uq_outbox_event"),
    sa.Index("ix_outbox_due", "published_at", "next_attempt_at"),
    sa.Index("ix_outbox_job", "job_id"),
)

outbox_deliveries = sa.Table(
    "outbox_deliveries",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("event_id", sa.String(36), nullable=False),
    sa.Column("sink", sa.String(32), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("delivered_at", Time),
    sa.Column("parked_at", Time),
    sa.Column("last_error", sa.Text),
    sa.Column("updated_at", Time, nullable=False),
    sa.UniqueConstraint("event_id", "sink", name="uq_deliveries_event_sink"),
)

clock = sa.Table(
    "clock",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("offset_us", sa.BigInteger, nullable=False),
)

create_gate = sa.Table(
    "create_gate",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("breaker", sa.String(16), nullable=False),
    sa.Column("breaker_reason", sa.String(64)),
    sa.Column("breaker_detail", sa.Text),
    sa.Column("opened_at", Time),
    sa.Column("open_count", sa.Integer, nullable=False),
    sa.Column("probe_after", Time),
    sa.Column("probe_owner", sa.String(128)),
    sa.Column("probe_expiry", Time),
    sa.Column("last_ok_at", Time),
    sa.Column("cooldown_until", Time),
    sa.Column("paused", sa.Boolean, nullable=False),
    sa.Column("paused_reason", sa.Text),
    sa.Column("paused_by", sa.String(128)),
    sa.Column("paused_at", Time),
    sa.Column("window_start", Time),
    sa.Column("window_creates", sa.Integer, nullable=False),
    sa.Column("updated_at", Time, nullable=False),
    # `pause --everything`: every automated command only records its heartbeat.
    sa.Column("paused_everything", sa.Boolean, nullable=False, server_default=sa.false()),
)

gate_events = sa.Table(
    "gate_events",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("worker", sa.String(128), nullable=False),
    sa.Column("detail", sa.Text),
    sa.Column("at", Time, nullable=False),
    sa.Index("ix_gate_events_at", "at"),
)

republish_grants = sa.Table(
    "republish_grants",
    metadata,
    sa.Column("job_id", sa.String(36), primary_key=True),
    sa.Column("granted_by", sa.String(128), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("granted_at", Time, nullable=False),
)

webhook_deliveries = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column("webhook_id", sa.String(255), primary_key=True),
    sa.Column("event_type", sa.String(64), nullable=False),
    sa.Column("event_id", sa.String(255)),
    sa.Column("response_id", sa.String(128)),
    sa.Column("job_id", sa.String(36)),
    sa.Column("outcome", sa.String(32), nullable=False),
    sa.Column("detail", sa.Text),
    sa.Column("event_created_at", Time),
    sa.Column("received_at", Time, nullable=False),
    sa.Column("settled_at", Time),
    sa.Index("ix_webhook_deliveries_received", "received_at"),
    sa.Index("ix_webhook_deliveries_response", "response_id"),
    sa.Index("ix_webhook_deliveries_outcome", "outcome"),
)

webhook_misses = sa.Table(
    "webhook_misses",
    metadata,
    sa.Column("response_id", sa.String(128), primary_key=True),
    sa.Column("job_id", sa.String(36), nullable=False),
    sa.Column("noticed_at", Time, nullable=False),
    sa.Index("ix_webhook_misses_noticed", "noticed_at"),
)

orphans = sa.Table(
    "orphans",
    metadata,
    sa.Column("response_id", sa.String(128), primary_key=True),
    sa.Column("named_job_id", sa.String(64)),
    sa.Column("slot", sa.String(128)),
    sa.Column("attempt", sa.String(16)),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("why", sa.Text, nullable=False),
    sa.Column("output", LongText),
    sa.Column("output_sha256", sa.String(64)),
    sa.Column("output_tokens", sa.BigInteger),
    sa.Column("total_tokens", sa.BigInteger),
    sa.Column("first_seen_at", Time, nullable=False),
    sa.Column("remote_deleted_at", Time),
    sa.Index("ix_orphans_seen", "first_seen_at"),
)

# This database's installation id, one row (`iipub.installation`).
installation = sa.Table(
    "installation",
    metadata,
    sa.Column("name", sa.String(16), primary_key=True),
    sa.Column("installation_id", sa.String(64), nullable=False),
    sa.Column("created_at", Time, nullable=False),
)

# What an orphan's metadata claimed in full, and the operator's decision about it.
orphan_details = sa.Table(
    "orphan_details",
    metadata,
    sa.Column("response_id", sa.String(128), primary_key=True),
    sa.Column("installation_id", sa.String(64)),
    sa.Column("fingerprint", sa.String(64)),
    sa.Column("metadata", sa.Text),
    sa.Column("fate", sa.String(16)),
    sa.Column("fate_job_id", sa.String(36)),
    sa.Column("fate_reason", sa.Text),
    sa.Column("fate_by", sa.String(128)),
    sa.Column("fate_at", Time),
)

# Every DELETE sent to the provider, and on what authority (`iipub check` proves each was owned).
provider_deletes = sa.Table(
    "provider_deletes",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("response_id", sa.String(128), nullable=False),
    sa.Column("job_id", sa.String(36)),
    sa.Column("basis", sa.String(16), nullable=False),
    sa.Column("worker", sa.String(128), nullable=False),
    sa.Column("at", Time, nullable=False),
    sa.Index("ix_provider_deletes_response", "response_id"),
)

# A rate limit seen on a provider read, shared by every process (`iipub.gate`): reads only.
read_cooldown = sa.Table(
    "read_cooldown",
    metadata,
    sa.Column("name", sa.String(16), primary_key=True),
    sa.Column("until_at", Time, nullable=False),
    sa.Column("worker", sa.String(128), nullable=False),
    sa.Column("set_at", Time, nullable=False),
)

# One row per `iipub reconcile` / `iipub relay` run (`iipub.heartbeat`).
runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("command", sa.String(16), nullable=False),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("worker", sa.String(128), nullable=False),
    sa.Column("started_at", Time, nullable=False),
    sa.Column("finished_at", Time),
    sa.Column("ok", sa.Boolean),
    sa.Column("summary", sa.Text),
    sa.Column("error", sa.Text),
    sa.Index("ix_runs_command_finished", "command", "finished_at"),
    sa.Index("ix_runs_started", "started_at"),
)

# Money controls (`iipub.spend`): one row per paid create, counted by payment time.
spend = sa.Table(
    "spend",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(36), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("product", sa.String(64), nullable=False),
    sa.Column("edition_date", sa.Date, nullable=False),
    sa.Column("model", sa.String(128), nullable=False),
    sa.Column("tier_asked", sa.String(16), nullable=False),
    sa.Column("tier_reported", sa.String(16)),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("response_id", sa.String(128)),
    sa.Column("estimated_tokens", sa.BigInteger, nullable=False),
    sa.Column("input_tokens", sa.BigInteger),
    sa.Column("output_tokens", sa.BigInteger),
    sa.Column("total_tokens", sa.BigInteger),
    sa.Column("paid_at", Time, nullable=False),
    sa.Column("updated_at", Time, nullable=False),
    sa.Index("ix_spend_paid", "paid_at"),
    sa.Index("ix_spend_job", "job_id", "attempt"),
    sa.Index("ix_spend_state", "state"),
)

spend_overrides = sa.Table(
    "spend_overrides",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("scope", sa.String(64), nullable=False),
    sa.Column("extra_tokens", sa.BigInteger, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("granted_by", sa.String(128), nullable=False),
    sa.Column("granted_at", Time, nullable=False),
    sa.Column("until_at", Time, nullable=False),
    sa.Index("ix_spend_overrides_until", "until_at"),
)

spend_notes = sa.Table(
    "spend_notes",
    metadata,
    sa.Column("day", sa.Date, primary_key=True),
    sa.Column("scope", sa.String(64), primary_key=True),
    sa.Column("noted_at", Time, nullable=False),
)

schema_migrations = sa.Table(
    "schema_migrations",
    metadata,
    sa.Column("version", sa.String(16), primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("checksum", sa.String(64), nullable=False),
    sa.Column("applied_at", Time, nullable=False),
)

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
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        raise ConfigError(f"IIPUB_DATABASE_URL is not a database URL ({URL_HELP})") from None
    backend, driver = parsed.get_backend_name(), parsed.drivername.partition("+")[2] or None
    if backend == "sqlite" and driver in (None, "pysqlite"):
        return parsed
    if backend in ("mysql", "mariadb") and driver in MYSQL_DRIVERS:
        return parsed.set(drivername=f"{backend}+pymysql")
    what = "database driver" if backend in ("sqlite", "mysql", "mariadb") else "database"
    raise ConfigError(f"unsupported {what} {parsed.drivername!r} in IIPUB_DATABASE_URL ({URL_HELP})")


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
        raise SchemaNotReady(f"no SQLite database at {path}; run `iipub db migrate` to create it "
                             "(or set IIPUB_DATABASE_URL)")


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
    return engine


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


# The drill offset, cached per database for a second: reading it inside every statement
# would make each INSERT a locking read of the clock row on InnoDB, so one paused
# transaction would block `advance_clock` and everything queued behind it.
_OFFSET_TTL = 1.0
_offsets: dict[str, tuple[float, int]] = {}
_offsets_lock = threading.Lock()


def _offset_us(conn_or_engine: Engine | Connection) -> int:
    key = str(conn_or_engine.engine.url)
    with _offsets_lock:
        cached = _offsets.get(key)
    if cached is not None and time.monotonic() - cached[0] < _OFFSET_TTL:
        return cached[1]
    q = sa.select(clock.c.offset_us).where(clock.c.id == 1)
    if isinstance(conn_or_engine, Connection):
        value = conn_or_engine.execute(q).scalar()
    else:
        with conn_or_engine.connect() as conn:
            value = conn.execute(q).scalar()
    offset = int(value or 0)
    with _offsets_lock:
        _offsets[key] = (time.monotonic(), offset)
    return offset


def now(
    conn_or_engine: Engine | Connection, delay_seconds: float = 0.0, *, drill_offset: bool = True
) -> sa.ColumnElement[Any]:
    """The database clock (plus `delay_seconds`) as a SQL expression, usable in any
    statement. Includes the drill offset from the `clock` table unless told not to (a
    change to it reaches other processes within a second)."""
    delay_us = round(delay_seconds * 1_000_000)
    total = (_offset_us(conn_or_engine) if drill_offset else 0) + delay_us
    # The offset is a bound value, so every statement keeps one SQL text and hits
    # SQLAlchemy's compiled cache whatever the delay (jittered backoffs included).
    if dialect_family(conn_or_engine) == "mysql":
        return _clock_expr("mysql", sa.literal(total, sa.BigInteger))
    return _clock_expr("sqlite", sa.literal(f"{total / 1_000_000:+.6f} seconds", sa.String))


def clock_at(family: str, name: str) -> sa.ColumnElement[Any]:
    """The database clock plus the offset bound as `name` (its value from `clock_offset`): for
    statements built once per shape and executed many times with only values changing."""
    return _clock_expr(family, sa.bindparam(name, type_=sa.BigInteger if family == "mysql" else sa.String))


def _clock_expr(family: str, offset: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    if family == "mysql":
        expr = sa.func.timestampadd(sa.literal_column("MICROSECOND"), offset, sa.literal_column("UTC_TIMESTAMP(6)"))
        return sa.type_coerce(expr, Time)
    # Six fractional digits, the format SQLAlchemy writes, so text comparison is time order.
    whole = sa.func.strftime(sa.literal_column("'%Y-%m-%d %H:%M:%S'"), sa.literal_column("'now'"), offset)
    micros = sa.func.substr(sa.func.strftime(sa.literal_column("'%f'"), sa.literal_column("'now'"), offset), 3, 4)
    return sa.type_coerce(whole.op("||")(micros).op("||")(sa.literal_column("'000'")), Time)


def clock_offset(conn: Connection, delay_seconds: float = 0.0) -> int | str:
    """The value for a `clock_at` parameter: the drill offset plus `delay_seconds`, in the form the
    dialect's expression takes (microseconds on MySQL, a date modifier on SQLite)."""
    total = _offset_us(conn) + round(delay_seconds * 1_000_000)
    return total if dialect_family(conn) == "mysql" else f"{total / 1_000_000:+.6f} seconds"


def read_now(conn: Connection) -> dt.datetime:
    """The database clock, read once (for display and age computations)."""
    value = conn.execute(sa.select(now(conn))).scalar_one()
    if isinstance(value, str):
        return dt.datetime.fromisoformat(value)
    return value  # type: ignore[no-any-return]


def advance_clock(engine: Engine, seconds: float) -> None:
    """Move the database clock forward (drills and tests: expire leases without sleeping)."""
    with engine.begin() as conn:
        conn.execute(
            clock.update().where(clock.c.id == 1).values(offset_us=clock.c.offset_us + int(seconds * 1_000_000))
        )
    with _offsets_lock:
        _offsets.pop(str(engine.url), None)


def ping(engine: Engine) -> None:
    """Fail with one clear error if the database is unreachable or not migrated."""
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
            conn.execute(sa.select(clock.c.offset_us).where(clock.c.id == 1)).one()
    except sa.exc.OperationalError as exc:
        if is_missing_table(exc):
            raise SchemaNotReady() from None
        raise DatabaseUnavailable(f"database unreachable: {describe_error(exc)}") from None
    except sa.exc.NoResultFound:
        raise SchemaNotReady() from None
    except sa.exc.ProgrammingError as exc:
        if is_missing_table(exc):
            raise SchemaNotReady() from None
        raise


def is_missing_table(exc: sa.exc.DBAPIError) -> bool:
    text = str(exc.orig).lower()
    return "no such table" in text or "1146" in text or "doesn't exist" in text


_UUID_PREFIX = re.compile(r"[0-9a-f-]{4,35}")


def by_id_or_prefix(conn: Connection, table: sa.Table, column: sa.Column[str], text: str) -> sa.Row[Any] | None:
    """The row whose id (a UUID) is `text`, or the one row whose id starts with it (at least four
    characters, id characters only, so no LIKE wildcard slips in); None if none or several."""
    row = conn.execute(sa.select(table).where(column == text)).first()
    if row is None and _UUID_PREFIX.fullmatch(text):
        rows = conn.execute(sa.select(table).where(column.like(text + "%")).limit(2)).all()
        row = rows[0] if len(rows) == 1 else None
    return row


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
# from this node, not a fault of the job (seen in bench/galera.py; docs/scale-out.md).
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
