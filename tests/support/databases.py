"""The database a test runs on: the backend the run selected (IIPUB_TEST_MYSQL_URL, read at
import, before tests/conftest.py scrubs IIPUB_* from the environment), a fresh database of it,
every row as a snapshot and back, the database clock at midday, and a MariaDB server of a test's
own."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.store import clock, tables

MYSQL_URL = os.environ.get("IIPUB_TEST_MYSQL_URL", "").strip()
BACKEND = "mysql" if MYSQL_URL else "sqlite"


# -- databases -------------------------------------------------------------------------------------------


def pin_midday(engine: sa.Engine) -> None:
    """Move the database clock (its drill offset) to 12:00 UTC of today's date. Every slot,
    window and deadline iipub computes comes from that clock, so a test that advances it by
    minutes or hours sees the same day whatever the hour the suite runs: run near midnight,
    it would otherwise cross into tomorrow and find tomorrow's slots due."""
    host = dt.datetime.now(dt.UTC)
    midday = host.replace(hour=12, minute=0, second=0, microsecond=0)
    clock.advance_clock(engine, (midday - host).total_seconds())


@contextmanager
def fresh_database(directory: Path) -> Iterator[str]:
    """A URL to an empty database of the selected backend: a SQLite file in `directory`, or a
    new MariaDB/MySQL database on IIPUB_TEST_MYSQL_URL's server, dropped afterwards."""
    if not MYSQL_URL:
        yield f"sqlite:///{directory / 'iipub.sqlite3'}"
        return
    name = f"iipub_t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(MYSQL_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    try:
        yield sa.engine.make_url(MYSQL_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name}"))
        admin.dispose()


Snapshot = dict[str, list[dict[str, Any]]]


def snapshot_rows(engine: sa.Engine) -> Snapshot:
    """Every row of every table iipub declares (the schema bookkeeping aside)."""
    with engine.connect() as conn:
        return {t.name: [dict(r) for r in conn.execute(sa.select(t)).mappings()]
                for t in tables.metadata.sorted_tables if t is not tables.schema_migrations}


def restore_rows(engine: sa.Engine, snapshot: Snapshot) -> None:
    """Make a migrated database hold exactly the rows of `snapshot` (ids included)."""
    present = [t for t in tables.metadata.sorted_tables if t.name in snapshot]
    with engine.begin() as conn:
        for t in reversed(present):
            conn.execute(t.delete())
        for t in present:
            if snapshot[t.name]:
                conn.execute(t.insert(), snapshot[t.name])


# -- a MariaDB server of a test's own ---------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def private_mariadbd(base: Path, *options: str) -> Iterator[str]:
    """A mariadbd of the caller's own (its datadir under `base`, a free loopback port, `options`
    added to its command line, stopped by its process id): the URL of its database `t`. Skips
    when mariadbd is not installed."""
    binary = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
    if not Path(binary).exists() or not shutil.which("mariadb-install-db"):
        pytest.skip("mariadbd is not installed")
    data, port = base / "data", free_port()
    subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                    "--auth-root-authentication-method=normal", "--skip-test-db"],
                   check=True, capture_output=True, timeout=120)
    with open(base / "server.log", "ab") as out:
        proc = subprocess.Popen([binary, "--no-defaults", f"--datadir={data}", f"--socket={base / 'sock'}",
                                 f"--port={port}", "--bind-address=127.0.0.1", "--user=root", "--skip-grant-tables",
                                 "--innodb-buffer-pool-size=64M", "--skip-log-bin", f"--pid-file={base / 'pid'}",
                                 *options], stdout=out, stderr=subprocess.STDOUT)
    url = f"mysql+pymysql://root@127.0.0.1:{port}/"
    try:
        admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        deadline = time.monotonic() + 60
        while True:
            try:
                with admin.connect() as conn:
                    conn.execute(sa.text("CREATE DATABASE IF NOT EXISTS t CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
                break
            except sa.exc.OperationalError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        admin.dispose()
        yield url + "t"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
