"""The `spend` table (migration 0008): one row per paid create, counted by PAYMENT time (`paid_at`, the database
clock when the dispatch was committed), never by edition date, so a backfill paid today is
today's spend. Its operator overrides (`spend_overrides`) and the once-a-day notes of a reached
ceiling (`spend_notes`) live here too; the rules are in `money`, the values `status` shows in
`payment_values`.

A row is written in the dispatch's own transaction (before the POST), given the create's
outcome after it, and the provider's reported usage when the output is taken into custody
(`Store.transition`, the one write path, calls `record_usage`). Until then it counts at its
product's `estimated_tokens`; a provably refused or rejected create counts nothing.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import sqlalchemy as sa
import structlog
from sqlalchemy.engine import Connection, Engine

from iipub.core.timefmt import naive_utc
from iipub.model.jobs import Job
from iipub.model.spend_states import ACCEPTED, IN_FLIGHT, NOT_CHARGED, REFUSED, REJECTED, UNKNOWN
from iipub.money import budgets as money
from iipub.money.payment_values import Override, SpendReport, Tally, Window
from iipub.provider.outcomes import Accepted, Ambiguous, CreateOutcome, Refused
from iipub.settings.config import Pricing, Product
from iipub.store import clock, tables

log = structlog.get_logger("iipub.spend")
spend_table, overrides_table, notes_table = tables.spend, tables.spend_overrides, tables.spend_notes

WINDOWS = (("today", None), ("7d", 7), ("30d", 30))  # (name, days back; None: since the UTC midnight)

_s = spend_table.c
# What a row counts for: the reported total, else its estimate; nothing if provably not charged.
COUNTED = sa.case((_s.state.in_(NOT_CHARGED), 0), (_s.total_tokens.is_not(None), _s.total_tokens),
                  else_=_s.estimated_tokens)
TIER = sa.func.coalesce(_s.tier_reported, _s.tier_asked)


# -- writes -------------------------------------------------------------------------------


def record_dispatch(conn: Connection, job: Job, attempt: int, product: Product, tier: str) -> int:
    """In the dispatch's transaction: the create is paid from now on (until proven refused)."""
    res = conn.execute(spend_table.insert().values(
        job_id=job.id, attempt=attempt, product=job.product, edition_date=job.edition_date, model=product.model,
        tier_asked=tier, state=IN_FLIGHT, estimated_tokens=product.estimated_tokens, paid_at=clock.now(conn),
        updated_at=clock.now(conn)))
    return int(res.inserted_primary_key[0])  # type: ignore[index]


def record_outcome(conn: Connection, spend_id: int, outcome: CreateOutcome) -> None:
    """In the transition that leaves CREATE_IN_FLIGHT: what the create's outcome says was paid."""
    values: dict[str, Any] = {"updated_at": clock.now(conn)}
    if isinstance(outcome, Accepted):
        values.update(state=ACCEPTED, response_id=outcome.response_id, tier_reported=outcome.tier)
    elif isinstance(outcome, Refused):
        values["state"] = REFUSED
    elif isinstance(outcome, Ambiguous):
        values["state"] = UNKNOWN
    else:
        values["state"] = REJECTED
    conn.execute(spend_table.update().where(_s.id == spend_id).values(**values))


def flex_jobs(engine: Engine) -> set[str]:
    """Jobs whose accepted response runs at the flex tier (polled at the flex cadence)."""
    with engine.connect() as conn:
        return set(conn.execute(sa.select(_s.job_id).where(_s.state == ACCEPTED, TIER == money.FLEX)).scalars())


# -- ceilings -----------------------------------------------------------------------------------


def day_start(now: dt.datetime) -> dt.datetime:
    return dt.datetime.combine(naive_utc(now).date(), dt.time(0))


def counted_today(conn: Connection, now: dt.datetime) -> dict[str, int]:
    """Tokens counted since the UTC midnight, by product and in all (`money.GLOBAL`)."""
    rows = conn.execute(sa.select(_s.product, sa.func.sum(COUNTED)).where(_s.paid_at >= day_start(now))
                        .group_by(_s.product)).all()
    out = {product: int(n or 0) for product, n in rows}
    out[money.GLOBAL] = sum(out.values())
    return out


def overrides_in_force(conn: Connection, now: dt.datetime) -> list[Override]:
    o = overrides_table.c
    rows = conn.execute(sa.select(overrides_table).where(o.until_at > now).order_by(o.id)).mappings()
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
    conn.execute(overrides_table.insert().values(scope=scope, extra_tokens=tokens, reason=reason, granted_by=by,
                                                 granted_at=clock.now(conn), until_at=until))
    return overrides_in_force(conn, clock.read_now(conn))[-1]


def note_reached(conn: Connection, ceiling: money.Ceiling, now: dt.datetime) -> bool:
    """True the first time today this ceiling is found reached (by any process)."""
    try:
        with conn.begin_nested():
            conn.execute(notes_table.insert().values(day=naive_utc(now).date(), scope=ceiling.scope,
                                                     noted_at=clock.now(conn)))
    except sa.exc.IntegrityError:
        return False
    return True


# -- what `status` reports ---------------------------------------------------------------------


def report(conn: Connection, now: dt.datetime, pricing: Pricing, budgets: Any,
           products: Mapping[str, Product]) -> SpendReport:
    """Spend by payment time: today (since the UTC midnight), the last 7 and 30 days."""
    starts = {name: day_start(now) if days is None else naive_utc(now) - dt.timedelta(days=days)
              for name, days in WINDOWS}
    windows = tuple(Window(name, since) for name, since in starts.items())
    oldest = min(starts.values())
    cols = [_s.product, _s.model, TIER.label("tier"), _s.state, _s.input_tokens, _s.output_tokens, _s.total_tokens,
            _s.estimated_tokens, _s.paid_at]
    for row in conn.execute(sa.select(*cols).where(_s.paid_at >= oldest)).mappings():
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
