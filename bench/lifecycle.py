"""Full lifecycle throughput with a zero-latency simulator: K backfill slots driven from
NO_JOB to DELETED by alternating `reconcile` and `relay` runs (the simulator's clock moved
5 s after each pair, so responses finish), all in this process on one engine.

Reported: slots per second (NO_JOB -> DELETED), fenced transitions per second (`job_events`
rows written / time), and database traffic per transition: SQL statements counted with
SQLAlchemy's `before_cursor_execute` hook, and (MariaDB) every command PyMySQL sends
(statements plus the COMMITs, pool pre-ping PINGs and reset-on-return ROLLBACKs).

    .venv/bin/python bench/lifecycle.py [--mysql URL] [--quick] [--sqlite] [--slots K]
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

import benchdb
import harness
import metering
import reporting
import simproc
from iipub import tables
from iipub.states import State


@dataclass
class Drive:
    """What one `driven` run measured; `engine` (open inside the `with` block) and `first_event`
    let the caller query the journal the run wrote."""

    engine: sa.Engine
    first_event: int
    wall: float
    cpu: float  # this process's CPU time over the drive
    spent: dict[str, Any]  # benchdb.drive's per-command times and loop count
    events: int  # job_events rows the drive wrote
    round_trips: dict[str, Any]  # metering.RoundTrips.snapshot()
    calls: dict[str, int]  # provider calls seen by the simulator, per operation


@contextlib.contextmanager
def driven(base_url: str, k: int, *, ends: Sequence[str] = (State.DELETED.value,),
           tick_seconds: float = 3600.0) -> Iterator[Drive]:
    """K backfill slots in a fresh database driven by reconcile + relay loops until every job is
    in one of `ends`; the simulator in its own process at zero latency, the spend ledger the run's
    own (`benchdb.bench_settings`)."""
    with simproc.SimProc(latency_seconds=0.0, queued_seconds=1.0, in_progress_seconds=2.0) as sim, \
            benchdb.fresh_database(base_url, "life") as url, tempfile.TemporaryDirectory() as tmp:
        engine = benchdb.open_db(url, pool_size=16 + 4)
        try:
            settings = benchdb.bench_settings(
                url, sim.url, Path(tmp) / "public",
                reconcile={"poll_interval_seconds": 0.0, "tick_seconds": tick_seconds, "max_in_flight": k,
                           "catch_up_days": 0},  # only the slots it made: no catch-up of missed days
                relay={"tick_seconds": tick_seconds},
            )
            benchdb.park_today(engine, settings)
            benchdb.schedule_backfill(engine, settings, k)
            first_event = benchdb.max_event_id(engine)
            requests_before = sim.requests()
            counter = metering.RoundTrips(engine)
            counter.reset()
            cpu0, t0 = time.process_time(), time.perf_counter()
            spent = benchdb.drive(settings, engine, sim,
                                  lambda c: sum(c.get(s, 0) for s in ends) == k + len(settings.products),
                                  relay_too=True, max_loops=12)
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            rt = counter.snapshot()
            counter.close()
            events = benchdb.count_rows(engine, tables.job_events, tables.job_events.c.id > first_event)
            req = sim.requests()
            calls = {op: req.get(op, 0) - requests_before.get(op, 0) for op in ("create", "retrieve", "delete")}
            yield Drive(engine=engine, first_event=first_event, wall=wall, cpu=cpu, spent=spent, events=events,
                        round_trips=rt, calls=calls)
        finally:
            engine.dispose()


def measure(base_url: str, k: int) -> dict[str, Any]:
    with driven(base_url, k) as d:
        dwell = dwell_seconds(d.engine, d.first_event)
    rt, events, wall = d.round_trips, d.events, d.wall
    return {
        "wall": wall, "slots_per_s": k / wall, "events": events, "transitions_per_s": events / wall,
        "reconcile_s": d.spent["reconcile_s"], "relay_s": d.spent["relay_s"], "loops": d.spent["loops"],
        "stmts_per_tr": rt["statement_total"] / events,
        "wire_per_tr": rt["wire_total"] / events if rt["wire_total"] else float("nan"),
        "statements": rt["statements"], "other": rt["other"], "wire": rt["wire"], "calls": d.calls,
        "dwell_max": max(dwell) if dwell else float("nan"), "dwell_n": len(dwell),
    }


def dwell_seconds(engine: Any, first_event: int) -> list[float]:
    """The unretrieved-dwell SLI samples (COMPLETED_NOT_RETRIEVED -> RETRIEVED_NOT_VALIDATED),
    computed from the journal with `iipub.status.dwell_samples`."""
    import datetime as dt

    from iipub.status import dwell_samples

    E = tables.job_events
    with engine.connect() as conn:
        rows = conn.execute(sa.select(E.c.job_id, E.c.from_state, E.c.to_state, E.c.at)
                            .where(E.c.id > first_event).order_by(E.c.job_id, E.c.id)).all()
    parsed = [(j, f, t, dt.datetime.fromisoformat(a) if isinstance(a, str) else a) for j, f, t, a in rows]
    durations, _failed = dwell_samples(parsed)
    return durations


def repeat(label: str, base_url: str, k: int, runs: int) -> list[dict[str, Any]]:
    out = []
    for r in range(runs):
        m = measure(base_url, k)
        out.append(m)
        print(f"[{label}] K={k} run {r + 1}: {m['wall']:.2f} s, {m['slots_per_s']:.1f} slots/s, "
              f"{m['transitions_per_s']:.0f} transitions/s, {m['stmts_per_tr']:.2f} stmts/transition, "
              f"{m['wire_per_tr']:.2f} round trips/transition (reconcile {m['reconcile_s']:.1f} s, "
              f"relay {m['relay_s']:.1f} s, {m['loops']} loops)", flush=True)
    return out


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
    results = {"MariaDB": repeat("MariaDB", args.mysql, k, runs)}
    if args.sqlite:
        results["SQLite (bonus)"] = repeat("SQLite", "sqlite", k, runs)
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
