"""Helpers shared by the tests (tests/conftest.py keeps only fixtures and hooks).

- the `iipub` command line, in process (`run_cli`: `iipub.cli.main` with its own environment,
  working directory, stdout and stderr) and, where the process itself is the subject, as the
  installed console script (`run_iipub`, `iipub_exe`);
- settings and subprocess environments for runs against the simulator;
- reads of the stored rows that assertions compare;
- a webhook receiver on loopback for relay tests.
"""

from __future__ import annotations

import base64
import datetime as dt
import importlib
import json
import logging
import os
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import openai
import pytest
import sqlalchemy as sa
import structlog
from click.testing import CliRunner

from iipub.core import logs
from iipub.core.errors import ConfigError
from iipub.machine import sweep
from iipub.provider.simulator import Simulator, SimulatorOptions
from iipub.provider.simulator import server as simulator_server
from iipub.settings.config import Settings
from iipub.settings.loading import settings_from_dict
from iipub.store import tables
from iipub.store.job_store import Store

# Read at import, which tests/conftest.py does before it scrubs IIPUB_* and OPENAI_* from the
# environment of the test run.
MYSQL_URL = os.environ.get("IIPUB_TEST_MYSQL_URL", "").strip()
BACKEND = "mysql" if MYSQL_URL else "sqlite"
ENV_PREFIXES = ("IIPUB_", "OPENAI_")

R = TypeVar("R")

UNKNOWN_ID = "00000000-0000-0000-0000-000000000000"


def clean_env() -> dict[str, str]:
    """The test run's environment without any IIPUB_* / OPENAI_* setting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    env["PYTHONUNBUFFERED"] = "1"
    return env


# -- the command line, in process -------------------------------------------------------------------


@dataclass
class CliResult:
    """What one `iipub` invocation left: like `subprocess.CompletedProcess`."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


@contextmanager
def _logging_restored() -> Iterator[None]:
    """`iipub.core.logs.configure` binds structlog and the root logger to the sys.stderr of the
    moment, once per process. Let each invocation configure them afresh (so its JSON log
    lines land in its own stderr), then put back what was there."""
    saved_structlog = structlog.get_config()
    was_configured = structlog.is_configured()
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    saved_flag, saved_format = logs._configured, logs._format
    logs._configured = False
    try:
        yield
    finally:
        logs._configured, logs._format = saved_flag, saved_format
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        if was_configured:
            structlog.configure(**saved_structlog)
        else:
            structlog.reset_defaults()


def run_cli(*args: str, env: Mapping[str, str], cwd: Path | None = None, check: bool = False) -> CliResult:
    """`iipub ARGS` in this process: `iipub.cli.main` exactly as the console script calls it,
    with os.environ replaced by `env` (missing keys unset), `cwd` as working directory, and
    stdout / stderr captured separately. An exception `main` does not turn into an exit code
    propagates (the console script would have printed a traceback)."""
    from iipub.cli import main as cli_main

    overrides: dict[str, str | None] = {k: None for k in os.environ if k not in env}
    overrides.update({k: v for k, v in env.items() if os.environ.get(k) != v})
    old_cwd = os.getcwd()
    old_sigterm = signal.getsignal(signal.SIGTERM)  # `iipub reconcile` installs its own
    code: int | None = None
    with _logging_restored(), CliRunner().isolation(env=overrides) as (out, err, _mixed):
        try:
            if cwd is not None:
                os.chdir(cwd)
            cli_main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            os.chdir(old_cwd)
            signal.signal(signal.SIGTERM, old_sigterm)
            sys.stdout.flush()
            sys.stderr.flush()
        stdout = out.getvalue().decode("utf-8", "replace")
        stderr = err.getvalue().decode("utf-8", "replace")
    if code is None:
        raise AssertionError(f"iipub {' '.join(args)}: main() returned instead of exiting")
    result = CliResult(args, code, stdout, stderr)
    if check and code != 0:
        raise AssertionError(f"iipub {' '.join(args)} exited {code}: {stderr[-2000:]}")
    return result


