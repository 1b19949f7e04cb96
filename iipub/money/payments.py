"""What the `spend` rows (migration 0008; written and read by `store.spend_rows`) mean in money: one
row per paid create, counted by PAYMENT time (`paid_at`, the database clock when the dispatch was
committed), never by edition date, so a backfill paid today is today's spend. The daily ceilings
with today's count and the operator overrides in force, and the spend report `status` shows; the
rules are in `money`, the values `status` shows in `payment_values`.

Until custody records the provider's reported usage a row counts at its product's
`estimated_tokens`; a provably refused or rejected create counts nothing.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import structlog

from iipub.core.timefmt import naive_utc
from iipub.model.spend_states import NOT_CHARGED
from iipub.money import budgets as money
from iipub.money.payment_values import Override, SpendReport, Tally, Window
from iipub.settings.config import Pricing, Product
from iipub.store import clock, spend_rows
from iipub.store.handles import Connection, Engine

log = structlog.get_logger("iipub.spend")

WINDOWS = (("today", None), ("7d", 7), ("30d", 30))  # (name, days back; None: since the UTC midnight)

# -- the rows -------------------------------------------------------------------------------


def flex_jobs(engine: Engine) -> set[str]:
    """Jobs whose accepted response runs at the flex tier (polled at the flex cadence)."""
    return spend_rows.accepted_at_tier(engine, money.FLEX)


# -- ceilings -----------------------------------------------------------------------------------


def day_start(now: dt.datetime) -> dt.datetime:
    return dt.datetime.combine(naive_utc(now).date(), dt.time(0))


def counted_today(conn: Connection, now: dt.datetime) -> dict[str, int]:
    """Tokens counted since the UTC midnight, by product and in all (`money.GLOBAL`)."""
    out = spend_rows.counted_since(conn, day_start(now))
    out[money.GLOBAL] = sum(out.values())
    return out


def overrides_in_force(conn: Connection, now: dt.datetime) -> list[Override]:
    rows = spend_rows.overrides_in_force(conn, now)
    return [Override(r["scope"], int(r["extra_tokens"]), r["reason"], r["granted_by"], naive_utc(r["granted_at"]),
                     naive_utc(r["until_at"])) for r in rows]


def extra_by_scope(overrides: Iterable[Override]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for o in overrides:
        out[o.scope] += o.extra_tokens
    return dict(out)


def ceilings_now(conn: Connection, budgets: Any, products: Mapping[str, Product],
                 now: dt.datetime) -> tuple[list[money.Ceiling], list[Override]]:
    """Every configured ceiling with today's count and the overrides in force."""
    overrides = overrides_in_force(conn, now)
    return money.ceilings(budgets, products, counted_today(conn, now), extra_by_scope(overrides)), overrides


def grant(conn: Connection, scope: str, tokens: int, until: dt.datetime, reason: str, by: str) -> Override:
    spend_rows.grant(conn, scope, tokens, until, reason, by)
    return overrides_in_force(conn, clock.read_now(conn))[-1]



# -- what `status` reports ---------------------------------------------------------------------


def report(conn: Connection, now: dt.datetime, pricing: Pricing, budgets: Any,
           products: Mapping[str, Product]) -> SpendReport:
    """Spend by payment time: today (since the UTC midnight), the last 7 and 30 days."""
    starts = {name: day_start(now) if days is None else naive_utc(now) - dt.timedelta(days=days)
              for name, days in WINDOWS}
    windows = tuple(Window(name, since) for name, since in starts.items())
    oldest = min(starts.values())
    for row in spend_rows.paid_since(conn, oldest):
        price = money.price_of(pricing, row["model"])
        estimated = int(row["estimated_tokens"]) if row["total_tokens"] is None else 0
        ins, outs = int(row["input_tokens"] or 0), int(row["output_tokens"] or 0)
        charged = row["state"] not in NOT_CHARGED
        cost = money.cost(price, row["tier"], ins, outs, estimated) if charged else None
        saving = (money.flex_saving(price, ins, outs, estimated)
                  if charged and row["tier"] == money.FLEX else None)
        paid = naive_utc(row["paid_at"])
        for w in windows:
            if paid < w.since:
                continue
            for tally in (w.total, w.by_product.setdefault(row["product"], Tally()),
                          w.by_tier.setdefault(row["tier"], Tally())):
                tally.add(row, cost, saving)
    found, overrides = ceilings_now(conn, budgets, products, now)
    return SpendReport(pricing.currency, bool(pricing.models), windows, tuple(found), tuple(overrides))
