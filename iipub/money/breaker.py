"""The create gate's rules, pure: may a paid create go out now, and what does its outcome
change? No database; `gate` reads the one shared row, asks these functions, and writes the
changes fenced on the row's version, so every reconcile process sees the same answer.

- Paused by an operator: no create, anywhere.
- A shared rate-limit cool-down (the provider's retry hint, from any process): no create until it passes.
- The breaker opens on the first unknown create outcome (5xx, timeout after sending, reset),
  on a quota refusal (the account cannot pay), and on a refused API key; while open no create is
  sent except one probe after a cool-down that doubles with every failed probe. The probe's
  acceptance closes it.
- A create with no recent success is itself a probe: one at a time, so an outage that begins
  while iipub is idle costs one quarantined slot, not one per concurrent worker.
- Optionally at most `max_creates_per_minute` creates across all processes.
- A product whose create the provider refused for a parameter, or found larger than the
  organization's tokens-per-minute limit (`ProductHold`, rows of `holds`): no create of that
  product until its request changes; the other products go on. A model the project may not
  use, or that does not exist (`ModelHold`): no create of its products until the models endpoint
  answers for it; the other models go on. Neither opens the breaker or cools other creates down.
- A daily token ceiling reached (`money.holding`: `[budgets]` and per product, counted by
  payment time, plus operator overrides): no create of the products it covers. `gate` asks it
  before these rules, so a held create never takes the probe.
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass
from typing import Any

from iipub.provider.outcomes import Accepted, Ambiguous, CreateOutcome, RefusalKind, Refused, Rejected
from iipub.settings.config import ProviderSettings


class BreakerReason(enum.StrEnum):
    CREATE_OUTCOME_UNKNOWN = "create_outcome_unknown"
    QUOTA_EXHAUSTED = "quota_exhausted"
    PROVIDER_AUTH = "provider_auth"


# Reasons an operator must act on (money or credentials), not just wait out.
CRITICAL_REASONS = frozenset({BreakerReason.QUOTA_EXHAUSTED, BreakerReason.PROVIDER_AUTH})
OPEN, CLOSED = "open", "closed"
RATE_WINDOW_SECONDS = 60.0
# A read's rate-limit hint is honoured up to this: a finished response stays at the provider for
# about ten minutes, and custody must never wait most of that.
READ_COOLDOWN_CAP_SECONDS = 60.0


@dataclass(frozen=True)
class GateState:
    """The shared row, as read (times naive UTC, by the database clock)."""

    version: int
    breaker: str
    breaker_reason: str | None
    breaker_detail: str | None
    opened_at: dt.datetime | None
    open_count: int
    probe_after: dt.datetime | None
    probe_owner: str | None
    probe_expiry: dt.datetime | None
    last_ok_at: dt.datetime | None
    cooldown_until: dt.datetime | None
    paused: bool
    paused_reason: str | None
    paused_by: str | None
    paused_at: dt.datetime | None
    window_start: dt.datetime | None
    window_creates: int
    paused_everything: bool = False  # `pause --everything`: automated commands only record heartbeats

    @property
    def is_open(self) -> bool:
        return self.breaker == OPEN


@dataclass(frozen=True)
class GateVerdict:
    allowed: bool
    why: str = ""
    probe: bool = False  # this create decides the provider's health: its outcome is recorded
    wait_briefly: bool = False  # another worker's probe is out: ask again once it is back
    changes: dict[str, Any] | None = None  # gate columns to write before the create goes out
    ceiling: str | None = None  # held by this daily spend ceiling's scope (`money.Ceiling`)
    at: dt.datetime | None = None  # the database clock when the gate decided


def admit(g: GateState, now: dt.datetime, worker: str, p: ProviderSettings, lease_seconds: float) -> GateVerdict:
    """May `worker` (one claimant: a worker's job) send a paid create now?"""
    if g.paused:
        return GateVerdict(False, f"creates paused by {g.paused_by or 'an operator'}: {g.paused_reason or ''}".strip())
    if g.cooldown_until is not None and now < g.cooldown_until:
        return GateVerdict(False, f"provider rate limit: no create before {g.cooldown_until.isoformat()}Z")
    probe_busy = (g.probe_owner is not None and g.probe_owner != worker
                  and g.probe_expiry is not None and g.probe_expiry > now)
    take_probe = {"probe_owner": worker, "probe_expiry": now + dt.timedelta(seconds=lease_seconds)}
    if g.is_open:
        if g.probe_after is not None and now < g.probe_after:
            return GateVerdict(False, f"create breaker open ({g.breaker_reason}) until {g.probe_after.isoformat()}Z")
        if probe_busy:
            return GateVerdict(False, f"create breaker open ({g.breaker_reason}); a probe is out ({g.probe_owner})")
        return GateVerdict(True, "probe after the breaker's cool-down", probe=True, changes=take_probe)
    healthy = g.last_ok_at is not None and (now - g.last_ok_at).total_seconds() <= p.healthy_for_seconds
    rate = _rate_take(g, now, p)
    if rate is None and p.max_creates_per_minute:
        return GateVerdict(False, f"max_creates_per_minute ({p.max_creates_per_minute}) reached")
    if not healthy:
        if probe_busy:
            return GateVerdict(False, f"the provider's health is being probed ({g.probe_owner})", wait_briefly=True)
        return GateVerdict(True, "no recent accepted create: this one probes", probe=True,
                       changes={**take_probe, **(rate or {})})
    return GateVerdict(True, changes=rate)


def _rate_take(g: GateState, now: dt.datetime, p: ProviderSettings) -> dict[str, Any] | None:
    """The window columns after taking one create, or None (no limit configured, or spent)."""
    if not p.max_creates_per_minute:
        return None
    if g.window_start is None or (now - g.window_start).total_seconds() >= RATE_WINDOW_SECONDS:
        return {"window_start": now, "window_creates": 1}
    if g.window_creates >= p.max_creates_per_minute:
        return None
    return {"window_creates": g.window_creates + 1}


@dataclass(frozen=True)
class Change:
    changes: dict[str, Any]
    event: str | None = None  # a gate_events kind when the breaker opened or closed
    detail: dict[str, Any] | None = None


def on_outcome(g: GateState, now: dt.datetime, worker: str, outcome: CreateOutcome, p: ProviderSettings,
               *, probe: bool) -> Change | None:
    """What a create's outcome changes in the gate (None: nothing to write)."""
    mine = g.probe_owner == worker
    release = {"probe_owner": None, "probe_expiry": None} if mine else {}
    if isinstance(outcome, Accepted):
        if g.is_open or probe or mine:
            return Change({"breaker": CLOSED, "breaker_reason": None, "breaker_detail": None, "opened_at": None,
                           "open_count": 0, "probe_after": None, "probe_owner": None, "probe_expiry": None,
                           "last_ok_at": now}, "breaker_close" if g.is_open else None,
                          {"was": g.breaker_reason} if g.is_open else None)
        if g.last_ok_at is None or (now - g.last_ok_at).total_seconds() > min(60.0, p.healthy_for_seconds / 2):
            return Change({"last_ok_at": now})  # kept fresh without a write per create
        return None
    if isinstance(outcome, Ambiguous):
        return _open(g, now, BreakerReason.CREATE_OUTCOME_UNKNOWN, outcome.why, p.breaker_cooldown_seconds, p)
    if isinstance(outcome, Refused):
        if outcome.kind is RefusalKind.QUOTA:
            return _open(g, now, BreakerReason.QUOTA_EXHAUSTED, outcome.why, p.breaker_quota_cooldown_seconds, p)
        changes: dict[str, Any] = dict(release)
        # A flex capacity refusal is flex's, not the account's: it cools no other create down;
        # nor does a refusal that holds its product or model (a parameter, no access to the model,
        # a request too large): it says nothing of the other products' creates.
        if outcome.retry_after is not None and outcome.kind is RefusalKind.RATE:
            until = now + dt.timedelta(seconds=outcome.retry_after)
            if g.cooldown_until is None or until > g.cooldown_until:
                changes["cooldown_until"] = until
        return Change(changes) if changes else None
    if isinstance(outcome, Rejected) and outcome.status in (401, 403):
        return _open(g, now, BreakerReason.PROVIDER_AUTH, f"HTTP {outcome.status}: {outcome.why}",
                     p.breaker_quota_cooldown_seconds, p)
    return Change(release) if release else None


def _open(g: GateState, now: dt.datetime, reason: BreakerReason, why: str, base: float,
          p: ProviderSettings) -> Change:
    count = g.open_count + 1
    cooldown = min(p.breaker_cooldown_cap_seconds, max(base, 0.0) * 2 ** min(count - 1, 20))
    return Change(
        {"breaker": OPEN, "breaker_reason": reason.value, "breaker_detail": why[:2000],
         "opened_at": g.opened_at if g.is_open and g.opened_at is not None else now, "open_count": count,
         "probe_after": now + dt.timedelta(seconds=cooldown), "probe_owner": None, "probe_expiry": None},
        "breaker_open", {"reason": reason.value, "why": why[:500], "cooldown_seconds": cooldown, "opens": count},
    )


def cool_down(g: GateState, now: dt.datetime, seconds: float) -> dict[str, Any] | None:
    """A rate limit seen by any call: share it (None when a longer one is already recorded)."""
    until = now + dt.timedelta(seconds=max(0.0, seconds))
    if g.cooldown_until is not None and g.cooldown_until >= until:
        return None
    return {"cooldown_until": until}