def one_line_error(result: CliResult | subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    """Exit `code`, and stderr is exactly one line: a JSON error object whose message contains
    `needle` (no traceback, no other log line)."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert needle in error_message(lines[0]), result.stderr


def error_message(line: str) -> str:
    """The message of one of the command line's JSON error lines (AssertionError if it is not one)."""
    doc = json.loads(line)
    assert isinstance(doc, dict) and doc.get("level") == "error" and doc.get("event") == "error", line
    return str(doc["message"])


def error_messages(stderr: str) -> list[str]:
    """Every stderr line, each required to be a JSON error object: their messages."""
    return [error_message(line) for line in stderr.strip().splitlines()]


# -- the command line, as a process ---------------------------------------------------------------------


def iipub_exe() -> list[str]:
    """The installed console script (falls back to the module when run from a checkout)."""
    exe = shutil.which("iipub", path=str(Path(sys.executable).parent)) or shutil.which("iipub")
    return [exe] if exe else [sys.executable, "-m", "iipub"]


def run_iipub(*args: str, env: dict[str, str], cwd: Path | None = None, timeout: float = 60,
              check: bool = False) -> subprocess.CompletedProcess[str]:
    """`iipub ARGS` as a child process. Only for tests whose subject is the process itself
    (signals, overlapping processes, the installed script): everything else uses `run_cli`."""
    proc = subprocess.run(
        [*iipub_exe(), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"iipub {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc


def start_iipub(*args: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    """`iipub ARGS` started as a child process (to be signalled, paused or overlapped)."""
    return subprocess.Popen([*iipub_exe(), *args], env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


# -- one TLS context for every HTTP client ----------------------------------------------------------


@contextmanager
def shared_ssl_contexts() -> Iterator[None]:
    """Every httpx client loads the CA bundle into a new SSL context (~30-70 ms here), and
    the tests create hundreds: one per Provider, that is per reconcile tick, plus the SDK
    clients and webhook sinks. All test traffic is plain HTTP on loopback, so let clients
    with the same verification settings share one context. Nothing else changes; without
    httpx's hook (another httpx version) this does nothing."""
    try:
        import httpx._transports.default as transport
    except ImportError:  # pragma: no cover
        yield
        return
    original = getattr(transport, "create_ssl_context", None)
    if original is None:  # pragma: no cover
        yield
        return
    cache: dict[tuple[Any, ...], Any] = {}
    lock = threading.Lock()

    def create_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        if cert is not None or not isinstance(verify, bool):
            return original(verify=verify, cert=cert, trust_env=trust_env)
        key = (verify, trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        with lock:
            if key not in cache:
                cache[key] = original(verify=verify, cert=cert, trust_env=trust_env)
            return cache[key]

    setattr(transport, "create_ssl_context", create_ssl_context)  # noqa: B010 - not re-exported by httpx
    try:
        yield
    finally:
        setattr(transport, "create_ssl_context", original)  # noqa: B010


# -- prompt shutdown of loopback servers -----------------------------------------------------------


def stop_promptly(stop: Callable[[], None], address: tuple[str, int]) -> None:
    """Call `stop` (which shuts a socketserver down) while knocking at `address`.

    `serve_forever` notices a shutdown request only when its select() wakes up: after its poll
    interval (50 ms for the simulator), or at once when a connection arrives. Knocking every
    few milliseconds while `stop` runs saves that wait at the end of every test using a server.
    A knock is a connection closed without a request: no handler records anything for it."""
    done = threading.Event()

    def knock() -> None:
        while not done.is_set():
            try:
                socket.create_connection(address, timeout=0.5).close()
            except OSError:
                return  # closed already: nothing left to wake
            done.wait(0.002)

    knocker = threading.Thread(target=knock, name="stop-promptly", daemon=True)
    knocker.start()
    try:
        stop()
    finally:
        done.set()
        knocker.join(timeout=5)


@contextmanager
def prompt_server_shutdown() -> Iterator[None]:
    """Within the block, every socketserver's `shutdown()` (the simulator's, the webhook
    receivers', the tests' own fake servers) returns as soon as its loop has stopped instead of
    after up to one poll interval (see `stop_promptly`)."""
    original = socketserver.BaseServer.shutdown

    def shutdown(self: socketserver.BaseServer) -> None:
        address = self.server_address
        if isinstance(address, tuple) and len(address) >= 2:
            stop_promptly(lambda: original(self), (str(address[0]), int(address[1])))
        else:  # pragma: no cover - not a TCP server
            original(self)

    socketserver.BaseServer.shutdown = shutdown  # type: ignore[method-assign]
    try:
        yield
    finally:
        socketserver.BaseServer.shutdown = original  # type: ignore[method-assign]


@contextmanager
def fast_simulator() -> Iterator[Simulator]:
    """The provider simulator over real HTTP on loopback, with a fast lifecycle (the `sim`
    fixture)."""
    with Simulator(SimulatorOptions(queued_seconds=0.2, in_progress_seconds=0.3, slow_seconds=8)) as sim:
        yield sim


@contextmanager
def minute_simulator() -> Iterator[Simulator]:
    """The simulator with responses in progress for a simulated minute: a test decides when a
    response finishes by advancing the simulator's clock."""
    with Simulator(SimulatorOptions(queued_seconds=0.5, in_progress_seconds=60, slow_seconds=4)) as sim:
        yield sim


def bench_module(name: str) -> Any:
    """bench/NAME.py, imported as the benchmarks run (bench/ is not a package: on sys.path just
    for the import)."""
    bench = str(Path(__file__).resolve().parents[1] / "bench")
    sys.path.insert(0, bench)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(bench)


def fast_first(values: Sequence[Any], fast: int = 1) -> list[Any]:
    """A family of parametrized cases: the first `fast` run in the fast loop (`-m "not slow"`),
    the others with the slow tests (CI runs them all)."""
    return [*values[:fast], *(pytest.param(v, marks=pytest.mark.slow) for v in values[fast:])]


# -- settings and environments ----------------------------------------------------------------------------


def ledger_file_of(tmp_path: Path) -> Path:
    """A test's spend ledger: where a command run without a config file finds it too (the
    default under `$XDG_STATE_HOME`, which tests/conftest.py points into the test's directory)."""
    return tmp_path / "xdg-state" / "iipub" / "spend-ledger.jsonl"


def make_settings(db_url: str, sim_url: str, root: Path, **sections: dict[str, Any]) -> Settings:
    """Settings for in-process ticks: short timeouts, immediate polls, a static root in tmp."""
    data: dict[str, Any] = {
        "reconcile": {"poll_interval_seconds": 0, "lease_seconds": 15, "tick_seconds": 30, "concurrency": 8,
                      "backoff_base_seconds": 1, "backoff_cap_seconds": 60},
        # Suspected losses are read again on the next tick, not half a minute later.
        "provider": {"timeout_seconds": 4, "connect_timeout_seconds": 1, "loss_confirm_seconds": 0},
        "relay": {"backoff_base_seconds": 1, "backoff_cap_seconds": 60},
        "sinks": {"static": {"root": str(root)}},
        "ledger": {"path": str(ledger_file_of(root.parent))},  # this test's own, never the account's
        # In-process ticks (`reconcile.run`, `relay.run`) record no heartbeat: only the cron
        # commands do. Tests of heartbeats turn the check on (tests/integration/test_heartbeats.py).
        "monitoring": {"heartbeat_after_seconds": 0},
    }
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    base = settings_from_dict(data)
    return replace(base, database_url=db_url, api_key="sk-test",
                   provider=replace(base.provider, base_url=sim_url))


def open_at_midnight(settings: Settings) -> Settings:
    """Every product opening at midnight, so today's slots are due whenever the test runs."""
    products = {name: replace(p, opens_at=dt.time(0, 0)) for name, p in settings.products.items()}
    return replace(settings, products=products)


def simulator_options_seen(monkeypatch: pytest.MonkeyPatch) -> list[SimulatorOptions]:
    """The options `iipub simulator` builds, collected instead of starting a simulator: each
    attempt to start one fails with ConfigError("stop here"), so the command exits 2."""
    seen: list[SimulatorOptions] = []

    def refuse(options: SimulatorOptions, **kwargs: Any) -> Simulator:
        seen.append(options)
        raise ConfigError("stop here")

    monkeypatch.setattr(simulator_server, "Simulator", refuse)
    return seen


# A config file's one product whose slot opens at midnight UTC: today's slot is due whatever the
# hour a test runs (the default products open at 05:00 and 06:00).
MIDNIGHT_PRODUCT_TOML = ('[[products]]\nname = "daily-brief"\nprompt = "Write the brief."\nopens_at = "00:00"\n'
                         "items = 3\n")


def sim_env(cli_env: dict[str, str], sim: Simulator, tmp_path: Path, config: str = "") -> dict[str, str]:
    """Environment for `iipub reconcile` / `relay` (in process or as a child) against `sim`,
    with a config file in `tmp_path` (`config` appended to it)."""
    cfg = tmp_path / "iipub.toml"
    cfg.write_text(
        "[reconcile]\npoll_interval_seconds = 0\nlease_seconds = 10\ntick_seconds = 20\n"
        "[provider]\ntimeout_seconds = 2\nconnect_timeout_seconds = 1\nloss_confirm_seconds = 0\n"
        f"[sinks.static]\nroot = \"{tmp_path / 'public'}\"\n"
        f"[ledger]\npath = \"{ledger_file_of(tmp_path)}\"\n" + config
    )
    return {**cli_env, "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": sim.url, "IIPUB_CONFIG": str(cfg)}


def drive_to_saved(settings: Settings, engine: sa.Engine, sim: Simulator, last_day: dt.date, days: int = 1) -> None:
    """Schedule every product for `days` dates up to `last_day` and tick until every job is
    SAVED_NOT_PUBLIC (editions and outbox rows written, nothing delivered yet)."""
    store = Store(engine, "test")
    for i in range(days):
        for p in settings.products.values():
            store.schedule(p, last_day - dt.timedelta(days=i))
    states: set[str] = set()
    for _ in range(6):
        sweep.run(settings, engine)
        sim.advance(5)
        with engine.connect() as conn:
            states = set(conn.execute(sa.select(tables.jobs.c.state)).scalars())
        if states == {"SAVED_NOT_PUBLIC"}:
            return
    raise AssertionError(f"jobs did not reach SAVED_NOT_PUBLIC: {states}")


# -- databases -------------------------------------------------------------------------------------------


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


# -- stored rows --------------------------------------------------------------------------------------------


def record_heartbeats(engine: sa.Engine, *commands: str, ok: bool = True) -> None:
    """Record a finished run of each of `commands` (default: reconcile and relay), as the cron
    commands do: for in-process ticks checked by `iipub status` with its heartbeat check on."""
    from iipub.observe import heartbeat

    for command in commands or heartbeat.COMMANDS:
        heartbeat.finish(heartbeat.start(engine, command, f"{command}:test"), ok=ok,
                         error=None if ok else "RuntimeError: test")


def utc_today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def job_rows(engine: sa.Engine) -> list[dict[str, Any]]:
    """Every job row, oldest edition first (then by product)."""
    with engine.connect() as conn:
        q = sa.select(tables.jobs).order_by(tables.jobs.c.edition_date, tables.jobs.c.product)
        return [dict(r) for r in conn.execute(q).mappings()]


def tick(settings: Settings, engine: sa.Engine, **kw: Any) -> sweep.TickReport:
    """One in-process reconcile tick (`reconcile.run`)."""
    return sweep.run(settings, engine, **kw)


def job_events(engine: sa.Engine, job_id: str, lang: str | None = None) -> list[dict[str, Any]]:
    """One slot's own journal (`lang` None) or one of its language tracks', oldest first."""
    ev = tables.job_events.c
    with engine.connect() as conn:
        q = (sa.select(tables.job_events).where(ev.job_id == job_id,
                                                ev.lang.is_(None) if lang is None else ev.lang == lang)
             .order_by(ev.id))
        return [dict(r) for r in conn.execute(q).mappings()]


def row_count(engine: sa.Engine, table: sa.Table) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


def job_versions(engine: sa.Engine) -> dict[str, int]:
    return {r["id"]: r["version"] for r in job_rows(engine)}


def stored(engine: sa.Engine) -> dict[str, Any]:
    """Everything a command could damage: every job row and the size of every other table."""
    with engine.connect() as conn:
        jobs = {r["id"]: dict(r) for r in conn.execute(sa.select(tables.jobs)).mappings()}
        counts = {t.name: conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()
                  for t in (tables.job_events, tables.editions, tables.outbox, tables.outbox_deliveries)}
    return {"jobs": jobs, "counts": counts}


def wait_for(predicate: Any, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


# -- a webhook receiver --------------------------------------------------------------------------------------

SECRET = "whsec_" + base64.b64encode(b"iipub-test-webhook-secret-32byte").decode()


@dataclass
class Receiver:
    """Records every request; answers 200, 503 with retry-after, 400, or hangs (so a relay
    can be killed mid-delivery), as `mode` says."""

    url: str
    mode: str = "ok"  # ok | 503 | 400 | hang
    hang_seconds: float = 30.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    reading: int = 0  # requests whose body is still being read (not yet recorded or dropped)
    truncated: int = 0  # requests whose client went away before the whole body arrived (not recorded)

    def quiet(self, timeout: float = 10.0) -> None:
        """Wait until no request is half-read: after a client is killed, what was recorded is final."""
        wait_for(lambda: self.reading == 0, timeout)

    def keys(self) -> Counter[str]:
        with self.lock:
            return Counter(r["headers"]["idempotency-key"] for r in self.requests)

    def verified(self) -> int:
        """How many recorded requests carry a valid Standard Webhooks signature (checked
        with the official SDK's verifier; tolerance ±5 min, so checked soon after)."""
        client = openai.OpenAI(api_key="unused", webhook_secret=SECRET)
        ok = 0
        try:
            for r in list(self.requests):
                client.webhooks.verify_signature(r["body"], r["headers"], secret=SECRET)
                ok += 1
        finally:
            client.close()
        return ok


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_POST(self) -> None:
        rec: Receiver = self.server.recorder  # type: ignore[attr-defined]
        with rec.lock:
            rec.reading += 1
        try:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            with rec.lock:
                if len(body) < length:  # the client died mid-request: nothing was delivered
                    rec.truncated += 1
                    return
                rec.requests.append({"headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
        finally:
            with rec.lock:
                rec.reading -= 1
        if rec.mode == "hang":
            time.sleep(rec.hang_seconds)
        status, extra = {"ok": (200, {}), "503": (503, {"retry-after": "120"}), "400": (400, {}),
                         "hang": (200, {})}[rec.mode]
        reply = b'{"ok":true}' if status == 200 else b'{"error":"nope"}'
        with suppress(OSError):  # the client is gone (killed relay)
            send_reply(self, status, extra, reply)


def send_reply(handler: BaseHTTPRequestHandler, status: int, headers: Mapping[str, str], body: bytes) -> None:
    """An answer with `headers`, a Content-Length and `body`."""
    handler.send_response(status)
    for k, v in headers.items():
        handler.send_header(k, v)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[None]:
    """`server` answering from a background thread for the duration of the block."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def recording_server(handler: type[BaseHTTPRequestHandler], recorder: Callable[[str], R],
                     path: str = "") -> Iterator[R]:
    """An HTTP server on loopback answering with `handler` (a thread per request) for the
    duration of the block. Yields `recorder(url)` (the server's URL ending in `path`), which the
    handler finds as `self.server.recorder`."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    rec = recorder(f"http://127.0.0.1:{server.server_address[1]}{path}")
    server.recorder = rec  # type: ignore[attr-defined]
    with serving(server):
        yield rec


@contextmanager
def receiver() -> Iterator[Receiver]:
    """A webhook receiver on loopback for the duration of the block."""
    with recording_server(_Handler, Receiver, "/hooks/iipub") as rec:
        yield rec


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
