"""Relay throughput to the static sink: M slots are driven to SAVED_NOT_PUBLIC by reconcile
(zero-latency simulator), which leaves one outbox event per slot and language; then one
`relay.run` is timed. The static sink is wrapped (same object, timed `deliver`) to split
the time between the sink's file work and the relay's database work.

    .venv/bin/python bench/relay_throughput.py [--mysql URL] [--quick] [--slots 50,150]
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

import benchdb
import common
import metering
import reporting
import simproc
from iipub import db, relay
from iipub.config import Settings
from iipub.relay import build_sinks
from iipub.sinks import DeliveryResult, Event, Sink
from iipub.states import State


class TimedSink:
    """Delegates to a real sink and adds up the time spent in `deliver`."""

    def __init__(self, inner: Sink) -> None:
        self.inner = inner
        self.name = inner.name
        self.seconds = 0.0
        self.calls = 0

    def deliver(self, event: Event) -> DeliveryResult:
        t0 = time.perf_counter()
        try:
            return self.inner.deliver(event)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1


def relay_settings(url: str, sim_url: str, root: Path, m: int) -> Settings:
    return benchdb.bench_settings(
        url, sim_url, root,
        reconcile={"poll_interval_seconds": 0.0, "tick_seconds": 3600.0, "max_in_flight": max(m, 1)},
        relay={"tick_seconds": 3600.0},
    )


def prepare(engine: sa.Engine, settings: Settings, sim: simproc.SimProc, m: int) -> None:
    """M slots in SAVED_NOT_PUBLIC with their outbox events (reconcile only, no relay)."""
    benchdb.park_today(engine, settings)
    benchdb.schedule_backfill(engine, settings, m)
    benchdb.drive(settings, engine, sim, lambda c: c.get(State.SAVED_NOT_PUBLIC.value, 0) == m,
                  relay_too=False, max_loops=10)


def measure(base_url: str, m: int) -> dict[str, Any]:
    with simproc.SimProc(latency_seconds=0.0, queued_seconds=0.5, in_progress_seconds=1.0) as sim, \
            benchdb.fresh_database(base_url, "relay") as url, tempfile.TemporaryDirectory() as tmp:
        engine = benchdb.open_db(url, pool_size=20)
        try:
            settings = relay_settings(url, sim.url, Path(tmp) / "public", m)
            t0 = time.perf_counter()
            prepare(engine, settings, sim, m)
            prep = time.perf_counter() - t0
            events = benchdb.count_rows(engine, db.outbox)
            timed = [TimedSink(s) for s in build_sinks(settings)]
            sinks: list[Sink] = list(timed)
            counter = metering.RoundTrips(engine)
            counter.reset()
            t0 = time.perf_counter()
            report = relay.run(settings, engine, sinks=sinks)
            wall = time.perf_counter() - t0
            rt = counter.snapshot()
            counter.close()
            published = benchdb.count_rows(engine, db.outbox, db.outbox.c.published_at.is_not(None))
            if published != events or report.jobs_published != m:
                print(f"  !! M={m}: {published}/{events} events published, {report.jobs_published} jobs")
            sink_s = sum(s.seconds for s in timed)
            return {
                "prep": prep, "wall": wall, "events": published, "rate": published / wall,
                "ms_per_event": wall / max(published, 1) * 1000, "sink_share": sink_s / wall,
                "sink_ms": sink_s / max(published, 1) * 1000,
                "db_ms": (wall - sink_s) / max(published, 1) * 1000,
                "stmts_per_event": rt["statement_total"] / max(published, 1),
                "wire_per_event": rt["wire_total"] / max(published, 1) if rt["wire_total"] else float("nan"),
            }
        finally:
            engine.dispose()


def main() -> None:
    ap = common.parser(__doc__.split("\n\n")[0])
    ap.add_argument("--slots", default=None, help="comma-separated M values (default 50,150; --quick 20)")
    run = common.start(ap)
    args = run.args
    sizes = [int(x) for x in (args.slots or ("20" if args.quick else "50,150")).split(",")]
    runs = args.runs or (1 if args.quick else 3)
    results: dict[int, list[dict[str, Any]]] = {}
    for m in sizes:
        results[m] = []
        for r in range(runs):
            x = measure(args.mysql, m)
            results[m].append(x)
            print(f"M={m} run {r + 1}: prepared in {x['prep']:.1f} s; relay {x['wall']:.2f} s for {x['events']} "
                  f"events = {x['rate']:.1f} events/s ({x['sink_ms']:.1f} ms sink + {x['db_ms']:.1f} ms db/other "
                  f"per event, {x['stmts_per_event']:.1f} stmts, {x['wire_per_event']:.1f} round trips)", flush=True)
    head = run.header(f"{runs} per M (median, min–max)")
    rows = []
    for m, ms in results.items():
        rows.append([
            f"{m:,}", f"{reporting.median(x['events'] for x in ms):.0f}", f"{m // 2:,}", str(len(ms)),
            reporting.spread([x["wall"] for x in ms], 2), reporting.spread([x["rate"] for x in ms]),
            reporting.spread([x["ms_per_event"] for x in ms]),
            f"{reporting.median(x['sink_ms'] for x in ms):.1f} / {reporting.median(x['db_ms'] for x in ms):.1f}",
            (f"{reporting.median(x['stmts_per_event'] for x in ms):.1f} / "
             f"{reporting.median(x['wire_per_event'] for x in ms):.1f}"),
        ])
    body = f"""{head}
- Set-up per run: fresh database and static root; M backfill slots of the two default products
  (languages en, es) driven by reconcile ticks to SAVED_NOT_PUBLIC (zero-latency simulator), leaving
  2·M outbox events; then one `relay.run` (production settings, `relay.tick_seconds = 3600`), static
  sink only, into a temporary directory on the same disk as MariaDB (every file and directory
  write is fsynced by the sink).
- *editions per index*: the sink rebuilds `<product>/<lang>/index.html` and `feed.atom` from every
  edition on disk at each delivery, so the last delivery of a run scans this many JSON files.

{reporting.table(["M slots", "events", "editions per index (end)", "runs", "relay wall s", "events/s",
                  "ms per event", "sink ms / db+other ms per event", "SQL stmts / wire round trips per event"],
                 rows)}
"""
    run.write_section("relay_throughput", "5. Relay throughput (static sink)", body)


if __name__ == "__main__":
    main()
