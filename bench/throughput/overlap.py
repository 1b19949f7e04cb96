"""Overlapping reconcilers: P = 1, 2, 4 `iipub reconcile` processes started together on the
same due set of N polling jobs (as cron would if ticks overran, or on several hosts). The figures
and the double-poll check: bench/notes/overlap.md.

    .venv/bin/python bench/throughput/overlap.py [--mysql URL] [--quick]
"""

from __future__ import annotations

import functools
import itertools
import sys
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))  # bench/support: the shared modules
import harness
import reporting
import simproc
from iipub.model.states import POLL_REASONS
from iipub.store import tables

KEYS = ("leased", "taken", "contention", "lease_lost", "errors")


def measure(base_url: str, sim: simproc.SimProc, n: int, procs: int, concurrency: int,
            max_connections: int = 32) -> dict[str, Any]:
    cfg: dict[str, dict[str, Any]] = {"reconcile": {"concurrency": concurrency, "tick_seconds": 600.0},
                                      "provider": {"max_connections": max_connections}}
    with harness.bed(base_url, "overlap", sim, polls=n, pool_size=4, sections=cfg) as bed:
        before = sim.requests().get("retrieve", 0)
        t0 = time.perf_counter()
        summaries = harness.run_reconcilers([bed.env(**cfg)] * procs, bed.workdir)
        wall = time.perf_counter() - t0
        polls = sim.requests().get("retrieve", 0) - before
        with bed.engine.connect() as conn:
            E = tables.job_events
            per_job = (sa.select(E.c.job_id, sa.func.count().label("n"))
                       .where(E.c.reason.in_(POLL_REASONS)).group_by(E.c.job_id).subquery())
            twice = conn.execute(
                sa.select(sa.func.count()).select_from(per_job).where(per_job.c.n > 1)
            ).scalar_one()
            journaled = conn.execute(sa.select(sa.func.count()).select_from(E)
                                     .where(E.c.reason.in_(POLL_REASONS))).scalar_one()
            polls_at = conn.execute(sa.select(E.c.job_id, E.c.at).where(E.c.reason.in_(POLL_REASONS))
                                    .order_by(E.c.job_id, E.c.id)).all()
        # A second poll of a job is legitimate once its poll interval has passed (a tick longer
        # than the interval finds it due again); sooner than that it is a double poll.
        interval = bed.settings.reconcile.poll_interval_seconds
    gaps = [(b.at - a.at).total_seconds() for a, b in itertools.pairwise(polls_at) if a.job_id == b.job_id]
    premature = sum(1 for g in gaps if g < interval - 1)
    totals = {k: sum(int(s.get(k, 0)) for s in summaries) for k in KEYS}
    return {"wall": wall, "polls": polls, "rate": polls / wall, "journaled": int(journaled),
            "twice": int(twice), "premature": premature, "min_gap": min(gaps) if gaps else float("nan"),
            "tick_s": [float(s["seconds"]) for s in summaries], **totals}


def main() -> None:
    ap = harness.parser(__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", type=int, default=16, help="reconcile.concurrency of each process (default 16)")
    ap.add_argument("--goal-runs", type=int, default=None,
                    help="runs of the goal-shaped cells (N = 10,000, concurrency 64, P = 1 and 2; default 2, "
                         "0 skips them)")
    run = harness.start(ap, production_logs=False)  # the ticks run in child processes
    args = run.args
    runs = args.runs or (1 if args.quick else 3)
    goal_runs = args.goal_runs if args.goal_runs is not None else (0 if args.quick else 2)
    # (label, latency, N, concurrency, provider.max_connections, P values, runs)
    scenarios: list[tuple[str, float, int, int, int, tuple[int, ...], int]] = [
        ("200 ms latency", 0.2, 300 if args.quick else 1000, args.concurrency, 32, (1, 2, 4), runs),
        ("zero latency (database-bound)", 0.0, 500 if args.quick else 2000, args.concurrency, 32, (1, 2, 4), runs),
    ]
    if goal_runs:
        scenarios.append(("goal shape: 200 ms latency, concurrency 64, max_connections 64", 0.2, 10_000, 64, 64,
                          (1, 2), goal_runs))
    rows = []
    for label, latency, n, concurrency, max_connections, procs, k in scenarios:
        print(f"[{label}] N={n}", flush=True)
        with harness.polling_simulator(latency) as sim:  # the P values side by side within a run
            cell = functools.partial(measure, args.mysql, sim, n, concurrency=concurrency,
                                     max_connections=max_connections)
            results = harness.grid(k, procs, cell)
        base = {m_i: m["wall"] for m_i, m in enumerate(results[1])}
        for p, ms in results.items():
            ratio = [base[i] / m["wall"] for i, m in enumerate(ms) if i in base]
            rows.append([
                label, f"{n:,}", str(p), str(len(ms)), reporting.spread([m["wall"] for m in ms], 2),
                reporting.spread([m["rate"] for m in ms]), reporting.spread(ratio, 2),
                reporting.fmt(reporting.median(reporting.median(m["tick_s"]) for m in ms), 2),
                *[f"{reporting.median(m[k] for m in ms):.0f}" for k in KEYS],
                (f"{max(m['polls'] for m in ms)} / {max(m['twice'] for m in ms)} / "
                 f"{max(m['premature'] for m in ms)}"),
            ])
    head = run.header(f"{runs} per cell, {goal_runs} for the goal-shaped cells (median, min–max); "
                      "the P values of a scenario measured back to back in each run")
    body = f"""{head}
{harness.note("overlap", concurrency=args.concurrency)}
{reporting.table(["scenario", "N", "P", "runs", "wall s", "polls/s", "speed-up vs P=1", "own tick s", *KEYS,
                  "max polls / jobs polled twice / double polls"], rows)}
"""
    run.write_section("overlap", "4. Overlapping reconcilers", body)


if __name__ == "__main__":
    main()
