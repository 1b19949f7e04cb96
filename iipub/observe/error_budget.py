"""Error budgets of the SLOs (seed 003 section 16) and their multiwindow burn-rate alerts (the
SRE workbook, "Alerting on SLOs"), as values: no I/O.

An SLO with target T over a rolling window may spend (1 - T) of its events on bad ones: that is
its budget. The burn rate over a shorter window is the share of bad events there divided by
(1 - T): 1 spends the budget exactly over the whole window, 14.4 spends 2 % of a 30-day budget in
one hour. The workbook's two paging conditions hold both a long and a short window above the
same rate (the short one proves the burn is still going on):

- fast burn: 1 h and 5 min above 14.4 (CRITICAL once `[status] burn_page_min_bad_events` bad
  samples fell in the hour, a WARNING before: a few editions a day burn 100x on one late one);
- slow burn: 6 h and 30 min above 6 (WARNING here: an edition is late, not lost).

While a budget is spent (nothing left), changes are frozen: `--check` says so, and a configuration
change recorded then is flagged in the journal (`config_identity`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# (name, seconds) of the burn-rate windows, shortest first.
WINDOWS: tuple[tuple[str, float], ...] = (("5m", 300.0), ("30m", 1800.0), ("1h", 3600.0), ("6h", 21600.0))
FAST = ("1h", "5m", 14.4)
SLOW = ("6h", "30m", 6.0)


@dataclass(frozen=True)
class Budget:
    """One SLO's budget over its window and its burn rates."""

    name: str
    target: float
    window_seconds: float
    events: int
    bad: int
    burn: tuple[tuple[str, float], ...]  # (window name, burn rate)
    bad_by_window: tuple[tuple[str, int], ...] = ()  # (window name, bad samples in it)

    @property
    def allowed(self) -> float:
        """Bad events the window may hold."""
        return (1 - self.target) * self.events

    @property
    def left(self) -> float:
        """Share of the budget left: 1 untouched, 0 spent, below 0 overspent (1 with no events)."""
        if self.events == 0:
            return 1.0
        allowed = self.allowed
        if allowed <= 0:  # a 100 % target: any bad event spends it all
            return 1.0 if self.bad == 0 else -float(self.bad)
        return 1 - self.bad / allowed

    @property
    def spent(self) -> bool:
        return self.bad > 0 and self.left <= 0

    def bad_within(self, window: str) -> int:
        return dict(self.bad_by_window).get(window, 0)

    def rate(self, window: str) -> float:
        return dict(self.burn)[window]

    def _over(self, rule: tuple[str, str, float]) -> bool:
        long, short, factor = rule
        return self.rate(long) > factor and self.rate(short) > factor

    @property
    def fast_burn(self) -> bool:
        return self._over(FAST)

    @property
    def slow_burn(self) -> bool:
        return self._over(SLOW)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target, "window_days": round(self.window_seconds / 86400, 3), "events": self.events,
            "bad": self.bad, "allowed_bad": round(self.allowed, 3), "budget_left": round(self.left, 4),
            "spent": self.spent, "burn_rates": {name: round(rate, 3) for name, rate in self.burn},
            "fast_burn": self.fast_burn, "slow_burn": self.slow_burn,
        }


def compute(name: str, target: float, samples: Iterable[tuple[dt.datetime, bool]], now: dt.datetime,
            window_seconds: float) -> Budget:
    """The budget of `samples` — (when, good) — within `window_seconds` before `now`."""
    ages = [((now - at).total_seconds(), good) for at, good in samples]
    ages = [(max(age, 0.0), good) for age, good in ages if age <= window_seconds]
    bad = sum(1 for _, good in ages if not good)
    allowed_share = 1 - target
    burn, bad_by_window = [], []
    for label, seconds in WINDOWS:
        inside = [good for age, good in ages if age <= seconds]
        bad_inside = sum(1 for g in inside if not g)
        bad_by_window.append((label, bad_inside))
        share = (bad_inside / len(inside)) if inside else 0.0
        burn.append((label, share / allowed_share if allowed_share > 0 else (float("inf") if share else 0.0)))
    return Budget(name, target, window_seconds, len(ages), bad, tuple(burn), tuple(bad_by_window))


def freeze_reasons(budgets: Iterable[Budget]) -> list[str]:
    """The SLOs whose budget is spent: while any is, changes are frozen."""
    return [b.name for b in budgets if b.spent]
