"""Every per-state decision and operator remedy, table-driven, without a database or a network.

Each case is (job, observation) -> (next state, journal reason, what changes); every decision
must also be an allowed edge of the state table, taken with a reason of the right kind."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
import subprocess
import sys
from dataclasses import replace
from typing import Any

import pytest

from iipub.core.errors import OperatorRefused, UsageError
from iipub.edition import parts, validate
from iipub.machine import decisions, steps, track_decisions
from iipub.machine.decisions import Decision
from iipub.model import states
from iipub.model.jobs import Job, slot_row
from iipub.model.states import Reason, State
from iipub.operate import remedies
from iipub.provider.openai import codes
from iipub.provider.outcomes import (
    Accepted,
    Ambiguous,
    Deleted,
    Missing,
    Observed,
    RefusalKind,
    Refused,
    Rejected,
    Transient,
    Usage,
)
from iipub.settings.config import Budgets, Product, ProviderSettings, ReconcileSettings

T0 = dt.datetime(2026, 12, 1, 5, 0)
PRODUCT = Product(name="daily-brief", prompt="Write the brief.", items=1, languages=("en",))
FP = PRODUCT.fingerprint()
S = ReconcileSettings(poll_interval_seconds=30, backoff_base_seconds=2, backoff_cap_seconds=600)
BUDGETS = Budgets(max_generation_attempts=3, max_poll_attempts=30)
LOSS = ProviderSettings(loss_confirm_reads=3, loss_confirm_seconds=60)


def job(state: State = State.CREATE_ELIGIBLE, **kw: Any) -> Job:
    base = slot_row(job_id="00000000-0000-4000-8000-000000000001", product="daily-brief",
                    day=dt.date(2026, 12, 1), priority=10, opens_at=T0, now=T0)
    base.update(state=state, version=5, lease_owner="w", config_fingerprint=FP)
    base.update(kw)
    return Job(**base)


def observed(status: str, text: str | None = None, usage: Usage | None = None, **kw: Any) -> Observed:
    """A response as the OpenAI adapter reports one the Responses API gave with `status`."""
    return codes.observed("resp_1", status, text, usage, **kw)


def assert_allowed(j: Job, d: Decision, *, operator: bool = False) -> None:
    assert states.allowed(j.state, d.to, operator=operator), f"{j.state} -> {d.to} is not an edge"
    assert d.reason.operator == operator, f"{d.reason} from {'an operator' if operator else 'the machine'}"
    if d.to == State.QUARANTINED:
        assert d.changes["quarantine_reason"] in states.QUARANTINE_REASONS


RNG = random.Random(7)
IN_FLIGHT = job(State.CREATE_IN_FLIGHT, generation_attempts=2, retry_count=1)
# Its own create's response: the scope it was created under is recorded (`after_create`).
POLLING = job(State.IN_PROGRESS, generation_attempts=1, response_id="resp_1", poll_count=4, retry_count=2,
              create_scope="org=- project=- key=0000000000000000")
GOOD = json.dumps({"en": {"title": "Daily Brief", "summary": "Today.", "items": [{"headline": "H", "summary": "S",
                                     "sources": [{"title": "R", "url": "https://reuters.com/a"}]}]}})

# (name, job, decide, expected state, expected reason, expected subset of changes)
CASES: list[tuple[str, Job, Any, State, Reason, dict[str, Any]]] = [
    ("window opens", job(State.NO_JOB, config_fingerprint=None), lambda j: decisions.on_window_open(j, FP),
     State.CREATE_ELIGIBLE, Reason.WINDOW_OPEN, {"config_fingerprint": FP}),
    ("dispatch charges the money budget", job(generation_attempts=1),
     lambda j: decisions.before_dispatch(j, FP, BUDGETS), State.CREATE_IN_FLIGHT, Reason.DISPATCH,
     {"generation_attempts": 2, "response_id": None, "poll_count": 0}),
    ("generation budget spent", job(generation_attempts=3), lambda j: decisions.before_dispatch(j, FP, BUDGETS),
     State.QUARANTINED, Reason.GENERATION_BUDGET_EXHAUSTED, {"quarantine_reason": "generation_budget_exhausted"}),
    ("accepted", IN_FLIGHT, lambda j: decisions.after_create(j, Accepted("resp_9", "queued"), S, RNG),
     State.ACCEPTED, Reason.ACCEPTED, {"response_id": "resp_9", "poll_count": 0, "retry_count": 0}),
    ("refused create is refunded", IN_FLIGHT,
     lambda j: decisions.after_create(j, Refused(7.0, "HTTP 429", kind=RefusalKind.RATE), S, RNG),
     State.CREATE_ELIGIBLE, Reason.CREATE_REFUSED, {"generation_attempts": 1, "retry_count": 2}),
    ("ambiguous create is quarantined", IN_FLIGHT, lambda j: decisions.after_create(j, Ambiguous("reset"), S, RNG),
     State.QUARANTINED, Reason.CREATE_OUTCOME_UNKNOWN, {"quarantine_reason": "create_outcome_unknown"}),
    ("rejected create is quarantined", IN_FLIGHT,
     lambda j: decisions.after_create(j, Rejected(400, "bad"), S, RNG),
     State.QUARANTINED, Reason.CREATE_REJECTED, {"quarantine_reason": "create_rejected"}),
    ("crash mid-create", IN_FLIGHT, decisions.crashed_in_flight,
     State.QUARANTINED, Reason.CRASHED_DURING_CREATE, {"quarantine_reason": "crashed_during_create"}),
    ("drift after custody", job(State.RETRIEVED_NOT_VALIDATED, payload="{}", config_fingerprint="0" * 64),
     lambda j: decisions.config_check(j, PRODUCT), State.QUARANTINED, Reason.CONFIG_DRIFT,
     {"quarantine_reason": "config_drift"}),
    ("drift before the save", job(State.COMPOSED_NOT_SAVED, config_fingerprint="0" * 64),
     lambda j: decisions.config_check(j, PRODUCT), State.QUARANTINED, Reason.CONFIG_DRIFT,
     {"quarantine_reason": "config_drift"}),
    ("a removed product spends nothing", job(State.CREATE_ELIGIBLE),
     lambda j: decisions.config_check(j, None), State.QUARANTINED, Reason.PRODUCT_REMOVED,
     {"quarantine_reason": "product_removed"}),
    ("a removed product keeps its output", job(State.READY_TO_COMPOSE, payload="{}"),
     lambda j: decisions.config_check(j, None), State.QUARANTINED, Reason.PRODUCT_REMOVED,
     {"quarantine_reason": "product_removed"}),
    ("a step failing five times in a row", job(State.READY_TO_COMPOSE, retry_count=4),
     lambda j: decisions.step_failed(j, "KeyError: x", 5)[0], State.QUARANTINED, Reason.STEP_FAILING,
     {"quarantine_reason": "step_failing"}),
    ("poll budget spent keeps the response id", replace(POLLING, poll_count=30),
     lambda j: decisions.before_poll(j, BUDGETS), State.QUARANTINED, Reason.POLL_BUDGET_EXHAUSTED,
     {"quarantine_reason": "poll_budget_exhausted"}),
    ("queued", replace(POLLING, state=State.ACCEPTED), lambda j: decisions.after_poll(j, observed("queued"), S, RNG),
     State.QUEUED, Reason.POLL, {"poll_count": 5, "retry_count": 0}),
    ("finished", POLLING, lambda j: decisions.after_poll(j, observed("completed", "x"), S, RNG),
     State.COMPLETED_NOT_RETRIEVED, Reason.PROVIDER_FINISHED, {"poll_count": 5}),
    ("incomplete is finished too", POLLING, lambda j: decisions.after_poll(j, observed("incomplete", "x"), S, RNG),
     State.COMPLETED_NOT_RETRIEVED, Reason.PROVIDER_FINISHED, {"poll_count": 5}),
    ("failed is only suspected at first", POLLING,
     lambda j: decisions.after_poll(j, observed("failed", error="boom", error_code="server_error"), S, RNG),
     State.IN_PROGRESS, Reason.LOSS_SUSPECTED, {"poll_count": 5}),
    ("unrequested cancelled is only suspected", POLLING,
     lambda j: decisions.after_poll(j, observed("cancelled"), S, RNG),
     State.IN_PROGRESS, Reason.LOSS_SUSPECTED, {"poll_count": 5}),
    ("404 is only suspected", POLLING, lambda j: decisions.after_poll(j, Missing("HTTP 404"), S, RNG),
     State.IN_PROGRESS, Reason.LOSS_SUSPECTED, {"poll_count": 5}),
    ("404 held over the window is a loss", POLLING,
     lambda j: decisions.after_poll(j, Missing("HTTP 404"), S, RNG, loss=LOSS, suspected_reads=2),
     State.PROVIDER_EXPIRED_OR_MISSING, Reason.LOSS_CONFIRMED, {"poll_count": 5}),
    ("confirmed provider fault may be paid again", POLLING,
     lambda j: decisions.after_poll(j, observed("failed", error_code="server_error"), S, RNG, loss=LOSS,
                                   suspected_reads=2),
     State.PROVIDER_EXPIRED_OR_MISSING, Reason.LOSS_CONFIRMED, {}),
    ("confirmed refusal is quarantined", POLLING,
     lambda j: decisions.after_poll(j, observed("failed", error_code="invalid_prompt"), S, RNG, loss=LOSS,
                                   suspected_reads=2),
     State.QUARANTINED, Reason.PROVIDER_REFUSED, {"quarantine_reason": "provider_refused"}),
    ("an unknown error code is the safer of the two", POLLING,
     lambda j: decisions.after_poll(j, observed("failed", error_code="mystery_error"), S, RNG, loss=LOSS,
                                   suspected_reads=2),
     State.QUARANTINED, Reason.PROVIDER_REFUSED, {"quarantine_reason": "provider_refused"}),
    ("an unknown status is observed again", POLLING, lambda j: decisions.after_poll(j, observed("paused"), S, RNG),
     State.IN_PROGRESS, Reason.PROVIDER_UNEXPECTED_STATUS, {"poll_count": 5, "retry_count": 0}),
    ("transient poll counts the poll only", POLLING,
     lambda j: decisions.after_poll(j, Transient(None, "HTTP 503"), S, RNG),
     State.IN_PROGRESS, Reason.POLL_FAILED, {"poll_count": 5, "retry_count": 3}),
    ("lost response with budget left", job(State.PROVIDER_EXPIRED_OR_MISSING, generation_attempts=1,
                                           response_id="resp_1"),
     lambda j: decisions.after_expired(j, BUDGETS), State.CREATE_ELIGIBLE, Reason.RECREATE_AFTER_LOSS,
     {"response_id": None, "poll_count": 0}),
    ("lost response, budget spent", job(State.PROVIDER_EXPIRED_OR_MISSING, generation_attempts=3,
                                        response_id="resp_1"),
     lambda j: decisions.after_expired(j, BUDGETS), State.QUARANTINED, Reason.GENERATION_BUDGET_EXHAUSTED, {}),
    ("refetch finds the output", job(State.COMPLETED_NOT_RETRIEVED, response_id="resp_1"),
     lambda j: decisions.after_refetch(j, observed("completed", "out"), S, 100, RNG),
     State.RETRIEVED_NOT_VALIDATED, Reason.RETRIEVED, {"payload": "out"}),
    ("a finished response never goes back to polling", job(State.COMPLETED_NOT_RETRIEVED, response_id="resp_1"),
     lambda j: decisions.after_refetch(j, observed("in_progress"), S, 100, RNG),
     State.COMPLETED_NOT_RETRIEVED, Reason.POLL, {}),
    ("validated", job(State.RETRIEVED_NOT_VALIDATED, payload=GOOD),
     lambda j: decisions.on_validation(j, validate.validate(j.payload, PRODUCT)),
     State.READY_TO_COMPOSE, Reason.VALIDATED, {}),
    ("validation failure keeps the payload", job(State.RETRIEVED_NOT_VALIDATED, payload="{}"),
     lambda j: decisions.on_validation(j, validate.validate(j.payload, PRODUCT)),
     State.VALIDATION_FAILED_RETAINED, Reason.VALIDATION_FAILED, {}),
    ("save conflict", job(State.COMPOSED_NOT_SAVED), lambda j: decisions.on_save_conflict("duplicate"),
     State.QUARANTINED, Reason.EDITION_CONFLICT, {"quarantine_reason": "edition_conflict"}),
    ("delivered", job(State.SAVED_NOT_PUBLIC), lambda j: decisions.on_delivered(),
     State.PUBLISHED, Reason.ALL_EVENTS_DELIVERED, {}),
    ("published", job(State.PUBLISHED), decisions.on_published, State.CLEANUP_PENDING, Reason.CLEANUP_START, {}),
    ("nothing remote", job(State.CLEANUP_PENDING), decisions.before_cleanup, State.DELETED, Reason.NOTHING_REMOTE, {}),
    ("deleted", job(State.CLEANUP_PENDING, response_id="resp_1"),
     lambda j: decisions.after_delete(j, Deleted("resp_1"), S, RNG), State.DELETED, Reason.REMOTE_DELETED, {}),
    ("404 on delete counts as deleted", job(State.CLEANUP_PENDING, response_id="resp_1"),
     lambda j: decisions.after_delete(j, Missing("gone"), S, RNG), State.DELETED, Reason.REMOTE_DELETED, {}),
    ("delete retries forever", job(State.CLEANUP_PENDING, response_id="resp_1"),
     lambda j: decisions.after_delete(j, Transient(3.0, "reset"), S, RNG),
     State.CLEANUP_PENDING, Reason.CLEANUP_RETRY, {"retry_count": 1}),
]


@pytest.mark.parametrize(("name", "before", "decide", "to", "reason", "changes"), CASES, ids=[c[0] for c in CASES])
def test_decision(name: str, before: Job, decide: Any, to: State, reason: Reason, changes: dict[str, Any]) -> None:
    d = decide(before)
    assert (d.to, d.reason) == (to, reason)
    assert {k: d.changes.get(k) for k in changes} == changes
    assert_allowed(before, d)


def test_suspected_losses_are_read_again_spread_over_the_window() -> None:
    first = decisions.after_poll(POLLING, Missing("HTTP 404"), S, RNG, loss=LOSS, suspected_reads=0)
    second = decisions.after_poll(POLLING, Missing("HTTP 404"), S, RNG, loss=LOSS, suspected_reads=1)
    assert first.reason == second.reason == Reason.LOSS_SUSPECTED
    assert first.delay == second.delay == 30.0  # 3 reads over 60 s
    assert (first.detail["read"], second.detail["read"], second.detail["of"]) == (1, 2, 3)
    assert first.detail["response_id"] == "resp_1"
    once = ProviderSettings(loss_confirm_reads=1)
    assert decisions.after_poll(POLLING, Missing("x"), S, RNG, loss=once).reason == Reason.LOSS_CONFIRMED


def test_poll_of_a_job_without_drift_or_spent_budget_goes_ahead() -> None:
    assert decisions.before_poll(POLLING, BUDGETS) is None
    # Drift never stops a poll (custody first): the poll does not even look at the config.
    assert decisions.before_poll(replace(POLLING, config_fingerprint="0" * 64), BUDGETS) is None
    assert decisions.config_check(job(State.RETRIEVED_NOT_VALIDATED), PRODUCT) is None
    assert decisions.config_check(job(State.CREATE_ELIGIBLE, config_fingerprint="0" * 64), PRODUCT) is None
    first, count = decisions.step_failed(job(State.READY_TO_COMPOSE), "boom", 5)
    assert first is None and count == 1
    published, _ = decisions.step_failed(job(State.CLEANUP_PENDING, retry_count=9), "boom", 5)
    assert published is None  # a published edition is never parked
    assert decisions.before_cleanup(job(State.CLEANUP_PENDING, response_id="resp_1")) is None


def test_backoff_hints_come_first_and_are_capped() -> None:
    hinted = decisions.after_poll(POLLING, Transient(12.5, "HTTP 429"), S, RNG)
    assert hinted.delay == 12.5 and hinted.cooldown == 12.5
    capped = decisions.after_poll(POLLING, Transient(10_000.0, "HTTP 429"), S, RNG)
    assert capped.delay == S.backoff_cap_seconds
    unhinted = decisions.after_poll(POLLING, Transient(None, "HTTP 503"), S, random.Random(1))
    assert unhinted.delay is not None and 0.8 * 8 <= unhinted.delay <= 1.2 * 8  # retry 3: 2 * 2**2
    assert unhinted.cooldown is None
    unsent = Refused(None, "connection refused", kind=RefusalKind.UNSENT)
    refused = decisions.after_create(IN_FLIGHT, unsent, S, random.Random(1))
    assert refused.cooldown is None and refused.delay is not None and 0.8 * 4 <= refused.delay <= 1.2 * 4


def test_the_generation_budget_is_charged_only_at_dispatch() -> None:
    for name, before, decide, _, _, _ in CASES:
        d = decide(before)
        if d.reason == Reason.DISPATCH:
            assert d.changes["generation_attempts"] == before.generation_attempts + 1, name
        elif d.reason == Reason.CREATE_REFUSED:
            assert d.changes["generation_attempts"] == before.generation_attempts - 1, name
        else:
            assert "generation_attempts" not in d.changes, name


def test_custody_escapes_unencodable_text_and_truncates_oversize_output() -> None:
    j = job(State.COMPLETED_NOT_RETRIEVED, response_id="resp_1", total_tokens=10, input_tokens=4, output_tokens=6)
    lone = "ok \ud800 end"
    d = decisions.on_output(j, observed("completed", lone, Usage(1, 2, 3)), max_bytes=1000)
    assert d.changes["payload"] == "ok \\ud800 end" and d.detail["escaped_unencodable"] is True
    assert d.changes["payload_sha256"] == hashlib.sha256(d.changes["payload"].encode()).hexdigest()
    assert (d.changes["input_tokens"], d.changes["output_tokens"], d.changes["total_tokens"]) == (5, 8, 13)
    big = decisions.on_output(j, observed("completed", "é" * 100), max_bytes=51)
    stored = big.changes["payload"].encode()
    assert len(stored) <= 52 and big.detail["stored_truncated_to"] == 52 and big.detail["bytes"] == 200
    assert_allowed(j, big)


def test_a_track_validates_composes_and_saves_its_language_in_one_plan() -> None:
    j = job(State.READY_TO_COMPOSE, payload=GOOD)
    (part,) = parts.parts_of(validate.shared(GOOD, PRODUCT))
    plan = track_decisions.step(j, "en", State.RETRIEVED_NOT_VALIDATED, part.text, None, PRODUCT, shadow=False)
    assert [(h.to, h.reason) for h in plan.hops] == [
        (State.READY_TO_COMPOSE, Reason.VALIDATED), (State.COMPOSED_NOT_SAVED, Reason.COMPOSED),
        (State.SAVED_NOT_PUBLIC, Reason.SAVED)]
    assert plan.save is not None and plan.changes["composed_sha256"] == plan.save.sha256
    at = State.RETRIEVED_NOT_VALIDATED
    for hop in plan.hops:
        assert states.track_allowed(at, hop.to)
        at = hop.to
    shadowed = track_decisions.step(j, "en", State.RETRIEVED_NOT_VALIDATED, part.text, None, PRODUCT, shadow=True)
    assert shadowed.save is None and shadowed.hops[-1].reason == Reason.SHADOW_WOULD_PUBLISH
    # The paid generation of a correction: the same checks and artifact, saved as the edition's revision.
    fixing = track_decisions.step(j, "en", State.RETRIEVED_NOT_VALIDATED, part.text, None, PRODUCT, shadow=False,
                                  correcting=True)
    assert fixing.save == plan.save and [h.to for h in fixing.hops] == [h.to for h in plan.hops]
    assert fixing.hops[-1].reason == Reason.CORRECTION_SAVED and not Reason.CORRECTION_SAVED.operator
    # ... into which a published track forked again (the fork's edge), never by itself otherwise.
    assert states.track_allowed(State.PUBLISHED, State.RETRIEVED_NOT_VALIDATED)
    assert not states.track_allowed(State.PUBLISHED, State.READY_TO_COMPOSE)


def test_a_track_whose_part_fails_parks_alone_with_its_reasons() -> None:
    bad = json.dumps({"en": {"title": "t", "summary": "s", "items": []}})
    plan = track_decisions.step(job(State.READY_TO_COMPOSE, payload=GOOD), "en", State.RETRIEVED_NOT_VALIDATED, bad,
                               None, PRODUCT, shadow=False)
    assert [h.to for h in plan.hops] == [State.VALIDATION_FAILED_RETAINED] and plan.save is None
    assert plan.changes["last_error"].startswith("schema: en.items")


def test_the_slot_follows_its_slowest_track() -> None:
    rtc = job(State.READY_TO_COMPOSE)
    assert track_decisions.slot_follows(rtc, {"en": (State.SAVED_NOT_PUBLIC, "{}"),
                                             "es": (State.RETRIEVED_NOT_VALIDATED, None)}) is None
    d = track_decisions.slot_follows(rtc, {"en": (State.PUBLISHED, "{}"), "es": (State.COMPOSED_NOT_SAVED, "{}")})
    assert d is not None and (d.to, d.reason) == (State.COMPOSED_NOT_SAVED, Reason.COMPOSED)
    d = track_decisions.slot_follows(rtc, {"en": (State.PUBLISHED, "{}"), "es": (State.SAVED_NOT_PUBLIC, "{}")})
    assert d is not None and d.to == State.SAVED_NOT_PUBLIC and d.detail["editions"] == ["en", "es"]
    assert track_decisions.slot_parks({"en": (State.SAVED_NOT_PUBLIC, None, None),
                                      "es": (State.VALIDATION_FAILED_RETAINED, None, "bad_url: x")}) is None
    d = track_decisions.slot_parks({"en": (State.VALIDATION_FAILED_RETAINED, None, "bad_url: a"),
                                   "es": (State.VALIDATION_FAILED_RETAINED, None, "bad_url: b")})
    assert d is not None and d.to == State.VALIDATION_FAILED_RETAINED and d.detail["reasons"] == ["bad_url: a",
                                                                                                  "bad_url: b"]
    d = track_decisions.slot_parks({"en": (State.QUARANTINED, "config_drift", "drift"),
                                   "es": (State.VALIDATION_FAILED_RETAINED, None, "bad_url: b")})
    assert d is not None and d.changes["quarantine_reason"] == "config_drift"


def test_a_killed_job_without_custody_is_cancelled_before_its_delete() -> None:
    assert decisions.cancel_before_delete(job(State.CLEANUP_PENDING, response_id="r", kill_requested=True))
    assert not decisions.cancel_before_delete(job(State.CLEANUP_PENDING, response_id="r", kill_requested=True,
                                                 payload="kept"))


# -- operator remedies --------------------------------------------------------------------------


QUARANTINED = job(State.QUARANTINED, response_id="resp_1", generation_attempts=1, quarantine_reason="x",
                  poll_count=9)
SAVED = job(State.SAVED_NOT_PUBLIC, payload=GOOD)
REMEDY_CASES: list[tuple[str, Job, Any, State, Reason]] = [
    ("verified lost", QUARANTINED, lambda j: remedies.release_verified_lost(j, 3, "al", "why"),
     State.CREATE_ELIGIBLE, Reason.OPERATOR_RELEASE_VERIFIED_LOST),
    ("resume polling", QUARANTINED, lambda j: remedies.release_resume_polling(j, FP, "al", "why"),
     State.ACCEPTED, Reason.OPERATOR_RESUME_POLLING),
    ("link a finished response", QUARANTINED,
     lambda j: remedies.link(j, observed("completed", "x", metadata={"iipub_job_id": j.id}), "al", "why"),
     State.COMPLETED_NOT_RETRIEVED, Reason.OPERATOR_LINK),
    ("link a live response", QUARANTINED,
     lambda j: remedies.link(j, observed("queued", metadata={"iipub_job_id": j.id}), "al", "why"),
     State.QUEUED, Reason.OPERATOR_LINK),
    ("suspend", SAVED, lambda j: remedies.suspend(j, "al", "why"), State.MANUALLY_SUSPENDED, Reason.OPERATOR_SUSPEND),
    ("resume", job(State.MANUALLY_SUSPENDED, suspended_from="SAVED_NOT_PUBLIC"),
     lambda j: remedies.resume(j, "al", None), State.SAVED_NOT_PUBLIC, Reason.OPERATOR_RESUME),
    ("kill", POLLING, lambda j: remedies.kill(j, "al", "why"), State.CLEANUP_PENDING, Reason.OPERATOR_KILL),
    ("cancel lost the race", POLLING, lambda j: remedies.after_cancel(j, observed("completed", "x"), "al", "why"),
     State.COMPLETED_NOT_RETRIEVED, Reason.OPERATOR_CANCEL),
    ("cancelled", POLLING, lambda j: remedies.after_cancel(j, observed("cancelled"), "al", "why"),
     State.QUARANTINED, Reason.OPERATOR_CANCEL),
    ("revalidate", job(State.VALIDATION_FAILED_RETAINED, payload="{}"),
     lambda j: remedies.revalidate(j, "al", "why"), State.RETRIEVED_NOT_VALIDATED, Reason.OPERATOR_REVALIDATE),
    ("regenerate", job(State.VALIDATION_FAILED_RETAINED, payload="{}", generation_attempts=1),
     lambda j: remedies.regenerate(j, 3, "al", "why"), State.CREATE_ELIGIBLE, Reason.OPERATOR_REGENERATE),
    ("harvest", job(State.COMPLETED_NOT_RETRIEVED, response_id="resp_1"),
     lambda j: remedies.harvest(j, observed("completed", "x"), 100, "al", "why"),
     State.RETRIEVED_NOT_VALIDATED, Reason.OPERATOR_HARVEST),
]


@pytest.mark.parametrize(("name", "before", "decide", "to", "reason"), REMEDY_CASES, ids=[c[0] for c in REMEDY_CASES])
def test_remedy(name: str, before: Job, decide: Any, to: State, reason: Reason) -> None:
    d = decide(before)
    assert (d.to, d.reason) == (to, reason)
    assert_allowed(before, d, operator=True)
    assert d.detail.get("by") == "al"


REFUSALS: list[tuple[str, Job, Any, str]] = [
    ("verified lost past the budget", replace(QUARANTINED, generation_attempts=3),
     lambda j: remedies.release_verified_lost(j, 3, "al", "why"), "paid creates are used"),
    ("resume polling without a response", replace(QUARANTINED, response_id=None),
     lambda j: remedies.release_resume_polling(j, FP, "al", "why"), "no response id"),
    ("resume polling under another config", QUARANTINED,
     lambda j: remedies.release_resume_polling(j, "0" * 64, "al", "why"), "differs"),
    ("release of a job that is not quarantined", POLLING,
     lambda j: remedies.release_verified_lost(j, 3, "al", "why"), "not QUARANTINED"),
    ("link of a response naming another job", QUARANTINED,
     lambda j: remedies.adoptable(j, "resp_1", observed("completed", metadata={"iipub_job_id": "other"})),
     "names job other"),
    ("link of a dead response", QUARANTINED,
     lambda j: remedies.adoptable(j, "resp_1", observed("failed", metadata={"iipub_job_id": j.id})), "no output"),
    ("suspend mid-create", IN_FLIGHT, lambda j: remedies.suspend(j, "al", "why"), "CREATE_IN_FLIGHT"),
    ("kill of a saved edition", SAVED, lambda j: remedies.kill(j, "al", "why"), "already saved"),
    ("kill of a suspended saved edition", job(State.MANUALLY_SUSPENDED, suspended_from="SAVED_NOT_PUBLIC"),
     lambda j: remedies.kill(j, "al", "why"), "already saved"),
    ("cancel of a suspended poll", job(State.MANUALLY_SUSPENDED, suspended_from="IN_PROGRESS"),
     remedies.check_cancel, "only a job waiting on the provider"),
    ("regenerate past the budget", job(State.VALIDATION_FAILED_RETAINED, generation_attempts=3),
     lambda j: remedies.regenerate(j, 3, "al", "why"), "paid creates are used"),
]


@pytest.mark.parametrize(("name", "before", "decide", "needle"), REFUSALS, ids=[c[0] for c in REFUSALS])
def test_remedy_refusal(name: str, before: Job, decide: Any, needle: str) -> None:
    with pytest.raises(OperatorRefused, match=needle):
        decide(before)


@pytest.mark.parametrize(("by", "reason"), [("", "why"), ("al", ""), ("al", "x" * 70_000), ("a" * 500, "why")])
def test_operator_input_is_bounded(by: str, reason: str) -> None:
    with pytest.raises(UsageError):
        remedies.check_input(by, reason)


# -- the step table ----------------------------------------------------------------------------


def test_reconcile_steps_cover_exactly_the_active_states() -> None:
    assert set(steps.STEPS) == set(states.ACTIVE)


def test_every_reason_is_declared_with_a_meaning() -> None:
    assert set(states.REASON_INFO) == set(Reason)
    assert all(r.meaning for r in Reason)
    assert set(Reason) >= states.QUARANTINE_REASONS


def test_the_pure_core_imports_no_database_and_no_http() -> None:
    code = ("import iipub.machine.decisions, iipub.operate.remedies, iipub.model.jobs, iipub.provider.outcomes, "
            "iipub.model.states, sys; "
            "assert 'sqlalchemy' not in sys.modules and 'httpx' not in sys.modules, "
            "sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'httpx'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_a_response_reported_queued_again_does_not_move_the_job_back() -> None:
    d = decisions.after_poll(POLLING, observed("queued"), S, RNG)
    assert (d.to, d.reason) == (State.IN_PROGRESS, Reason.POLL)
    assert_allowed(POLLING, d)


# -- speaking the real API (PRODUCT.md section 18) ----------------------------------------------------

SCOPE_A = "org=- project=proj_a key=0123456789abcdef"
SCOPE_B = "org=- project=proj_b key=fedcba9876543210"


def test_a_refused_parameter_refunds_and_holds_without_cooling_anything_down() -> None:
    d = decisions.after_create(IN_FLIGHT, Refused(None, "HTTP 400: Unsupported value", "unsupported_value",
                                                 kind=RefusalKind.PARAMETER, param="temperature"), S, RNG)
    assert d.to == State.CREATE_ELIGIBLE and d.reason == Reason.CREATE_PARAM_REFUSED
    assert d.changes["generation_attempts"] == IN_FLIGHT.generation_attempts - 1
    assert d.cooldown is None and d.delay == decisions.HELD_RECHECK_SECONDS
    assert d.detail["param"] == "temperature" and d.detail["product_held"] == IN_FLIGHT.product
    assert_allowed(IN_FLIGHT, d)


def test_an_accepted_create_records_its_scope() -> None:
    d = decisions.after_create(IN_FLIGHT, Accepted("resp_9", "queued"), S, RNG, scope=SCOPE_A)
    assert d.changes["create_scope"] == SCOPE_A


def test_a_404_under_another_scope_is_not_evidence_of_loss() -> None:
    polling = replace(POLLING, create_scope=SCOPE_A)
    d = decisions.after_poll(polling, Missing("HTTP 404: not found"), S, RNG, loss=LOSS, suspected_reads=5,
                            scope=SCOPE_B, in_scope=False)
    assert d.to == polling.state and d.reason == Reason.SCOPE_MISMATCH
    assert "poll_count" not in d.changes  # the poll budget is not spent waiting for credentials
    assert d.detail["created_under"] == SCOPE_A and d.detail["read_under"] == SCOPE_B
    # The same project under another key is the same scope: a 404 there is evidence, as before.
    same_project = "org=- project=proj_a key=ffffffffffffffff"
    d = decisions.after_poll(polling, Missing("HTTP 404"), S, RNG, loss=LOSS, suspected_reads=2, scope=same_project,
                             in_scope=codes.same_scope(SCOPE_A, same_project))
    assert d.reason == Reason.LOSS_CONFIRMED
    # No project named: the key is the scope.
    keyed = replace(POLLING, create_scope="org=- project=- key=0123456789abcdef")
    d = decisions.after_poll(keyed, Missing("HTTP 404"), S, RNG, loss=LOSS,
                             scope="org=- project=- key=ffffffffffffffff",
                             in_scope=codes.same_scope(keyed.create_scope or "",
                                                       "org=- project=- key=ffffffffffffffff"))
    assert d.reason == Reason.SCOPE_MISMATCH
    # A response whose scope is not known (taken over, or from before scopes were recorded):
    # suspected as usual, but never a loss: it parks with the facts.
    unknown = replace(POLLING, create_scope=None)
    d = decisions.after_poll(unknown, Missing("HTTP 404"), S, RNG, loss=LOSS, suspected_reads=1, scope=SCOPE_B)
    assert d.reason == Reason.LOSS_SUSPECTED
    d = decisions.after_poll(unknown, Missing("HTTP 404"), S, RNG, loss=LOSS, suspected_reads=2, scope=SCOPE_B)
    assert d.to == State.QUARANTINED and d.changes["quarantine_reason"] == Reason.SCOPE_UNKNOWN.value
    assert d.detail["read_under"] == SCOPE_B and d.detail["response_id"] == "resp_1" and d.detail["read"] == 3
    assert "not taken as a loss" in d.changes["last_error"] and "--verified-lost" in d.changes["last_error"]
    assert_allowed(unknown, d)


def test_a_taken_over_response_records_its_scope_at_its_first_successful_read() -> None:
    unknown = replace(POLLING, create_scope=None)
    for seen in (observed("in_progress"), observed("completed", GOOD), observed("failed", error_code="server_error")):
        d = decisions.after_poll(unknown, seen, S, RNG, loss=LOSS, scope=SCOPE_A)
        assert d.changes["create_scope"] == SCOPE_A, seen.status
    # a recorded scope is never replaced by a read
    assert "create_scope" not in decisions.after_poll(POLLING, observed("in_progress"), S, RNG, scope=SCOPE_A).changes


@pytest.mark.parametrize(("seen", "end", "parked"), [
    (observed("incomplete", '{"en": {"title": "T', incomplete_reason="max_output_tokens"), "max_output_tokens",
     Reason.OUTPUT_CAP_REACHED),
    (observed("completed", refusal="I can't help with that."), "refusal", Reason.PROVIDER_REFUSED),
    (observed("incomplete", '{"en"', incomplete_reason="content_filter"), "content_filter", Reason.CONTENT_FILTERED),
    (observed("completed", GOOD), None, None),
])
def test_custody_first_then_a_cut_or_refused_answer_parks(seen: Observed, end: str | None,
                                                          parked: Reason | None) -> None:
    retrieved = job(State.COMPLETED_NOT_RETRIEVED, generation_attempts=1, response_id="resp_1")
    d = decisions.on_output(retrieved, seen)
    assert d.to == State.RETRIEVED_NOT_VALIDATED and d.reason == Reason.RETRIEVED  # custody, whatever it holds
    assert d.changes["output_end"] == end and d.changes["payload"] == (seen.output_text or seen.refusal)
    stored = replace(retrieved, state=State.RETRIEVED_NOT_VALIDATED, **{k: v for k, v in d.changes.items()
                                                                         if k in ("payload", "output_end")})
    p = decisions.before_validation(stored, PRODUCT)
    if parked is None:
        assert p is None
        return
    assert p is not None and p.to == State.QUARANTINED and p.changes["quarantine_reason"] == parked.value
    assert_allowed(stored, p)
    if parked == Reason.CONTENT_FILTERED:
        assert "content filter stopped the response resp_1" in p.changes["last_error"]
        assert "change 'daily-brief''s prompt" in p.changes["last_error"]
    elif parked == Reason.OUTPUT_CAP_REACHED:
        assert f"max_output_tokens ({PRODUCT.output_token_cap()})" in p.changes["last_error"]
        assert "max_output_tokens for 'daily-brief'" in p.changes["last_error"]
    else:
        assert "I can't help with that." in p.changes["last_error"] and p.detail["refusal"] == seen.refusal


def test_a_link_or_an_auto_link_records_where_the_response_was_just_read() -> None:
    parked = job(State.QUARANTINED, generation_attempts=1, quarantine_reason=Reason.CREATE_OUTCOME_UNKNOWN.value,
                 create_scope=SCOPE_B, config_fingerprint="f" * 64)
    seen = observed("in_progress", metadata={"iipub_job_id": parked.id})
    assert remedies.link(parked, seen, "al", "why", scope=SCOPE_A).changes["create_scope"] == SCOPE_A
    assert remedies.link(parked, seen, "al", "why").changes["create_scope"] is None  # unknown: not the old one
    proven = observed("completed", GOOD, metadata={"iipub_job_id": parked.id, "iipub_attempt": "1",
                                                  "iipub_fingerprint": "f" * 64})
    d = decisions.auto_link(parked, proven, via="webhook", scope=SCOPE_A)
    assert d is not None and d.changes["create_scope"] == SCOPE_A
