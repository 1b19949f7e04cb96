"""`iipub report`'s reading: the rows of the last `days` UTC days (by the database clock), each
through an index (`store.history_rows`), folded into `history_values.History`."""

from __future__ import annotations

from iipub.observe import history_values as hv
from iipub.settings.config import Settings
from iipub.store import history_rows
from iipub.store.handles import Engine

MAX_DAYS = 366  # the range `--days` accepts: a year and a leap day


def collect(engine: Engine, settings: Settings, days: int) -> hv.History:
    """Read the range in one short read and fold it. Editions are read per configured product
    (`uq_jobs_slot` leads with the product): a product removed from the configuration is left out."""
    now, rows = history_rows.read_days(engine, days, sorted(settings.products))
    span = hv.day_range(now.date(), days)
    journal = rows["journal"]
    edition_rows = [r for name, found in rows.items() if name.startswith("editions ") for r in found]
    ceilings = []
    if settings.budgets.max_tokens_per_day is not None:
        ceilings.append(("global", settings.budgets.max_tokens_per_day))
    ceilings += [(name, p.max_tokens_per_day) for name, p in sorted(settings.products.items())
                 if p.max_tokens_per_day is not None]
    s = settings.status
    charts = (
        hv.spend_chart(span, rows["spend"], ceilings),
        hv.editions_chart(span, edition_rows, now, s.late_after_minutes * 60),
        hv.dwell_chart(span, journal, s.dwell_slo_seconds),
        hv.quarantine_chart(span, journal),
        hv.runs_chart(span, rows["runs"]),
        hv.provider_chart(span, journal),
    )
    return hv.History(now, span, charts, hv.quarantine_now(rows["quarantined"], now))
