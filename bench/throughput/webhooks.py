"""Webhooks against polling: polls per published edition and the dwell from the provider's
completion to custody, for the same workload, with and without the provider's webhooks.

Two modes, each on its own fresh database and in-process simulator (real HTTP, real time):
`polling` (cron-like ticks poll every job in flight) and `webhooks` (the simulator POSTs signed
webhooks to `iipub.webhooks.receiver.Receiver` on a loopback server, which takes custody; the ticks poll
only as a safety net). Timings, workload and figures: bench/notes/webhooks.md (also in `--help`).

    python bench/throughput/webhooks.py [--editions 24] [--scale 10] [--waves 1] [--mysql URL] [--json PATH]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import json
import math
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))  # bench/support: the shared modules
import benchdb
import harness
import reporting
from iipub.core.timefmt import naive_utc, seconds_between
from iipub.machine import sweep
from iipub.model.states import POLL_REASONS, Reason
from iipub.observe import invariants
from iipub.provider.factory import settings_from_dict
from iipub.provider.openai.adapter import OpenAIAdapter
from iipub.provider.openai.simulator import Simulator, SimulatorOptions
from iipub.provider.outcomes import CreateOutcome, CreateRequest
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import tables
from iipub.store.deliveries import Deliveries
from iipub.store.job_store import Store
from iipub.webhooks import receiver as webhook

PRODUCT = "daily-brief"
DONE = ("PUBLISHED", "CLEANUP_PENDING", "DELETED")
SECRET = "whsec_" + base64.b64encode(b"iipub-bench-webhook-secret-0123456789").decode()
MODES = ("polling", "webhooks")
# Production timings (seconds), divided by --scale.
CRON = 60.0
POLL_INTERVAL = 30.0
SAFETY_NET_INTERVAL = 240.0
HEALTHY_FOR = 3600.0
QUEUED = 10.0
IN_PROGRESS = 200.0
RETENTION = 600.0
TICK_BUDGET = 50.0
DEADLINE_GENERATIONS = 20  # a mode gives up after this many generation times


@dataclass(frozen=True)
class Timings:
    scale: float

    @property
    def cron(self) -> float:
        return CRON / self.scale

    @property
    def generation(self) -> float:
        return (QUEUED + IN_PROGRESS) / self.scale

    def __call__(self, production_seconds: float) -> float:
        return production_seconds / self.scale


# -- the receiver ---------------------------------------------------------------------------


class TimedProvider(OpenAIAdapter):
    """A tick's provider that notes the host's clock (`time.time()`, the clock the database and
    the simulator read too) just before and just after each create's HTTP call: the simulator
    stamps the response's creation between the two."""

    def __init__(self, settings: Settings, calls: dict[str, tuple[float, float]]) -> None:
        super().__init__(settings.provider, settings.require_api_key())
        self.calls = calls

    def create(self, req: CreateRequest) -> CreateOutcome:
        before = time.time()
        try:
            return super().create(req)
        finally:
            self.calls[req.job_id] = (before, time.time())


def warm_up() -> None:
    """One create and one read on a scratch simulator, so that the process's first provider call
    (the SDK's lazy imports and model builds: over a second) does not sit inside a measured create."""
    base = settings_from_dict({})
    product = benchdb.brief_only(base).products[PRODUCT]
    with Simulator(SimulatorOptions(queued_seconds=0, in_progress_seconds=0)) as sim, \
            OpenAIAdapter(replace(base.provider, base_url=sim.url), "sk-bench") as provider:
        outcome = provider.create(CreateRequest(job_id="warm-up", product=product, edition_date=dt.date(2026, 1, 1),
                                                attempt=1, fingerprint=product.fingerprint()))
        response_id = getattr(outcome, "response_id", None)
        if response_id:
            provider.retrieve(response_id)


# -- settings and workload ------------------------------------------------------------------


def sections(t: Timings, webhooks: bool) -> dict[str, dict[str, Any]]:
    return {"reconcile": {"poll_interval_seconds": t(POLL_INTERVAL), "tick_seconds": t(TICK_BUDGET)},
            "relay": {"tick_seconds": t(TICK_BUDGET)},
            "webhooks": {"enabled": webhooks, "poll_interval_seconds": t(SAFETY_NET_INTERVAL),
                         "healthy_for_seconds": t(HEALTHY_FOR)}}


