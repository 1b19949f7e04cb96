"""Simulated days of the two default products (2 languages each) at the default tier and at
flex with a deadline, the simulator refusing a share of flex creates (429 resource
unavailable): tokens paid at each tier, what they cost, editions on time.

How a simulated day runs, and the prices: bench/notes/flex_day.md (also in `--help`).

    .venv/bin/python bench/provider/flex_day.py [--mysql URL | --sqlite] [--quick] [--days N]
        [--refusal-rate 0.2] [--flex-until 30] [--no-doc]
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))  # bench/support: the shared modules
import benchdb
import harness
import reporting
from iipub.core.timefmt import naive_utc
from iipub.machine import sweep
from iipub.model.jobs import slot_opened
from iipub.model.states import State
from iipub.observe import queries
from iipub.provider.openai.simulator import Simulator, SimulatorOptions
from iipub.publish import relay
from iipub.settings.config import ModelPrice, Pricing, Settings
from iipub.store import clock, tables

MAX_MINUTES = 180  # a day that has not published both editions after this is reported as such


@dataclass
class Outcome:
    label: str
    slots: int = 0
    published: int = 0
    on_time: int = 0  # published within [status] late_after_minutes of the slot's opening
    worst_minutes: float = 0.0  # the latest publication, minutes after its slot opened
    creates: dict[str, int] | None = None  # paid creates the simulator made, by tier
    refused: int = 0  # flex creates refused (not charged)
    tokens: dict[str, int] | None = None  # tokens paid, by tier (status' payment-time figures)
    cost: float = 0.0
    saving: float = 0.0
    ticks: int = 0
    wall: float = 0.0


def run_days(base_url: str, label: str, days: int, *, tier: str, refusal_rate: float, flex_until: int,
             price: ModelPrice, seed: int) -> Outcome:
    out = Outcome(label)
    options = SimulatorOptions(queued_seconds=20, in_progress_seconds=60, flex_refusal_rate=refusal_rate,
                               flex_slowdown=3.0, seed=seed)
    with Simulator(options) as sim, harness.bed(base_url, "flex", sim, pool_size=20) as bed:
        engine = bed.engine
        products = {name: replace(p, service_tier=tier, flex_until_minutes=flex_until)
                    for name, p in bed.settings.products.items()}
        settings = replace(bed.settings, products=products,
                           pricing=Pricing("USD", {p.model: price for p in products.values()}))
        t0 = time.perf_counter()
        first = benchdb.db_now(engine).date() + dt.timedelta(days=1)
        for i in range(days):
            out.ticks += _one_day(settings, engine, sim, first + dt.timedelta(days=i))
        out.wall = time.perf_counter() - t0
        _tally(out, settings, engine, sim)
    return out


def _one_day(settings: Settings, engine: sa.Engine, sim: Simulator, day: dt.date) -> int:
    """Move the database clock to 04:58 of `day`, then tick once per simulated minute until the
    day's editions are published."""
    start = dt.datetime.combine(day, dt.time(4, 58))
    clock.advance_clock(engine, (start - benchdb.db_now(engine)).total_seconds())
    for minute in range(MAX_MINUTES):
        sweep.run(settings, engine)
        relay.run(settings, engine)
        today = tables.jobs.c.edition_date == day
        made = benchdb.count_rows(engine, tables.jobs, today)
        left = benchdb.count_rows(engine, tables.jobs, today, tables.jobs.c.state.not_in(
            [State.PUBLISHED.value, State.CLEANUP_PENDING.value, State.DELETED.value]))
        if made and not left:
            return minute + 1
        clock.advance_clock(engine, 60)
        sim.advance(60)
    return MAX_MINUTES


