"""Money rules, pure: which tier a create asks for, whether a daily token ceiling holds
new creates back, and what tokens cost. No database; `spend` reads and writes the rows these
rules are asked about, `gate` applies the ceilings before a paid create.

- Flex tier with a deadline: a product configured for flex asks for flex until
  `flex_until_minutes` after its slot opened, then for the default tier, so a flex create that
  keeps being refused for capacity (`RefusalKind.CAPACITY`, not charged) still leaves time for the
  edition to be on time.
- Ceilings: `[budgets] max_tokens_per_day` (every product) and `[[products]] max_tokens_per_day`
  count the tokens paid since the start of the UTC day (by payment time), each create at the
  usage the provider reported or, while that is unknown, at its product's `estimated_tokens`.
  Once a count reaches its ceiling (plus any operator override), new creates wait.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from iipub.settings.config import Budgets, ModelPrice, Pricing, Product

FLEX, DEFAULT = "flex", "default"
TIERS = (FLEX, DEFAULT)
GLOBAL = "*"  # the scope of the global ceiling (a product's scope is its name)


def flex_deadline(product: Product, slot_opened: dt.datetime) -> dt.datetime | None:
    """Until when a create of this slot asks for flex (None: the product never asks for it)."""
    if product.service_tier != FLEX:
        return None
    return slot_opened + dt.timedelta(minutes=product.flex_until_minutes)


def tier_for(product: Product, slot_opened: dt.datetime, now: dt.datetime) -> str:
    """The tier a create sent `now` asks for."""
    deadline = flex_deadline(product, slot_opened)
    return FLEX if deadline is not None and now < deadline else DEFAULT


@dataclass(frozen=True)
class Ceiling:
    """One daily ceiling as it stands today."""

    scope: str  # GLOBAL or a product name
    limit: int  # the configured ceiling
    extra: int  # raised by operator overrides in force
    spent: int  # tokens counted today (reported, or estimated while unknown)

    @property
    def allowed(self) -> int:
        return self.limit + self.extra

    @property
    def reached(self) -> bool:
        return self.spent >= self.allowed

    @property
    def name(self) -> str:
        return ("[budgets] max_tokens_per_day" if self.scope == GLOBAL
                else f"product {self.scope} max_tokens_per_day")

    def describe(self) -> str:
        raised = f" + {self.extra:,} by override" if self.extra else ""
        return f"{self.name} {self.limit:,}{raised}: {self.spent:,} tokens counted today"


def ceilings(budgets: Budgets, products: Mapping[str, Product], spent: Mapping[str, int],
             extra: Mapping[str, int]) -> list[Ceiling]:
    """Every configured ceiling with today's count (`spent` and `extra` by scope; GLOBAL is
    every product's)."""
    found = []
    if budgets.max_tokens_per_day is not None:
        found.append(Ceiling(GLOBAL, budgets.max_tokens_per_day, extra.get(GLOBAL, 0), spent.get(GLOBAL, 0)))
    for name, p in sorted(products.items()):
        if p.max_tokens_per_day is not None:
            found.append(Ceiling(name, p.max_tokens_per_day, extra.get(name, 0), spent.get(name, 0)))
    return found


def holding(all_ceilings: list[Ceiling], product: str) -> Ceiling | None:
    """The reached ceiling that holds back a create of `product`, or None."""
    return next((c for c in all_ceilings if c.reached and c.scope in (GLOBAL, product)), None)


def override_refusal(all_ceilings: list[Ceiling], scope: str, tokens: int, products: Sequence[str]) -> str | None:
    """Why an override of `scope` by `tokens` would print "raised" and change nothing, or None.
    An override must raise a ceiling that exists; and when the ceilings reached now hold
    creates back, it must release some product's creates: the ceiling that holds them is named
    (a product without a ceiling of its own is held by the global one)."""
    by_scope = {c.scope: c for c in all_ceilings}
    own = by_scope.get(scope)
    label = "the global ceiling ([budgets] max_tokens_per_day)" if scope == GLOBAL else \
        f"product {scope} has no max_tokens_per_day of its own"
    if own is None:
        if scope == GLOBAL:
            named = ", ".join(c.name for c in all_ceilings)
            return (f"{label} is not configured; nothing to raise" +
                    (f" (configured: {named}; raise one with --product NAME)" if named else ""))
        held = by_scope.get(GLOBAL)
        if held is not None:
            verb = "are held by" if held.reached else "count against"
            return (f"{label}: its creates {verb} {held.describe()}; raise that one "
                    f"(`iipub budget override --tokens N` without --product)")
        return f"{label} and no global ceiling is configured: nothing holds its creates, nothing to raise"
    raised = [Ceiling(c.scope, c.limit, c.extra + (tokens if c.scope == scope else 0), c.spent) for c in all_ceilings]
    still = {p: holding(raised, p) for p in ([scope] if scope != GLOBAL else products)
             if holding(all_ceilings, p) is not None}
    if not still or any(after is None or after.scope == scope for after in still.values()):
        return None  # nothing held now (a raise ahead of time), or some product's creates are released
    product = min(still)
    after = still[product]
    assert after is not None
    return (f"{product}'s creates are held by {after.describe()}, which this override does not raise; raise that "
            "one" + (" (without --product)" if after.scope == GLOBAL else f" (--product {after.scope})"))


def has_ceilings(budgets: Budgets, products: Mapping[str, Product]) -> bool:
    return budgets.max_tokens_per_day is not None or any(p.max_tokens_per_day is not None
                                                         for p in products.values())


# -- prices -------------------------------------------------------------------------------


def cost(price: ModelPrice | None, tier: str, input_tokens: int, output_tokens: int,
         estimated: int = 0) -> float | None:
    """What the tokens cost at `tier` (None: no price for the model). Tokens counted at an
    estimate (usage not known yet) are priced at the output rate, the dearer one."""
    if price is None:
        return None
    per_in, per_out = price.per_million(tier)
    return (input_tokens * per_in + (output_tokens + estimated) * per_out) / 1_000_000


def flex_saving(price: ModelPrice | None, input_tokens: int, output_tokens: int, estimated: int = 0) -> float | None:
    """What flex tokens saved against the default tier's price (None: no price for the model)."""
    at_default = cost(price, DEFAULT, input_tokens, output_tokens, estimated)
    at_flex = cost(price, FLEX, input_tokens, output_tokens, estimated)
    return None if at_default is None or at_flex is None else at_default - at_flex


def price_of(pricing: Pricing, model: str) -> ModelPrice | None:
    return pricing.models.get(model)
