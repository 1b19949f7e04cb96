"""Shared setup for the iipub benchmarks (bench/*.py).

* a fresh database per measurement (`fresh_database`: MariaDB `iipub_bench_*`, or a
  temporary SQLite file), migrated with `iipub.migrate.migrate`;
* the provider simulator in its own process (`SimProc`), so its HTTP handling and JSON
  rendering do not share the benchmarked process's GIL, with real responses created on it
  before a measurement (`SimProc.precreate`);
* bulk inserts of jobs in a given state with valid columns (`polling_rows`, `terminal_rows`,
  `park_today`, `insert_rows`), and a scheduler for lifecycle runs (`schedule_backfill`);
* counters of SQL statements and driver round trips (`RoundTrips`);
* median / percentile helpers and the writer of this script's section of
  docs/benchmarks.md (`write_section`), with the machine description.

Run as `python bench/common.py sim-child '<options json>'` it is the simulator child.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import itertools
import json
import logging
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
DEFAULT_MYSQL = "mysql+pymysql://root@127.0.0.1:3306/test"
VENV_PY = ".venv/bin/python"

if str(ROOT) not in sys.path:  # running from a checkout without the editable install
    sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402
from sqlalchemy import event  # noqa: E402

from iipub import db, migrate, output  # noqa: E402
from iipub.config import Product, Settings, settings_from_dict  # noqa: E402
from iipub.provider import CreateRequest, create_input, create_metadata  # noqa: E402
from iipub.states import State  # noqa: E402
from iipub.store import Store  # noqa: E402

# -- command line -------------------------------------------------------------------


def parser(description: str, *, sqlite: bool = False) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--mysql", default=os.environ.get("IIPUB_BENCH_MYSQL_URL", DEFAULT_MYSQL),
                   help="server URL; each measurement creates and drops its own iipub_bench_* database "
                        f"(default {DEFAULT_MYSQL})")
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer runs (a smoke run)")
    p.add_argument("--runs", type=int, default=None, help="repetitions per measurement (median is reported)")
    p.add_argument("--no-doc", action="store_true", help="print only; leave docs/benchmarks.md alone")
    if sqlite:
        p.add_argument("--sqlite", action="store_true", help="also measure on SQLite (bonus figures)")
    return p


def command_line() -> str:
    script = os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)
    return " ".join([VENV_PY, shlex.quote(script), *map(shlex.quote, sys.argv[1:])])


# -- logging --------------------------------------------------------------------------


def production_logs_to_devnull() -> None:
    """Configure structlog exactly as the CLI does (JSON lines, level info) but into
    /dev/null: the rendering cost of every transition's log line is part of the figure,
    the terminal noise is not."""
    from iipub import logs

    saved = sys.stderr
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    try:
        logs.configure("info")
    finally:
        sys.stderr = saved
    logging.getLogger().setLevel(logging.WARNING)


# -- databases ------------------------------------------------------------------------


@contextlib.contextmanager
def fresh_database(base_url: str, tag: str) -> Iterator[str]:
    """An empty database: `iipub_bench_<tag>_<random>` on the MariaDB server of `base_url`
    (dropped afterwards), or a temporary SQLite file when `base_url` is "sqlite"."""
    if base_url == "sqlite":
        with tempfile.TemporaryDirectory(prefix=f"iipub_bench_{tag}_") as d:
            yield f"sqlite:///{d}/iipub.sqlite3"
        return
    name = f"iipub_bench_{tag}_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(base_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    try:
        yield sa.engine.make_url(base_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name}"))
        admin.dispose()


def open_db(url: str, pool_size: int = 8) -> sa.Engine:
    engine = db.make_engine(url, pool_size=pool_size)
    migrate.migrate(engine)
    return engine


def server_probe(base_url: str) -> sa.Engine:
    """An engine on the server itself (for its version string)."""
    return sa.create_engine(base_url)


def db_now(engine: sa.Engine) -> dt.datetime:
    with engine.connect() as conn:
        return db.read_now(conn).replace(tzinfo=None)


def server_version(engine: sa.Engine) -> str:
    if db.dialect_family(engine) == "mysql":
        with engine.connect() as conn:
            return str(conn.execute(sa.text("SELECT VERSION()")).scalar_one())
    import sqlite3

    return f"SQLite {sqlite3.sqlite_version}"


# -- settings --------------------------------------------------------------------------


def bench_settings(db_url: str, sim_url: str, static_root: Path, **sections: Mapping[str, Any]) -> Settings:
    """Production defaults (`iipub.config`) plus the given section overrides, the default two
    products, a static sink under `static_root`, and the simulator as the provider."""
    data: dict[str, Any] = {"sinks": {"static": {"root": str(static_root)}}}
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    base = settings_from_dict(data)
    return replace(base, database_url=db_url, api_key="sk-bench",
                   provider=replace(base.provider, base_url=sim_url))


def settings_toml(static_root: Path, **sections: Mapping[str, Any]) -> str:
    """The same overrides as a TOML file for `iipub reconcile` subprocesses."""
    data: dict[str, Any] = {**sections}
    lines: list[str] = []
    for name, values in data.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    lines += ["[sinks.static]", f"root = {_toml_value(str(static_root))}"]
    return "\n".join(lines) + "\n"


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))


# -- rows -------------------------------------------------------------------------------


def job_row(*, job_id: str, product: str, priority: int, day: dt.date, state: State | str, now: dt.datetime,
            opens_at: dt.datetime | None = None, **overrides: Any) -> dict[str, Any]:
    """A complete, valid `jobs` row (every NOT NULL column set) in `state`, due now."""
    row: dict[str, Any] = {
        "id": job_id, "product": product, "edition_date": day, "state": State(state).value, "version": 1,
        "priority": priority, "is_backfill": False, "opens_at": opens_at or dt.datetime.combine(day, dt.time(5)),
        "next_attempt_at": now - dt.timedelta(seconds=1), "lease_owner": None, "lease_expiry": None,
        "generation_attempts": 0, "poll_count": 0, "retry_count": 0, "response_id": None,
        "config_fingerprint": None, "payload": None, "payload_sha256": None, "composed": None,
        "composed_sha256": None, "input_tokens": 0, "output_tokens": 0, "total_tokens": 0,
        "quarantine_reason": None, "last_error": None, "suspended_from": None, "kill_requested": False,
        "created_at": now, "updated_at": now, "state_entered_at": now,
    }
    row.update(overrides)
    return row


def slots(products: Sequence[Product], n: int, last_day: dt.date) -> list[tuple[Product, dt.date]]:
    """n distinct (product, day) slots, products interleaved, days going back from `last_day`."""
    return [(products[i % len(products)], last_day - dt.timedelta(days=i // len(products))) for i in range(n)]


def create_body(product: Product, day: dt.date, job_id: str, attempt: int = 1) -> dict[str, Any]:
    """The JSON body `Provider.create` sends for this slot (same helpers, same shape)."""
    req = CreateRequest(job_id=job_id, product=product, edition_date=day, attempt=attempt,
                        fingerprint=product.fingerprint())
    return {
        "model": product.model, "instructions": product.prompt, "input": create_input(product, day),
        "temperature": product.temperature, "background": True, "store": True,
        "text": {"format": edition_schema.text_format(product.languages, product.items)},
        "metadata": create_metadata(req),
    }


def polling_rows(settings: Settings, sim: SimProc, n: int, now: dt.datetime,
                 states: Sequence[State] = (State.ACCEPTED, State.IN_PROGRESS)) -> list[dict[str, Any]]:
    """n jobs due for a poll, alternating between `states`, each holding the id of a real
    response created on the simulator (still in progress if the simulator's lifecycle is
    long), with the product's current fingerprint (so no config_drift)."""
    products = list(settings.products.values())
    chosen = slots(products, n, now.date() - dt.timedelta(days=1))
    ids = [str(uuid.uuid4()) for _ in chosen]
    bodies = [create_body(p, day, job_id) for (p, day), job_id in zip(chosen, ids, strict=True)]
    response_ids = sim.precreate(bodies)
    fingerprints = {p.name: p.fingerprint() for p in products}
    rows = []
    for i, ((p, day), job_id, rid) in enumerate(zip(chosen, ids, response_ids, strict=True)):
        st = states[i % len(states)]
        rows.append(job_row(
            job_id=job_id, product=p.name, priority=p.priority, day=day, state=st, now=now,
            opens_at=p.opens_on(day), version=4, generation_attempts=1, response_id=rid,
            config_fingerprint=fingerprints[p.name], poll_count=0 if st == State.ACCEPTED else 1,
        ))
    return rows


