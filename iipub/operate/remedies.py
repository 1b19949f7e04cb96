"""Operator remedies, pure: given a job (and what the provider said), refuse with a reason or
return the decision to apply. No database, no network; `executor` takes the lease, calls the
provider and applies what these return through the fenced write path.

Every rule is judged on the job's effective state: a suspended job is what it was before the
suspension (`Job.effective_state`).
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from iipub.core.errors import OperatorRefused, UsageError
from iipub.machine import decisions
from iipub.machine.decisions import Decision
from iipub.model import states
from iipub.model.jobs import Job
from iipub.model.states import PAYLOAD_QUARANTINES, Reason, State
from iipub.money.spend import SlotSpend
from iipub.operate import parked
from iipub.provider.interface import SavedResponseReader
from iipub.provider.outcomes import (
    Missing,
    Observed,
    ReadOutcome,
    Rejected,
    Stage,
    Transient,
    Usage,
)

POLLING_STAGE = {Stage.WAITING: State.QUEUED, Stage.RUNNING: State.IN_PROGRESS}
_RESET = {"poll_count": 0, "quarantine_reason": None, "retry_count": 0, "last_error": None}
# Operator text is journaled and shown; bounded so it always fits (jobs.last_error, detail JSON).
MAX_REASON_CHARS = 1000
MAX_BY_CHARS = 100


class ReleaseMode(enum.StrEnum):
    VERIFIED_LOST = "verified-lost"
    LINK = "link"
    RESUME_POLLING = "resume-polling"


def who(by: str, why: str | None, **extra: Any) -> dict[str, Any]:
    """The journal detail of an operator action: who acted, why, and the facts."""
    return {"by": by, "why": why, **{k: v for k, v in extra.items() if v is not None}}


def check_input(by: str, reason: str | None) -> None:
    """Operator text is bounded and named: refused before anything is read or leased."""
    if not by or not by.strip():
        raise UsageError("--by must name who is acting")
    if len(by) > MAX_BY_CHARS:
        raise UsageError(f"--by is {len(by)} characters; at most {MAX_BY_CHARS}")
    if reason is not None:
        if not reason.strip():
            raise UsageError("--reason must say why")
        if len(reason) > MAX_REASON_CHARS:
            raise UsageError(f"--reason is {len(reason)} characters; at most {MAX_REASON_CHARS}")


# -- leaving quarantine ---------------------------------------------------------------------------


def release_verified_lost(job: Job, max_generation_attempts: int, by: str, reason: str,
                          spend: SlotSpend | None = None, live: Mapping[str, str] | None = None) -> Decision:
    """Create again. A job parked `restored_behind_ledger` is charged the spend ledger's count of
    paid creates for its slot first (`spend`), so the budget stays honest and the fence does not
    park it again; refused when that leaves no create in the budget, or when the live site still
    serves the editions the ledger recorded published (`live`): that page is paid for already."""
    _require_quarantined(job)
    attempts = job.generation_attempts
    restored = job.quarantine_reason == Reason.RESTORED_BEHIND_LEDGER
    if restored and spend is not None:
        attempts = max(attempts, spend.charged)
        if live:
            raise OperatorRefused(
                f"job {job.id}: the live site still serves the editions the spend ledger recorded published for "
                f"{spend.slot} ({', '.join(sorted(live))}); a new create would pay for a page that is live. "
                f"`iipub kill {job.id} --reason …` closes the job and keeps the page"
            )
    if attempts >= max_generation_attempts:
        counted = (f"the spend ledger records {attempts} paid creates for its slot"
                   if attempts > job.generation_attempts else f"all {max_generation_attempts} paid creates are used")
        raise OperatorRefused(
            f"job {job.id}: {counted} ({attempts}/{max_generation_attempts}); a new create would exceed the generation "
            "budget. Raise budgets.max_generation_attempts or `iipub kill` the job"
            + ("; or give it its output without paying (`iipub orphans adopt`, `iipub jobs import-payload`)"
               if restored else "")
        )
    changes: dict[str, Any] = {"response_id": None, **_RESET}
    extra: dict[str, Any] = {}
    if attempts > job.generation_attempts:
        changes["generation_attempts"] = attempts
        extra["charged_from_ledger"] = attempts - job.generation_attempts
    if restored and spend is not None:
        extra["ledger_ack"] = spend.counts()
    return Decision(
        State.CREATE_ELIGIBLE, Reason.OPERATOR_RELEASE_VERIFIED_LOST, delay=0, changes=changes,
        detail=who(by, reason, quarantine_reason=job.quarantine_reason, lost_response_id=job.response_id,
                   attempts_used=attempts, **extra),
    )


def release_resume_polling(job: Job, current_fingerprint: str | None, by: str, reason: str) -> Decision:
    _require_quarantined(job)
    if job.payload is not None:
        # Polling again could only find the response gone (and a confirmed loss pays again).
        raise OperatorRefused(
            f"job {job.id} already holds its output in custody (sha256 {job.payload_sha256}); there is nothing to "
            f"poll: `iipub revalidate {job.id} --reason …` validates it (free)"
        )
    if not job.response_id:
        raise OperatorRefused(
            f"job {job.id} has no response id to poll ({job.quarantine_reason}); use --link RESP_ID "
            "if you found its response, or --verified-lost if it never ran"
        )
    if job.config_fingerprint and job.config_fingerprint != current_fingerprint:
        # The first poll would quarantine it again as config_drift.
        raise OperatorRefused(
            f"job {job.id}: the deployed config of {job.product} differs from the one its response was "
            "generated under; redeploy that config, or use --verified-lost to generate under the new one"
        )
    return Decision(
        State.ACCEPTED, Reason.OPERATOR_RESUME_POLLING, delay=0, changes=dict(_RESET),
        detail=who(by, reason, quarantine_reason=job.quarantine_reason, response_id=job.response_id,
                   polls_before=job.poll_count),
    )


def adoptable(job: Job, response_id: str, outcome: ReadOutcome, installation_id: str | None = None) -> Observed:
    """The response `--link` may adopt: readable, of this installation (or made before installation
    ids), naming this job, and not dead."""
    if isinstance(outcome, Missing):
        raise OperatorRefused(f"response {response_id} not found at the provider (expired, deleted or never "
                              "existed); nothing changed")
    if isinstance(outcome, Transient):
        raise OperatorRefused(f"could not read response {response_id}: {outcome.why}; nothing changed, retry")
    if isinstance(outcome, Rejected):
        raise OperatorRefused(f"could not read response {response_id}: HTTP {outcome.status}: {outcome.why}")
    claimed = outcome.metadata.get("iipub_installation")
    if installation_id is not None and claimed is not None and claimed != installation_id:
        raise OperatorRefused(f"response {response_id} belongs to installation {claimed[:80]!r}, not this one "
                              f"({installation_id}); refusing to link it")
    owner = outcome.metadata.get("iipub_job_id")
    if owner != job.id:
        named = f"names job {owner}" if owner else "carries no iipub_job_id metadata"
        raise OperatorRefused(f"response {response_id} {named}, not job {job.id}; refusing to link it")
    if outcome.gone:
        raise OperatorRefused(f"response {response_id} is {outcome.status}: there is no output to adopt; "
                              "use --verified-lost to generate again")
    if not outcome.finished and not outcome.live:
        raise OperatorRefused(f"response {response_id} has unknown status {outcome.status!r}")
    return outcome


def check_link(job: Job) -> None:
    _require_quarantined(job)


def link(job: Job, observed: Observed, by: str, reason: str, scope: str | None = None) -> Decision:
    """Adopt `observed` (already checked by `adoptable`). A finished one goes to
    COMPLETED_NOT_RETRIEVED with the lease kept, so its output is harvested at once. `scope` is
    where it was just read (`Provider.scope`): the response lives there, so a later 404 under
    another scope is not a loss."""
    _require_quarantined(job)
    changes: dict[str, Any] = {"response_id": observed.response_id, **_RESET, "create_scope": scope}
    fingerprint = observed.metadata.get("iipub_fingerprint")
    if fingerprint:
        # Compare future polls with the config this response was generated under.
        changes["config_fingerprint"] = fingerprint
    if observed.usage is not None:
        changes.update(input_tokens=observed.usage.input_tokens, output_tokens=observed.usage.output_tokens,
                       total_tokens=observed.usage.total_tokens)
    detail = who(by, reason, quarantine_reason=job.quarantine_reason, previous_response_id=job.response_id,
                 response_id=observed.response_id, status=observed.status,
                 attempt=observed.metadata.get("iipub_attempt"))
    if observed.live:
        return Decision(POLLING_STAGE[observed.stage], Reason.OPERATOR_LINK, changes, detail, delay=0)
    return Decision(State.COMPLETED_NOT_RETRIEVED, Reason.OPERATOR_LINK, changes, detail, delay=0, go_on=True)


def harvest(job: Job, observed: Observed, max_output_bytes: int | None, by: str, reason: str) -> Decision:
    """COMPLETED_NOT_RETRIEVED -> RETRIEVED_NOT_VALIDATED with the payload, due now, so the next
    tick validates and publishes it like any other output."""
    d = decisions.on_output(job, observed, max_output_bytes)
    return Decision(d.to, Reason.OPERATOR_HARVEST, d.changes, {**d.detail, **who(by, reason)}, delay=0)


# -- suspend / resume -----------------------------------------------------------------------------


def suspend(job: Job, by: str, reason: str) -> Decision:
    if job.state == State.MANUALLY_SUSPENDED:
        raise OperatorRefused(f"job {job.id} is already suspended (from {job.suspended_from})")
    if job.state == State.CREATE_IN_FLIGHT:
        raise OperatorRefused(
            f"job {job.id} is in CREATE_IN_FLIGHT: a paid create is being sent; retry in a minute, "
            "once the tick has recorded its outcome"
        )
    if job.state not in states.SUSPENDABLE:
        raise OperatorRefused(f"job {job.id} is {job.state}: there is nothing left to suspend")
    return Decision(State.MANUALLY_SUSPENDED, Reason.OPERATOR_SUSPEND, changes={"suspended_from": job.state.value},
                    detail=who(by, reason, suspended_from=job.state.value))


def resume(job: Job, by: str, reason: str | None) -> Decision:
    if job.state != State.MANUALLY_SUSPENDED:
        raise OperatorRefused(f"job {job.id} is {job.state}, not suspended; nothing to resume")
    if not job.suspended_from or job.suspended_from not in State.__members__:
        raise OperatorRefused(f"job {job.id} does not record the state it was suspended from")
    back = State(job.suspended_from)
    return Decision(back, Reason.OPERATOR_RESUME, changes={"suspended_from": None}, delay=0,
                    detail=who(by, reason, resumed_to=back.value))


# -- cancel / kill --------------------------------------------------------------------------------


def check_cancel(job: Job) -> None:
    if job.state not in states.POLLING:
        raise OperatorRefused(
            f"job {job.id} is {job.effective_state}"
            + (" (suspended)" if job.state == State.MANUALLY_SUSPENDED else "")
            + ": only a job waiting on the provider (ACCEPTED, QUEUED, IN_PROGRESS) can be cancelled; "
            "see `iipub kill` or `iipub suspend`"
        )


def after_cancel(job: Job, outcome: Observed | Missing, by: str, reason: str) -> Decision:
    """What the provider says it actually did decides: finished anyway -> COMPLETED_NOT_RETRIEVED
    with the lease kept (harvested next, paid work is never discarded); cancelled, failed or
    gone -> QUARANTINED (operator_cancelled)."""
    base = who(by, reason, response_id=job.response_id)
    if isinstance(outcome, Missing):
        note = f"response {job.response_id} not found at the provider"
        return _cancelled(job, by, reason, {**base, "why_gone": outcome.why}, note)
    if outcome.finished:
        return Decision(State.COMPLETED_NOT_RETRIEVED, Reason.OPERATOR_CANCEL, changes={"retry_count": 0},
                        detail={**base, "status": outcome.status, "race": True}, delay=0, go_on=True)
    note = f"provider reports {outcome.status}"
    if not outcome.gone:
        note += f" after the cancel request; {parked.STILL_RUNNING_AFTER_CANCEL}"
    return _cancelled(job, by, reason, {**base, "status": outcome.status}, note)


def _cancelled(job: Job, by: str, reason: str, detail: dict[str, Any], note: str) -> Decision:
    d = decisions.quarantine(Reason.OPERATOR_CANCELLED, f"cancelled by {by}: {reason} ({note})",
                            journal_as=Reason.OPERATOR_CANCEL)
    return Decision(d.to, d.reason, d.changes, {**detail, "note": note})


def kill(job: Job, by: str, reason: str, saved_languages: Sequence[str] = ()) -> Decision:
    """Terminate: the job will not publish. The next tick cancels and deletes any remote data.
    Refused once any language's edition is saved (`saved_languages`: its tracks saved or
    published); the slot's unpublished tracks end with it."""
    effective = job.effective_state
    suspended = " (suspended)" if job.state == State.MANUALLY_SUSPENDED else ""
    if effective in states.EDITIONS_SAVED:
        raise OperatorRefused(
            f"job {job.id} is {effective}{suspended}: the edition is already saved; kill only stops jobs "
            "before their edition is saved"
        )
    if saved_languages:
        raise OperatorRefused(
            f"job {job.id}: the {', '.join(saved_languages)} edition is already saved; kill only stops jobs "
            "before any edition is saved"
        )
    if effective == State.CREATE_IN_FLIGHT:
        raise OperatorRefused(
            f"job {job.id} is in CREATE_IN_FLIGHT: a paid create is being sent; retry in a minute, "
            "once the tick has recorded its response id"
        )
    if job.state not in states.KILLABLE or effective not in states.KILLABLE:
        raise OperatorRefused(f"job {job.id} is {effective}{suspended} and cannot be killed")
    return Decision(
        State.CLEANUP_PENDING, Reason.OPERATOR_KILL, delay=0,
        changes={"kill_requested": True, "suspended_from": None, "retry_count": 0},
        detail=who(by, reason, killed_in=job.state.value, response_id=job.response_id,
                   had_payload=job.payload is not None),
    )


