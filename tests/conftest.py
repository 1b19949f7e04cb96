"""Shared fixtures: a fresh, migrated database per test (SQLite file, or a fresh MariaDB/MySQL
database when IIPUB_TEST_MYSQL_URL is set), the simulator over real HTTP, and a clean
environment for subprocesses."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

# Read before the environment is scrubbed below.
MYSQL_URL = os.environ.get("IIPUB_TEST_MYSQL_URL", "").strip()
for _name in list(os.environ):
    if _name.startswith(("IIPUB_", "OPENAI_")):
        del os.environ[_name]

from dataclasses import replace  # noqa: E402

from iipub import db, migrate  # noqa: E402
from iipub.config import Settings, settings_from_dict  # noqa: E402
from iipub.simulator import Simulator, SimulatorOptions  # noqa: E402

BACKEND = "mysql" if MYSQL_URL else "sqlite"


def pytest_report_header(config: pytest.Config) -> str:
    return f"iipub database backend: {BACKEND}" + (f" ({_safe(MYSQL_URL)})" if MYSQL_URL else "")


def _safe(url: str) -> str:
    return sa.engine.make_url(url).render_as_string(hide_password=True)


def pytest_sessionstart(session: pytest.Session) -> None:
    if not MYSQL_URL:
        return
    # In CI the MariaDB run must really run: an unreachable server fails loudly.
    engine = sa.create_engine(MYSQL_URL)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.OperationalError as exc:
        pytest.exit(f"IIPUB_TEST_MYSQL_URL is set but the server is unreachable: {exc.orig}", returncode=3)
    finally:
        engine.dispose()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if MYSQL_URL:
        return
    skip = pytest.mark.skip(reason="MySQL/MariaDB-only test: set IIPUB_TEST_MYSQL_URL to run it")
    for item in items:
        if "mysql" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def db_url(tmp_path: Path) -> Iterator[str]:
    """A URL to an empty database of the selected backend, dropped afterwards."""
    if not MYSQL_URL:
        yield f"sqlite:///{tmp_path / 'iipub.sqlite3'}"
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


@pytest.fixture
def engine(db_url: str) -> Iterator[sa.engine.Engine]:
    """A migrated engine on a fresh database."""
    eng = db.make_engine(db_url, pool_size=24)
    migrate.migrate(eng)
    try:
        yield eng
    finally:
        eng.dispose()


@pytest.fixture
def cli_env(db_url: str, tmp_path: Path) -> dict[str, str]:
    """Environment for `iipub` subprocesses: this test's database, nothing inherited."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IIPUB_", "OPENAI_"))}
    env["IIPUB_DATABASE_URL"] = db_url
    env["PYTHONUNBUFFERED"] = "1"
    return env


def iipub_exe() -> list[str]:
    """The installed console script (falls back to the module when run from a checkout)."""
    exe = shutil.which("iipub", path=str(Path(sys.executable).parent)) or shutil.which("iipub")
    return [exe] if exe else [sys.executable, "-m", "iipub"]


def run_iipub(*args: str, env: dict[str, str], cwd: Path | None = None, timeout: float = 60,
              check: bool = False) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [*iipub_exe(), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"iipub {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc


@pytest.fixture
def sim() -> Iterator[Simulator]:
    """The provider simulator over real HTTP on loopback, with a fast lifecycle."""
    with Simulator(SimulatorOptions(queued_seconds=0.2, in_progress_seconds=0.3, slow_seconds=8)) as s:
        yield s


def make_settings(db_url: str, sim_url: str, root: Path, **sections: dict) -> Settings:
    """Settings for in-process ticks: short timeouts, immediate polls, a static root in tmp."""
    data: dict = {
        "reconcile": {"poll_interval_seconds": 0, "lease_seconds": 15, "tick_seconds": 30, "concurrency": 8,
                      "backoff_base_seconds": 1, "backoff_cap_seconds": 60},
        "provider": {"timeout_seconds": 4, "connect_timeout_seconds": 1},
        "relay": {"backoff_base_seconds": 1, "backoff_cap_seconds": 60},
        "sinks": {"static": {"root": str(root)}},
    }
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    base = settings_from_dict(data)
    return replace(base, database_url=db_url, api_key="sk-test",
                   provider=replace(base.provider, base_url=sim_url))


@pytest.fixture
def settings(db_url: str, sim: Simulator, tmp_path: Path) -> Settings:
    return make_settings(db_url, sim.url, tmp_path / "public")


def sim_env(cli_env: dict[str, str], sim: Simulator, tmp_path: Path, config: str = "") -> dict[str, str]:
    """Environment for `iipub reconcile`/`relay` subprocesses against `sim`."""
    cfg = tmp_path / "iipub.toml"
    cfg.write_text(
        "[reconcile]\npoll_interval_seconds = 0\nlease_seconds = 10\ntick_seconds = 20\n"
        "[provider]\ntimeout_seconds = 2\nconnect_timeout_seconds = 1\n"
        f"[sinks.static]\nroot = \"{tmp_path / 'public'}\"\n" + config
    )
    return {**cli_env, "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": sim.url, "IIPUB_CONFIG": str(cfg)}