def _tally(out: Outcome, settings: Settings, engine: sa.Engine, sim: Simulator) -> None:
    late_after = settings.status.late_after_minutes
    with engine.connect() as conn:
        jobs = conn.execute(sa.select(tables.jobs.c.id, tables.jobs.c.opens_at, tables.jobs.c.created_at)).all()
        published = dict(conn.execute(
            sa.select(tables.job_events.c.job_id, sa.func.min(tables.job_events.c.at))
            .where(tables.job_events.c.to_state == State.PUBLISHED.value).group_by(tables.job_events.c.job_id)).all())
    out.slots = len(jobs)
    for job_id, opens_at, created_at in jobs:
        at = published.get(job_id)
        if at is None:
            continue
        minutes = (naive_utc(at) - slot_opened(opens_at, created_at)).total_seconds() / 60
        out.published += 1
        out.on_time += minutes <= late_after
        out.worst_minutes = max(out.worst_minutes, minutes)
    stats = sim.stats()
    out.creates = dict(stats["creates_by_tier"])
    out.refused = int(stats["flex_refused"])
    paid = queries.collect(engine, settings).paid
    assert paid is not None
    window = paid.window("30d")
    out.tokens = {tier: t.tokens for tier, t in sorted(window.by_tier.items())}
    out.cost = window.total.cost or 0.0
    out.saving = window.total.flex_saving or 0.0


def main() -> None:
    ap = harness.parser(__doc__ or "", sqlite=True, note="flex_day")
    ap.add_argument("--days", type=int, default=None, help="simulated days per configuration (default 10; 3 quick)")
    ap.add_argument("--refusal-rate", type=float, default=0.2, help="share of flex creates refused (default 0.2)")
    ap.add_argument("--flex-until", type=int, default=30, help="flex_until_minutes (default 30)")
    ap.add_argument("--input-price", type=float, default=0.25, help="per million input tokens, default tier")
    ap.add_argument("--output-price", type=float, default=2.0, help="per million output tokens, default tier")
    run = harness.start(ap)
    a = run.args
    days = a.days or (3 if a.quick else 10)
    base = "sqlite" if a.sqlite else a.mysql
    price = ModelPrice(input_per_million=a.input_price, output_per_million=a.output_price)
    results = [
        run_days(base, "default tier", days, tier="default", refusal_rate=a.refusal_rate, flex_until=a.flex_until,
                 price=price, seed=7),
        run_days(base, f"flex until {a.flex_until} min, {a.refusal_rate:.0%} refused", days, tier="flex",
                 refusal_rate=a.refusal_rate, flex_until=a.flex_until, price=price, seed=7),
    ]
    rows: list[list[Any]] = []
    for r in results:
        tokens = r.tokens or {}
        rows.append([r.label, r.slots, f"{r.on_time}/{r.slots}", f"{r.worst_minutes:.0f}",
                     ", ".join(f"{k} {v}" for k, v in sorted((r.creates or {}).items())), r.refused,
                     ", ".join(f"{k} {v:,}" for k, v in tokens.items()), f"{r.cost:.4f}", f"{r.saving:.4f}",
                     r.ticks, f"{r.wall:.0f}"])
    body = "\n".join([
        run.header("1 run per configuration", [
            (f"- {days} simulated days x 2 products (daily-brief 05:00, revolution-watch 06:00) x 2 languages "
            f"per configuration; one reconcile + relay tick per simulated minute"),
            (f"- Simulator: queued 20 s, in progress 60 s (x3 at flex), flex refusals {a.refusal_rate:.0%} "
            f"(429 resource_unavailable, seed 7); prices {a.input_price:g} / {a.output_price:g} USD per million "
            "input / output tokens at the default tier, half at flex"),
            f"- Database: {'SQLite' if a.sqlite else 'MariaDB'}",
        ]),
        "",
        reporting.table(
            ["configuration", "slots", "on time (<= 60 min)", "latest (min after open)", "creates by tier",
             "flex refusals", "tokens paid by tier", "cost USD", "flex saving USD", "ticks", "wall s"], rows),
        "",
        harness.note("flex_day"),
    ])
    run.write_section("flex_day", "Flex tier: simulated days at 20 % flex refusals", body)


if __name__ == "__main__":
    main()