# -- out of a validation failure ------------------------------------------------------------------


def revalidate(job: Job, by: str, reason: str, current_fingerprint: str | None = None) -> Decision:
    """Validate the retained payload again (after the product's rules were fixed, or, for a job
    parked by config drift, a removed product or a failing step, under the rules deployed now):
    no provider call, no money. The next tick validates and, if it passes, publishes."""
    changes: dict[str, Any] = {"last_error": None}
    if job.state == State.QUARANTINED and job.payload is not None:
        # Whatever parked it (config drift, a failing step, or a response stored by the custody
        # watch after its poll budget ran out), the output is here: validate it, free.
        if current_fingerprint is None:
            raise OperatorRefused(f"job {job.id}: product {job.product!r} is not configured; configure it, "
                                  "or `iipub kill` the job")
        # Accepted under the rules deployed now: later steps compare with this fingerprint.
        changes.update(config_fingerprint=current_fingerprint, quarantine_reason=None, retry_count=0)
    else:
        _require_parked_payload(job, "revalidate")
    return Decision(State.RETRIEVED_NOT_VALIDATED, Reason.OPERATOR_REVALIDATE, delay=0, changes=changes,
                    detail=who(by, reason, payload_sha256=job.payload_sha256,
                               quarantine_reason=job.quarantine_reason))


