"""Provider-truth drills: for each provider fault, what it costs and how fast iipub recovers.

Each scenario schedules slots on a fresh database, runs cron-like ticks (reconcile + relay,
the database and simulator clocks moved forward a minute per tick) against the simulator over
real HTTP with the fault active, then clears the fault ("the provider is back") and runs until
every slot that is not parked is published. It reports, per fault: paid creates per slot (the
simulator's own count), quarantined slots, and the time from recovery to the last publication
(database clock, i.e. cron minutes, and wall-clock seconds of the ticks).

    python bench/provider_truth.py [--mysql URL] [--json PATH]

The table it prints is the one in docs/reliability.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # running from a checkout without the install
    sys.path.insert(0, str(ROOT))

import sqlalchemy as sa

from iipub import clock, db, invariants, logs, migrate, reconcile, relay, tables
from iipub.config import Settings
from iipub.config_file import settings_from_dict
from iipub.simulator import Simulator, SimulatorOptions
from iipub.store import Store
from iipub.timefmt import seconds_between

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


def settings_for(url: str, sim: Simulator, root: Path) -> Settings:
    s = settings_from_dict({
        "reconcile": {"poll_interval_seconds": 0, "lease_seconds": 15, "tick_seconds": 30, "concurrency": 8,
                      "backoff_base_seconds": 1, "backoff_cap_seconds": 60},
        "provider": {"timeout_seconds": 4, "connect_timeout_seconds": 1, "loss_confirm_seconds": 60},
        "sinks": {"static": {"root": str(root)}},
    })
    p = replace(s.products[PRODUCT], items=3, prompt="Write the brief.", opens_at=dt.time(0, 0))
    return replace(s, database_url=url, api_key="sk-bench", products={PRODUCT: p}, webhook_sink=None,
                   provider=replace(s.provider, base_url=sim.url))


def fresh_database(mysql: str | None, workdir: Path, name: str) -> tuple[str, sa.Engine]:
    if not mysql:
        url = f"sqlite:///{workdir / (name + '.sqlite3')}"
        engine = db.make_engine(url)
    else:
        admin = sa.create_engine(mysql, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name}"))
            conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
        admin.dispose()
        url = sa.engine.make_url(mysql).set(database=name).render_as_string(hide_password=False)
        engine = db.make_engine(url)
    migrate.migrate(engine)
    return url, engine


def states(engine: sa.Engine) -> Counter[str]:
    with engine.connect() as conn:
        return Counter(conn.execute(sa.select(tables.jobs.c.state)).scalars())


def _ticks_to_settle(engine: sa.Engine, upper: int) -> int:
    """Cron minutes from the slots' opening to the last publication (database clock)."""
    with engine.connect() as conn:
        first = conn.execute(sa.select(sa.func.min(tables.job_events.c.at))).scalar_one()
        last = conn.execute(sa.select(sa.func.max(tables.job_events.c.at))
                            .where(tables.job_events.c.reason == "all_events_delivered")).scalar_one()
    if first is None or last is None:
        return -1  # nothing published
    return round(seconds_between(last, first) / 60)


def tick(s: Settings, engine: sa.Engine, sim: Simulator) -> None:
    reconcile.run(s, engine)
    relay.run(s, engine)
    sim.advance(TICK_DB_SECONDS)
    clock.advance_clock(engine, TICK_DB_SECONDS)


def run_scenario(sc: Scenario, mysql: str | None, workdir: Path, index: int) -> dict[str, Any]:
    with Simulator(SimulatorOptions(queued_seconds=5, in_progress_seconds=20, log_requests=False)) as sim:
        url, engine = fresh_database(mysql, workdir, f"iipub_truth_{index}")
        try:
            s = settings_for(url, sim, workdir / f"public-{index}")
            store = Store(engine, "bench")
            for i in range(sc.slots):
                store.schedule(s.products[PRODUCT], DAY - dt.timedelta(days=i))
            sim.add_faults(sc.rules)
            total = 0
            for _ in range(sc.fault_ticks):
                tick(s, engine, sim)
                total += 1
            during = states(engine)
            sim.clear_faults()
            started, ticks = time.monotonic(), 0
            while ticks < 90:
                now = states(engine)
                if not (set(now) - {"DELETED", "QUARANTINED", "VALIDATION_FAILED_RETAINED"}):
                    break
                tick(s, engine, sim)
                ticks += 1
            wall = time.monotonic() - started
            total = _ticks_to_settle(engine, total + ticks)
            final = states(engine)
            stats = sim.stats()
            creates = Counter(stats["creates_by_job"].values())
            violations = invariants.check(engine, settings=s, sim_stats=stats)
            return {
                "fault": sc.name, "slots": sc.slots,
                "paid_creates_per_slot": dict(sorted(creates.items())),
                "max_paid_creates_per_slot": max(stats["creates_by_job"].values(), default=0),
                "create_requests": stats["requests"].get("create", 0),
                "quarantined": final.get("QUARANTINED", 0),
                "quarantined_during_fault": during.get("QUARANTINED", 0),
                "published": sum(final.get(x, 0) for x in DONE),
                "recovery_ticks": ticks, "recovery_db_minutes": ticks * TICK_DB_SECONDS / 60,
                "minutes_to_last_publication": total,
                "recovery_wall_seconds": round(wall, 2),
                "violations": [str(v) for v in violations],
            }
        finally:
            engine.dispose()


def render(results: Sequence[dict[str, Any]]) -> str:
    lines = [("| fault | slots | paid creates per slot | quarantined | published | minutes to last publication "
              "| after the fault cleared |"), "|---|---|---|---|---|---|---|"]
    for r in results:
        per = ", ".join(f"{n} create{'s' if n != 1 else ''}: {k} slot{'s' if k != 1 else ''}"
                        for n, k in r["paid_creates_per_slot"].items()) or "none"
        lines.append(f"| {r['fault']} | {r['slots']} | {per} | {r['quarantined']} | {r['published']} | "
                     f"{r['minutes_to_last_publication'] if r['minutes_to_last_publication'] >= 0 else '-'} | "
                     f"{r['recovery_ticks']} ticks "
                     f"({r['recovery_wall_seconds']:.1f} s of tick time) |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mysql", help="a MariaDB/MySQL URL whose server may create scratch databases")
    ap.add_argument("--json", type=Path, help="write the results here too")
    args = ap.parse_args(argv)
    # Only the drill's own slots: today's schedule would add one more slot per product and day.
    reconcile._ensure_today = lambda settings, store: None
    logs.configure("warning")  # the breaker's own warnings stay visible, transitions do not
    with tempfile.TemporaryDirectory(prefix="iipub-truth-") as tmp:
        results = [run_scenario(sc, args.mysql, Path(tmp), i) for i, sc in enumerate(SCENARIOS)]
    print(render(results))
    bad = [r for r in results if r["violations"]]
    for r in bad:
        print(f"VIOLATIONS in {r['fault']}: {r['violations'][:5]}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
