"""Which slots exist: today's schedule and backfills. Writes go through the store."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from iipub.core.errors import UsageError
from iipub.model.jobs import MAX_PAST_DAYS, date_outside_window
from iipub.settings.config import Product
from iipub.store.job_store import Store

# A typo in a date must not schedule decades of paid generations, nor a slot for a year that has
# not come (each slot is a paid generation once its window opens): `jobs.date_outside_window`.
MAX_BACKFILL_DAYS = MAX_PAST_DAYS

Progress = Callable[[dt.date, bool], None]  # (date, created or would be created)


@dataclass
class BackfillReport:
    product: str
    from_date: dt.date
    to_date: dt.date
    dry_run: bool
    created: list[dt.date] = field(default_factory=list)  # would be created, on a dry run
    present: list[dt.date] = field(default_factory=list)


def schedule_day(store: Store, products: Iterable[Product], day: dt.date, *, backfill: bool = False) -> dict[str, bool]:
    """Create each product's slot for `day`; returns product -> created (False: already present)."""
    return {p.name: store.schedule(p, day, backfill=backfill) for p in products}


def ensure_scheduled(store: Store, products: Iterable[Product], day: dt.date, catch_up_days: int = 0) -> int:
    """Schedule the missing slots of `day` and of the `catch_up_days` before it (those at
    backfill priority), so a day on which no tick ran is not skipped. One range read of the
    slots that exist first, so a steady tick writes nothing. A past day is caught up only for a
    product that already had a slot before it: a new installation (or a product just added)
    does not pay for the days before it existed (`iipub backfill` does that on purpose)."""
    wanted = list(products)
    days = catch_up_window(day, catch_up_days)
    present = store.slots_between([p.name for p in wanted], days[0], day)
    created = 0
    for p in wanted:
        missing = [d for d in days if (p.name, d) not in present]
        if not missing:
            continue
        first = store.first_slot(p.name) if missing[0] < day else None
        for d in missing:
            if d == day or (first is not None and first < d):
                created += store.schedule(p, d, backfill=d < day)
    return created


def catch_up_window(today: dt.date, catch_up_days: int) -> list[dt.date]:
    """`today` and the `catch_up_days` before it, oldest first. Pure."""
    return [today - dt.timedelta(days=n) for n in range(max(0, catch_up_days), -1, -1)]


def missing_days(present: set[tuple[str, dt.date]], firsts: dict[str, dt.date | None], days: Iterable[dt.date],
                 ) -> list[tuple[str, dt.date]]:
    """(product, date) for each day of `days` that has no slot for a product that already had one
    before it (the dispatch SLI's gaps: a day on which no tick ran). Pure."""
    return sorted((name, d) for name, first in firsts.items() for d in days
                  if first is not None and first < d and (name, d) not in present)


def check_schedule_date(day: dt.date, today: dt.date) -> None:
    """`schedule --date` stays within what a backfill could reach (at most MAX_BACKFILL_DAYS
    back) and at most `jobs.MAX_AHEAD_DAYS` ahead, by the database clock. Pure."""
    why = date_outside_window(day, today)
    if why is not None:
        raise UsageError(f"--date {why}; nothing scheduled")


def backfill_days(from_date: dt.date, to_date: dt.date, today: dt.date) -> list[dt.date]:
    """The dates a backfill covers (inclusive), refused when the range is backwards, reaches
    into the future (by the database clock) or further back than `date_outside_window` allows,
    or is longer than `MAX_BACKFILL_DAYS`. Pure."""
    if from_date > to_date:
        raise UsageError(f"--from {from_date} is after --to {to_date}")
    if to_date > today:
        raise UsageError(f"--to {to_date} is in the future (today is {today} by the database clock)")
    too_old = date_outside_window(from_date, today)
    if too_old is not None:  # a 1900 or a 2016 typed for 2026 would be paid for, slot by slot
        raise UsageError(f"--from {too_old}; nothing scheduled")
    days = (to_date - from_date).days + 1
    if days > MAX_BACKFILL_DAYS:
        raise UsageError(f"{days} days requested; backfill at most {MAX_BACKFILL_DAYS} days per run")
    return [from_date + dt.timedelta(days=i) for i in range(days)]


def backfill(store: Store, product: Product, from_date: dt.date, to_date: dt.date, today: dt.date, *,
             dry_run: bool = False, progress: Progress | None = None) -> BackfillReport:
    """Create the missing slots from `from_date` to `to_date`. Past dates get backfill priority;
    today's slot, if in range, keeps its normal priority."""
    report = BackfillReport(product.name, from_date, to_date, dry_run)
    for day in backfill_days(from_date, to_date, today):
        if dry_run:
            created = not store.products_scheduled([product.name], day)
        else:
            created = store.schedule(product, day, backfill=day < today)
        (report.created if created else report.present).append(day)
        if progress is not None:
            progress(day, created)
    return report
