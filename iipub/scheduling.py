"""Which slots exist: today's schedule and backfills. Writes go through the store."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from .config import Product
from .store import Store


def schedule_day(store: Store, products: Iterable[Product], day: dt.date, *, backfill: bool = False) -> dict[str, bool]:
    """Create each product's slot for `day`; returns product -> created (False: already present)."""
    return {p.name: store.schedule(p, day, backfill=backfill) for p in products}