def revalidate_track(job: Job, lang: str, track_state: State | None, by: str, reason: str,
                     quarantine_reason: str | None = None) -> tuple[State, Reason, dict[str, Any], dict[str, Any]]:
    """`revalidate ID --lang L`: that language's kept part checked again under the rules deployed
    now (free). Returns the track's next state, the reason, its column changes and the detail."""
    if track_state is None:
        raise OperatorRefused(f"job {job.id} has no {lang} track (its payload has not forked into languages; "
                              "revalidate the job without --lang)")
    if track_state not in states.TRACK_PARKED:
        raise OperatorRefused(f"job {job.id}: the {lang} track is {track_state}; only a VALIDATION_FAILED_RETAINED "
                              "or QUARANTINED track can be revalidated")
    return (State.RETRIEVED_NOT_VALIDATED, Reason.OPERATOR_REVALIDATE,
            {"last_error": None, "quarantine_reason": None, "retry_count": 0},
            who(by, reason, lang=lang, was=track_state.value, quarantine_reason=quarantine_reason))


def reopen_for_track(job: Job, lang: str, by: str, reason: str, current_fingerprint: str | None) -> Decision | None:
    """`revalidate ID --lang L` must lead somewhere: a track moves only while its slot lets its
    tracks run (READY_TO_COMPOSE, COMPOSED_NOT_SAVED: None, nothing to change). A slot parked with
    all its tracks (VALIDATION_FAILED_RETAINED, QUARANTINED) goes back to READY_TO_COMPOSE with
    the track, in one transaction, accepted under the rules deployed now like `revalidate ID`;
    any other slot state is refused (nothing written)."""
    if job.state in states.TRACKS_RUN_IN:
        return None
    if job.state in states.REOPENS_FOR_A_TRACK:
        if current_fingerprint is None:
            raise OperatorRefused(f"job {job.id}: product {job.product!r} is not configured; configure it, "
                                  "or `iipub kill` the job")
        return Decision(State.READY_TO_COMPOSE, Reason.OPERATOR_REVALIDATE, delay=0,
                        changes={"last_error": None, "quarantine_reason": None, "retry_count": 0,
                                 "config_fingerprint": current_fingerprint},
                        detail=who(by, reason, lang=lang, reopened_from=job.state.value,
                                   quarantine_reason=job.quarantine_reason))
    suspended = f" (suspended from {job.suspended_from}; resume it first)" \
        if job.state == State.MANUALLY_SUSPENDED else ""
    raise OperatorRefused(f"job {job.id} is {job.state}{suspended}: its {lang} track cannot move from there; "
                          "nothing written")


