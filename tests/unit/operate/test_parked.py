"""Parked jobs, pure: what the custody watch decides for every parked job and every provider
answer (custody, a report, nothing), and the remedies `quarantine show` lists for every reason."""

from __future__ import annotations

import pytest

from iipub.machine import decisions
from iipub.model.states import KNOWN_BAD_OUTPUT, QUARANTINE_REASONS, Reason, State
from iipub.operate import parked
from iipub.provider.openai import codes
from iipub.provider.outcomes import Missing, Observed, Rejected, Transient, Usage
from tests.unit.machine.test_decisions import job

ANSWERS: dict[str, Observed | Missing | Transient | Rejected] = {
    "completed": codes.observed("resp_1", "completed", '{"en": {}}', Usage(1, 2, 3)),
    "incomplete": codes.observed("resp_1", "incomplete", '{"en": {}}', None),
    "in_progress": codes.observed("resp_1", "in_progress", None, None),
    "queued": codes.observed("resp_1", "queued", None, None),
    "weird": codes.observed("resp_1", "paused_by_provider", None, None),
    "failed": codes.observed("resp_1", "failed", None, None),
    "cancelled": codes.observed("resp_1", "cancelled", None, None),
    "404": Missing("not found"),
    "503": Transient(None, "HTTP 503"),
    "400": Rejected(400, "bad"),
}


@pytest.mark.parametrize("reason", sorted(QUARANTINE_REASONS))
@pytest.mark.parametrize("answer", sorted(ANSWERS))
def test_a_quarantined_job_keeps_its_state_and_reason_whatever_the_answer(reason: str, answer: str) -> None:
    j = job(State.QUARANTINED, quarantine_reason=reason, response_id="resp_1", last_error="why it parked")
    d = decisions.custody_while_parked(j, ANSWERS[answer])
    if answer in ("completed", "incomplete"):
        assert d is not None and d.reason == Reason.RETRIEVED and d.to == State.QUARANTINED
        assert d.changes["payload"] and d.changes["payload_sha256"]
        assert not {"quarantine_reason", "last_error", "poll_count", "response_id"} & set(d.changes)
        assert d.detail["while_parked"] == "QUARANTINED" and d.detail["quarantine_reason"] == reason
    elif answer in ("failed", "cancelled", "404"):
        assert d is not None and d.reason == Reason.PARKED_RESPONSE_GONE and d.to == State.QUARANTINED
        assert not d.changes  # reported only: nothing confirmed, nothing paid
    else:
        assert d is None


@pytest.mark.parametrize(("suspended_from", "after"), [
    ("ACCEPTED", "RETRIEVED_NOT_VALIDATED"), ("IN_PROGRESS", "RETRIEVED_NOT_VALIDATED"),
    ("COMPLETED_NOT_RETRIEVED", "RETRIEVED_NOT_VALIDATED"), ("PROVIDER_EXPIRED_OR_MISSING", "RETRIEVED_NOT_VALIDATED"),
    ("QUARANTINED", None),
])
def test_a_suspended_job_stores_its_output_and_resumes_where_it_can_use_it(suspended_from: str,
                                                                           after: str | None) -> None:
    j = job(State.MANUALLY_SUSPENDED, suspended_from=suspended_from, response_id="resp_1")
    d = decisions.custody_while_parked(j, ANSWERS["completed"])
    assert d is not None and d.to == State.MANUALLY_SUSPENDED and d.changes["payload"]
    assert d.changes.get("suspended_from") == after


@pytest.mark.parametrize("reason", sorted(QUARANTINE_REASONS))
@pytest.mark.parametrize("holds", ["nothing", "response", "payload"])
def test_every_quarantined_job_has_remedies_and_the_kill_is_last(reason: str, holds: str) -> None:
    kw: dict[str, object] = {"quarantine_reason": reason, "generation_attempts": 1}
    if holds != "nothing":
        kw["response_id"] = "resp_1"
    if holds == "payload":
        kw.update(payload="{}", payload_sha256="ab" * 32)
    found = parked.of(job(State.QUARANTINED, **kw), 3, 60)
    assert found is not None and found.remedies and found.remedies[-1].command.startswith("iipub kill ")
    commands = " ".join(r.command for r in found.remedies)
    if holds == "payload":
        assert "safe" in found.output and "--resume-polling" not in commands and "--verified-lost" not in commands
    elif holds == "response" and (reason in KNOWN_BAD_OUTPUT or reason == "operator_cancelled"):
        # Read again, a refusal is refused again and a cancelled response is still cancelled.
        assert "watched" in found.output and "--resume-polling" not in commands and "--verified-lost" in commands
    elif holds == "response":
        assert "watched" in found.output and "--resume-polling" in commands
    else:
        assert "--verified-lost" in commands


