"""The database clock: every time iipub writes or compares comes from the database (plus the
drill offset in the `clock` table), never from the host.

`now(delay)` is a SQL expression, never a host-clock value."""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from iipub.store.db import dialect_family
from iipub.store.tables import Time, clock

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
