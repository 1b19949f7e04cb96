"""The one bench harness: what every measurement sets up, measures and tears down (the
command line, the simulator, the bed, a program measured as cron starts it, the runs x
configurations grid, the drills' set-up and a loopback WSGI server); bench/README.md lists
each. Prose for docs/benchmarks.md lives in bench/notes/<key>.md (`note`), not in Python strings.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import benchdb  # puts this checkout on sys.path before iipub
import metering
import reporting
import simproc
from iipub.provider.openai.simulator import Simulator

BENCH = Path(__file__).resolve().parents[1]  # bench/
ROOT = benchdb.ROOT
NOTES = BENCH / "notes"
DEFAULT_MYSQL = "mysql+pymysql://root@127.0.0.1:3306/test"

# The simulator of the poll benchmarks: a response stays in progress for a day (every poll
# is a plain "still running") and is kept for ten, whatever the benchmark's own clock does.
POLLING = {"queued_seconds": 0.0, "in_progress_seconds": 86400.0, "retention_seconds": 864000.0}

# -- command line -----------------------------------------------------------------------


def described(description: str, note_key: str | None = None) -> argparse.ArgumentParser:
    """A parser whose `--help` ends with bench/notes/<note_key>.md, when given."""
    if note_key is None:
        return argparse.ArgumentParser(description=description)
    return argparse.ArgumentParser(description=description, epilog=note(note_key),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def parser(description: str, *, sqlite: bool = False, runs: int | None = None,
           note: str | None = None) -> argparse.ArgumentParser:
    p = described(description, note)
    p.add_argument("--mysql", default=os.environ.get("IIPUB_BENCH_MYSQL_URL", DEFAULT_MYSQL),
                   help="server URL; each measurement creates and drops its own iipub_bench_* database "
                        f"(default {DEFAULT_MYSQL})")
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer runs (a smoke run)")
    p.add_argument("--runs", type=int, default=runs, help="repetitions per measurement (median is reported)")
    p.add_argument("--no-doc", action="store_true", help="print only; leave docs/benchmarks.md alone")
    if sqlite:
        p.add_argument("--sqlite", action="store_true", help="also measure on SQLite (bonus figures)")
    return p


@dataclass(frozen=True)
class Run:
    """One run of a benchmark script: its arguments, the load average before it and its start."""

    args: argparse.Namespace
    load_before: str
    started: float

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def header(self, runs: str, extra: Sequence[str] = ()) -> str:
        wall = f"- Script wall time: {self.elapsed():.0f} s"
        return reporting.server_header(self.args.mysql, runs, self.load_before, [wall, *extra])

    def write_section(self, key: str, title: str, body: str) -> None:
        reporting.write_section(key, title, body, enabled=not self.args.no_doc)


def start(ap: argparse.ArgumentParser, *, production_logs: bool = True) -> Run:
    """Parse the command line, log as production does into /dev/null (unless the ticks run in
    child processes), note the load average and the time."""
    args = ap.parse_args()
    if production_logs:
        production_logs_to_devnull()
    return Run(args, reporting.loadavg(), time.monotonic())


def production_logs_to_devnull() -> None:
    """structlog configured exactly as the CLI does (JSON lines, level info), into /dev/null:
    rendering every line is part of an in-process figure, the terminal noise is not."""
    import logging

    from iipub.core import logs

    saved = sys.stderr
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    try:
        logs.configure("info")
    finally:
        sys.stderr = saved
    logging.getLogger().setLevel(logging.WARNING)


def note(key: str, **figures: Any) -> str:
    """The prose of a section of docs/benchmarks.md (bench/notes/<key>.md), its `{name}` fields
    filled from `figures` (a note given figures spells a literal brace `{{`)."""
    path = NOTES / f"{key}.md"
    text = path.read_text(encoding="utf-8").strip() if path.exists() else ""
    return (text.format(**figures) if figures else text) + "\n"


# -- the simulator and the test bed -------------------------------------------------------


def polling_simulator(latency: float, **options: Any) -> simproc.SimProc:
    return simproc.SimProc(latency_seconds=latency, **{**POLLING, **options})


# Either simulator: in its own process (the poll benchmarks) or in this one (the drills).
Sim = simproc.SimProc | Simulator


@dataclass
class Bed:
    """One measurement's world: a fresh migrated database, its engine and settings, the
    simulator, a work directory, and (when asked for) a round-trip counter."""

    url: str
    engine: Any
    settings: Any
    sim: Sim
    workdir: Path
    trips: metering.RoundTrips | None = None

    def env(self, **sections: Mapping[str, Any]) -> dict[str, str]:
        """The environment of an `iipub` child run as cron runs it on this bed."""
        return reconcile_env(self.url, self.sim.url, self.workdir, sections)


@contextlib.contextmanager
def bed(base_url: str, tag: str, sim: Sim, *, polls: int = 0, pool_size: int = 8,
        count_trips: bool = False, seed: Callable[[Bed], object] | None = None,
        sections: Mapping[str, Mapping[str, Any]] | None = None, workdir: Path | None = None) -> Iterator[Bed]:
    """Fresh database -> engine -> settings (`sections` over production defaults, the static
    sink under `workdir`/public, `workdir` a temporary directory unless given) -> `polls` due
    polls (and `seed(bed)`) -> round-trip counter -> yield -> dispose and drop."""
    sim.reset()
    with benchdb.fresh_database(base_url, tag) as url, contextlib.ExitStack() as stack:
        work = workdir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        engine = benchdb.open_db(url, pool_size=pool_size)
        trips = None
        try:
            settings = benchdb.bench_settings(url, sim.url, work / "public", **(sections or {}))
            world = Bed(url, engine, settings, sim, work)
            if polls:
                assert isinstance(sim, simproc.SimProc), "seeded polls need the simulator's child process"
                benchdb.seed_polls(engine, settings, sim, polls)
            if seed is not None:
                seed(world)
            if count_trips:
                trips = world.trips = metering.RoundTrips(engine)
            yield world
        finally:
            if trips is not None:
                trips.close()
            engine.dispose()


def park_today(world: Bed) -> None:
    """A `seed`: today's slots present and finished, so a tick has nothing to schedule."""
    benchdb.park_today(world.engine, world.settings)