def park_today(engine: sa.Engine, settings: Settings) -> None:
    """Insert today's slots (by the database clock) as DELETED, so a tick's own scheduling
    finds them present and has nothing to dispatch: the measured tick does only the
    seeded work."""
    now = db_now(engine)
    rows = [job_row(job_id=str(uuid.uuid4()), product=p.name, priority=p.priority, day=now.date(),
                    state=State.DELETED, now=now, opens_at=p.opens_on(now.date()), version=12)
            for p in settings.products.values()]
    insert_rows(engine, db.jobs, rows)


def terminal_rows(start: int, n: int, now: dt.datetime, products: int = 200) -> Iterator[dict[str, Any]]:
    """DELETED jobs with the columns a finished slot has. Ids are UUID-shaped but ascending
    (cheap InnoDB appends); 200 synthetic products so a million slots fit in ~14 years."""
    for i in range(start, start + n):
        day = now.date() - dt.timedelta(days=1 + i // products)
        opened = dt.datetime.combine(day, dt.time(5))
        yield job_row(
            job_id=f"00000000-0000-4000-8000-{i:012x}", product=f"bench-{i % products:03d}", priority=10,
            day=day, state=State.DELETED, now=now, opens_at=opened, next_attempt_at=opened, version=14,
            generation_attempts=1, poll_count=2, response_id=f"resp_{i:048x}", config_fingerprint="f" * 64,
            payload_sha256="a" * 64, composed_sha256="b" * 64, input_tokens=700, output_tokens=9000,
            total_tokens=9700, created_at=opened, updated_at=opened, state_entered_at=opened,
        )


def terminal_events(start: int, n: int, now: dt.datetime, per_job: int = 1) -> Iterator[dict[str, Any]]:
    """The last `per_job` journal rows of each terminal job (…, CLEANUP_PENDING -> DELETED)."""
    trail = [("PUBLISHED", "CLEANUP_PENDING", "cleanup_start", None),
             ("SAVED_NOT_PUBLIC", "PUBLISHED", "all_events_delivered", None),
             ("COMPOSED_NOT_SAVED", "SAVED_NOT_PUBLIC", "saved", '{"editions": ["en", "es"]}')]
    for i in range(start, start + n):
        job_id = f"00000000-0000-4000-8000-{i:012x}"
        rows = [("CLEANUP_PENDING", "DELETED", "remote_deleted", '{"response_id": "resp_x", "was_missing": false}')]
        rows += trail[: per_job - 1]
        for k, (src, dst, reason, detail) in enumerate(rows):
            yield {"job_id": job_id, "from_state": src, "to_state": dst, "version": 14 - k,
                   "worker": "reconcile:bench:1:00000000", "reason": reason, "detail": detail, "at": now}


def insert_rows(engine: sa.Engine, table: sa.Table, rows: Iterable[dict[str, Any]], chunk: int = 2000) -> int:
    """executemany in chunks, one transaction per chunk; returns the row count."""
    it = iter(rows)
    total = 0
    while True:
        batch = list(itertools.islice(it, chunk))
        if not batch:
            return total
        with engine.begin() as conn:
            conn.execute(table.insert(), batch)
        total += len(batch)


def schedule_backfill(engine: sa.Engine, settings: Settings, k: int) -> list[str]:
    """k NO_JOB slots through `Store.schedule` (as `iipub schedule --backfill` does), dated
    before yesterday so they are all due; returns the job ids."""
    store = Store(engine, "bench-scheduler")
    last = db_now(engine).date() - dt.timedelta(days=2)
    for p, day in slots(list(settings.products.values()), k, last):
        store.schedule(p, day, backfill=True)
    with engine.connect() as conn:
        return list(conn.execute(sa.select(db.jobs.c.id).where(db.jobs.c.state == State.NO_JOB.value)).scalars())


def drive(settings: Settings, engine: sa.Engine, sim: SimProc, done: Callable[[Counter[str]], bool], *,
          relay_too: bool, max_loops: int = 30, advance: float = 5.0) -> dict[str, Any]:
    """Loop reconcile (and relay) ticks, moving the simulator's clock `advance` seconds after
    each, until `done(state counts)`. Returns the time spent in each and the loop count."""
    from iipub import reconcile, relay

    spent = {"reconcile_s": 0.0, "relay_s": 0.0, "loops": 0, "reconcile_reports": [], "relay_reports": []}
    while True:
        counts = state_counts(engine)
        if done(counts):
            return spent
        if spent["loops"] >= max_loops:
            raise RuntimeError(f"not done after {spent['loops']} loops: {dict(counts)}")
        t0 = time.perf_counter()
        spent["reconcile_reports"].append(reconcile.run(settings, engine))
        spent["reconcile_s"] += time.perf_counter() - t0
        if relay_too:
            t0 = time.perf_counter()
            spent["relay_reports"].append(relay.run(settings, engine))
            spent["relay_s"] += time.perf_counter() - t0
        sim.advance(advance)
        spent["loops"] += 1


def state_counts(engine: sa.Engine) -> Counter[str]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(db.jobs.c.state, sa.func.count()).group_by(db.jobs.c.state)).all()
    return Counter({s: int(n) for s, n in rows})