def regenerate(job: Job, max_generation_attempts: int, by: str, reason: str,
               track_states: Mapping[str, State] | None = None) -> Decision:
    """Pay for a new generation of a slot whose output failed validation, within the generation
    budget (also a job parked by config drift or a failing step, generated again under the rules
    deployed now). The failed payload's hash stays in the journal. A forked slot waiting on a
    parked language track (`track_states`) is generated again for its unpublished languages only:
    a saved edition is kept, never replaced."""
    tracks = dict(track_states or {})
    if job.state in states.TRACKS_RUN_IN:
        parked = sorted(lang for lang, s in tracks.items() if s in states.TRACK_PARKED)
        if not parked:
            raise OperatorRefused(f"job {job.id} is {job.state} and none of its language tracks is parked; "
                                  "regenerate applies to a failed validation")
    elif not (job.state == State.QUARANTINED and (job.quarantine_reason in PAYLOAD_QUARANTINES or (
            job.quarantine_reason in states.KNOWN_BAD_OUTPUT and job.payload is not None))):
        _require_parked_payload(job, "regenerate")
    languages = sorted(lang for lang, s in tracks.items() if s not in states.TRACK_SAVED) if tracks else []
    kept = sorted(lang for lang, s in tracks.items() if s in states.TRACK_SAVED)
    if job.generation_attempts >= max_generation_attempts:
        raise OperatorRefused(
            f"job {job.id}: all {max_generation_attempts} paid creates are used "
            f"({job.generation_attempts}/{max_generation_attempts}); raise budgets.max_generation_attempts "
            "or `iipub kill` the job"
        )
    return Decision(
        State.CREATE_ELIGIBLE, Reason.OPERATOR_REGENERATE, delay=0,
        changes={"response_id": None, "poll_count": 0, "retry_count": 0, "payload": None, "payload_sha256": None,
                 "composed": None, "composed_sha256": None, "last_error": None, "quarantine_reason": None,
                 "output_end": None},
        detail=who(by, reason, failed_payload_sha256=job.payload_sha256, failed_response_id=job.response_id,
                   attempts_used=job.generation_attempts, quarantine_reason=job.quarantine_reason,
                   languages=languages or "all", kept=kept),
    )


