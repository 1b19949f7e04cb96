"""Webhook deliveries as values: webhooks are healthy while a verified delivery arrived recently
and no poll found a completion first since; what `status` says of orphans and misses."""

from __future__ import annotations

import datetime as dt

from iipub.model import deliveries
from iipub.model.deliveries import Delivery, Health, WebhookSummary

NOW = dt.datetime(2026, 12, 1, 12, 0)


def ago(minutes: float) -> dt.datetime:
    return NOW - dt.timedelta(minutes=minutes)


def test_webhooks_are_healthy_only_after_a_recent_delivery_no_poll_beat() -> None:
    assert not Health(None, None, NOW, 600).healthy  # never a delivery
    assert Health(ago(5), None, NOW, 600).healthy
    assert not Health(ago(11), None, NOW, 600).healthy  # too long ago
    assert not Health(ago(5), ago(1), NOW, 600).healthy  # a poll found a completion first since
    assert Health(ago(1), ago(5), NOW, 600).healthy  # ... before the last delivery


def summary(*, health: Health, misses: int = 0, orphans: int = 0, last: Delivery | None = None) -> WebhookSummary:
    return WebhookSummary(True, health, last, {deliveries.CUSTODY: 3, deliveries.UNKNOWN_EVENT: 1}, misses, orphans,
                          2, 900.0)


def test_orphans_and_misses_while_unhealthy_are_problems() -> None:
    healthy = Health(ago(1), None, NOW, 600)
    assert summary(health=healthy).problems() == []
    assert summary(health=healthy, misses=2).problems() == []  # healthy again: the misses are history
    (orphans,) = summary(health=healthy, orphans=1).problems()
    assert orphans.startswith("1 orphan response of this installation")
    last = Delivery("wh_1", "response.completed", "evt_1", "resp_1", "job-1", deliveries.CUSTODY, ago(30))
    (missed,) = summary(health=Health(ago(30), ago(1), NOW, 600), misses=2, last=last).problems()
    assert missed == ("webhooks: 2 completions found by polling first (last verified delivery 2026-12-01T11:30:00Z); "
                      "polling at the normal interval")


def test_the_json_view_counts_outcomes_and_unknown_events() -> None:
    doc = summary(health=Health(None, None, NOW, 600)).to_dict()
    assert doc["outcomes"] == {"custody": 3, "unknown_event": 1} and doc["unknown_events"] == 1
    assert (doc["healthy"], doc["last_delivery"], doc["foreign"]) == (False, None, 2)


def test_every_outcome_a_delivery_row_ends_with_is_declared_once() -> None:
    assert len(set(deliveries.OUTCOMES)) == len(deliveries.OUTCOMES)
    assert {deliveries.ORPHAN, deliveries.FOREIGN, deliveries.AUTO_LINKED} <= set(deliveries.OUTCOMES)
