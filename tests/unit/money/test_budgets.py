"""Money rules, pure: the tier a create asks for, the flex refusal's mapping and decision, the
daily ceilings, prices. The provider mapping of flex's 429 uses a mock transport (a pure unit
test of the adapter); everything over real HTTP is in tests/integration/money/test_gate.py."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Iterator

import httpx
import pytest

from iipub.machine import decisions
from iipub.model.states import Reason, State
from iipub.money import breaker, budgets
from iipub.provider.openai.adapter import OpenAIAdapter
from iipub.provider.outcomes import Accepted, CreateRequest, RefusalKind, Refused
from iipub.settings.config import Budgets, ModelPrice, Product, ProviderSettings, ReconcileSettings
from tests.unit.machine.test_decisions import job
from tests.unit.money.test_breaker import HEALTHY, NOW, P

OPENED = dt.datetime(2026, 12, 1, 5, 0)
FLEX = Product(name="daily-brief", prompt="Write it.", items=3, service_tier="flex", flex_until_minutes=30)
BASE = "http://provider.test/v1"


def test_flex_until_the_deadline_then_the_default_tier() -> None:
    assert budgets.tier_for(FLEX, OPENED, OPENED) == "flex"
    assert budgets.tier_for(FLEX, OPENED, OPENED + dt.timedelta(minutes=29, seconds=59)) == "flex"
    assert budgets.tier_for(FLEX, OPENED, OPENED + dt.timedelta(minutes=30)) == "default"
    default = dataclasses.replace(FLEX, service_tier="default")
    assert budgets.tier_for(default, OPENED, OPENED) == "default"
    assert budgets.flex_deadline(default, OPENED) is None
    # The tier is not part of what shapes the output: switching it is no config drift.
    assert default.fingerprint() == FLEX.fingerprint()


def test_a_capacity_refusal_is_refunded_cools_nothing_and_retries_before_the_deadline() -> None:
    in_flight = job(State.CREATE_IN_FLIGHT, generation_attempts=1)
    s = ReconcileSettings(backoff_base_seconds=100, backoff_cap_seconds=600)
    refusal = Refused(30.0, "HTTP 429: Resource Unavailable", "resource_unavailable", kind=RefusalKind.CAPACITY)
    d = decisions.after_create(in_flight, refusal, s, tier="flex", flex_left=12.0)
    assert d.to == State.CREATE_ELIGIBLE and d.reason == Reason.CREATE_REFUSED
    assert d.changes["generation_attempts"] == 0  # refunded: nothing was charged
    assert d.cooldown is None  # flex's capacity, not the account's rate limit
    assert d.delay == 12.0  # the retry is not put off past the flex deadline
    assert d.detail["capacity"] is True and d.detail["service_tier_asked"] == "flex"
    # The account's own rate limit still cools every create down.
    rate = Refused(2.0, "HTTP 429: slow down", "rate_limit_exceeded", kind=RefusalKind.RATE)
    limited = decisions.after_create(in_flight, rate, s)
    assert limited.cooldown == 2.0


def test_a_capacity_refusal_neither_opens_the_breaker_nor_shares_a_cool_down() -> None:
    refusal = Refused(30.0, "HTTP 429: Resource Unavailable", "resource_unavailable", kind=RefusalKind.CAPACITY)
    change = breaker.on_outcome(HEALTHY, NOW, "w/j", refusal, P, probe=False)
    assert change is None or ("cooldown_until" not in change.changes and "breaker" not in change.changes)
    limited = Refused(30.0, "HTTP 429", "rate_limit_exceeded", kind=RefusalKind.RATE)
    rate = breaker.on_outcome(HEALTHY, NOW, "w/j", limited, P, probe=False)
    assert rate is not None and "cooldown_until" in rate.changes


def test_accepted_journals_both_tiers() -> None:
    d = decisions.after_create(job(State.CREATE_IN_FLIGHT, generation_attempts=1),
                              Accepted("resp_1", "queued", "flex"), ReconcileSettings(), tier="flex")
    assert d.detail["service_tier_asked"] == "flex" and d.detail["service_tier"] == "flex"
    dispatch = decisions.before_dispatch(job(), "f" * 64, Budgets(), "default")
    assert dispatch.detail["service_tier"] == "default"


def test_ceilings_hold_only_the_products_they_cover() -> None:
    products = {"a": dataclasses.replace(FLEX, name="a", max_tokens_per_day=100),
                "b": dataclasses.replace(FLEX, name="b")}
    found = budgets.ceilings(Budgets(max_tokens_per_day=1000), products, {"a": 100, "b": 50, budgets.GLOBAL: 150}, {})
    assert [c.scope for c in found] == [budgets.GLOBAL, "a"]
    assert budgets.holding(found, "a") is not None and budgets.holding(found, "a").scope == "a"  # type: ignore[union-attr]
    assert budgets.holding(found, "b") is None
    raised = budgets.ceilings(Budgets(max_tokens_per_day=1000), products, {"a": 100, budgets.GLOBAL: 1000},
                            {"a": 50, budgets.GLOBAL: 1})
    assert budgets.holding(raised, "a") is None and budgets.holding(raised, "b") is None
    assert "product a max_tokens_per_day 100 + 50 by override" in raised[1].describe()


def test_prices_per_tier_and_the_flex_saving() -> None:
    price = ModelPrice(input_per_million=2.0, output_per_million=8.0)
    assert budgets.cost(price, "default", 1_000_000, 1_000_000) == 10.0
    assert budgets.cost(price, "flex", 1_000_000, 1_000_000) == 5.0  # batch rates: half, unless given
    assert budgets.flex_saving(price, 1_000_000, 1_000_000) == 5.0
    assert budgets.cost(price, "default", 0, 0, estimated=500_000) == 4.0  # an estimate at the output rate
    assert budgets.cost(None, "flex", 1, 1) is None
    given = ModelPrice(input_per_million=2.0, output_per_million=8.0, flex_input_per_million=1.5,
                       flex_output_per_million=3.0)
    assert budgets.cost(given, "flex", 1_000_000, 1_000_000) == 4.5


# -- the adapter: flex's 429 and timeout (mock transport) ---------------------------------------

class Recorder:
    def __init__(self, status: int, body: dict[str, object]) -> None:
        self.status, self.body = status, body
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(self.status, json=self.body)


def _provider(rec: Recorder) -> Iterator[OpenAIAdapter]:
    client = httpx.Client(transport=httpx.MockTransport(rec))
    with OpenAIAdapter(ProviderSettings(base_url=BASE, timeout_seconds=7, flex_timeout_seconds=44), "sk-test",
                  http_client=client) as p:
        yield p
    client.close()


UNAVAILABLE = {"error": {"message": "Resource Unavailable: no flex capacity", "type": "resource_unavailable",
                         "param": None, "code": "resource_unavailable"}}
QUOTA = {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "param": None,
                   "code": "insufficient_quota"}}


@pytest.mark.parametrize(("tier", "body", "capacity"), [
    ("flex", UNAVAILABLE, True),
    ("default", UNAVAILABLE, False),  # not asked for flex: an ordinary 429
    ("flex", QUOTA, False),  # the account cannot pay: the breaker's business
])
def test_flex_429_resource_unavailable_is_a_capacity_refusal(tier: str, body: dict[str, object],
                                                             capacity: bool) -> None:
    rec = Recorder(429, body)
    for p in _provider(rec):
        outcome = p.create(CreateRequest("job-1", FLEX, dt.date(2026, 12, 1), 1, "f" * 64, tier=tier))
    assert isinstance(outcome, Refused) and outcome.capacity is capacity
    sent = json.loads(rec.requests[0].content)
    assert sent["service_tier"] == tier
    # The create's read timeout follows the tier.
    assert rec.requests[0].extensions["timeout"]["read"] == (44 if tier == "flex" else 7)


def test_the_tier_the_response_reports_is_read() -> None:
    body = {"id": "resp_1", "object": "response", "created_at": 1, "status": "queued", "model": "m", "output": [],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "service_tier": "flex"}
    for p in _provider(Recorder(200, body)):
        outcome = p.create(CreateRequest("job-1", FLEX, dt.date(2026, 12, 1), 1, "f" * 64, tier="flex"))
    assert outcome == Accepted("resp_1", "queued", "flex")


def test_an_override_names_the_ceiling_that_holds_the_creates() -> None:
    from iipub.money.budgets import GLOBAL, Ceiling, override_refusal

    reached_global = [Ceiling(GLOBAL, 100, 0, 150), Ceiling("daily-brief", 10**6, 0, 150)]
    products = ["daily-brief", "revolution-watch"]
    assert "its creates are held by [budgets] max_tokens_per_day 100" in str(
        override_refusal(reached_global, "revolution-watch", 500, products))
    assert "daily-brief's creates are held by [budgets] max_tokens_per_day" in str(
        override_refusal(reached_global, "daily-brief", 500, products))
    assert override_refusal(reached_global, GLOBAL, 500, products) is None  # releases them
    # The ceiling that holds them, raised too little to release them yet: its effect is real (raised by 10).
    assert override_refusal(reached_global, GLOBAL, 10, products) is None
    calm = [Ceiling(GLOBAL, 100, 0, 5)]
    assert "count against" in str(override_refusal(calm, "daily-brief", 500, products))
    assert override_refusal(calm, GLOBAL, 500, products) is None  # a raise ahead of time
    own = [Ceiling("daily-brief", 100, 0, 150)]
    assert override_refusal(own, "daily-brief", 500, products) is None
    assert "not configured" in str(override_refusal(own, GLOBAL, 500, products))