def count_rows(engine: sa.Engine, table: sa.Table, *where: Any) -> int:
    with engine.connect() as conn:
        q = sa.select(sa.func.count()).select_from(table)
        for w in where:
            q = q.where(w)
        return int(conn.execute(q).scalar_one())


def poll_lateness(engine: sa.Engine, since_id: int = 0) -> list[float]:
    """For every poll journaled after event `since_id`: seconds from its due time to when it
    ran (the overdue-poll SLI of `iipub status`)."""
    from iipub.status import POLL_REASONS
    from iipub.status import poll_lateness as lateness

    E = db.job_events
    with engine.connect() as conn:
        rows = conn.execute(sa.select(E.c.at, E.c.detail).where(E.c.id > since_id, E.c.reason.in_(POLL_REASONS)))
        out = []
        for at, detail in rows:
            at = dt.datetime.fromisoformat(at) if isinstance(at, str) else at
            d = lateness(at, detail)
            if d is not None:
                out.append(d)
    return out


def max_event_id(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(db.job_events.c.id), 0))).scalar_one())


# -- the simulator in a child process ------------------------------------------------------


class SimProc:
    """`iipub.simulator.Simulator` served from a child process (`bench/common.py sim-child`),
    driven over a line protocol on its stdin/stdout."""

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "sim-child", json.dumps(options)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )
        assert self.proc.stdout is not None
        hello = json.loads(self.proc.stdout.readline())
        self.url: str = hello["url"]
        self.origin: str = hello["origin"]
        self._lock = threading.Lock()

    def _call(self, op: str, **kw: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self._lock:
            self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"simulator child exited ({self.proc.poll()})")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"simulator child: {reply['error']}")
        return reply["result"]

    def precreate(self, bodies: Sequence[Mapping[str, Any]]) -> list[str]:
        """Create responses (the same backend call an HTTP create makes, minus the socket and
        the configured latency); returns their ids in order."""
        ids: list[str] = []
        for i in range(0, len(bodies), 1000):
            ids += self._call("precreate", bodies=list(bodies[i : i + 1000]))
        return ids

    def advance(self, seconds: float) -> None:
        self._call("advance", seconds=seconds)

    def requests(self) -> dict[str, int]:
        """Requests served over HTTP so far, by operation."""
        return dict(self._call("requests"))

    def reset(self) -> None:
        self._call("reset")

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self._call("quit")
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> SimProc:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _sim_child(options_json: str) -> None:
    from iipub.simulator import Simulator, SimulatorOptions

    sim = Simulator(SimulatorOptions(**json.loads(options_json))).start()
    print(json.dumps({"url": sim.url, "origin": sim.origin}), flush=True)
    backend = sim.backend
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            op = cmd.pop("op")
            try:
                if op == "precreate":
                    # Backend.create sweeps every stored response per call (O(n) each); the
                    # sweep only expires finished ones, so skip it while seeding.
                    backend._sweep = lambda: None  # type: ignore[method-assign]
                    try:
                        result: Any = []
                        for body in cmd["bodies"]:
                            reply = backend.create(json.dumps(body).encode())
                            if reply.status != 200:
                                raise RuntimeError(f"precreate answered {reply.status}: {reply.body}")
                            result.append(reply.body["id"])
                    finally:
                        del backend._sweep
                elif op == "advance":
                    result = sim.advance(float(cmd["seconds"]))
                elif op == "requests":
                    with backend._lock:
                        result = dict(backend._stats.requests)
                elif op == "reset":
                    sim.reset()
                    result = True
                elif op == "quit":
                    print(json.dumps({"result": True}), flush=True)
                    break
                else:
                    raise ValueError(f"unknown op {op!r}")
                print(json.dumps({"result": result}), flush=True)
            except Exception as exc:  # report, keep serving
                print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
    finally:
        sim.stop()