def test_a_response_that_ran_on_after_an_operator_cancel_may_be_watched_again() -> None:
    note = f"cancelled by ops: r (provider reports in_progress; {parked.STILL_RUNNING_AFTER_CANCEL})"
    still = parked.of(job(State.QUARANTINED, quarantine_reason="operator_cancelled", response_id="resp_1",
                          generation_attempts=1, last_error=note), 3, 60)
    assert still is not None and any("--resume-polling" in r.command for r in still.remedies)


def test_kill_is_offered_only_while_no_edition_of_the_slot_is_saved() -> None:
    """`kill` refuses a slot whose edition (or a language's) is saved: it is not printed for one."""
    saved = parked.of(job(State.MANUALLY_SUSPENDED, suspended_from="SAVED_NOT_PUBLIC", response_id="resp_1"), 3, 60)
    assert saved is not None and [r.command.split()[1] for r in saved.remedies] == ["resume"]
    correcting = parked.of(job(State.QUARANTINED, quarantine_reason="create_outcome_unknown", generation_attempts=1),
                           3, 60, {"en": State.PUBLISHED, "es": State.PUBLISHED}, correcting=True)
    assert correcting is not None
    commands = [r.command for r in correcting.remedies]
    assert not [c for c in commands if c.startswith("iipub kill")]
    assert any(c.endswith("--verified-lost --pay-again --reason …") for c in commands), commands


def test_remedies_of_other_parked_states_and_of_a_job_that_is_not_parked() -> None:
    suspended = parked.of(job(State.MANUALLY_SUSPENDED, suspended_from="ACCEPTED", response_id="resp_1"), 3, 60)
    assert suspended is not None and suspended.remedies[0].command.startswith("iipub resume ")
    failed = parked.of(job(State.VALIDATION_FAILED_RETAINED, payload="{}", payload_sha256="ab" * 32,
                           generation_attempts=3), 3, 60)
    assert failed is not None and not any("regenerate" in r.command for r in failed.remedies)
    assert "all 3 paid creates are used" in failed.not_now[0]  # said, not printed as a command
    assert parked.of(job(State.ACCEPTED), 3, 60) is None


def test_a_response_naming_another_slot_is_never_stored_for_a_parked_job() -> None:
    j = job(State.QUARANTINED, quarantine_reason="restored_behind_ledger", response_id="resp_1")
    other = codes.observed("resp_1", "completed", "{}", None, metadata={"iipub_slot": "daily-brief/2026-11-30"})
    assert decisions.custody_while_parked(j, other) is None
    mine = codes.observed("resp_1", "completed", "{}", None, metadata={"iipub_slot": "daily-brief/2026-12-01"})
    d = decisions.custody_while_parked(j, mine)
    assert d is not None and d.changes["payload"] == "{}"


def test_a_slot_waiting_on_a_parked_track_lists_that_languages_remedies() -> None:
    slot = job(State.READY_TO_COMPOSE, payload="{}", payload_sha256="ab" * 32, generation_attempts=1)
    found = parked.of(slot, 3, 60, {"en": State.PUBLISHED, "es": State.VALIDATION_FAILED_RETAINED})
    assert found is not None
    commands = [r.command for r in found.remedies]
    assert commands[0] == f"iipub revalidate {slot.id} --lang es --reason …"
    assert "new paid generation for es" in found.remedies[1].effect
    assert not any(c.startswith("iipub kill") for c in commands)  # English is saved: kill is refused
    assert parked.of(slot, 3, 60, {"en": State.PUBLISHED, "es": State.COMPOSED_NOT_SAVED}) is None
