"""Provider-truth drills: for each provider fault, what it costs and how fast iipub recovers.

How a scenario runs and what it reports: bench/notes/provider_truth.md (also in `--help`).

    python bench/provider/provider_truth.py [--mysql URL] [--json PATH]

The table it prints is the one in docs/reliability.md.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))  # bench/support: the shared modules
import benchdb
import harness
import reporting
from iipub.core.timefmt import seconds_between
from iipub.machine import sweep
from iipub.observe import invariants
from iipub.provider.openai.simulator import Simulator, SimulatorOptions
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import clock, tables
from iipub.store.job_store import Store

DAY = dt.date(2026, 11, 30)
PRODUCT = "daily-brief"
TICK_DB_SECONDS = 60.0  # cron: one tick a minute
DONE = ("PUBLISHED", "CLEANUP_PENDING", "DELETED")


@dataclass(frozen=True)
class Scenario:
    name: str
    rules: tuple[dict[str, Any], ...]
    slots: int = 5
    fault_ticks: int = 6  # ticks with the fault active (rules with `times` may run out sooner)


SCENARIOS = (
    Scenario("none (baseline)", ()),
    Scenario("cancelled, then completed", ({"op": "create", "fault": "cancelled_then_completed", "times": 1000},)),
    Scenario("404 once on a poll", ({"op": "retrieve", "fault": "not_found", "times": 5},)),
    Scenario("unknown status (3 reads)", ({"op": "retrieve", "fault": "unknown_status", "times": 15},)),
    Scenario("reported failed once", ({"op": "retrieve", "fault": "report_failed", "times": 5},)),
    Scenario("failed: server_error", ({"op": "create", "fault": "fail", "times": 5},)),
    Scenario("failed: invalid_prompt", ({"op": "create", "fault": "fail_refused", "times": 5},)),
    Scenario("failed: unknown code", ({"op": "create", "fault": "fail_unknown_code", "times": 5},)),
    Scenario("404 that holds (expired)", ({"op": "retrieve", "fault": "not_found", "times": 15},)),
    Scenario("outage: every create 503", ({"op": "create", "fault": "service_unavailable", "times": 10_000},),
             slots=20, fault_ticks=10),
    Scenario("quota exhausted (429)", ({"op": "create", "fault": "quota_exhausted", "times": 10_000},),
             slots=20, fault_ticks=15),
    Scenario("rate limited (429 retry-after)", ({"op": "create", "fault": "rate_limit", "times": 30},), slots=20),
)


SECTIONS = {
    "reconcile": {"poll_interval_seconds": 0, "lease_seconds": 15, "tick_seconds": 30, "concurrency": 8,
                  "backoff_base_seconds": 1, "backoff_cap_seconds": 60},
    "provider": {"timeout_seconds": 4, "connect_timeout_seconds": 1, "loss_confirm_seconds": 60},
}


def _ticks_to_settle(engine: sa.Engine) -> int:
    """Cron minutes from the slots' opening to the last publication (database clock)."""
    with engine.connect() as conn:
        first = conn.execute(sa.select(sa.func.min(tables.job_events.c.at))).scalar_one()
        last = conn.execute(sa.select(sa.func.max(tables.job_events.c.at))
                            .where(tables.job_events.c.reason == "all_events_delivered")).scalar_one()
    if first is None or last is None:
        return -1  # nothing published
    return round(seconds_between(last, first) / 60)


def tick(s: Settings, engine: sa.Engine, sim: Simulator) -> None:
    sweep.run(s, engine)
    relay.run(s, engine)
    sim.advance(TICK_DB_SECONDS)
    clock.advance_clock(engine, TICK_DB_SECONDS)


def run_scenario(sc: Scenario, mysql: str | None, index: int) -> dict[str, Any]:
    with Simulator(SimulatorOptions(queued_seconds=5, in_progress_seconds=20, log_requests=False)) as sim, \
            harness.bed(mysql or "sqlite", f"truth_{index}", sim, sections=SECTIONS) as bed:
        s, engine = benchdb.brief_only(bed.settings), bed.engine
        store = Store(engine, "bench")
        for i in range(sc.slots):
            store.schedule(s.products[PRODUCT], DAY - dt.timedelta(days=i))
        sim.add_faults(sc.rules)
        for _ in range(sc.fault_ticks):
            tick(s, engine, sim)
        during = benchdb.state_counts(engine)
        sim.clear_faults()
        started, ticks = time.monotonic(), 0
        while ticks < 90:
            now = benchdb.state_counts(engine)
            if not (set(now) - {"DELETED", "QUARANTINED", "VALIDATION_FAILED_RETAINED"}):
                break
            tick(s, engine, sim)
            ticks += 1
        wall = time.monotonic() - started
        final = benchdb.state_counts(engine)
        stats = sim.stats()
        violations = invariants.check(engine, settings=s, sim_stats=stats)
        return {
            "fault": sc.name, "slots": sc.slots,
            "paid_creates_per_slot": dict(sorted(Counter(stats["creates_by_job"].values()).items())),
            "max_paid_creates_per_slot": max(stats["creates_by_job"].values(), default=0),
            "create_requests": stats["requests"].get("create", 0),
            "quarantined": final.get("QUARANTINED", 0),
            "quarantined_during_fault": during.get("QUARANTINED", 0),
            "published": sum(final.get(x, 0) for x in DONE),
            "recovery_ticks": ticks, "recovery_db_minutes": ticks * TICK_DB_SECONDS / 60,
            "minutes_to_last_publication": _ticks_to_settle(engine),
            "recovery_wall_seconds": round(wall, 2),
            "violations": [str(v) for v in violations],
        }


def render(results: Sequence[dict[str, Any]]) -> str:
    rows = []
    for r in results:
        per = ", ".join(f"{n} create{'s' if n != 1 else ''}: {k} slot{'s' if k != 1 else ''}"
                        for n, k in r["paid_creates_per_slot"].items()) or "none"
        minutes = r["minutes_to_last_publication"]
        rows.append([r["fault"], r["slots"], per, r["quarantined"], r["published"], minutes if minutes >= 0 else "-",
                     f"{r['recovery_ticks']} ticks ({r['recovery_wall_seconds']:.1f} s of tick time)"])
    return reporting.table(["fault", "slots", "paid creates per slot", "quarantined", "published",
                            "minutes to last publication", "after the fault cleared"], rows)


def main(argv: Sequence[str] | None = None) -> int:
    args = harness.drill_parser(__doc__.split("\n\n")[0], note="provider_truth").parse_args(argv)
    harness.drill_logs()
    results = [run_scenario(sc, args.mysql, i) for i, sc in enumerate(SCENARIOS)]
    print(render(results))
    bad = [r for r in results if r["violations"]]
    for r in bad:
        print(f"VIOLATIONS in {r['fault']}: {r['violations'][:5]}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
