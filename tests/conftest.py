"""Fixtures and hooks only (what tests share besides fixtures lives in tests/support/): a fresh,
migrated database per test (SQLite file, or a fresh MariaDB/MySQL database when
IIPUB_TEST_MYSQL_URL is set), the simulator over real HTTP, settings against it, a webhook
receiver, and a clean environment for the command line.

Three markers shape the fixtures of a test (or of a module, as `pytestmark`):
- `@pytest.mark.simulator(**options)`: the `sim` fixture starts with these SimulatorOptions
  fields (lifecycle, faults, webhooks; tests/support/simulator.py has FAST and MINUTE) instead
  of the fast lifecycle;
- `@pytest.mark.host_clock`: the `engine` fixture leaves the database clock on the host's time
  instead of pinning it to midday of today's date (which keeps slots on one day whatever the
  hour the suite runs);
- `@pytest.mark.no_auto_schedule`: the `settings` fixture (and so `cfg`) has `[reconcile]
  auto_schedule = false`: ticks make no slots, the test's own are the only ones.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import structlog
from hypothesis import settings as hypothesis_settings

# tests.support.databases reads IIPUB_TEST_MYSQL_URL at import, before the environment is
# scrubbed below.
from tests.support.cli import clean_env
from tests.support.databases import BACKEND, MYSQL_URL, fresh_database, pin_midday
from tests.support.loopback import SECRET, Receiver, receiver
from tests.support.plumbing import prompt_server_shutdown, shared_ssl_contexts
from tests.support.settings import make_settings
from tests.support.simulator import FAKE_LIFECYCLE, simulator

# The test run's own settings (IIPUB_TEST_*) stay: the parallel workers, started after this, read
# the backend from them too. No command the tests run reads them (`clean_env` drops them).
for _name in list(os.environ):
    if _name.startswith(("IIPUB_", "OPENAI_")) and not _name.startswith("IIPUB_TEST_"):
        del os.environ[_name]

# Bytecode is cached whatever the caller's environment says: the suite imports iipub in this
# process and in every interpreter it starts, and with PYTHONDONTWRITEBYTECODE each of them
# would compile the package (and pytest re-rewrite every test module) from source, some seconds
# per run. What the tests observe is the same.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# Each test's files (SQLite database, static site, spend ledger) live in memory when the machine
# has a tmpfs: iipub fsyncs every published file and ledger line, and a few milliseconds per
# fsync on a disk add up over the suite. What the tests observe is the same (no test can see a
# lost power supply). A TMPDIR given by the caller wins.
if "TMPDIR" not in os.environ and os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
    tempfile.tempdir = "/dev/shm"

from iipub.provider import fake  # noqa: E402
from iipub.provider.fake import FakeProvider  # noqa: E402
from iipub.provider.openai.simulator import Simulator  # noqa: E402
from iipub.settings.config import Settings  # noqa: E402
from iipub.store import db, migrate  # noqa: E402

# Property tests assert what holds, not how fast: a per-example deadline on a shared 2-core host only
# adds flaky failures (speed lives in bench/, not in timed tests).
hypothesis_settings.register_profile("iipub", deadline=None, database=None)
hypothesis_settings.load_profile("iipub")

# Steps run in the test process log through structlog's default configuration (commands run by
# the tests configure their own, as cron's runs do). Its console renderer draws an exception as
# a rich traceback with every frame's locals: about a second per logged failure, and the suite
# logs hundreds on purpose. A plain traceback says the same.
structlog.configure(processors=[
    *structlog.get_config()["processors"][:-1],
    structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback),
])


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker more than the usable cores. A third of a test's time is waiting (the
    simulator's latency, lease and webhook timings, fsync), which another worker's test fills."""
    return len(os.sched_getaffinity(0)) + 1


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


@pytest.fixture(scope="session", autouse=True)
def _quick_http_plumbing() -> Iterator[None]:
    """One CA bundle load per run instead of one per HTTP client, and loopback servers that stop
    without waiting out their poll interval (see tests/support/plumbing.py)."""
    with shared_ssl_contexts(), prompt_server_shutdown():
        yield


@pytest.fixture(scope="session", autouse=True)
def _one_statement_cache_per_backend() -> Iterator[None]:
    """On SQLite, every engine of a run shares the first one's dialect and compiled statement
    cache. SQLAlchemy caches compiled SQL per engine (keyed by its dialect), and each test makes a
    fresh engine (and each in-process command its own): compiling the same few dozen statements
    again in every test was about a tenth of the suite's CPU. Each statement is still compiled
    once per process, by the dialect the engine would have had (`db.make_engine` configures every
    SQLite engine alike, and SQLite's dialect keeps nothing of one database). Not on MySQL/MariaDB,
    whose dialect remembers its engine's database."""
    original = db.make_engine
    first: list[sa.Engine] = []

    def make_engine(url: str, *args: Any, **kwargs: Any) -> sa.Engine:
        eng = original(url, *args, **kwargs)
        if eng.dialect.name != "sqlite":
            return eng
        if not first:
            first.append(eng)
        eng.dialect = first[0].dialect
        eng._compiled_cache = first[0]._compiled_cache
        return eng

    setattr(db, "make_engine", make_engine)  # noqa: B010 - the module's own name, for every caller
    try:
        yield
    finally:
        setattr(db, "make_engine", original)  # noqa: B010


