"""The wake-up check: the first thing a cron run of `iipub reconcile` or `iipub relay` does, with
the database driver alone (the standard library's sqlite3, or PyMySQL), before click,
SQLAlchemy, the SDK or any of iipub's machinery loads.

It asks the database whether anything can be due (`wakeup.why_awake`). When nothing can, it
records the run's heartbeat (a `runs` row, as every run does), prints the run's summary and
exits 0: an idle minute costs about what starting Python and two queries cost. Anything else
(a command line it does not recognise, a URL it does not parse, a missing API key, a database
error, something due) returns None and the full run goes on: the check fails open.

Its SQL is `iipub.store.wakeup_sql`'s (plain text, every statement through an index, so its cost
does not grow with history). It is the one module outside `iipub.store` that sends SQL, and the
named exception to "SQL lives in the store": it runs those texts on the driver's own cursor
because it must answer before SQLAlchemy (a third of an idle minute's CPU) or anything else loads;
it sends nothing the store does not write out for it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote, urlsplit

from iipub.observe import wakeup
from iipub.settings import environment
from iipub.store import wakeup_sql

_GLOBAL_OPTIONS = ("--env-file", "--log-level", "--log-format")
_COMMAND_OPTIONS = ("--log-level", "--log-format")
_LEVELS = ("debug", "info", "warning", "error")
_FORMATS = ("json", "console")
# Set to "off" to always run in full (a drill, a comparison, a doubt).
OFF_SWITCH = "IIPUB_WAKEUP_CHECK"
# config.DEFAULT_DATABASE_URL (that module loads pydantic; a test holds the two equal).
DEFAULT_DATABASE_URL = "sqlite:///iipub.sqlite3"


def run(argv: Sequence[str]) -> int | None:
    """0 when this run was answered idle, None when the full run must go on."""
    started = time.monotonic()
    try:
        return _run(list(argv), started)
    except Exception:  # any doubt: the full run, which reports what is wrong in its own words
        return None


def _run(argv: list[str], started: float) -> int | None:
    parsed = _parse(argv)
    if parsed is None:
        return None
    command, options = parsed
    if "--env-file" in options or os.environ.get("IIPUB_ENV_FILE"):
        from iipub.settings import envfile

        given = options.get("--env-file")
        envfile.load(given or os.environ["IIPUB_ENV_FILE"], named_by="--env-file" if given else "IIPUB_ENV_FILE")
    if os.environ.get(OFF_SWITCH, "").lower() in ("off", "0", "false", "no"):
        return None
    if command == "reconcile" and not os.environ.get(environment.API_KEY):
        return None  # the full run refuses it in one line
    level = (options.get("--log-level") or os.environ.get("IIPUB_LOG_LEVEL") or "info").lower()
    fmt = (options.get("--log-format") or os.environ.get("IIPUB_LOG_FORMAT") or "").lower() or None
    if level not in _LEVELS or (fmt is not None and fmt not in _FORMATS):
        return None
    url = _database_url()
    if url is None:
        return None
    host = socket.gethostname()
    cwd = os.getcwd()
    with _connect(url) as (family, placeholder, cursor, commit):
        cursor.execute(wakeup_sql.asleep_sql(family, placeholder),
                       (command, wakeup.place(os.environ, cwd, host)))
        row = cursor.fetchone()
        if row is None or not row[5]:
            return None  # nothing recorded here, or due: nothing else is read
        files = wakeup.parse_files(row[3])
        names = wakeup.parse_names(row[6])
        if files is None or names is None:
            return None
        recorded = wakeup.RecordedWakeup(signature=row[1], identity=row[2], files=files, idle_summary=row[4],
                                         asleep=bool(row[5]))

        def signature() -> str:
            cursor.execute(wakeup_sql.NEWEST_MIGRATION_SQL)
            if newest_migration(family) > str(cursor.fetchone()[0] or ""):
                return "migration pending"  # code newer than the schema: the full run says so
            cursor.execute(wakeup_sql.signature_sql(family))
            return wakeup.digest(cursor.fetchone())

        if wakeup.why_awake(recorded, wakeup.identity(os.environ, cwd, names),
                            lambda: {path: file_mark(path) for path in files}, signature) is not None:
            return None
        summary = json.loads(row[4])
        if not isinstance(summary, dict):
            return None
        worker = f"{command}:{host}:{os.getpid()}:{os.urandom(4).hex()}"
        summary = {**summary, "idle": True, "seconds": round(time.monotonic() - started, 3)}
        if "worker" in summary:
            summary["worker"] = worker
        cursor.execute(wakeup_sql.heartbeat_sql(family, placeholder),
                       (command, host[:255], os.getpid(), worker[:128], json.dumps(summary, sort_keys=True)))
        commit()
    _report(command, worker, summary, level, fmt, row[0])
    return 0


def _parse(argv: list[str]) -> tuple[str, dict[str, str]] | None:
    """The command and its options, for exactly the cron lines' shape: global options, then
    `reconcile` or `relay`, then only logging options. Anything else is the full CLI's."""
    options: dict[str, str] = {}
    command: str | None = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        allowed = _GLOBAL_OPTIONS if command is None else _COMMAND_OPTIONS
        name, eq, value = arg.partition("=")
        if name in allowed:
            if not eq:
                if i + 1 >= len(argv):
                    return None
                value = argv[i + 1]
                i += 1
            options[name] = value
        elif command is None and arg in wakeup.COMMANDS:
            command = arg
        else:
            return None
        i += 1
    return (command, options) if command is not None else None