# -- output recovered by hand ---------------------------------------------------------------------

# A response object wraps the output in JSON (escapes can triple its size) beside its own fields.
IMPORT_ENVELOPE_BYTES = 1_048_576
_MAX_TOKENS = 10**12


def import_file_limit(max_output_bytes: int) -> int:
    """The largest file `import-payload` reads; a larger one is refused unread."""
    return 4 * max_output_bytes + IMPORT_ENVELOPE_BYTES


@dataclass(frozen=True)
class Imported:
    """Output an operator recovered (e.g. from the provider's dashboard), as read from a file."""

    text: str
    source: str  # what held it: the provider's reader says (`SavedResponse.source`), or text
    file_bytes: int
    file_sha256: str
    response_id: str | None = None
    status: str | None = None
    usage: Usage | None = None
    metadata: dict[str, str] = field(default_factory=dict)


def parse_import(raw: bytes, max_output_bytes: int, read_saved: SavedResponseReader) -> Imported:
    """What a file holds, pure. Accepted, in this order:
    - a JSON object the provider's reader (`read_saved`, `factory.saved_response_reader`) takes
      for a saved response or its output: its text and what it says of itself (for OpenAI, a
      response object or an `{"output_text": "..."}`, `provider/openai/documents.py`);
    - anything else: the file's text itself is the output (the model's output is the edition's
      JSON document, whose keys are language codes, so it never looks like a saved response).
    Refuses (OperatorRefused) text that is not UTF-8, an empty output, and an output over
    `max_output_bytes` (it could only fail validation)."""
    digest = hashlib.sha256(raw).hexdigest()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OperatorRefused(f"the file is not UTF-8 text (byte {exc.start}: {exc.reason}); nothing written") from None
    text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
    data: Any = None
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:  # the raw output text, however malformed: validation judges it
            data = None
    saved = read_saved(data) if isinstance(data, dict) else None
    imported = Imported(text, "text", len(raw), digest) if saved is None else Imported(
        saved.text, saved.source, len(raw), digest, saved.response_id, saved.status, saved.usage, saved.metadata)
    if not imported.text.strip():
        raise OperatorRefused(f"the file holds no output text ({imported.source}); nothing written")
    size = len(imported.text.encode("utf-8", "surrogatepass"))
    if size > max_output_bytes:
        raise OperatorRefused(f"the output is {size} bytes, over the product's max_output_bytes ({max_output_bytes}): "
                              "it could only fail validation; nothing written")
    return imported