def waves_of(days: Sequence[dt.date], waves: int) -> list[list[dt.date]]:
    size = math.ceil(len(days) / waves)
    return [list(days[i:i + size]) for i in range(0, len(days), size)]


# -- measuring -------------------------------------------------------------------------------


def journal(engine: sa.Engine) -> tuple[dict[str, list[Any]], dict[str, dt.datetime], dict[str, dt.date]]:
    """Per job: its journal events (reason, worker, at), when the receiver recorded its first
    delivery (database clock), and its edition date."""
    ev, d, jobs = tables.job_events, tables.webhook_deliveries, tables.jobs
    with engine.connect() as conn:
        rows = conn.execute(sa.select(ev.c.job_id, ev.c.reason, ev.c.worker, ev.c.at).order_by(ev.c.id)).all()
        received = conn.execute(sa.select(d.c.job_id, sa.func.min(d.c.received_at)).where(d.c.job_id.is_not(None))
                                .group_by(d.c.job_id)).all()
        dates = {r.id: r.edition_date for r in conn.execute(sa.select(jobs.c.id, jobs.c.edition_date))}
    events: dict[str, list[Any]] = {}
    for r in rows:
        events.setdefault(r.job_id, []).append((r.reason, r.worker, naive_utc(r.at)))
    return events, {str(job_id): naive_utc(at) for job_id, at in received}, dates


def _utc(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).replace(tzinfo=None)


def dwell_figures(engine: sa.Engine, t: Timings, calls: dict[str, tuple[float, float]],
                  waves: Sequence[Sequence[dt.date]]) -> dict[str, Any]:
    """Per job: retrieved.at - completion, completion = the create call's midpoint + queued +
    in progress (and, for comparison, accepted.at + the same); who took custody; who read."""
    wave_of = {day: i for i, days in enumerate(waves) for day in days}
    events_by_job, arrived, dates = journal(engine)
    arrival: list[float] = []  # completion -> the receiver recorded the delivery
    handling: list[float] = []  # recorded -> custody
    generation = dt.timedelta(seconds=t.generation)
    dwell: list[float] = []
    dwell_from_accepted: list[float] = []
    half_trip: list[float] = []
    custody: Counter[str] = Counter()
    reads: Counter[str] = Counter()
    reads_by_wave: Counter[int] = Counter()
    jobs_by_wave: Counter[int] = Counter()
    for job_id, events in events_by_job.items():
        wave = wave_of.get(dates.get(job_id, dt.date.min), -1)
        jobs_by_wave[wave] += 1
        for reason, worker, _ in events:
            if reason in POLL_REASONS:
                reads[_role(worker)] += 1
                reads_by_wave[wave] += 1
        accepted = [at for reason, _, at in events if reason == Reason.ACCEPTED]
        retrieved = [(worker, at) for reason, worker, at in events if reason == Reason.RETRIEVED]
        if not retrieved:
            continue
        worker, at = retrieved[-1]
        custody[_role(worker)] += 1
        if job_id in calls:
            before, after = calls[job_id]
            done = _utc((before + after) / 2) + generation
            dwell.append(seconds_between(at, done))
            if job_id in arrived:
                arrival.append(seconds_between(arrived[job_id], done))
                handling.append(seconds_between(at, arrived[job_id]))
            half_trip.append((after - before) / 2)
        if accepted:
            dwell_from_accepted.append(seconds_between(at, accepted[-1] + generation))
    return {"dwell": dwell, "dwell_from_accepted": dwell_from_accepted, "arrival": arrival, "handling": handling,
            "error_max": max(half_trip, default=0.0),
            "custody_by": dict(custody), "reads_by": dict(reads),
            "reads_per_edition_by_wave": [round(reads_by_wave[i] / jobs_by_wave[i], 2) if jobs_by_wave[i] else None
                                          for i in range(len(waves))]}


def _role(worker: str) -> str:
    return "receiver" if worker.startswith("webhook:") else "tick"


def summary(values: Sequence[float], scale: float) -> dict[str, float]:
    p50, p99, top = (reporting.percentile(values, 50), reporting.percentile(values, 99),
                     max(values, default=float("nan")))
    return {"n": len(values), "p50": p50, "p99": p99, "max": top,
            "p50_production": p50 * scale, "p99_production": p99 * scale, "max_production": top * scale}


# -- one mode --------------------------------------------------------------------------------


