"""Meters for the iipub benchmarks: SQL statements and driver round trips of an engine
(`RoundTrips`), the CPU time of another process (`cpu_seconds`) and its /proc/PID/status
figures (`proc_status`).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event


class RoundTrips:
    """Counts what one engine sends: SQL statements by verb (`before_cursor_execute`),
    COMMIT/ROLLBACK and pool pings (engine and pool events), and, on MySQL/MariaDB, every
    command PyMySQL writes to the socket (the exact number of round trips)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.lock = threading.Lock()
        self.statements: Counter[str] = Counter()
        self.other: Counter[str] = Counter()
        self.wire: Counter[str] = Counter()
        self.statement_seconds: Counter[str] = Counter()
        self.record_sql = False
        self.sql: list[tuple[str, Any]] = []
        self._t = threading.local()
        self._listeners: list[tuple[Any, str, Callable[..., None]]] = [
            (engine, "before_cursor_execute", self._before), (engine, "after_cursor_execute", self._after),
            (engine, "commit", self._other("COMMIT")), (engine, "rollback", self._other("ROLLBACK")),
            (engine.pool, "checkout", self._other("checkout"))]
        for target, name, fn in self._listeners:
            event.listen(target, name, fn)
        self._unpatch: Callable[[], None] | None = None
        from iipub.store.db import dialect_family

        if dialect_family(engine) == "mysql":
            self._patch_pymysql()

    def _before(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        verb = statement.lstrip().split(None, 1)[0].upper()
        self._t.started = time.perf_counter()
        with self.lock:
            self.statements[verb] += 1
            if self.record_sql:
                self.sql.append((statement, parameters))

    def _after(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        started = getattr(self._t, "started", None)
        if started is None:
            return
        key = statement_key(statement)
        with self.lock:
            self.statement_seconds[key] += time.perf_counter() - started

    def _other(self, key: str) -> Callable[..., None]:
        """A listener counting COMMIT, ROLLBACK or a pool checkout under `key`."""

        def count(*args: Any) -> None:
            with self.lock:
                self.other[key] += 1

        return count

    def _patch_pymysql(self) -> None:
        import pymysql.connections as pc

        original = pc.Connection._execute_command
        names = {3: "COM_QUERY", 14: "COM_PING", 1: "COM_QUIT", 2: "COM_INIT_DB"}
        counter = self

        def counted(conn_self: Any, command: int, sql: Any) -> Any:
            name = names.get(command, f"COM_{command}")
            if command == 3:  # split COM_QUERY into statements and transaction control
                head = (sql[:9].decode("latin-1") if isinstance(sql, bytes) else str(sql)[:9]).strip().upper()
                name = head if head in ("COMMIT", "ROLLBACK") else "statement"
            with counter.lock:
                counter.wire[name] += 1
            return original(conn_self, command, sql)

        pc.Connection._execute_command = counted

        def unpatch() -> None:
            pc.Connection._execute_command = original

        self._unpatch = unpatch

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "statements": dict(self.statements), "other": dict(self.other), "wire": dict(self.wire),
                "statement_total": sum(self.statements.values()), "wire_total": sum(self.wire.values()),
            }

    def reset(self) -> None:
        with self.lock:
            self.statements.clear()
            self.other.clear()
            self.wire.clear()
            self.statement_seconds.clear()
            self.sql.clear()

    def close(self) -> None:
        for target, name, fn in self._listeners:
            event.remove(target, name, fn)
        if self._unpatch:
            self._unpatch()


def statement_key(statement: str, limit: int = 160) -> str:
    """A statement as `RoundTrips.statement_seconds` keys it: white space folded, the
    database-clock expression shortened to `now()`, at most `limit` characters."""
    s = " ".join(statement.split())
    s = re.sub(r"\(SELECT offset_us FROM clock WHERE id = 1\)", "<clock>", s)
    s = re.sub(r"DATE_ADD\(UTC_TIMESTAMP\(6\), INTERVAL \(<clock> \+ -?\d+\) MICROSECOND\)", "now()", s)
    return s[:limit]


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (fields 14 and 15 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def proc_status(pid: int) -> dict[str, int]:
    """The numeric fields of /proc/PID/status (VmHWM, VmRSS in KiB, Threads, ...); {} when the
    process is gone."""
    out: dict[str, int] = {}
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            first = value.split()[:1]
            if first and first[0].isdigit():
                out[key] = int(first[0])
    return out
