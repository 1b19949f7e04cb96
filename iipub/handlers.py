"""Per-state decisions, pure: given a job and what was observed, return the next state
and what to record. No database, no network; `reconcile` does the I/O and applies them.

Quarantine reasons (each has a runbook entry):
  create_outcome_unknown, create_rejected, crashed_during_create,
  generation_budget_exhausted, poll_budget_exhausted, config_drift, edition_conflict,
  operator_cancelled.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any

from . import backoff
from .config import Budgets, ReconcileSettings
from .provider import (
    Accepted,
    Ambiguous,
    Deleted,
    NotFound,
    Observed,
    Refused,
    Rejected,
    Transient,
)
from .states import State
from .store import Job

QUARANTINE_REASONS = (
    "create_outcome_unknown",
    "create_rejected",
    "crashed_during_create",
    "generation_budget_exhausted",
    "poll_budget_exhausted",
    "config_drift",
    "edition_conflict",
    "operator_cancelled",
)


@dataclass(frozen=True)
class Decision:
    to: State
    reason: str
    changes: dict[str, Any] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)
    delay: float | None = None  # next_attempt_at = database now + delay
    go_on: bool = False  # keep the lease and take the next step in this tick
    cooldown: float | None = None  # the provider rate-limited us: no more calls this tick


def quarantine(reason: str, why: str, **detail: Any) -> Decision:
    return Decision(
        State.QUARANTINED, reason,
        changes={"quarantine_reason": reason, "last_error": why[:2000], "retry_count": 0},
        detail={"why": why, **detail},
    )


def _backoff(retry_count: int, hinted: float | None, s: ReconcileSettings, rng: random.Random | None) -> float:
    """Server-provided delay first; otherwise exponential with jitter, capped."""
    if hinted is not None:
        return min(hinted, s.backoff_cap_seconds)
    return backoff.exponential(retry_count, s.backoff_base_seconds, s.backoff_cap_seconds, rng)


def on_window_open(job: Job, fingerprint: str) -> Decision:
    return Decision(State.CREATE_ELIGIBLE, "window_open", changes={"config_fingerprint": fingerprint}, go_on=True)


def before_dispatch(job: Job, fingerprint: str, budgets: Budgets) -> Decision:
    """CREATE_ELIGIBLE: charge the generation budget, committed before the POST."""
    if job.generation_attempts >= budgets.max_generation_attempts:
        return quarantine(
            "generation_budget_exhausted",
            f"{job.generation_attempts} of {budgets.max_generation_attempts} paid creates used",
        )
    return Decision(
        State.CREATE_IN_FLIGHT, "dispatch",
        changes={"generation_attempts": job.generation_attempts + 1, "config_fingerprint": fingerprint,
                 "response_id": None, "poll_count": 0},
        detail={"attempt": job.generation_attempts + 1},
        go_on=True,
    )


def after_create(
    job: Job, outcome: Accepted | Refused | Ambiguous | Rejected, s: ReconcileSettings,
    rng: random.Random | None = None,
) -> Decision:
    """Leaving CREATE_IN_FLIGHT. `job` is the in-flight job (attempt already charged)."""
    if isinstance(outcome, Accepted):
        return Decision(
            State.ACCEPTED, "accepted",
            changes={"response_id": outcome.response_id, "poll_count": 0, "retry_count": 0, "last_error": None},
            detail={"response_id": outcome.response_id, "status": outcome.status},
            delay=s.poll_interval_seconds,
        )
    if isinstance(outcome, Refused):
        # Nothing can have been charged: refund the attempt and try again later.
        retry = job.retry_count + 1
        delay = _backoff(retry, outcome.retry_after, s, rng)
        return Decision(
            State.CREATE_ELIGIBLE, "create_refused",
            changes={"generation_attempts": job.generation_attempts - 1, "retry_count": retry,
                     "last_error": outcome.why[:2000]},
            detail={"why": outcome.why, "refunded_attempt": job.generation_attempts, "delay": round(delay, 3)},
            delay=delay,
            cooldown=delay if outcome.retry_after is not None or "429" in outcome.why else None,
        )
    if isinstance(outcome, Rejected):
        return quarantine("create_rejected", f"HTTP {outcome.status}: {outcome.why}", status=outcome.status)
    # Ambiguous: the provider may have accepted (and billed) it. Never retry blindly.
    return quarantine("create_outcome_unknown", outcome.why)


def crashed_in_flight(job: Job) -> Decision:
    return quarantine(
        "crashed_during_create",
        f"found in CREATE_IN_FLIGHT with an expired lease (worker {job.lease_owner}); the create may have been billed",
        attempt=job.generation_attempts,
    )


def before_poll(job: Job, fingerprint: str, budgets: Budgets) -> Decision | None:
    """Checks before observing an accepted response; None means go ahead and poll."""
    if job.config_fingerprint and job.config_fingerprint != fingerprint:
        return quarantine(
            "config_drift",
            "the deployed product config changed under an accepted job",
            recorded=job.config_fingerprint, current=fingerprint, response_id=job.response_id,
        )
    if job.poll_count >= budgets.max_poll_attempts:
        return quarantine(
            "poll_budget_exhausted",
            f"{job.poll_count} polls without a finished response; response {job.response_id} kept",
            response_id=job.response_id,
        )
    return None


_STATUS_STATE = {"queued": State.QUEUED, "in_progress": State.IN_PROGRESS}


def after_poll(
    job: Job, outcome: Observed | NotFound | Transient | Rejected, s: ReconcileSettings,
    rng: random.Random | None = None,
) -> Decision:
    """An observation of the job's response. Counts `poll_count` only, never the generation budget."""
    polls = job.poll_count + 1
    if isinstance(outcome, Observed):
        if outcome.status in _STATUS_STATE:
            return Decision(
                _STATUS_STATE[outcome.status], "poll",
                changes={"poll_count": polls, "retry_count": 0},
                detail={"status": outcome.status, "due_at": str(job.next_attempt_at)},
                delay=s.poll_interval_seconds,
            )
        if outcome.status in ("completed", "incomplete"):
            return Decision(
                State.COMPLETED_NOT_RETRIEVED, "provider_finished",
                changes={"poll_count": polls, "retry_count": 0},
                detail={"status": outcome.status, "incomplete_reason": outcome.incomplete_reason,
                        "due_at": str(job.next_attempt_at)},
                go_on=True,
            )
        return Decision(
            State.PROVIDER_EXPIRED_OR_MISSING, f"provider_{outcome.status}"[:64],
            changes={"poll_count": polls, "last_error": (outcome.error or outcome.status)[:2000]},
            detail={"status": outcome.status, "error": outcome.error, "response_id": job.response_id},
            go_on=True,
        )
    if isinstance(outcome, NotFound):
        return Decision(
            State.PROVIDER_EXPIRED_OR_MISSING, "provider_missing",
            changes={"poll_count": polls, "last_error": outcome.why[:2000]},
            detail={"why": outcome.why, "response_id": job.response_id},
            go_on=True,
        )
    # Transient (429/5xx/timeout) or a rejected read: count the poll, back off, stay put.
    retry = job.retry_count + 1
    hinted = outcome.retry_after if isinstance(outcome, Transient) else None
    why = outcome.why if isinstance(outcome, Transient) else f"HTTP {outcome.status}: {outcome.why}"
    delay = _backoff(retry, hinted, s, rng)
    return Decision(
        job.state, "poll_failed",
        changes={"poll_count": polls, "retry_count": retry, "last_error": why[:2000]},
        detail={"why": why, "delay": round(delay, 3), "due_at": str(job.next_attempt_at)},
        delay=delay,
        cooldown=delay if hinted is not None else None,
    )


