"""What `iipub status` shows of the `spend` table, as values: spend by payment time per window,
product and tier, the daily ceilings and the operator overrides in force. Pure: `payments`
reads and writes the rows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from iipub.core.timefmt import iso_z
from iipub.model.spend_states import NOT_CHARGED, REFUSED
from iipub.money import budgets


@dataclass(frozen=True)
class Override:
    scope: str
    extra_tokens: int
    reason: str
    granted_by: str
    granted_at: dt.datetime
    until: dt.datetime

    def to_dict(self) -> dict[str, Any]:
        return {"scope": "global" if self.scope == budgets.GLOBAL else self.scope, "extra_tokens": self.extra_tokens,
                "reason": self.reason, "by": self.granted_by, "granted_at": iso_z(self.granted_at),
                "until": iso_z(self.until)}


@dataclass
class Tally:
    """Spend of one group (a window, a product, a tier) by payment time."""

    creates: int = 0  # paid creates (not counting provable refusals)
    refused: int = 0  # creates the provider provably refused (not charged)
    input_tokens: int = 0
    output_tokens: int = 0
    reported_tokens: int = 0  # total tokens the provider reported
    estimated_tokens: int = 0  # counted at the estimate: usage not known yet
    cost: float | None = None
    flex_saving: float | None = None

    @property
    def tokens(self) -> int:
        return self.reported_tokens + self.estimated_tokens

    def add(self, row: Mapping[Any, Any], cost: float | None, saving: float | None) -> None:
        if row["state"] in NOT_CHARGED:
            self.refused += int(row["state"] == REFUSED)
            return
        self.creates += 1
        if row["total_tokens"] is None:
            self.estimated_tokens += int(row["estimated_tokens"])
        else:
            self.input_tokens += int(row["input_tokens"] or 0)
            self.output_tokens += int(row["output_tokens"] or 0)
            self.reported_tokens += int(row["total_tokens"])
        if cost is not None:
            self.cost = (self.cost or 0.0) + cost
        if saving is not None:
            self.flex_saving = (self.flex_saving or 0.0) + saving

    def to_dict(self) -> dict[str, Any]:
        return {"creates": self.creates, "refused": self.refused, "tokens": self.tokens,
                "reported_tokens": self.reported_tokens, "estimated_tokens": self.estimated_tokens,
                "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cost": None if self.cost is None else round(self.cost, 6),
                "flex_saving": None if self.flex_saving is None else round(self.flex_saving, 6)}


@dataclass
class Window:
    name: str
    since: dt.datetime
    total: Tally = field(default_factory=Tally)
    by_product: dict[str, Tally] = field(default_factory=dict)
    by_tier: dict[str, Tally] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"since": iso_z(self.since), **self.total.to_dict(),
                "by_product": {k: v.to_dict() for k, v in sorted(self.by_product.items())},
                "by_tier": {k: v.to_dict() for k, v in sorted(self.by_tier.items())}}


@dataclass(frozen=True)
class SpendReport:
    currency: str
    priced: bool  # [pricing] gives a price for at least one model
    windows: tuple[Window, ...]
    ceilings: tuple[budgets.Ceiling, ...] = ()
    overrides: tuple[Override, ...] = ()

    def window(self, name: str) -> Window:
        return next(w for w in self.windows if w.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "counted_by": "payment time",
            "currency": self.currency if self.priced else None,
            "windows": {w.name: w.to_dict() for w in self.windows},
            "ceilings": [{"scope": "global" if c.scope == budgets.GLOBAL else c.scope, "name": c.name,
                          "max_tokens_per_day": c.limit, "override_tokens": c.extra, "allowed": c.allowed,
                          "counted_today": c.spent, "reached": c.reached} for c in self.ceilings],
            "overrides": [o.to_dict() for o in self.overrides],
        }
