"""Which slots exist: today's schedule and backfills. Writes go through the store."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from .config import Product
from .store import Store


def schedule_day(store: Store, products: Iterable[Product], day: dt.date, *, backfill: bool = False) -> dict[str, bool]:
    """Create each product's slot for `day`; returns product -> created (False: already present)."""
    return {p.name: store.schedule(p, day, backfill=backfill) for p in products}


def ensure_scheduled(store: Store, products: Iterable[Product], day: dt.date) -> int:
    """Schedule `day`'s missing slots (a cheap read first, so a steady tick writes nothing)."""
    wanted = list(products)
    present = store.products_scheduled([p.name for p in wanted], day)
    return sum(store.schedule(p, day) for p in wanted if p.name not in present)