@pytest.fixture(autouse=True)
def _own_state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default spend ledger of a command run without a config file is this test's own
    (`$XDG_STATE_HOME/iipub/`), never the account's: a shared one would fence other tests' slots."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


@pytest.fixture
def db_url(tmp_path: Path) -> Iterator[str]:
    """A URL to an empty database of the selected backend, dropped afterwards."""
    with fresh_database(tmp_path) as url:
        yield url


@pytest.fixture(scope="session")
def _migrated_sqlite_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once per run: `engine` starts from a copy of it (a copy takes a
    millisecond, the migrations about twenty). Migrating a fresh file is itself tested with
    `db_url` (tests/integration/store/test_migrate.py, `iipub db migrate`)."""
    path = tmp_path_factory.mktemp("migrated") / "iipub.sqlite3"
    eng = db.make_engine(f"sqlite:///{path}")
    try:
        migrate.migrate(eng)
    finally:
        eng.dispose()  # the last connection to close checkpoints the WAL into the file
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
    return path


@pytest.fixture
def engine(db_url: str, request: pytest.FixtureRequest) -> Iterator[sa.engine.Engine]:
    """A migrated engine on a fresh database, its clock at midday (tests/support/databases.py)."""
    if not MYSQL_URL:
        target = Path(sa.engine.make_url(db_url).database or "")
        if not target.exists():
            shutil.copyfile(request.getfixturevalue("_migrated_sqlite_file"), target)
    eng = db.make_engine(db_url, pool_size=24)
    migrate.migrate(eng)  # a no-op on the copy; on MySQL/MariaDB it creates the schema
    if request.node.get_closest_marker("host_clock") is None:
        pin_midday(eng)
    try:
        yield eng
    finally:
        eng.dispose()


@pytest.fixture
def cli_env(db_url: str) -> dict[str, str]:
    """Environment for `iipub` (in process or as a child): this test's database, no other
    IIPUB_* / OPENAI_* setting."""
    return {**clean_env(), "IIPUB_DATABASE_URL": db_url}


@pytest.fixture
def sim(request: pytest.FixtureRequest) -> Iterator[Simulator]:
    """The provider simulator over real HTTP on loopback: the fast lifecycle, or the options of
    the test's `@pytest.mark.simulator(...)`."""
    marker = request.node.get_closest_marker("simulator")
    with simulator(**(marker.kwargs if marker else {})) as s:
        yield s


@pytest.fixture
def provider_fake() -> Iterator[FakeProvider]:
    """The in-memory provider that settings of `[provider] kind = "fake"` build (`factory.build`)
    in this test: its responses move on by themselves as the simulator's fast lifecycle does."""
    provider = FakeProvider(lifecycle=FAKE_LIFECYCLE)
    fake.install(provider)
    try:
        yield provider
    finally:
        fake.install(None)


@pytest.fixture
def settings(db_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    """Settings for in-process ticks (tests/support/settings.py `make_settings`) on the in-memory
    provider (`provider_fake`), unless HTTP is the test's subject: a test that asks for `sim` (or
    is marked `@pytest.mark.simulator(...)`) gets settings against the simulator over real HTTP.
    Under `@pytest.mark.no_auto_schedule`, ticks make no slots of their own."""
    own_slots = request.node.get_closest_marker("no_auto_schedule") is not None
    sections: dict[str, Any] = {"reconcile": {"auto_schedule": False}} if own_slots else {}
    if "sim" in request.fixturenames or request.node.get_closest_marker("simulator") is not None:
        sim: Simulator = request.getfixturevalue("sim")
        return make_settings(db_url, sim.url, tmp_path / "public", **sections)
    request.getfixturevalue("provider_fake")
    return make_settings(db_url, None, tmp_path / "public", provider={"kind": "fake"}, **sections)


@pytest.fixture
def cfg(settings: Settings) -> Settings:
    """`settings` with one product, daily-brief (3 items, open since midnight), and no webhook sink."""
    p = replace(settings.products["daily-brief"], items=3, prompt="Write the brief.", opens_at=dt.time(0, 0))
    return replace(settings, products={"daily-brief": p}, webhook_sink=None)


@pytest.fixture
def hook() -> Iterator[Receiver]:
    """A webhook receiver on loopback that records every request (tests/support/loopback.py)."""
    with receiver() as rec:
        yield rec


@pytest.fixture
def webhook_sink_secret(monkeypatch: pytest.MonkeyPatch) -> str:
    """The webhook sink's signing secret in the environment ($IIPUB_WEBHOOK_SECRET, the sink's
    default `secret_env`), as a deployment has it: the receivers verify with the same SECRET."""
    monkeypatch.setenv("IIPUB_WEBHOOK_SECRET", SECRET)
    return SECRET
