"""Where a tick's time goes: pyinstrument profiles of the hot paths.

* `poll`: one reconcile tick polling N jobs (zero-latency simulator in its own process), with
  the tick's thread pool replaced by a synchronous executor so the whole sweep runs in the
  profiled thread (pyinstrument samples one thread). This is the per-poll cost that bounds
  a concurrent tick once the provider latency is hidden.
* `relay`: one relay run delivering the outbox events of M saved slots to the static sink.
* `idle`: one reconcile tick with no due work over T terminal rows.
* `engine`: not a profile but the check of a suggestion: the same 200 ms-latency tick on
  engines that differ only in pool options (pre-ping, reset-on-return), side by side.

Writes the full text profiles to bench/profiles/ and a summary (self time by package,
inclusive time of the functions that matter) to docs/benchmarks.md.

Needs pyinstrument in the venv (`.venv/bin/pip install pyinstrument`; not a project dependency).

    .venv/bin/python bench/profile_tick.py [--mysql URL] [--quick] [--what poll,relay,idle,engine]
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

import benchdb
import common
import metering
import reporting
import simproc
from iipub import db, reconcile, relay, tables
from iipub.states import State

PROFILES = Path(__file__).resolve().parent / "profiles"

# Inclusive time of these (module suffix, function) pairs is reported.
KEY_FUNCTIONS = [
    ("iipub/reconcile.py", "_handle"),
    ("iipub/store.py", "claim"),
    ("iipub/reconcile.py", "_claim"),
    ("iipub/store.py", "transition"),
    ("iipub/store.py", "due_candidates"),
    ("iipub/store.py", "release"),
    ("iipub/provider.py", "retrieve"),
    ("iipub/provider.py", "create"),
    ("iipub/provider.py", "_observed"),
    ("iipub/config.py", "fingerprint"),
    ("iipub/store.py", "from_row"),
    ("structlog/_native.py", "meth"),
    ("structlog/_base.py", "_process_event"),
    ("iipub/relay.py", "_deliver"),
    ("iipub/sinks/static.py", "deliver"),
    ("iipub/sinks/static.py", "_render_around"),
    ("iipub/sinks/static.py", "write"),
    ("iipub/sinks/site.py", "feed"),
    ("iipub/outbox.py", "claim"),
    ("iipub/outbox.py", "record"),
    ("iipub/outbox.py", "settled_sinks"),
    ("iipub/outbox.py", "mark_published"),
    ("iipub/relay.py", "publish_finished_jobs"),
    ("iipub/reconcile.py", "_ensure_today"),
    ("iipub/store.py", "count_in_flight"),
    ("iipub/validate.py", "validate"),
    ("iipub/compose.py", "compose"),
    ("sqlalchemy/engine/base.py", "_execute_context"),
    ("sqlalchemy/sql/compiler.py", "__init__"),
    ("pymysql/connections.py", "_read_packet"),
    ("pymysql/connections.py", "ping"),
    ("openai/_base_client.py", "request"),
    ("openai/_response.py", "parse"),
    ("httpx/_client.py", "send"),
]


class SyncExecutor:
    """Stands in for ThreadPoolExecutor: runs each job at submit, in the calling thread."""

    def __init__(self, max_workers: int | None = None, thread_name_prefix: str = "") -> None:
        pass

    def __enter__(self) -> SyncExecutor:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        f: Future[Any] = Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # mirrored into the future, as the pool does
            f.set_exception(exc)
        return f


@contextmanager
def synchronous_ticks() -> Iterator[None]:
    with mock.patch.object(reconcile, "ThreadPoolExecutor", SyncExecutor):
        yield


_T = TypeVar("_T")


def profiled(name: str, work: Callable[[], _T]) -> tuple[_T, float, Any]:
    """Run `work` under pyinstrument (0.5 ms interval): its result, the wall seconds and the
    profiler; the full text profile goes to bench/profiles/`name`."""
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.0005)
    t0 = time.perf_counter()
    profiler.start()
    result = work()
    profiler.stop()
    wall = time.perf_counter() - t0
    PROFILES.mkdir(exist_ok=True)
    (PROFILES / name).write_text(profiler.output_text(unicode=True, color=False))
    return result, wall, profiler


def package_of(path: str | None) -> str:
    if not path:
        return "?"
    p = path.replace("\\", "/")
    if "/site-packages/" in p:
        return p.split("/site-packages/", 1)[1].split("/", 1)[0].removesuffix(".py")
    if "/iipub/" in p:
        return "iipub." + p.split("/iipub/", 1)[1].removesuffix(".py").replace("/", ".")
    if "<" in p:
        return p
    return "stdlib:" + Path(p).stem


def _builtin_name(frame: Any, path: str | None) -> str:
    name = frame.function or "?"
    if name.startswith("[") and frame.parent is not None:  # synthetic [self] leaf
        name = frame.parent.function or name
    return name


def warm_openai(settings: Any) -> None:
    """Import the SDK's Responses resource before profiling: a one-off per process, measured
    separately (see the memory section's N = 0 tick and the overlap start-up figures)."""
    from iipub.provider import Provider

    with Provider(settings.provider, "sk-bench") as p:
        _ = p._client.responses


def summarise(profiler: Any, wall: float, work: str) -> tuple[str, dict[str, float]]:
    root = profiler.last_session.root_frame()
    total = root.time
    by_pkg: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()

    def walk(frame: Any, parent_path: str | None, active: frozenset[str]) -> None:
        path = frame.file_path or parent_path
        if not frame.children:
            if frame.file_path == "<built-in>" or (frame.file_path is None and parent_path == "<built-in>"):
                by_pkg["built-in: " + _builtin_name(frame, path)] += frame.time
            else:
                by_pkg[package_of(path)] += frame.time
        key = None
        for suffix, fn in KEY_FUNCTIONS:
            if frame.function == fn and (frame.file_path or "").replace("\\", "/").endswith(suffix):
                key = f"{suffix.rsplit('/', 1)[-1].removesuffix('.py')}.{fn}"
                break
        nxt = active
        if key and key not in active:  # count recursion once
            inclusive[key] += frame.time
            nxt = active | {key}
        for child in frame.children:
            walk(child, path, nxt)

    walk(root, None, frozenset())
    pkgs = [(k, v) for k, v in by_pkg.most_common(12)]
    rows = [[k, f"{v:.2f}", f"{v / total * 100:.0f} %"] for k, v in pkgs]
    text = [f"*{work}* — profiled wall time {wall:.2f} s (sampled {total:.2f} s)", "",
            "Self time by package (where the samples landed):", "",
            reporting.table(["package / module", "s", "share"], rows), "",
            "Inclusive time of the functions that matter:", "",
            reporting.table(["function", "s", "share"],
                            [[k, f"{v:.2f}", f"{v / total * 100:.0f} %"] for k, v in inclusive.most_common()])]
    return "\n".join(text), {k: v / total for k, v in inclusive.items()}


def profile_poll(base_url: str, n: int) -> str:
    with simproc.SimProc(latency_seconds=0.0, queued_seconds=0.0, in_progress_seconds=86400.0,
                         retention_seconds=864000.0) as sim, \
            benchdb.fresh_database(base_url, "prof") as url, tempfile.TemporaryDirectory() as tmp:
        engine = benchdb.open_db(url, pool_size=8)
        try:
            settings = benchdb.bench_settings(url, sim.url, Path(tmp) / "public",
                                              reconcile={"concurrency": 1, "tick_seconds": 3600.0})
            benchdb.seed_polls(engine, settings, sim, n)
            warm_openai(settings)
            with synchronous_ticks():
                report, wall, profiler = profiled("poll_tick.txt", lambda: reconcile.run(settings, engine))
            moved = sum(report.transitions.values())
            text, _ = summarise(profiler, wall, f"tick over {n:,} due polls, zero latency, one thread "
                                f"({moved} transitions, {wall / max(moved, 1) * 1000:.1f} ms per poll)")
            return text
        finally:
            engine.dispose()


_TALLY = threading.Lock()  # the tallies are shared by the tick's threads


class _TimedLogger:
    """Delegates to a structlog logger, adding up the thread CPU its `info` calls take."""

    def __init__(self, inner: Any, totals: defaultdict[str, float], counts: Counter[str], label: str) -> None:
        self._inner, self._totals, self._counts, self._label = inner, totals, counts, label

    def info(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.thread_time()
        try:
            return self._inner.info(*args, **kwargs)
        finally:
            spent = time.thread_time() - t0
            with _TALLY:
                self._totals[self._label] += spent
                self._counts[self._label] += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@contextmanager
def cpu_accounting() -> Iterator[tuple[defaultdict[str, float], Counter[str]]]:
    """Wrap the calls that make up a poll and add up the *thread CPU time* each takes
    (inclusive; nested labels overlap), so the per-poll CPU cost can be split by layer."""
    import httpx
    import openai._response as oai_response
    import sqlalchemy as sa

    from iipub import config, provider, store

    totals: defaultdict[str, float] = defaultdict(float)
    counts: Counter[str] = Counter()
    targets = [
        (provider.Provider, "retrieve", "Provider.retrieve (SDK + HTTP + parse)"),
        (httpx.Client, "send", "  httpx.Client.send (HTTP exchange)"),
        (oai_response.APIResponse, "parse", "  openai APIResponse.parse (pydantic Response)"),
        (store.Store, "claim", "Store.claim (a chunk of leases)"),
        (store.Store, "transition", "Store.transition (incl. its log line)"),
        (store.Store, "release", "Store.release"),
        (store.Store, "due_candidates", "Store.due_candidates"),
        (sa.engine.Connection, "execute", "  SQLAlchemy Connection.execute (compile + PyMySQL)"),
        (sa.engine.Engine, "connect", "  Engine.connect (pool checkout; a ping only after 5 s idle)"),
        (sa.engine.base.Transaction, "commit", "  Transaction.commit"),
        (sa.engine.Connection, "close", "  Connection.close (ends the transaction)"),
        (config.Product, "fingerprint", "Product.fingerprint"),
    ]
    saved = []
    for owner, attr, label in targets:
        original = owner.__dict__[attr]

        def wrapper(*a: Any, __orig: Any = original, __label: str = label, **k: Any) -> Any:
            t0 = time.thread_time()
            try:
                return __orig(*a, **k)
            finally:
                spent = time.thread_time() - t0
                with _TALLY:
                    totals[__label] += spent
                    counts[__label] += 1

        setattr(owner, attr, wrapper)
        saved.append((owner, attr, original))
    saved_log = store.log
    store.log = _TimedLogger(saved_log, totals, counts, "  structlog info line (in transition)")
    try:
        yield totals, counts
    finally:
        store.log = saved_log
        for owner, attr, original in saved:
            setattr(owner, attr, original)


def cpu_per_poll(base_url: str, n: int, *, threaded: bool = False) -> str:
    """CPU per poll, by layer: a synchronous tick at zero latency, or (`threaded`) the
    shape of the 10,000-job goal: concurrency 64, 64 provider connections, 200 ms latency."""
    latency, concurrency = (0.2, 64) if threaded else (0.0, 1)
    with simproc.SimProc(latency_seconds=latency, queued_seconds=0.0, in_progress_seconds=86400.0,
                         retention_seconds=864000.0) as sim, \
            benchdb.fresh_database(base_url, "prof") as url, tempfile.TemporaryDirectory() as tmp:
        engine = benchdb.open_db(url, pool_size=concurrency + 4)
        try:
            settings = benchdb.bench_settings(url, sim.url, Path(tmp) / "public",
                                              reconcile={"concurrency": concurrency, "tick_seconds": 3600.0},
                                              provider={"max_connections": max(concurrency, 32)})
            benchdb.seed_polls(engine, settings, sim, n)
            warm_openai(settings)
            mode = contextlib.nullcontext() if threaded else synchronous_ticks()
            with mode, cpu_accounting() as (totals, counts):
                c0, t0 = time.process_time(), time.perf_counter()
                report = reconcile.run(settings, engine)
                cpu, wall = time.process_time() - c0, time.perf_counter() - t0
            polls = sum(report.transitions.values())
            rows = [["whole tick (process CPU, all threads)", f"{cpu / polls * 1000:.2f}", "100 %", "–"]]
            rows += [[label, f"{v / polls * 1000:.2f}", f"{v / cpu * 100:.0f} %", f"{counts[label] / polls:.1f}"]
                     for label, v in sorted(totals.items(), key=lambda kv: -kv[1])]
            shape = (f"{concurrency} threads, {latency * 1000:g} ms latency, {polls / wall:.0f} polls/s"
                     if threaded else "one thread, zero latency")
            return (f"*CPU per poll by layer* — {polls:,} polls, {shape}, no profiler attached "
                    f"(process CPU {cpu:.2f} s of {wall:.2f} s wall; each layer is the thread CPU spent inside "
                    "it; indented rows are contained in the row above them, so shares overlap):\n\n"
                    + reporting.table(["layer", "CPU ms per poll", "share of tick CPU", "calls per poll"], rows))
        finally:
            engine.dispose()


ENGINE_VARIANTS = (
    ("db.make_engine as shipped (ping only after 5 s idle, no check-in ROLLBACK)", None),
    ("pool_pre_ping=True (ping at every checkout)", {"pool_pre_ping": True}),
    ("pool_pre_ping=True, pool_reset_on_return='rollback' (SQLAlchemy's defaults)",
     {"pool_pre_ping": True, "pool_reset_on_return": "rollback"}),
)


def variant_engine(url: str, pool_size: int, overrides: dict[str, Any] | None) -> Any:
    """`db.make_engine`'s MariaDB engine with some pool options changed (bench-side only)."""
    import sqlalchemy as sa

    if overrides is None:
        return db.make_engine(url, pool_size=pool_size)
    kwargs: dict[str, Any] = {
        "isolation_level": "READ COMMITTED", "pool_recycle": 3600, "pool_reset_on_return": None,
        "pool_size": pool_size, "max_overflow": pool_size,
        "connect_args": {"connect_timeout": 10, "charset": "utf8mb4", "init_command": "SET time_zone = '+00:00'"},
    }
    kwargs.update(overrides)
    return sa.create_engine(url, **kwargs)


def engine_experiment(base_url: str, n: int, runs: int, latency: float = 0.2, concurrency: int = 16) -> str:
    """The same tick (N polls, 200 ms latency, concurrency 16) on engines that differ only in
    pool options, side by side per run: what the pings and reset rollbacks cost."""
    results: dict[str, list[dict[str, float]]] = {label: [] for label, _ in ENGINE_VARIANTS}
    with simproc.SimProc(latency_seconds=latency, queued_seconds=0.0, in_progress_seconds=86400.0,
                         retention_seconds=864000.0) as sim:
        warm_openai(benchdb.bench_settings("sqlite://", sim.url, Path("public")))
        for r in range(runs):
            for label, overrides in ENGINE_VARIANTS:
                sim.reset()
                with benchdb.fresh_database(base_url, "prof") as url, tempfile.TemporaryDirectory() as tmp:
                    benchdb.open_db(url).dispose()  # migrate
                    engine = variant_engine(url, concurrency + 4, overrides)
                    try:
                        settings = benchdb.bench_settings(url, sim.url, Path(tmp) / "public",
                                                          reconcile={"concurrency": concurrency,
                                                                     "tick_seconds": 3600.0})
                        benchdb.seed_polls(engine, settings, sim, n)
                        counter = metering.RoundTrips(engine)
                        counter.reset()
                        t0 = time.perf_counter()
                        report = reconcile.run(settings, engine)
                        wall = time.perf_counter() - t0
                        snap = counter.snapshot()
                        counter.close()
                        polls = sum(report.transitions.values())
                        results[label].append({"wall": wall, "rate": polls / wall,
                                               "wire": snap["wire_total"] / max(polls, 1), "run": r})
                        print(f"engine variant [{label}] run {r + 1}: {wall:.2f} s, {polls / wall:.1f} polls/s, "
                              f"{snap['wire_total'] / max(polls, 1):.1f} round trips/poll", flush=True)
                    finally:
                        engine.dispose()
    base = {m["run"]: m["wall"] for m in results[ENGINE_VARIANTS[0][0]]}
    rows = []
    for label, ms in results.items():
        rows.append([label, reporting.spread([m["wall"] for m in ms], 2), reporting.fmt(reporting.median(
            m["rate"] for m in ms)), f"{reporting.median(m['wire'] for m in ms):.1f}",
            reporting.spread([base[m["run"]] / m["wall"] for m in ms], 2)])
    return (f"*Engine pool options* — one tick over {n:,} due polls, {latency * 1000:g} ms latency, "
            f"concurrency {concurrency}, {runs} runs, variants side by side per run (the engine is built in "
            "the benchmark and passed to `reconcile.run`; iipub unchanged):\n\n"
            + reporting.table(["engine", "tick wall s", "polls/s", "wire round trips per poll",
                               "speed-up vs shipped"], rows))


def profile_relay(base_url: str, m: int) -> str:
    import relay_throughput

    with simproc.SimProc(latency_seconds=0.0, queued_seconds=0.5, in_progress_seconds=1.0) as sim, \
            benchdb.fresh_database(base_url, "prof") as url, tempfile.TemporaryDirectory() as tmp:
        engine = benchdb.open_db(url, pool_size=20)
        try:
            settings = relay_throughput.relay_settings(url, sim.url, Path(tmp) / "public", m)
            relay_throughput.prepare(engine, settings, sim, m)
            report, wall, profiler = profiled("relay_run.txt", lambda: relay.run(settings, engine))
            text, _ = summarise(profiler, wall, f"relay run delivering {report.published} events of {m} slots "
                                f"to the static sink ({wall / max(report.published, 1) * 1000:.1f} ms per event)")
            return text
        finally:
            engine.dispose()


def profile_idle(base_url: str, terminal: int) -> str:
    with simproc.SimProc(latency_seconds=0.0) as sim, benchdb.fresh_database(base_url, "prof") as url, \
            tempfile.TemporaryDirectory() as tmp:
        engine = benchdb.open_db(url, pool_size=8)
        try:
            settings = benchdb.bench_settings(url, sim.url, Path(tmp) / "public",
                                              reconcile={"tick_seconds": 3600.0})
            benchdb.park_today(engine, settings)
            now = benchdb.db_now(engine)
            benchdb.insert_rows(engine, tables.jobs, benchdb.terminal_rows(0, terminal, now), chunk=5000)
            reconcile.run(settings, engine)  # warm the buffer pool
            report, wall, profiler = profiled("idle_tick.txt", lambda: reconcile.run(settings, engine))
            assert report.leased == 0, report
            text, _ = summarise(profiler, wall, f"idle tick over {terminal:,} {State.DELETED.value} rows")
            return text
        finally:
            engine.dispose()


def main() -> None:
    ap = common.parser(__doc__.split("\n\n")[0])
    ap.add_argument("--what", default="poll,relay,idle,engine")
    ap.add_argument("--polls", type=int, default=None, help="jobs in the poll profile (default 500)")
    ap.add_argument("--slots", type=int, default=None, help="slots in the relay profile (default 100)")
    ap.add_argument("--terminal", type=int, default=None, help="rows in the idle profile (default 100000)")
    run = common.start(ap)
    args = run.args
    what = [w.strip() for w in args.what.split(",") if w.strip()]
    parts = []
    if "poll" in what:
        parts.append(profile_poll(args.mysql, args.polls or (300 if args.quick else 500)))
        parts.append(cpu_per_poll(args.mysql, args.polls or (300 if args.quick else 500)))
        parts.append(cpu_per_poll(args.mysql, 300 if args.quick else 2000, threaded=True))
    if "relay" in what:
        parts.append(profile_relay(args.mysql, args.slots or (40 if args.quick else 100)))
    if "engine" in what:
        parts.append(engine_experiment(args.mysql, 300 if args.quick else 1000, args.runs or (1 if args.quick else 3)))
    if "idle" in what:
        parts.append(profile_idle(args.mysql, args.terminal or (20_000 if args.quick else 100_000)))
    head = reporting.server_header(args.mysql, "1 (a profile, not a timing)", run.load_before, [
        ("- pyinstrument 5 (interval 0.5 ms), wall-clock sampling: time waiting on MariaDB or the "
         "simulator shows up under the socket read of the client library (pymysql `_read_packet`, "
         "httpx/httpcore); full trees in `bench/profiles/*.txt`")])
    run.write_section("profile", "7. Profiles (pyinstrument)", head + "\n\n" + "\n\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
