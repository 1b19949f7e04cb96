"""One reconcile tick over N jobs due for a poll, at a fixed provider latency.

N = 100, 1,000, 10,000 jobs in ACCEPTED / IN_PROGRESS, each holding a real simulator
response still in progress; the simulator (its own process) sleeps `--latency` before every
answer. Measured per tick: wall time, polls per second, when each poll ran, SQL statements
and driver round trips per poll. Compared side by side in each run: concurrency 1 (the
sequential design), 16 (the default), 64 (with the default provider.max_connections = 32,
and with 64).

Concurrency 1 is measured on N = 100 and 1,000 only (10,000 polls x 200 ms would take
2,000 s); its N = 10,000 figure is extrapolated from its measured per-poll time.

    .venv/bin/python bench/tick_throughput.py [--mysql URL] [--quick] [--sqlite]
"""

from __future__ import annotations

import datetime as dt
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

import benchdb
import common
import metering
import reporting
import simproc
from iipub import reconcile, tables
from iipub.states import POLL_REASONS


@dataclass(frozen=True)
class Config:
    label: str
    concurrency: int
    max_connections: int


C1 = Config("c=1", 1, 32)
C16 = Config("c=16", 16, 32)
C64 = Config("c=64", 64, 32)
C64W = Config("c=64, max_connections=64", 64, 64)
CONFIGS = (C1, C16, C64, C64W)


def measure(base_url: str, sim: simproc.SimProc, n: int, cfg: Config, latency: float,
            meters: Mapping[str, Callable[[], float]] | None = None) -> dict[str, Any]:
    """One tick. `cpu` in the result is this process's CPU over the tick; each of `meters`
    (a reading such as another process's CPU seconds) is read before and after the tick too."""
    sim.reset()
    with fresh(base_url) as url, tempfile.TemporaryDirectory() as tmp:
        engine = benchdb.open_db(url, pool_size=cfg.concurrency + 4)  # as the CLI sizes it
        try:
            settings = benchdb.bench_settings(
                url, sim.url, Path(tmp) / "public",
                reconcile={"concurrency": cfg.concurrency, "tick_seconds": 3600.0},
                provider={"max_connections": cfg.max_connections},
            )
            benchdb.seed_polls(engine, settings, sim, n)
            counter = metering.RoundTrips(engine)
            before = sim.requests().get("retrieve", 0)
            start_db = benchdb.db_now(engine)
            counter.reset()
            readings = {name: read() for name, read in (meters or {}).items()}
            cpu0, t0 = time.process_time(), time.perf_counter()
            report = reconcile.run(settings, engine)
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            readings = {name: read() - readings[name] for name, read in (meters or {}).items()}
            rt = counter.snapshot()
            counter.close()
            polls = sim.requests().get("retrieve", 0) - before
            offsets = poll_offsets(engine, start_db)
            moved = sum(report.transitions.values())
            if report.errors or polls != n or moved != n:
                print(f"  !! n={n} {cfg.label}: polls={polls} transitions={moved} errors={report.errors}")
            return {
                "wall": wall, "cpu": cpu, **readings, "polls": polls, "rate": polls / wall,
                "per_poll": wall / max(polls, 1),
                "within_50s": sum(1 for o in offsets if o <= 50.0) / max(len(offsets), 1),
                "p95_offset": reporting.percentile(offsets, 95),
                "stmts_per_poll": rt["statement_total"] / max(polls, 1),
                "wire_per_poll": rt["wire_total"] / max(polls, 1) if rt["wire_total"] else float("nan"),
                "statements": rt["statements"],
            }
        finally:
            engine.dispose()


def fresh(base_url: str) -> Any:
    return benchdb.fresh_database(base_url, "tick")


def poll_offsets(engine: sa.Engine, start: Any) -> list[float]:
    """Seconds from the tick's start (database clock) to each poll's journal row."""
    E = tables.job_events
    with engine.connect() as conn:
        ats = conn.execute(sa.select(E.c.at).where(E.c.reason.in_(POLL_REASONS))).scalars().all()
    out = []
    for at in ats:
        if isinstance(at, str):  # SQLite
            at = dt.datetime.fromisoformat(at)
        out.append((at - start).total_seconds())
    return out