# -- counting statements and round trips ---------------------------------------------------


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
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)
        event.listen(engine, "commit", self._commit)
        event.listen(engine, "rollback", self._rollback)
        event.listen(engine.pool, "checkout", self._checkout)
        self._unpatch: Callable[[], None] | None = None
        if db.dialect_family(engine) == "mysql":
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
        key = _statement_key(statement)
        with self.lock:
            self.statement_seconds[key] += time.perf_counter() - started

    def _commit(self, conn: Any) -> None:
        with self.lock:
            self.other["COMMIT"] += 1

    def _rollback(self, conn: Any) -> None:
        with self.lock:
            self.other["ROLLBACK"] += 1

    def _checkout(self, *args: Any) -> None:
        with self.lock:
            self.other["checkout"] += 1

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

        pc.Connection._execute_command = counted  # type: ignore[method-assign]

        def unpatch() -> None:
            pc.Connection._execute_command = original  # type: ignore[method-assign]

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
        event.remove(self.engine, "before_cursor_execute", self._before)
        event.remove(self.engine, "after_cursor_execute", self._after)
        event.remove(self.engine, "commit", self._commit)
        event.remove(self.engine, "rollback", self._rollback)
        event.remove(self.engine.pool, "checkout", self._checkout)
        if self._unpatch:
            self._unpatch()


