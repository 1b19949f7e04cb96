"""The create gate's rules (`iipub.money.breaker`), pure: who may send a paid create, and what each
create outcome changes for every other process."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

from iipub.money import breaker
from iipub.money.breaker import GateState
from iipub.provider.outcomes import Accepted, Ambiguous, RefusalKind, Refused, Rejected
from iipub.settings.config import ProviderSettings

NOW = dt.datetime(2026, 12, 1, 5, 0)
P = ProviderSettings(breaker_cooldown_seconds=60, breaker_quota_cooldown_seconds=900,
                     breaker_cooldown_cap_seconds=3600, healthy_for_seconds=900)
HEALTHY = GateState(version=1, breaker="closed", breaker_reason=None, breaker_detail=None, opened_at=None,
                    open_count=0, probe_after=None, probe_owner=None, probe_expiry=None,
                    last_ok_at=NOW - dt.timedelta(seconds=30), cooldown_until=None, paused=False,
                    paused_reason=None, paused_by=None, paused_at=None, window_start=None, window_creates=0)


def later(seconds: float) -> dt.datetime:
    return NOW + dt.timedelta(seconds=seconds)


def apply(g: GateState, changes: dict[str, Any] | None) -> GateState:
    return replace(g, **(changes or {}))


def test_a_healthy_gate_admits_without_writing() -> None:
    v = breaker.admit(HEALTHY, NOW, "w/j1", P, 60)
    assert v.allowed and not v.probe and v.changes is None


def test_no_recent_success_makes_the_create_a_probe_and_the_others_wait() -> None:
    cold = replace(HEALTHY, last_ok_at=None)
    first = breaker.admit(cold, NOW, "w/j1", P, 60)
    assert first.allowed and first.probe and first.changes and first.changes["probe_owner"] == "w/j1"
    taken = apply(cold, first.changes)
    second = breaker.admit(taken, NOW, "w/j2", P, 60)
    assert not second.allowed and second.wait_briefly
    # the probe's worker died: its claim expires with its lease
    assert breaker.admit(taken, later(61), "w/j2", P, 60).allowed


def test_an_unknown_outcome_opens_the_breaker_with_a_growing_cool_down() -> None:
    g = HEALTHY
    cooldowns = []
    for _ in range(8):
        change = breaker.on_outcome(g, NOW, "w/j", Ambiguous("HTTP 503"), P, probe=True)
        assert change is not None and change.event == "breaker_open"
        g = apply(g, change.changes)
        cooldowns.append((g.probe_after - NOW).total_seconds())  # type: ignore[operator]
    assert cooldowns == [60, 120, 240, 480, 960, 1920, 3600, 3600]
    assert g.is_open and g.breaker_reason == "create_outcome_unknown" and g.open_count == 8
    blocked = breaker.admit(g, later(3599), "w/j", P, 60)
    assert not blocked.allowed and "breaker open" in blocked.why
    probe = breaker.admit(g, later(3600), "w/j", P, 60)
    assert probe.allowed and probe.probe
    closed = breaker.on_outcome(apply(g, probe.changes), later(3601), "w/j", Accepted("resp_1", "queued"), P,
                                probe=True)
    assert closed is not None and closed.event == "breaker_close"
    g = apply(g, closed.changes)
    assert not g.is_open and g.open_count == 0 and g.probe_owner is None and g.last_ok_at == later(3601)


def test_quota_and_auth_open_the_breaker_for_an_operator() -> None:
    refusal = Refused(None, "HTTP 429", "insufficient_quota", kind=RefusalKind.QUOTA)
    quota = breaker.on_outcome(HEALTHY, NOW, "w/j", refusal, P, probe=False)
    assert quota is not None and quota.changes["breaker_reason"] == "quota_exhausted"
    assert quota.changes["probe_after"] == later(900)
    auth = breaker.on_outcome(HEALTHY, NOW, "w/j", Rejected(401, "bad key"), P, probe=False)
    assert auth is not None and auth.changes["breaker_reason"] == "provider_auth"
    assert {breaker.BreakerReason.QUOTA_EXHAUSTED, breaker.BreakerReason.PROVIDER_AUTH} == breaker.CRITICAL_REASONS
    assert breaker.on_outcome(HEALTHY, NOW, "w/j", Rejected(400, "bad model"), P, probe=False) is None


def test_a_rate_limit_is_a_shared_cool_down_not_a_breaker() -> None:
    refusal = Refused(7.0, "HTTP 429", "rate_limit_exceeded", kind=RefusalKind.RATE)
    change = breaker.on_outcome(HEALTHY, NOW, "w/j", refusal, P, probe=False)
    assert change is not None and change.changes == {"cooldown_until": later(7)} and change.event is None
    g = apply(HEALTHY, change.changes)
    assert not breaker.admit(g, later(6), "w/j2", P, 60).allowed
    assert breaker.admit(g, later(7), "w/j2", P, 60).allowed
    assert breaker.cool_down(g, NOW, 3) is None  # a shorter one changes nothing
    assert breaker.cool_down(g, NOW, 30) == {"cooldown_until": later(30)}


def test_pause_stops_every_create() -> None:
    g = replace(HEALTHY, paused=True, paused_by="alice", paused_reason="incident")
    v = breaker.admit(g, NOW, "w/j", P, 60)
    assert not v.allowed and "paused by alice" in v.why


def test_the_global_create_rate_is_counted_per_minute() -> None:
    p = replace(P, max_creates_per_minute=2)
    g = HEALTHY
    verdicts = []
    for i in range(3):
        v = breaker.admit(g, later(i), f"w/j{i}", p, 60)
        verdicts.append(v.allowed)
        g = apply(g, v.changes) if v.allowed else g
    assert verdicts == [True, True, False]
    assert breaker.admit(g, later(61), "w/j9", p, 60).allowed  # a new window