def estimate(results: dict[tuple[int, str], list[dict[str, Any]]], n: int, cfg: Config, latency: float) -> float:
    """Seconds a cell will take: this config's per-poll time at the largest smaller N measured,
    else the latency floor with a margin (plus set-up)."""
    smaller = [nn for (nn, label) in results if label == cfg.label and nn < n]
    if smaller:
        return n * reporting.median(m["per_poll"] for m in results[(max(smaller), cfg.label)]) + 5
    return 1.5 * n * latency / min(cfg.concurrency, cfg.max_connections) + 5


def run_backend(label: str, base_url: str, sizes: list[int], runs: int, big_runs: int, latency: float,
                results: dict[tuple[int, str], list[dict[str, Any]]], skipped: list[str], budget: float,
                started: float, c1_max: int) -> None:
    """Cells in priority order: every N with c=16 and c=64 (side by side within each run), then
    c=1 at the sizes it is measured at (N <= c1_max), as long as the time budget allows."""
    with simproc.SimProc(latency_seconds=latency, queued_seconds=0.0, in_progress_seconds=86400.0,
                         retention_seconds=864000.0) as sim:
        plan: list[tuple[int, list[Config], int]] = []
        for n in sizes:
            if n <= 100:  # cheap: all four side by side
                plan.append((n, [c for c in CONFIGS if c is not C1 or n <= c1_max], runs))
            else:
                plan.append((n, [C16, C64, C64W], big_runs if n >= 10_000 else runs))
        plan += [(n, [C1], big_runs) for n in sizes if 100 < n <= c1_max]
        for n, configs, k in plan:
            for r in range(k):
                for cfg in configs:  # side by side within run r
                    need = estimate(results, n, cfg, latency)
                    if time.monotonic() - started + need > budget:
                        skipped.append(f"{label} N={n:,} {cfg.label} run {r + 1} (needs ≈ {need:.0f} s)")
                        print(f"[{label}] skip n={n} {cfg.label} run {r + 1}: ≈ {need:.0f} s exceeds the budget",
                              flush=True)
                        continue
                    m = measure(base_url, sim, n, cfg, latency)
                    m["run"] = r
                    results[(n, cfg.label)].append(m)
                    print(f"[{label}] n={n:>6} {cfg.label:<26} run {r + 1}: {m['wall']:8.2f} s "
                          f"{m['rate']:7.1f} polls/s  stmts/poll {m['stmts_per_poll']:.1f} "
                          f"wire/poll {m['wire_per_poll']:.1f}", flush=True)


def render(label: str, sizes: list[int], results: dict[tuple[int, str], list[dict[str, Any]]],
           latency: float) -> str:
    measured_c1 = [n for n in sizes if results.get((n, C1.label))]
    c1_per_poll = (reporting.median(m["per_poll"] for m in results[(max(measured_c1), C1.label)])
                   if measured_c1 else None)
    rows = []
    for n in sizes:
        c1 = {m["run"]: m["wall"] for m in results.get((n, C1.label), [])}
        c16 = {m["run"]: m["wall"] for m in results.get((n, C16.label), [])}
        for cfg in CONFIGS:
            ms = results.get((n, cfg.label), [])
            floor = reporting.fmt(n * latency / min(cfg.concurrency, cfg.max_connections))
            if not ms:
                if cfg is C1 and c1_per_poll:
                    est = c1_per_poll * n
                    rows.append([f"{n:,}", cfg.label, "0 (extrapolated)",
                                 f"≈ {reporting.fmt(est)} ({c1_per_poll * 1000:.0f} ms/poll × {n:,})",
                                 reporting.fmt(n / est), "–", "1", "–", f"{min(1.0, 50 / est) * 100:.0f} %", "–",
                                 floor])
                continue
            walls = [m["wall"] for m in ms]
            pairs = [c1[m["run"]] / m["wall"] for m in ms if m["run"] in c1]
            if pairs:
                speedup = reporting.spread(pairs)
            elif c1_per_poll:
                speedup = f"≈ {reporting.fmt(c1_per_poll * n / reporting.median(walls))} (vs extrapolated)"
            else:
                speedup = "–"
            pairs16 = [c16[m["run"]] / m["wall"] for m in ms if m["run"] in c16]
            vs16 = reporting.spread(pairs16, 2) if pairs16 and cfg is not C16 else "–"
            rows.append([
                f"{n:,}", cfg.label, str(len(ms)), reporting.spread(walls, 2),
                reporting.fmt(reporting.median(m["rate"] for m in ms)),
                reporting.fmt(reporting.median(m["p95_offset"] for m in ms)), speedup, vs16,
                f"{reporting.median(m['within_50s'] for m in ms) * 100:.0f} %",
                reporting.fmt(reporting.median(m["stmts_per_poll"] for m in ms)) + " / "
                + reporting.fmt(reporting.median(m["wire_per_poll"] for m in ms)),
                floor,
            ])
    headers = ["N", "config", "runs", "tick wall s, median (min–max)", "polls/s", "p95 poll at s",
               "speed-up vs c=1", "c=16 wall / this wall", "polls in first 50 s",
               "SQL stmts / wire round trips per poll", "latency floor s"]
    return f"**{label}**\n\n" + reporting.table(headers, rows)