def _statement_key(statement: str) -> str:
    s = " ".join(statement.split())
    s = re.sub(r"\(SELECT offset_us FROM clock WHERE id = 1\)", "<clock>", s)
    s = re.sub(r"DATE_ADD\(UTC_TIMESTAMP\(6\), INTERVAL \(<clock> \+ -?\d+\) MICROSECOND\)", "now()", s)
    return s[:160]


# -- numbers -------------------------------------------------------------------------------


def median(values: Iterable[float]) -> float:
    vals = list(values)
    return statistics.median(vals) if vals else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[k]


def fmt(x: float, digits: int = 1) -> str:
    if x != x:  # NaN
        return "–"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:,.{digits}f}"


def spread(values: Sequence[float], digits: int = 1) -> str:
    """`median (min–max, n)` for tables."""
    if not values:
        return "–"
    if len(values) == 1:
        return fmt(values[0], digits)
    return f"{fmt(median(values), digits)} ({fmt(min(values), digits)}–{fmt(max(values), digits)})"


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


# -- the document ---------------------------------------------------------------------------

SECTIONS = ("tick_throughput", "lifecycle", "idle_tick", "overlap", "relay_throughput", "memory", "profile",
            "host_share", "before_after")

DOC_HEADER = """# iipub benchmarks

Figures produced by the scripts in `bench/` (commands in `bench/README.md`). Each numbered
section is rewritten by its script between its `bench:` markers; everything outside the
markers is written by hand.

## Design goal

One 2-core host keeps **10,000 in-flight provider jobs, each polled at least once a minute**:
a reconcile tick over 10,000 due polls must finish inside the 50 s tick budget
(`reconcile.tick_seconds`, cron every minute), i.e. at least 200 polls/s sustained, with the
dwell SLO intact (a finished response taken into custody within 180 s, 99 %; polls at most
90 s late, 95 %).

"""


