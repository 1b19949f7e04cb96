"""Spend by payment time as `status` shows it: a provable refusal is counted apart and costs
nothing, reported usage is counted as reported, a create whose usage is not known yet at its
estimate, and costs and flex savings summed only where a price is known."""

from __future__ import annotations

import datetime as dt
from typing import Any

from iipub.model import spend_states
from iipub.money import budgets
from iipub.money.payment_values import Override, SpendReport, Tally, Window

SINCE = dt.datetime(2026, 12, 1)


def row(state: str, total: int | None = None, estimated: int = 0, **usage: int) -> dict[str, Any]:
    return {"state": state, "total_tokens": total, "estimated_tokens": estimated,
            "input_tokens": usage.get("i"), "output_tokens": usage.get("o")}


def test_refusals_are_counted_apart_and_usage_as_reported_or_estimated() -> None:
    t = Tally()
    t.add(row(spend_states.REFUSED), 9.0, None)
    t.add(row(spend_states.REJECTED), 9.0, None)
    t.add(row(spend_states.SETTLED, total=120, i=100, o=20), 0.5, 0.25)
    t.add(row(spend_states.ACCEPTED, estimated=300), None, None)
    assert (t.creates, t.refused, t.tokens, t.reported_tokens, t.estimated_tokens) == (2, 1, 420, 120, 300)
    assert (t.cost, t.flex_saving) == (0.5, 0.25)
    assert Tally().to_dict()["cost"] is None  # nothing priced: no figure, not zero


def test_the_report_names_the_global_scope_and_hides_an_unpriced_currency() -> None:
    w = Window("today", SINCE)
    w.total.add(row(spend_states.SETTLED, total=10, i=5, o=5), None, None)
    grant = Override(budgets.GLOBAL, 1000, "launch", "ops", SINCE, SINCE + dt.timedelta(hours=6))
    doc = SpendReport("USD", False, (w,), overrides=(grant,)).to_dict()
    assert doc["counted_by"] == "payment time" and doc["currency"] is None
    assert doc["windows"]["today"]["tokens"] == 10 and doc["windows"]["today"]["since"] == "2026-12-01T00:00:00.000000Z"
    assert doc["overrides"] == [{"scope": "global", "extra_tokens": 1000, "reason": "launch", "by": "ops",
                                 "granted_at": "2026-12-01T00:00:00.000000Z", "until": "2026-12-01T06:00:00.000000Z"}]
    assert SpendReport("USD", True, (w,)).window("today") is w