def main() -> None:
    ap = common.parser(__doc__.split("\n\n")[0], sqlite=True)
    ap.add_argument("--latency", type=float, default=0.2, help="provider latency in seconds (default 0.2)")
    ap.add_argument("--big-runs", type=int, default=None,
                    help="runs of the expensive cells: every N = 10,000 tick and c=1 at N = 1,000 (default 1)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds; a cell whose estimated time would overrun it is skipped and listed "
                         "(default 600, --quick 240)")
    run = common.start(ap)
    args = run.args
    runs = args.runs or (1 if args.quick else 3)
    big_runs = args.big_runs or 1
    budget = args.budget or (240.0 if args.quick else 600.0)
    sizes = [100, 1000] if args.quick else [100, 1000, 10_000]
    c1_max = 100 if args.quick else 1000
    results: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    skipped: list[str] = []
    run_backend("MariaDB", args.mysql, sizes, runs, big_runs, args.latency, results, skipped, budget, run.started,
                c1_max)
    mysql_table = render("MariaDB", sizes, results, args.latency)
    sqlite_table = ""
    if args.sqlite:
        sresults: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
        run_backend("SQLite", "sqlite", [100, 1000], runs, big_runs, args.latency, sresults, skipped,
                    budget + 300, run.started, 100)
        sqlite_table = render("SQLite (bonus)", [100, 1000], sresults, args.latency)
    head = reporting.server_header(
        args.mysql, f"{runs} per cell at N ≤ 1,000, {big_runs} at N = 10,000 and for c=1 at N = 1,000; "
        "within a run the configurations of one N are measured back to back (c=1 at N = 1,000 "
        "runs last, after the N = 10,000 cells)", run.load_before,
        [f"- Script wall time: {run.elapsed():.0f} s (budget {budget:.0f} s)",
         "- Skipped for the time budget: " + ("; ".join(skipped) if skipped else "none")])
    body = f"""{head}
- Set-up per tick: fresh database; N jobs inserted directly (half ACCEPTED, half IN_PROGRESS, due,
  unleased, current config fingerprint), each with a real response created on the simulator
  (still in progress: the poll answers `in_progress`); simulator in its own process with
  `latency_seconds={args.latency}` before every /v1 answer; production settings except
  `reconcile.tick_seconds = 3600` (so every tick completes; the production budget is 50 s),
  `reconcile.concurrency` and `provider.max_connections` as listed; engine pool = concurrency + 4
  (as `iipub reconcile` sizes it); log lines rendered as in production into /dev/null.
- *p95 poll at*: seconds from the tick's start to the journal row of the 95th-percentile poll.
  *polls in first 50 s*: share of the tick's polls a production tick (`tick_seconds = 50`) would have
  made before its deadline. *latency floor*: N × latency / min(concurrency, max_connections), the
  best any tick can do. Speed-ups are per run (same N, measured back to back), then the median;
  where c=1 was not measured the speed-up is against its extrapolation (per-poll time at the
  largest N it was measured at × N).

{mysql_table}
"""
    if sqlite_table:
        body += f"\n{sqlite_table}\n"
    title = f"1. Tick throughput (polls at {args.latency * 1000:g} ms provider latency)"
    run.write_section("tick_throughput", title, body)


if __name__ == "__main__":
    main()