def machine(engine: sa.Engine | None = None) -> str:
    import pymysql

    mem = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    parts = [
        f"`nproc` {os.cpu_count()} ({cpu})", f"memory {mem}", f"Linux {platform.release()}",
        f"Python {platform.python_version()}", f"SQLAlchemy {sa.__version__}", f"PyMySQL {pymysql.__version__}",
    ]
    if engine is not None:
        parts.append(server_version(engine))
    return ", ".join(parts)


def header_lines(engine: sa.Engine | None, runs: str, load_before: str, extra: Sequence[str] = ()) -> str:
    lines = [
        f"- Date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Machine: {machine(engine)}",
        f"- Command: `{command_line()}`",
        f"- Runs: {runs}",
        f"- Load average (1/5/15 min) before / after: {load_before} / {loadavg()} "
        "(a shared machine: other processes may have been running on the same 2 cores)",
        *extra,
    ]
    return "\n".join(lines)


def server_header(base_url: str, runs: str, load_before: str, extra: Sequence[str] = ()) -> str:
    """`header_lines` with the server's version read through a short-lived probe engine."""
    probe = server_probe(base_url)
    try:
        return header_lines(probe, runs, load_before, extra)
    finally:
        probe.dispose()


def write_section(key: str, title: str, body: str, *, enabled: bool = True) -> None:
    """Replace this script's section of docs/benchmarks.md (creating the file, with the
    sections in a fixed order, if needed)."""
    block_body = f"## {title}\n\n{body.rstrip()}\n"
    print("\n" + block_body)
    if not enabled:
        return
    DOC.parent.mkdir(parents=True, exist_ok=True)
    text = DOC.read_text(encoding="utf-8") if DOC.exists() else DOC_HEADER
    for k in SECTIONS:  # placeholders keep the order stable whatever runs first
        if f"<!-- bench:{k}:begin -->" not in text:
            text = text.rstrip() + f"\n\n<!-- bench:{k}:begin -->\n<!-- bench:{k}:end -->\n"
    begin, end = f"<!-- bench:{key}:begin -->", f"<!-- bench:{key}:end -->"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _m: f"{begin}\n{block_body}{end}", text, count=1)
    DOC.write_text(text, encoding="utf-8")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def iipub_exe() -> list[str]:
    exe = Path(sys.executable).parent / "iipub"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "iipub"]


def wait_rusage(proc: subprocess.Popen[Any], timeout: float) -> tuple[int, Any]:
    """Wait for `proc` with os.wait4: its exit status and its own rusage (ru_maxrss in KiB)."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage
        if time.monotonic() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            raise TimeoutError(f"child {proc.args} exceeded {timeout} s")
        time.sleep(0.02)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "sim-child":
        _sim_child(sys.argv[2])
    else:
        sys.exit("usage: common.py sim-child '<SimulatorOptions as JSON>'")