def check_import(job: Job) -> None:
    """The job can take imported output: in a state with the edge, and no payload in custody yet."""
    if job.state not in states.IMPORTABLE:
        suspended = f" (suspended from {job.suspended_from}; resume it first)" \
            if job.state == State.MANUALLY_SUSPENDED else ""
        raise OperatorRefused(f"job {job.id} is {job.state}{suspended}; import-payload applies only to "
                              f"{', '.join(sorted(states.IMPORTABLE))} jobs")
    assert states.allowed(job.state, State.RETRIEVED_NOT_VALIDATED, operator=True)
    if job.payload is not None:
        raise OperatorRefused(f"job {job.id} already holds a payload in custody (sha256 {job.payload_sha256}); "
                              "nothing written. See `iipub revalidate` or `iipub regenerate`")


def import_payload(job: Job, imported: Imported, max_output_bytes: int | None, by: str, reason: str) -> Decision:
    """Custody of output an operator recovered: stored exactly as `decisions.on_output` stores a
    finished response (the same escaping, bounds and sha256), into RETRIEVED_NOT_VALIDATED, due
    now, so the next tick validates and publishes it like any other output."""
    check_import(job)
    owner = imported.metadata.get("iipub_job_id")
    if owner and owner != job.id:
        raise OperatorRefused(f"the response in the file names job {owner}, not job {job.id}; nothing written")
    # An output imported without a status of its own is journaled as a completed one.
    observed = Observed(response_id=imported.response_id or job.response_id or "", status=imported.status or
                        "completed", output_text=imported.text, usage=imported.usage, metadata=imported.metadata,
                        stage=Stage.FINISHED)
    d = decisions.on_output(job, observed, max_output_bytes)
    return Decision(
        State.RETRIEVED_NOT_VALIDATED, Reason.OPERATOR_IMPORT_PAYLOAD, {**d.changes, "quarantine_reason": None},
        {**d.detail, **who(by, reason, source=imported.source, file_bytes=imported.file_bytes,
                           file_sha256=imported.file_sha256, imported_from=job.state.value,
                           quarantine_reason=job.quarantine_reason, response_id=job.response_id,
                           file_response_id=imported.response_id)},
        delay=0,
    )


# -- shared preconditions -------------------------------------------------------------------------


def _require_quarantined(job: Job) -> None:
    if job.state != State.QUARANTINED:
        suspended = f" (suspended from {job.suspended_from})" if job.state == State.MANUALLY_SUSPENDED else ""
        raise OperatorRefused(f"job {job.id} is {job.state}{suspended}, not QUARANTINED; release applies only to "
                              "quarantined jobs" + ("; resume it first" if suspended else ""))


def _require_parked_payload(job: Job, action: str) -> None:
    if job.state == State.QUARANTINED:
        held = "holds no output in custody" if job.payload is None else "holds its output in custody"
        raise OperatorRefused(f"job {job.id} is QUARANTINED ({job.quarantine_reason}) and {held}; {action} does not "
                              f"apply to it; see `iipub quarantine show {job.id}` for what does")
    _require_state(job, State.VALIDATION_FAILED_RETAINED, action)