def _database_url() -> str | None:
    url = os.environ.get("IIPUB_DATABASE_URL")
    if url:
        return url
    config = os.environ.get("IIPUB_CONFIG")
    if config:
        import tomllib

        with open(config, "rb") as f:
            value = tomllib.load(f).get("database_url")
        if value is not None and not isinstance(value, str):
            return None
        if value:
            return value
    return DEFAULT_DATABASE_URL


Cursor = Any


# The MySQL URL options the check passes to PyMySQL as the full run's engine does (SQLAlchemy's
# PyMySQL dialect hands a URL's query to `pymysql.connect`); any other option is the full run's.
_MYSQL_TEXT_OPTIONS = ("charset", "unix_socket", "ssl_ca", "ssl_cert", "ssl_key", "ssl_capath", "ssl_cipher",
                       "read_default_file", "read_default_group", "init_command")
# What the engine's own connection arguments set whatever the URL says (`db.make_engine`).
_ENGINE_OWN = ("charset", "connect_timeout", "init_command")
_MYSQL_INT_OPTIONS = ("connect_timeout", "read_timeout", "write_timeout")
_MYSQL_FLAG_OPTIONS = ("ssl_check_hostname", "ssl_verify_cert", "ssl_verify_identity", "local_infile")


def mysql_options(query: str) -> dict[str, Any]:
    """A MySQL URL's query string as PyMySQL's arguments; ValueError for an option the check does
    not know (the full run takes it)."""
    from urllib.parse import parse_qsl

    out: dict[str, Any] = {}
    for key, value in parse_qsl(query, keep_blank_values=True, strict_parsing=True):
        if key in out:
            raise ValueError(f"{key} given twice")
        if key in _MYSQL_TEXT_OPTIONS:
            out[key] = value
        elif key in _MYSQL_INT_OPTIONS:
            out[key] = int(value)
        elif key in _MYSQL_FLAG_OPTIONS:
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(f"{key}={value}")
            out[key] = value.lower() in ("true", "1", "yes")
        else:
            raise ValueError(f"URL option {key} is the full run's")
    return out