def run_mode(mode: str, args: argparse.Namespace, workdir: Path, t: Timings) -> dict[str, Any]:
    webhooks = mode == "webhooks"
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(harness.wsgi_server()) if webhooks else None
        options = SimulatorOptions(
            queued_seconds=t(QUEUED), in_progress_seconds=t(IN_PROGRESS), retention_seconds=t(RETENTION),
            time_scale=1.0, log_requests=False,
            webhook_url=f"http://127.0.0.1:{server.server_port}/" if server is not None else None,
            webhook_secret=SECRET if webhooks else None)
        sim = stack.enter_context(Simulator(options))
        bed = stack.enter_context(harness.bed(args.mysql or "sqlite", f"webhooks_{mode}", sim,
                                              sections=sections(t, webhooks), workdir=workdir / mode))
        engine = bed.engine
        s = replace(benchdb.brief_only(bed.settings), provider_webhook_secret=SECRET if webhooks else None)
        if server is not None:
            receiver = webhook.Receiver(s, engine=engine)
            stack.callback(receiver.close)
            server.set_app(receiver)
        store = Store(engine, "bench")
        product = s.products[PRODUCT]
        today = benchdb.db_now(engine).date()
        waves = waves_of([today - dt.timedelta(days=1 + i) for i in range(args.editions)], args.waves)
        wave_ticks = math.ceil((t.generation + t.cron) / t.cron)  # ticks between waves
        health = Deliveries(engine)
        calls: dict[str, tuple[float, float]] = {}
        started = time.monotonic()
        deadline = started + DEADLINE_GENERATIONS * t.generation * len(waves)
        ticks = relaxed = 0
        while True:
            if ticks % wave_ticks == 0 and ticks // wave_ticks < len(waves):
                for day in waves[ticks // wave_ticks]:
                    store.schedule(product, day)
            if webhooks and health.health(s.webhooks.healthy_for_seconds).healthy:
                relaxed += 1
            with TimedProvider(s, calls) as provider:  # a fresh client per tick, like cron's processes
                sweep.run(s, engine, provider=provider)
            relay.run(s, engine)
            ticks += 1
            now = benchdb.state_counts(engine)
            if ticks >= wave_ticks * (len(waves) - 1) and sum(now.get(x, 0) for x in DONE) >= args.editions:
                break
            if time.monotonic() >= deadline:
                print(f"{mode}: deadline reached with {dict(now)}", file=sys.stderr)
                break
            time.sleep(max(0.0, started + ticks * t.cron - time.monotonic()))
        wall = time.monotonic() - started
        flushed = sim.flush_webhooks(5)
        final = benchdb.state_counts(engine)
        stats = sim.stats()
        published = sum(final.get(x, 0) for x in DONE)
        figures = dwell_figures(engine, t, calls, waves)
        retrieves = int(stats["requests"].get("retrieve", 0))
        violations = invariants.check(engine, settings=s, sim_stats=stats)
        return {
            "mode": mode, "editions": args.editions, "waves": len(waves), "published": published,
            "states": dict(final),
            "retrieves": retrieves,
            "polls_per_edition": retrieves / published if published else float("nan"),
            "reads_by": figures["reads_by"],
            "custody_by": figures["custody_by"],
            "dwell_seconds": summary(figures["dwell"], t.scale),
            "dwell_samples": [round(x, 4) for x in figures["dwell"]],
            "completion_estimate_error_max_seconds": round(figures["error_max"], 4),
            "delivery_arrival_seconds": summary(figures["arrival"], t.scale),
            "delivery_to_custody_seconds": summary(figures["handling"], t.scale),
            "dwell_from_accepted_seconds": summary(figures["dwell_from_accepted"], t.scale),
            "dwell_from_accepted_samples": [round(x, 4) for x in figures["dwell_from_accepted"]],
            "reads_per_edition_by_wave": figures["reads_per_edition_by_wave"],
            "paid_creates": int(stats["creates_total"]),
            "deliveries": dict(benchdb.count_by(engine, tables.webhook_deliveries.c.outcome)),
            "webhooks_sent": int(stats.get("webhooks_sent", 0)),
            "webhook_answers": dict(stats.get("webhook_answers", {})),
            "webhooks_flushed": flushed,
            "ticks": ticks, "relaxed_ticks": relaxed,
            "wall_seconds": round(wall, 2),
            "violations": [str(v) for v in violations],
        }


# -- report ----------------------------------------------------------------------------------


def _s(x: float, scale: float) -> str:
    return f"{reporting.fmt(x, 3)} ({reporting.fmt(x * scale, 1)})"


def render(results: Sequence[dict[str, Any]], scale: float) -> str:
    rows = []
    for r in results:
        d = r["dwell_seconds"]
        reads = r["reads_by"]
        deliveries_text = ", ".join(f"{k} {v}" for k, v in sorted(r["deliveries"].items())) or "–"
        custody = ", ".join(f"{k} {v}" for k, v in sorted(r["custody_by"].items())) or "–"
        rows.append([
            r["mode"], f"{r['published']} / {r['editions']}",
            (f"{r['polls_per_edition']:.2f} ({r['retrieves']}: ticks {reads.get('tick', 0)}, "
             f"receiver {reads.get('receiver', 0)})"),
            custody, _s(d["p50"], scale), _s(d["p99"], scale), _s(d["max"], scale), deliveries_text,
            f"{r['ticks']} ({r['relaxed_ticks']} relaxed)", f"{r['wall_seconds']:.1f}",
        ])
    return reporting.table(
        ["mode", "editions published", "polls / edition (reads: by ticks, by receiver)", "custody taken by",
         "dwell p50 s (×scale)", "dwell p99 s (×scale)", "dwell max s (×scale)", "webhook deliveries",
         "ticks (relaxed)", "wall s"],
        rows)


def main(argv: Sequence[str] | None = None) -> int:
    ap = harness.drill_parser(__doc__.split("\n\n")[0], note="webhooks")
    ap.add_argument("--editions", type=int, default=24, help="editions in the workload (default 24)")
    ap.add_argument("--scale", type=float, default=10.0, help="production timings divided by this (default 10)")
    ap.add_argument("--waves", type=int, default=1, help="schedule the editions in this many waves (default 1)")
    args = ap.parse_args(argv)
    if not 1 <= args.editions <= 100 or args.scale <= 0 or not 1 <= args.waves <= args.editions:
        ap.error("--editions must be 1-100 (max_in_flight), --scale > 0, --waves 1..editions")
    harness.drill_logs()
    t = Timings(args.scale)
    warm_up()
    with tempfile.TemporaryDirectory(prefix="iipub-webhooks-") as tmp:
        results = [run_mode(mode, args, Path(tmp), t) for mode in MODES]
    engine_note = "SQLite" if not args.mysql else "MariaDB"
    machine = reporting.machine(args.mysql)
    print(render(results, args.scale))
    polling, hooked = results
    if polling["polls_per_edition"] and hooked["polls_per_edition"] == hooked["polls_per_edition"]:
        print(f"\npolls per edition, webhooks / polling: "
              f"{hooked['polls_per_edition'] / polling['polls_per_edition']:.2f}")
    for r in results:
        acc = r["dwell_from_accepted_seconds"]
        print(f"{r['mode']}: completion known within {r['completion_estimate_error_max_seconds'] * 1000:.1f} ms; "
              f"dwell from `accepted` instead: p50 {acc['p50']:.3f} s, p99 {acc['p99']:.3f} s, "
              f"min {min(r['dwell_from_accepted_samples'], default=float('nan')):.3f} s; "
              f"reads per edition by wave {r['reads_per_edition_by_wave']}; "
              f"webhooks sent {r['webhooks_sent']} {r['webhook_answers']}; paid creates {r['paid_creates']}")
        if r["delivery_arrival_seconds"]["n"]:
            arr, han = r["delivery_arrival_seconds"], r["delivery_to_custody_seconds"]
            print(f"  completion -> delivery recorded: p50 {arr['p50']:.3f} s, max {arr['max']:.3f} s; "
                  f"recorded -> custody: p50 {han['p50']:.3f} s, max {han['max']:.3f} s")
    print(f"\n- Database: {engine_note}\n- Machine: {machine}\n- Command: `{reporting.command_line()}`")
    bad = [r for r in results if r["violations"] or r["published"] < r["editions"]]
    for r in bad:
        print(f"PROBLEM in {r['mode']}: published {r['published']}/{r['editions']}, "
              f"violations {r['violations'][:5]}", file=sys.stderr)
    if args.json:
        doc = {"machine": machine, "command": reporting.command_line(), "database": engine_note,
               "scale": args.scale, "results": results}
        args.json.write_text(json.dumps(doc, indent=2, default=str))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