def on_output(job: Job, outcome: Observed, max_bytes: int | None = None) -> Decision:
    """Custody: the payload is stored on the job row, whatever it holds.

    Untrusted output must always be storable, or the job would be fetched again and again
    until the provider forgets it (and a new paid create follows). Text that cannot be
    encoded (lone surrogates) is stored with those code points backslash-escaped; text over
    `max_bytes` is stored cut to `max_bytes + 1` bytes. Either way validation then fails
    and the job parks in VALIDATION_FAILED_RETAINED; the journal keeps the original's size
    and hash."""
    text = outcome.output_text or ""
    raw = text.encode("utf-8", "surrogatepass")
    detail: dict[str, Any] = {"bytes": len(raw), "status": outcome.status,
                              "sha256_as_received": hashlib.sha256(raw).hexdigest()}
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
        detail["escaped_unencodable"] = True
    if max_bytes is not None and len(text.encode("utf-8")) > max_bytes:
        text = text.encode("utf-8")[: max_bytes + 1].decode("utf-8", "ignore")
        detail["stored_truncated_to"] = max_bytes + 1
    usage = outcome.usage
    changes: dict[str, Any] = {
        "payload": text,
        "payload_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "retry_count": 0,
        "last_error": None,
    }
    if usage is not None:  # accumulated: a slot that needed two paid responses costs both
        changes.update(input_tokens=job.input_tokens + usage.input_tokens,
                       output_tokens=job.output_tokens + usage.output_tokens,
                       total_tokens=job.total_tokens + usage.total_tokens)
    detail["total_tokens"] = usage.total_tokens if usage else None
    return Decision(State.RETRIEVED_NOT_VALIDATED, "retrieved", changes=changes, detail=detail, go_on=True)


def after_expired(job: Job, budgets: Budgets) -> Decision:
    """PROVIDER_EXPIRED_OR_MISSING: try again on the same row if the budget allows."""
    if job.generation_attempts < budgets.max_generation_attempts:
        return Decision(
            State.CREATE_ELIGIBLE, "recreate_after_loss",
            changes={"response_id": None, "poll_count": 0, "retry_count": 0},
            detail={"lost_response_id": job.response_id, "attempts_used": job.generation_attempts},
            go_on=True,
        )
    return quarantine(
        "generation_budget_exhausted",
        f"response {job.response_id} lost and all {budgets.max_generation_attempts} paid creates used",
        lost_response_id=job.response_id,
    )


def after_delete(
    job: Job, outcome: Deleted | NotFound | Transient | Rejected, s: ReconcileSettings,
    rng: random.Random | None = None,
) -> Decision:
    if isinstance(outcome, (Deleted, NotFound)):
        return Decision(State.DELETED, "remote_deleted", changes={"retry_count": 0, "last_error": None},
                        detail={"response_id": job.response_id, "was_missing": isinstance(outcome, NotFound)})
    # Network trouble: retry forever; what is published stays published.
    retry = job.retry_count + 1
    hinted = outcome.retry_after if isinstance(outcome, Transient) else None
    why = outcome.why if isinstance(outcome, Transient) else f"HTTP {outcome.status}: {outcome.why}"
    delay = _backoff(retry, hinted, s, rng)
    return Decision(State.CLEANUP_PENDING, "cleanup_retry",
                    changes={"retry_count": retry, "last_error": why[:2000]},
                    detail={"why": why, "delay": round(delay, 3)}, delay=delay,
                    cooldown=delay if hinted is not None else None)
