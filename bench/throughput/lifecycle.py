"""Full lifecycle throughput with a zero-latency simulator: K backfill slots driven from
NO_JOB to DELETED by alternating `reconcile` and `relay` runs, all in this process on one engine;
slots and fenced transitions per second, SQL statements and (MariaDB) PyMySQL round trips per
transition (`metering.RoundTrips`). Set-up: bench/notes/lifecycle.md.

    .venv/bin/python bench/throughput/lifecycle.py [--mysql URL] [--quick] [--sqlite] [--slots K]
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))  # bench/support: the shared modules
import benchdb
import harness
import reporting
import simproc
from iipub.model.states import State
from iipub.observe.status_report import dwell_samples
from iipub.store import tables


def measure(base_url: str, k: int) -> dict[str, Any]:
    """K backfill slots in a fresh database driven by reconcile + relay loops until every job is
    DELETED; the simulator in its own process at zero latency, the spend ledger the run's own
    (`benchdb.bench_settings`)."""
    sections = {"reconcile": {"poll_interval_seconds": 0.0, "tick_seconds": 3600.0, "max_in_flight": k,
                              "catch_up_days": 0,  # only the slots it made: no catch-up of missed days
                              "wrapper_seconds": 0},  # one long tick, no cron wrapper: creates all through it
                "relay": {"tick_seconds": 3600.0}}
    with simproc.SimProc(latency_seconds=0.0, queued_seconds=1.0, in_progress_seconds=2.0) as sim, \
            harness.bed(base_url, "life", sim, pool_size=16 + 4, sections=sections, count_trips=True,
                        seed=lambda w: benchdb.schedule_backfill(w.engine, w.settings, k)) as bed:
        engine, settings, counter = bed.engine, bed.settings, bed.trips
        assert counter is not None
        first_event = benchdb.max_event_id(engine)
        requests_before = sim.requests()
        counter.reset()
        t0 = time.perf_counter()
        spent = benchdb.drive(settings, engine, sim,
                              lambda c: c.get(State.DELETED.value, 0) == k + len(settings.products),
                              relay_too=True, max_loops=12)
        wall = time.perf_counter() - t0
        rt = counter.snapshot()
        events = benchdb.count_rows(engine, tables.job_events, tables.job_events.c.id > first_event)
        req = sim.requests()
        calls = {op: req.get(op, 0) - requests_before.get(op, 0) for op in ("create", "retrieve", "delete")}
        dwell = dwell_seconds(engine, first_event)
    return {
        "wall": wall, "slots_per_s": k / wall, "events": events, "transitions_per_s": events / wall,
        "reconcile_s": spent["reconcile_s"], "relay_s": spent["relay_s"], "loops": spent["loops"],
        "stmts_per_tr": rt["statement_total"] / events,
        "wire_per_tr": rt["wire_total"] / events if rt["wire_total"] else float("nan"),
        "statements": rt["statements"], "other": rt["other"], "wire": rt["wire"], "calls": calls,
        "dwell_max": max(dwell) if dwell else float("nan"), "dwell_n": len(dwell),
    }


def dwell_seconds(engine: Any, first_event: int) -> list[float]:
    """The unretrieved-dwell SLI samples (COMPLETED_NOT_RETRIEVED -> RETRIEVED_NOT_VALIDATED),
    computed from the journal with `iipub.observe.status_report.dwell_samples`."""
    E = tables.job_events
    with engine.connect() as conn:
        rows = conn.execute(sa.select(E.c.job_id, E.c.from_state, E.c.to_state, E.c.at)
                            .where(E.c.id > first_event).order_by(E.c.job_id, E.c.id)).all()
    parsed = [(j, f, t, dt.datetime.fromisoformat(a) if isinstance(a, str) else a) for j, f, t, a in rows]
    durations, _failed = dwell_samples(parsed)
    return durations


def rows_for(label: str, k: int, ms: list[dict[str, Any]]) -> list[list[str]]:
    def per(key: str) -> str:
        return reporting.spread([m[key] for m in ms])

    return [[label, f"{k:,}", str(len(ms)), reporting.spread([m["wall"] for m in ms], 2), per("slots_per_s"),
             per("transitions_per_s"), f"{reporting.median(m['events'] / k for m in ms):.1f}",
             reporting.spread([m["stmts_per_tr"] for m in ms], 2),
             reporting.spread([m["wire_per_tr"] for m in ms], 2),
             (f"{reporting.median(m['reconcile_s'] for m in ms):.1f} / "
              f"{reporting.median(m['relay_s'] for m in ms):.1f}"),
             f"{max(m['dwell_max'] for m in ms):.2f} ({min(m['dwell_n'] for m in ms)})"]]


def main() -> None:
    ap = harness.parser(__doc__.split("\n\n")[0], sqlite=True)
    ap.add_argument("--slots", type=int, default=None, help="K, slots per run (default 200, --quick 40)")
    run = harness.start(ap)
    args = run.args
    k = args.slots or (40 if args.quick else 200)
    runs = args.runs or (1 if args.quick else 3)
    backends = {"MariaDB": args.mysql, **({"SQLite (bonus)": "sqlite"} if args.sqlite else {})}
    results = harness.grid(runs, list(backends), lambda label: measure(backends[label], k))
    head = run.header(f"{runs} (median, min–max)")
    rows = [r for label, ms in results.items() for r in rows_for(label, k, ms)]
    m0 = results["MariaDB"][len(results["MariaDB"]) // 2]
    ev = m0["events"]
    wire = ", ".join(f"{name} {n / ev:.2f}" for name, n in sorted(m0["wire"].items(), key=lambda kv: -kv[1]))
    stmts = ", ".join(f"{name} {n / ev:.2f}" for name, n in sorted(m0["statements"].items(), key=lambda kv: -kv[1]))
    calls = ", ".join(f"{op} {n / k:.2f}" for op, n in m0["calls"].items())
    body = f"""{head}
{harness.note("lifecycle")}
{reporting.table(["backend", "K slots", "runs", "wall s", "slots/s", "transitions/s", "transitions/slot",
                  "SQL stmts/transition", "wire round trips/transition", "reconcile s / relay s",
                  "max unretrieved dwell s (samples)"], rows)}

Per transition (MariaDB, median run): statements {stmts}; wire commands {wire}.
Provider calls per slot: {calls}.
"""
    run.write_section("lifecycle", "2. Full lifecycle throughput (zero-latency provider)", body)


if __name__ == "__main__":
    main()