def _require_state(job: Job, state: State, action: str) -> None:
    if job.state != state:
        suspended = f" (suspended from {job.suspended_from}; resume it first)" \
            if job.state == State.MANUALLY_SUSPENDED else ""
        raise OperatorRefused(f"job {job.id} is {job.state}{suspended}; only a {state} job can {action}")


# -- orphans: the kept output of a response of this installation no job holds ------------------



@dataclass(frozen=True)
class Orphan:
    """What `orphans` keeps of one response (`Deliveries.orphan`)."""

    response_id: str
    status: str
    output: str | None
    named_job_id: str | None
    slot: str | None
    attempt: str | None
    installation_id: str | None
    fingerprint: str | None
    fate: str | None
    output_tokens: int | None = None
    total_tokens: int | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Orphan:
        return cls(str(row["response_id"]), str(row["status"]), row.get("output"), row.get("named_job_id"),
                   row.get("slot"), row.get("attempt"), row.get("installation_id"), row.get("fingerprint"),
                   row.get("fate"), row.get("output_tokens"), row.get("total_tokens"))


def adopt_orphan(job: Job, orphan: Orphan, *, installation_id: str, live_editions: int, max_output_bytes: int | None,
                 other_slot: bool, by: str, reason: str) -> Decision:
    """Custody of an orphan's kept output for `job`, stored as `decisions.on_output` stores a finished
    response (the same bounds, escaping and sha256), into RETRIEVED_NOT_VALIDATED, due now. The
    job's row learns the response and the paid attempt it stands for, so nothing is paid again."""
    rid = orphan.response_id
    if orphan.fate is not None:
        raise OperatorRefused(f"orphan {rid} was already {orphan.fate}; nothing written")
    if orphan.installation_id is not None and orphan.installation_id != installation_id:
        raise OperatorRefused(f"orphan {rid} belongs to installation {orphan.installation_id!r}, not this one")
    if orphan.output is None:
        raise OperatorRefused(f"orphan {rid} ({orphan.status}) has no kept output to adopt; nothing written")
    if job.state not in states.ORPHAN_ADOPTABLE:
        raise OperatorRefused(f"job {job.id} is {job.state}; an orphan can be adopted only by a "
                              f"{', '.join(sorted(states.ORPHAN_ADOPTABLE))} job")
    if job.payload is not None:
        raise OperatorRefused(f"job {job.id} already holds a payload in custody (sha256 {job.payload_sha256}); "
                              "nothing written")
    if live_editions:
        raise OperatorRefused(f"the slot {job.product}/{job.edition_date} already has {live_editions} edition(s); "
                              "nothing written")
    slot = f"{job.product}/{job.edition_date.isoformat()}"
    if not other_slot and orphan.slot != slot:
        raise OperatorRefused(f"orphan {rid} was made for slot {orphan.slot!r}, not {slot}; pass --other-slot to "
                              "use it anyway")
    attempt_text = orphan.attempt or ""
    attempt = int(attempt_text) if attempt_text.isdigit() else 0
    usage = (Usage(0, orphan.output_tokens, orphan.total_tokens)
             if orphan.output_tokens is not None and orphan.total_tokens is not None else None)
    d = decisions.on_output(job, Observed(rid, orphan.status, output_text=orphan.output, usage=usage,
                                          stage=Stage.FINISHED), max_output_bytes)
    attempts = max(job.generation_attempts, attempt)
    changes: dict[str, Any] = {**d.changes, "response_id": rid, "generation_attempts": attempts,
                               "quarantine_reason": None, "poll_count": 0}
    if orphan.fingerprint and not other_slot:
        changes["config_fingerprint"] = orphan.fingerprint
    return Decision(
        State.RETRIEVED_NOT_VALIDATED, Reason.OPERATOR_ADOPT_ORPHAN, changes,
        {**d.detail, **who(by, reason, response_id=rid, attempt=orphan.attempt, orphan_slot=orphan.slot,
                           named_job_id=orphan.named_job_id, adopted_from=job.state.value,
                           attempts_added=attempts - job.generation_attempts,
                           quarantine_reason=job.quarantine_reason, previous_response_id=job.response_id)},
        delay=0,
    )


def check_discard(orphan: Orphan) -> None:
    if orphan.fate == "adopted":
        raise OperatorRefused(f"orphan {orphan.response_id} was adopted: its job owns it now (its cleanup deletes it)")