@contextmanager
def _connect(url: str) -> Iterator[tuple[str, str, Cursor, Callable[[], None]]]:
    """(dialect family, parameter placeholder, cursor, commit) for the URLs iipub takes; anything
    unusual (an unknown option, another driver) raises, and the full run deals with it."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if parts.fragment:
        raise ValueError("a URL fragment is the full run's")
    if scheme in ("sqlite", "sqlite+pysqlite"):
        if parts.query:
            raise ValueError("SQLite URL options are the full run's")
        path = url.split(":///", 1)[1] if ":///" in url else ""
        if not path or path.startswith((":memory:", "file:")) or not os.path.exists(path):
            raise ValueError("not a SQLite file")
        import sqlite3

        conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        try:
            conn.execute("PRAGMA busy_timeout = 30000")
            conn.execute("PRAGMA synchronous = NORMAL")
            cur = conn.cursor()

            def commit_sqlite() -> None:
                pass  # autocommit: the one INSERT is its own transaction

            yield "sqlite", "?", cur, commit_sqlite
        finally:
            conn.close()
        return
    backend, _, driver = scheme.partition("+")
    if backend not in ("mysql", "mariadb") or driver not in ("", "pymysql", "mysqldb"):
        raise ValueError("another database")
    options = {k: v for k, v in mysql_options(parts.query).items() if k not in _ENGINE_OWN}
    from iipub.store import mysql_driver

    mysql = mysql_driver.connection_class()(
        host=parts.hostname or "localhost", port=parts.port or 3306, user=unquote(parts.username or ""),
        password=unquote(parts.password or ""), database=unquote(parts.path.lstrip("/")), **options,
        charset="utf8mb4", connect_timeout=10, init_command="SET time_zone = '+00:00'", autocommit=True)
    try:
        cur = mysql.cursor()
        yield "mysql", "%s", cur, mysql.commit
    finally:
        mysql.close()


def newest_migration(family: str) -> str:
    """The number of the newest migration this installation ships (`migrate.sql_dir`: the
    wheel's `iipub/sql`, else a checkout's `sql/`); "" when none is found (then nothing is
    newer than the schema by this test, and the recorded row decides)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package: iipub/
    for base in (os.path.join(here, "sql"), os.path.join(os.path.dirname(here), "sql")):
        try:
            names = os.listdir(os.path.join(base, "migrations", family))
        except OSError:
            continue
        numbers = [n[:4] for n in names if n.endswith(".sql") and n[:4].isdigit()]
        if numbers:
            return max(numbers)
    return ""


def file_mark(path: str) -> wakeup.FileMark:
    """What a watched file looks like now: size, modification and change times and inode, or None
    if absent. The change time moves with any write, also one that puts the old modification
    time back (`cp -p`, `rsync -a --inplace`)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]


# The event a full run of each command logs its summary with: an idle run logs the same, so a
# log reader sees one kind of line per run whichever path answered it.
DONE_EVENTS = {"reconcile": "tick_done", "relay": "relay_done"}


def _report(command: str, worker: str, summary: dict[str, Any], level: str, fmt: str | None,
            next_at: object) -> None:
    """The run's summary: its log line on stderr (the full run's event, `idle` true, with time and
    level) and, unless stdout is stderr's very file (cron's `>>log 2>&1`), the JSON on stdout."""
    if level in ("debug", "info"):
        import datetime as dt

        stamp = dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")
        event = DONE_EVENTS[command]
        if (fmt or ("console" if _isatty() else "json")) == "console":
            sys.stderr.write(f"{stamp} [info     ] {event} idle=True next_wakeup={next_at} worker={worker}\n")
        else:
            sys.stderr.write(json.dumps({**summary, "event": event, "level": "info", "timestamp": stamp,
                                         "next_wakeup": str(next_at)}, sort_keys=True) + "\n")
        sys.stderr.flush()
    if not same_file(sys.stdout, sys.stderr):
        sys.stdout.write(json.dumps(summary, sort_keys=True) + "\n")
        sys.stdout.flush()


def same_file(a: Any, b: Any) -> bool:
    """Whether stream `a` writes to the very file `b` does (cron's `>>log 2>&1`); never for a
    terminal or a stream without a file (a test's capture, a closed stream)."""
    try:
        if a.isatty():
            return False
        one, two = os.fstat(a.fileno()), os.fstat(b.fileno())
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture, a closed stream)
        return False
    return (one.st_dev, one.st_ino) == (two.st_dev, two.st_ino)


def _isatty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