# -- the drills (provider_truth.py, webhooks.py): the simulator in process, SQLite by default --


def drill_parser(description: str, note: str | None = None) -> argparse.ArgumentParser:
    p = described(description, note)
    p.add_argument("--mysql", help="a MariaDB/MySQL URL whose server may create scratch databases (default SQLite)")
    p.add_argument("--json", type=Path, help="write the results here too")
    return p


def drill_logs() -> None:
    """A drill logs at warning, so the breaker's and the receiver's warnings stay visible (its
    ticks see only its own slots: `benchdb.brief_only` turns `[reconcile] auto_schedule` off)."""
    from iipub.core import logs

    logs.configure("warning")


# -- a loopback WSGI server (the webhook receivers of webhooks.py and chaos.py) -------------


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


class _ThreadingServer(WSGIServer):
    """Deliveries may overlap: one thread each, like mod_wsgi's."""

    def process_request(self, request: Any, client_address: Any) -> None:
        threading.Thread(target=self._serve_one, args=(request, client_address), daemon=True).start()

    def _serve_one(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        finally:
            self.shutdown_request(request)


@contextlib.contextmanager
def wsgi_server(app: Any = None) -> Iterator[WSGIServer]:
    """A loopback WSGI server on a free port serving `app`, or (when the app needs to know the
    server's URL first) the app given to `server.set_app` later."""
    server = make_server("127.0.0.1", 0, app or (lambda environ, start: []), server_class=_ThreadingServer,
                         handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


# -- a program as cron starts it ---------------------------------------------------------


def iipub_exe() -> list[str]:
    exe = Path(sys.executable).parent / "iipub"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "iipub"]


def reconcile_env(url: str, sim_url: str, workdir: Path, sections: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """This process's environment without any IIPUB_/OPENAI_ variable, plus the database, the
    simulator as the provider and `IIPUB_CONFIG` (workdir/iipub.toml: `sections` and a static
    sink under workdir/public)."""
    cfg = workdir / "iipub.toml"
    cfg.write_text(benchdb.settings_toml(workdir / "public", **sections))
    return clean_env(IIPUB_DATABASE_URL=url, IIPUB_CONFIG=str(cfg), OPENAI_API_KEY="sk-bench", OPENAI_BASE_URL=sim_url)


def clean_env(**variables: str) -> dict[str, str]:
    """This process's environment without any IIPUB_/OPENAI_ variable, plus `variables`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IIPUB_", "OPENAI_"))}
    return {**env, **variables}


def run_reconcilers(envs: Sequence[Mapping[str, str]], cwd: str | Path, timeout: float = 900) -> list[dict[str, Any]]:
    """One `iipub reconcile` per environment, all at once (as overlapping cron runs would); their
    JSON summaries (the last line each prints), in order."""
    children = [subprocess.Popen([*iipub_exe(), "reconcile"], env=dict(env), cwd=cwd,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                for env in envs]
    summaries = []
    for child in children:
        out, _ = child.communicate(timeout=timeout)
        if child.returncode != 0:
            raise RuntimeError(f"iipub reconcile exited {child.returncode}: {out[-500:]}")
        summaries.append(json.loads(out.strip().splitlines()[-1]))
    return summaries


def run_process(cmd: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                log: Path | None = None, timeout: float = 900, ok: Sequence[int] = (0,)) -> dict[str, Any]:
    """Start `cmd` cold, stderr appended to `log` (cron's `>> log 2>&1`), stdout kept; measure
    wall around it and, from `wait4`, its whole-process CPU (user + system, every thread). Peak
    RSS is its VmHWM, read while it runs: `wait4`'s ru_maxrss starts from this (larger) process's
    RSS at the fork. The last stdout line, when it is JSON, is in `result`. An exit code not in
    `ok` raises (a monitoring check's 1, 2 or 3 is its answer)."""
    with contextlib.ExitStack() as stack:
        err = stack.enter_context(open(log, "ab")) if log is not None else subprocess.DEVNULL
        out = stack.enter_context(tempfile.TemporaryFile())
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(cmd), env=dict(env) if env is not None else None, cwd=cwd,
                                stdout=out, stderr=err)
        peak_kib, deadline = 0, time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                break
            peak_kib = max(peak_kib, _vm_hwm_kib(proc.pid))
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise TimeoutError(f"{list(cmd)[:3]} exceeded {timeout} s")
            time.sleep(0.01)
        wall = time.perf_counter() - t0
        proc.returncode = rc = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
    m: dict[str, Any] = {"rc": rc, "wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "user": usage.ru_utime,
                         "sys": usage.ru_stime, "peak_rss_mib": peak_kib / 1024}
    lines = text.strip().splitlines()
    with contextlib.suppress(ValueError, IndexError):
        m["result"] = json.loads(lines[-1])
    if rc not in ok:
        raise RuntimeError(f"{list(cmd)[:3]} exited {rc}: {text[-2000:]}")
    return m


def _vm_hwm_kib(pid: int) -> int:
    return metering.proc_status(pid).get("VmHWM", 0)


# -- runs x configurations ------------------------------------------------------------------

K = TypeVar("K")


def grid(runs: int, configs: Sequence[K], measure: Callable[[K], dict[str, Any]],
         progress: bool = True) -> dict[K, list[dict[str, Any]]]:
    """Every configuration once per run, in turn (run 1: a, b, c; run 2: a, b, c; ...)."""
    results: dict[K, list[dict[str, Any]]] = {c: [] for c in configs}
    for r in range(runs):
        for c in configs:
            m = measure(c)
            results[c].append(m)
            if progress:
                print(f"run {r + 1}/{runs} {c}: " + json.dumps({k: v for k, v in m.items()
                                                               if isinstance(v, (int, float))}, default=str),
                      file=sys.stderr, flush=True)
    return results
