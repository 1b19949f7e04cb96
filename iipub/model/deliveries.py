"""Verified webhook deliveries as values: the outcomes a delivery row can end with, a delivery,
whether webhooks currently carry completions, and what `iipub status` shows of them. Pure:
`store.deliveries` reads and writes the rows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from iipub.core.wording import plural

# Outcomes a delivery row can end with.
RECEIVED = "received"  # being processed (or its processor died: taken over after _STALE)
CUSTODY = "custody"  # the receiver took the job's output into custody
POLLED = "polled"  # the receiver read the response and applied the poll's decision
DEFERRED = "deferred"  # the job was busy: made due now for the next worker
NO_OP = "no_op"  # the job is past custody (published, kept, parked): nothing to do
AUTO_LINKED = "auto_linked"  # proof for an unknown create: the job adopted the response
AWAITING_CREATE = "awaiting_create"  # the named job's create is still being recorded
ORPHAN = "orphan"  # this installation's response no job holds: kept in `orphans`
FOREIGN = "foreign"  # another installation's or application's response: left alone
UNCONFIRMED = "unconfirmed"  # one read found nothing: read again by the next ticks until reads agree
IGNORED = "ignored"  # a verified event about something other than a response
UNKNOWN_EVENT = "unknown_event"  # a verified event of a type the SDK does not know: answered 200, counted
OUTCOMES = (RECEIVED, CUSTODY, POLLED, DEFERRED, NO_OP, AUTO_LINKED, AWAITING_CREATE, ORPHAN, FOREIGN, UNCONFIRMED,
            IGNORED, UNKNOWN_EVENT)


@dataclass(frozen=True)
class Delivery:
    webhook_id: str
    event_type: str
    event_id: str | None
    response_id: str | None
    job_id: str | None
    outcome: str
    received_at: dt.datetime
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Health:
    """Whether webhooks currently carry completions: a verified response event arrived within
    `healthy_for_seconds` and no poll found a completion first since then."""

    last_delivery_at: dt.datetime | None
    last_miss_at: dt.datetime | None
    now: dt.datetime
    healthy_for_seconds: float

    @property
    def healthy(self) -> bool:
        if self.last_delivery_at is None:
            return False
        if (self.now - self.last_delivery_at).total_seconds() > self.healthy_for_seconds:
            return False
        return self.last_miss_at is None or self.last_miss_at < self.last_delivery_at


@dataclass(frozen=True)
class WebhookSummary:
    """What `iipub status` shows of webhooks."""

    enabled: bool
    health: Health
    last: Delivery | None
    outcomes: Mapping[str, int]  # in the status window
    misses: int  # completions a poll found first, in the window
    orphans: int
    foreign: int  # deliveries about responses that are not this installation's, ever
    poll_interval_seconds: float  # the relaxed (safety-net) interval

    def problems(self) -> list[str]:
        found = []
        if self.orphans:
            found.append(f"{plural(self.orphans, 'orphan response')} of this installation (paid, held by no job; kept: "
                         "see `iipub orphans list`, then `orphans adopt` or `orphans discard`)")
        if self.enabled and self.misses and not self.health.healthy:
            last = self.last.received_at.isoformat(timespec="seconds") + "Z" if self.last else "never"
            found.append(f"webhooks: {plural(self.misses, 'completion')} found by polling first (last verified "
                         f"delivery {last}); polling at the normal interval")
        return found

    def to_dict(self) -> dict[str, Any]:
        h = self.health
        return {
            "enabled": self.enabled,
            "healthy": h.healthy,
            "last_delivery": None if self.last is None else {
                "webhook_id": self.last.webhook_id, "type": self.last.event_type,
                "response_id": self.last.response_id, "job_id": self.last.job_id, "outcome": self.last.outcome,
                "received_at": self.last.received_at.isoformat(timespec="microseconds") + "Z",
            },
            "outcomes": dict(sorted(self.outcomes.items())),
            "unknown_events": self.outcomes.get(UNKNOWN_EVENT, 0),
            "misses": self.misses,
            "relaxed_poll_interval_seconds": self.poll_interval_seconds,
            "orphans": self.orphans,
            "foreign": self.foreign,
        }
