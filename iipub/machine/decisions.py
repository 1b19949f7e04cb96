"""Per-state decisions, pure: given a job and what was observed, return the next state
and what to record. No database, no network; `steps` does the I/O and applies them.

Every reason a decision records is a member of `states.Reason`; the quarantine reasons
are `states.QUARANTINE_REASONS` (each has a runbook entry).
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from iipub.core import backoff
from iipub.edition import validate
from iipub.model import states
from iipub.model.jobs import Job
from iipub.model.states import POLLING, Reason, State
from iipub.money.authority import Ruling
from iipub.money.spend import SlotSpend
from iipub.provider.outcomes import (
    ACCOUNT_LIMITS,
    Accepted,
    Ambiguous,
    Deleted,
    FailureCause,
    Missing,
    Observed,
    RefusalKind,
    Refused,
    Rejected,
    Stage,
    Transient,
    failure_text,
)
from iipub.settings.config import Budgets, Product, ProviderSettings, ReconcileSettings

_ERROR_MAX = 2000  # jobs.last_error is bounded; the journal detail keeps the whole text
# A slot whose product's creates are held (a refused parameter) is looked at again this often:
# once the configuration is fixed, its create goes out within this long.
HELD_RECHECK_SECONDS = 60.0
# A response read under other credentials than its create's is read again this often (the
# operator restores the scope's credentials; see the runbook's "Rotating a key").
SCOPE_RECHECK_SECONDS = 120.0


@dataclass(frozen=True)
class Decision:
    to: State
    reason: Reason
    changes: dict[str, Any] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)
    delay: float | None = None  # next_attempt_at = database now + delay
    go_on: bool = False  # keep the lease and take the next step in this tick
    cooldown: float | None = None  # the provider rate-limited us: no more calls this tick


def quarantine(reason: Reason, why: str, *, journal_as: Reason | None = None, **detail: Any) -> Decision:
    """Park the job for an operator. The journal entry is `reason` unless `journal_as` names
    the action that led there (an operator cancel journals `operator_cancel`)."""
    return Decision(
        State.QUARANTINED, journal_as or reason,
        changes={"quarantine_reason": reason.value, "last_error": why[:_ERROR_MAX], "retry_count": 0},
        detail={"why": why, **detail},
    )


def _backoff(retry_count: int, hinted: float | None, s: ReconcileSettings, rng: random.Random | None) -> float:
    """Server-provided delay first; otherwise exponential with jitter, capped."""
    if hinted is not None:
        return min(hinted, s.backoff_cap_seconds)
    return backoff.exponential(retry_count, s.backoff_base_seconds, s.backoff_cap_seconds, rng)


def on_window_open(job: Job, fingerprint: str) -> Decision:
    return Decision(State.CREATE_ELIGIBLE, Reason.WINDOW_OPEN, changes={"config_fingerprint": fingerprint}, go_on=True)


def before_dispatch(job: Job, fingerprint: str, budgets: Budgets, tier: str = "default") -> Decision:
    """CREATE_ELIGIBLE: charge the generation budget, committed before the POST (the journal
    names the service tier the create asks for)."""
    if job.generation_attempts >= budgets.max_generation_attempts:
        return quarantine(
            Reason.GENERATION_BUDGET_EXHAUSTED,
            f"{job.generation_attempts} of {budgets.max_generation_attempts} paid creates used",
        )
    return Decision(
        State.CREATE_IN_FLIGHT, Reason.DISPATCH,
        changes={"generation_attempts": job.generation_attempts + 1, "config_fingerprint": fingerprint,
                 "response_id": None, "poll_count": 0},
        detail={"attempt": job.generation_attempts + 1, "service_tier": tier},
        go_on=True,
    )


def after_create(
    job: Job, outcome: Accepted | Refused | Ambiguous | Rejected, s: ReconcileSettings,
    rng: random.Random | None = None, *, tier: str = "default", flex_left: float | None = None,
    scope: str | None = None,
) -> Decision:
    """Leaving CREATE_IN_FLIGHT. `job` is the in-flight job (attempt already charged), `tier`
    the tier it asked for; `flex_left` is how long the slot may still ask for flex
    (a flex refusal's retry is not put off past it: after it the create asks the default tier);
    `scope` what the create was sent under (`Provider.scope`, opaque), recorded with its response."""
    if isinstance(outcome, Accepted):
        return Decision(
            State.ACCEPTED, Reason.ACCEPTED,
            changes={"response_id": outcome.response_id, "poll_count": 0, "retry_count": 0, "last_error": None,
                     "create_scope": scope},
            detail={"response_id": outcome.response_id, "status": outcome.status, "service_tier_asked": tier,
                    "service_tier": outcome.tier},
            delay=s.poll_interval_seconds,
        )
    if isinstance(outcome, Refused) and outcome.kind is RefusalKind.PARAMETER:
        # A parameter the model refuses: nothing was charged, and the same request would be
        # refused again. The attempt is refunded and the product's creates are held (`holds`)
        # until its configuration changes; this slot waits unpaid, looked at again now and then.
        return Decision(
            State.CREATE_ELIGIBLE, Reason.CREATE_PARAM_REFUSED,
            changes={"generation_attempts": job.generation_attempts - 1, "last_error": outcome.why[:_ERROR_MAX]},
            detail={"why": outcome.why, "param": outcome.param, "code": outcome.code, "product_held": job.product,
                    "refunded_attempt": job.generation_attempts, "service_tier_asked": tier},
            delay=HELD_RECHECK_SECONDS,
        )
    if isinstance(outcome, Refused) and outcome.kind in (RefusalKind.ACCESS, RefusalKind.TOO_LARGE):
        # No access to the model (or no such model), or a request larger than the organization's
        # tokens-per-minute limit: nothing was charged, and the same request would be refused
        # again. The attempt is refunded and the model's (or the product's) creates are held
        # (`holds`); nothing opens the breaker or cools other creates down.
        access = outcome.kind is RefusalKind.ACCESS
        held: dict[str, Any] = {"why": outcome.why, "code": outcome.code, "refunded_attempt": job.generation_attempts,
                                "service_tier_asked": tier}
        if access:
            held["model_held"] = outcome.model
        else:
            held.update(product_held=job.product, limit=outcome.limit, requested=outcome.requested)
        return Decision(
            State.CREATE_ELIGIBLE, Reason.CREATE_ACCESS_REFUSED if access else Reason.CREATE_TOO_LARGE,
            changes={"generation_attempts": job.generation_attempts - 1, "last_error": outcome.why[:_ERROR_MAX]},
            detail=held, delay=HELD_RECHECK_SECONDS,
        )
    if isinstance(outcome, Refused):
        # Nothing can have been charged: refund the attempt and try again later.
        retry = job.retry_count + 1
        delay = _backoff(retry, outcome.retry_after, s, rng)
        if outcome.capacity and flex_left is not None:
            delay = max(0.0, min(delay, flex_left))
        detail: dict[str, Any] = {"why": outcome.why, "refunded_attempt": job.generation_attempts,
                                  "delay": round(delay, 3), "service_tier_asked": tier}
        if outcome.capacity:
            detail["capacity"] = True  # flex had no capacity: not the account's rate limit
        # A capacity refusal of flex cools nothing down: default-tier creates are not limited.
        rate_limited = outcome.kind in ACCOUNT_LIMITS
        return Decision(
            State.CREATE_ELIGIBLE, Reason.CREATE_REFUSED,
            changes={"generation_attempts": job.generation_attempts - 1, "retry_count": retry,
                     "last_error": outcome.why[:_ERROR_MAX]},
            detail=detail,
            delay=delay,
            cooldown=delay if rate_limited else None,
        )
    if isinstance(outcome, Rejected):
        return quarantine(Reason.CREATE_REJECTED, f"HTTP {outcome.status}: {outcome.why}", status=outcome.status)
    # Ambiguous: the provider may have accepted (and billed) it. Never retry blindly.
    return quarantine(Reason.CREATE_OUTCOME_UNKNOWN, outcome.why)


def in_flight_on_ledger(job: Job, spend: SlotSpend | None, scope: str | None = None) -> Decision | None:
    """CREATE_IN_FLIGHT with an expired lease, but the spend ledger recorded this very attempt's
    create as accepted (the worker died after the answer, or the database was restored from a
    backup taken mid-create): adopt that response, nothing paid again; None if it did not.
    `scope` is this installation's (`Provider.scope`): the create was its own, sent from this very
    job under its credentials, not a response taken over from elsewhere."""
    if (spend is None or spend.response_id is None or spend.response_attempt != job.generation_attempts
            or job.id not in spend.job_ids):
        return None
    return Decision(State.ACCEPTED, Reason.RESTORED_ADOPTED,
                    changes={"response_id": spend.response_id, "poll_count": 0, "retry_count": 0, "last_error": None,
                             "create_scope": scope},
                    detail={"response_id": spend.response_id, "attempt": job.generation_attempts, "attempts_added": 0,
                            "via": "ledger_outcome"},
                    delay=0)


def crashed_in_flight(job: Job) -> Decision:
    return quarantine(
        Reason.CRASHED_DURING_CREATE,
        f"found in CREATE_IN_FLIGHT with an expired lease (worker {job.lease_owner}); the create may have been billed",
        attempt=job.generation_attempts,
    )


def before_poll(job: Job, budgets: Budgets) -> Decision | None:
    """Checks before observing an accepted response; None means go ahead and poll. A drifted or
    removed config does not stop the poll: custody comes first (`config_check` parks the job
    once its output is stored)."""
    if job.poll_count >= budgets.max_poll_attempts:
        return quarantine(
            Reason.POLL_BUDGET_EXHAUSTED,
            f"{job.poll_count} polls without a finished response; response {job.response_id} kept",
            response_id=job.response_id,
        )
    return None


def config_check(job: Job, product: Product | None) -> Decision | None:
    """Before validation, composition and save (and before any money is spent): the job's
    product must still be configured, and once a response exists, configured as it was when
    the response was generated. None means carry on."""
    if product is None:
        return quarantine(Reason.PRODUCT_REMOVED, f"product {job.product!r} is no longer configured"
                          + ("; its output is kept" if job.payload is not None else ""),
                          product=job.product, response_id=job.response_id)
    if job.state in states.CREATE_NEXT or not job.config_fingerprint:
        return None
    if not product.fingerprint_matches(job.config_fingerprint):
        return quarantine(
            Reason.CONFIG_DRIFT,
            "the deployed product config changed under the job"
            + ("; its output is kept" if job.payload is not None else ""),
            recorded=job.config_fingerprint, current=product.fingerprint(), response_id=job.response_id,
        )
    return None


def step_failed(job: Job, error: str, max_failures: int) -> tuple[Decision | None, int]:
    """A step raised an unexpected error. Returns the quarantine decision once that happened
    `max_failures` times in a row (else None) and the failure count. Published jobs are never
    parked: their cleanup retries forever."""
    failures = job.retry_count + 1
    if failures >= max_failures and states.allowed(job.state, State.QUARANTINED):
        return quarantine(Reason.STEP_FAILING, f"{failures} failures in a row: {error}",
                          failures=failures, failed_in=job.state.value), failures
    return None, failures


_STAGE_STATE = {Stage.WAITING: State.QUEUED, Stage.RUNNING: State.IN_PROGRESS}
_DEFAULT_PROVIDER = ProviderSettings()


def after_poll(
    job: Job, outcome: Observed | Missing | Transient | Rejected, s: ReconcileSettings,
    rng: random.Random | None = None, *, loss: ProviderSettings = _DEFAULT_PROVIDER, suspected_reads: int = 0,
    scope: str | None = None, in_scope: bool = True, cancelled_by_operator: bool = False,
) -> Decision:
    """An observation of the job's response. Counts `poll_count` only, never the generation budget.

    What the provider says is evidence, not proof: a 404, a `cancelled` iipub did not ask for,
    or a `failed` is a suspected loss (the job stays put, `loss_suspected`) until it held over
    `loss.loss_confirm_reads` reads spread over `loss.loss_confirm_seconds`; `suspected_reads`
    is how many such reads of this response came before this one. A status iipub does not know
    is observed again, never taken as a loss; nor is a 404 read under a `scope` that does not reach
    the create's (`in_scope` false: `jobs.create_scope`, the response is invisible there, not gone).
    A response an operator cancelled (`cancelled_by_operator`: polled again after a release) that
    reads gone parks `operator_cancelled` again at once: its end is the operator's doing, never a
    loss that pays for a new create by itself."""
    polls = job.poll_count + 1
    if isinstance(outcome, Observed):
        d = _observed(job, outcome, s, polls)
        if d is None:
            facts: dict[str, Any] = {"status": outcome.status, "error": outcome.error,
                                     "error_code": outcome.error_code}
            why = f"provider reports {outcome.status}" + (f": {outcome.error}" if outcome.error else "")
            d = (_cancelled_again(job, polls, facts, why) if cancelled_by_operator else
                 _suspected_loss(job, polls, facts, why, loss, suspected_reads,
                                 outcome.failure is FailureCause.REFUSAL))
        if job.create_scope is None and scope:
            # A response taken over without a known scope (adopted, restored, older rows) lives
            # where this read found it: recorded at its first successful read.
            d = dataclasses.replace(d, changes={**d.changes, "create_scope": scope})
        return d
    if isinstance(outcome, Missing):
        if job.create_scope and scope and not in_scope:
            # The response lives in the scope its create was sent under; a read under another
            # (a rotated key, other credentials) cannot see it. Not a loss: wait.
            why = (f"{outcome.why}: read under {scope}, but the response was created under {job.create_scope}; "
                   "not taken as a loss, waiting for the credentials of its scope")
            return Decision(job.state, Reason.SCOPE_MISMATCH,
                            changes={"retry_count": 0, "last_error": why[:_ERROR_MAX]},
                            detail={"created_under": job.create_scope, "read_under": scope, "answer": outcome.why,
                                    "due_at": str(job.next_attempt_at)},
                            delay=max(s.poll_interval_seconds, SCOPE_RECHECK_SECONDS))
        facts, why, refused = {"status": "not_found", "answer": outcome.why, "read_under": scope}, outcome.why, False
        if cancelled_by_operator:
            return _cancelled_again(job, polls, facts, why)
    else:
        # Transient (429/5xx/timeout) or a rejected read: count the poll, back off, stay put.
        retry = job.retry_count + 1
        hinted = outcome.retry_after if isinstance(outcome, Transient) else None
        why = failure_text(outcome)
        delay = _backoff(retry, hinted, s, rng)
        return Decision(
            job.state, Reason.POLL_FAILED,
            changes={"poll_count": polls, "retry_count": retry, "last_error": why[:_ERROR_MAX]},
            detail={"why": why, "delay": round(delay, 3), "due_at": str(job.next_attempt_at)},
            delay=delay,
            cooldown=delay if hinted is not None else None,
        )
    return _suspected_loss(job, polls, facts, why, loss, suspected_reads, refused)


def _observed(job: Job, outcome: Observed, s: ReconcileSettings, polls: int) -> Decision | None:
    """A readable response's decision, or None for a gone one (a suspected loss)."""
    if outcome.live:
        seen = _STAGE_STATE[outcome.stage]
        # A response reported waiting again after it ran does not move the job back.
        to = seen if states.allowed(job.state, seen) else job.state
        return Decision(
            to, Reason.POLL,
            changes={"poll_count": polls, "retry_count": 0},
            detail={"status": outcome.status, "due_at": str(job.next_attempt_at)},
            delay=s.poll_interval_seconds,
        )
    if outcome.finished:
        return Decision(
            State.COMPLETED_NOT_RETRIEVED, Reason.PROVIDER_FINISHED,
            changes={"poll_count": polls, "retry_count": 0},
            detail={"status": outcome.status, "incomplete_reason": outcome.cut_reason,
                    "due_at": str(job.next_attempt_at)},
            go_on=True,
        )
    if not outcome.gone:
        why = f"the provider reports status {outcome.status[:64]!r}, which iipub does not know"
        return Decision(
            job.state, Reason.PROVIDER_UNEXPECTED_STATUS,
            changes={"poll_count": polls, "retry_count": 0, "last_error": why},
            detail={"status": outcome.status[:64], "due_at": str(job.next_attempt_at)},
            delay=s.poll_interval_seconds,
        )
    return None


def _cancelled_again(job: Job, polls: int, facts: dict[str, Any], why: str) -> Decision:
    d = quarantine(Reason.OPERATOR_CANCELLED,
                   f"{why}: response {job.response_id} was cancelled by an operator; not taken as a loss and not "
                   f"created again by itself (`iipub quarantine release {job.id} --verified-lost` pays for a new "
                   f"one, `iipub kill` ends the slot)", response_id=job.response_id, **facts)
    return Decision(d.to, d.reason, {**d.changes, "poll_count": polls}, d.detail)


def _suspected_loss(job: Job, polls: int, facts: dict[str, Any], why: str, loss: ProviderSettings,
                    suspected_reads: int, refused: bool) -> Decision:
    reads = suspected_reads + 1
    detail = {**facts, "response_id": job.response_id, "read": reads, "of": loss.loss_confirm_reads}
    if reads < loss.loss_confirm_reads:
        spacing = loss.loss_confirm_seconds / max(1, loss.loss_confirm_reads - 1)
        return Decision(job.state, Reason.LOSS_SUSPECTED,
                        changes={"poll_count": polls, "retry_count": 0, "last_error": why[:_ERROR_MAX]},
                        detail={**detail, "due_at": str(job.next_attempt_at)}, delay=spacing)
    if facts["status"] == "not_found" and job.create_scope is None:
        # Taken over without a known scope and never read since: the 404 may only say it lives in
        # another organization or project. Never a loss: it parks with the facts for a person.
        d = quarantine(Reason.SCOPE_UNKNOWN,
                       f"response {job.response_id} answers 404 under {facts.get('read_under') or 'this scope'}, "
                       f"but where it was created is not known (taken over, never read successfully): not taken as "
                       f"a loss. Find it in the dashboard of the project it was created in: put that project's "
                       f"credentials back (it is then read and kept), or `iipub jobs import-payload {job.id} FILE`; "
                       f"`iipub quarantine release {job.id} --verified-lost` only once it is known gone (one new "
                       f"paid create)", **detail)
        return Decision(d.to, d.reason, {**d.changes, "poll_count": polls}, d.detail)
    if refused:
        # Paying again would get the same answer: a human decides (regenerate after a fix, or kill).
        d = quarantine(Reason.PROVIDER_REFUSED, f"{why} (error code {facts.get('error_code') or 'none'})",
                       **detail)
        return Decision(d.to, d.reason, {**d.changes, "poll_count": polls}, d.detail)
    return Decision(
        State.PROVIDER_EXPIRED_OR_MISSING, Reason.LOSS_CONFIRMED,
        changes={"poll_count": polls, "retry_count": 0, "last_error": why[:_ERROR_MAX]},
        detail=detail, go_on=True,
    )


def on_output(job: Job, outcome: Observed, max_bytes: int | None = None) -> Decision:
    """Custody: the payload is stored on the job row, whatever it holds.

    Untrusted output must always be storable, or the job would be fetched again and again
    until the provider forgets it (and a new paid create follows). Text that cannot be
    encoded (lone surrogates) is stored with those code points backslash-escaped; text over
    `max_bytes` is stored cut to `max_bytes + 1` bytes. Either way validation then fails
    and the job parks in VALIDATION_FAILED_RETAINED; the journal keeps the original's size
    and hash."""
    # A refusal's text is what the provider gave (after any text that came with it: all is kept).
    text = "\n".join(t for t in (outcome.output_text, outcome.refusal) if t)
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
        "output_end": output_end(outcome),
    }
    if outcome.refusal is not None:
        detail["refusal"] = outcome.refusal
    if changes["output_end"] is not None:
        detail["output_end"] = changes["output_end"]
    if usage is not None:  # accumulated: a slot that needed two paid responses costs both
        changes.update(input_tokens=job.input_tokens + usage.input_tokens,
                       output_tokens=job.output_tokens + usage.output_tokens,
                       total_tokens=job.total_tokens + usage.total_tokens)
    detail["total_tokens"] = usage.total_tokens if usage else None
    if outcome.tier is not None:
        detail["service_tier"] = outcome.tier
    if outcome.completed_at is not None and outcome.created_at is not None:
        # The provider's clock: the dwell SLI maps its completion onto the database clock through
        # the create's acceptance (`status.dwell_samples`), so time it waited unseen counts.
        detail["provider_completed_at"] = outcome.completed_at
        detail["provider_created_at"] = outcome.created_at
    return Decision(State.RETRIEVED_NOT_VALIDATED, Reason.RETRIEVED, changes=changes, detail=detail, go_on=True)


# `jobs.output_end` of a response cut at the request's output cap (named after the product's key).
OUTPUT_CAP = "max_output_tokens"
REFUSAL = "refusal"
CONTENT_FILTER = "content_filter"  # the provider's content filter stopped the response


def output_end(outcome: Observed) -> str | None:
    """How a finished response ended when that decides more than validation can (`jobs.output_end`)."""
    if outcome.refusal is not None:
        return REFUSAL
    if outcome.at_cap:
        return OUTPUT_CAP
    if outcome.filtered:
        return CONTENT_FILTER
    return None


def before_validation(job: Job, product: Product | None) -> Decision | None:
    """RETRIEVED_NOT_VALIDATED, output in custody: a response cut at the product's output cap,
    or one in which the model refused, parks with its output kept (paying again would give the
    same answer until the cap or the prompt changes); None: validate as usual."""
    if job.output_end == OUTPUT_CAP:
        cap = product.output_token_cap() if product is not None else None
        return quarantine(
            Reason.OUTPUT_CAP_REACHED,
            f"the response {job.response_id} stopped at max_output_tokens ({cap or 'the cap'}) before its answer was "
            f"complete; its output is kept. Raise [[products]] max_output_tokens for {job.product!r}, then "
            f"`iipub regenerate {job.id} --reason …` (one new paid create)",
            response_id=job.response_id, max_output_tokens=cap)
    if job.output_end == CONTENT_FILTER:
        return quarantine(
            Reason.CONTENT_FILTERED,
            f"the provider's content filter stopped the response {job.response_id} before its answer was complete "
            f"(incomplete: content_filter); its output is kept. The same prompt is likely filtered again: change "
            f"{job.product!r}'s prompt (or the day's subject), then `iipub quarantine release {job.id} --verified-lost "
            f"--reason …` (one new paid create), or `iipub kill {job.id} --reason …`",
            response_id=job.response_id, output_end=CONTENT_FILTER)
    if job.output_end == REFUSAL:
        return quarantine(
            Reason.PROVIDER_REFUSED,
            f"the model refused in its answer: {job.payload or ''}"[:_ERROR_MAX],
            response_id=job.response_id, refusal=job.payload)
    return None


def after_expired(job: Job, budgets: Budgets) -> Decision:
    """PROVIDER_EXPIRED_OR_MISSING: try again on the same row if the budget allows."""
    if job.generation_attempts < budgets.max_generation_attempts:
        return Decision(
            State.CREATE_ELIGIBLE, Reason.RECREATE_AFTER_LOSS,
            changes={"response_id": None, "poll_count": 0, "retry_count": 0},
            detail={"lost_response_id": job.response_id, "attempts_used": job.generation_attempts},
            go_on=True,
        )
    return quarantine(
        Reason.GENERATION_BUDGET_EXHAUSTED,
        f"response {job.response_id} lost and all {budgets.max_generation_attempts} paid creates used",
        lost_response_id=job.response_id,
    )


def after_delete(
    job: Job, outcome: Deleted | Missing | Transient | Rejected, s: ReconcileSettings,
    rng: random.Random | None = None,
) -> Decision:
    if isinstance(outcome, (Deleted, Missing)):
        return Decision(State.DELETED, Reason.REMOTE_DELETED, changes={"retry_count": 0, "last_error": None},
                        detail={"response_id": job.response_id, "was_missing": isinstance(outcome, Missing)})
    # Network trouble: retry forever; what is published stays published.
    retry = job.retry_count + 1
    hinted = outcome.retry_after if isinstance(outcome, Transient) else None
    why = failure_text(outcome)
    delay = _backoff(retry, hinted, s, rng)
    return Decision(State.CLEANUP_PENDING, Reason.CLEANUP_RETRY,
                    changes={"retry_count": retry, "last_error": why[:_ERROR_MAX]},
                    detail={"why": why, "delay": round(delay, 3)}, delay=delay,
                    cooldown=delay if hinted is not None else None)


def after_refetch(
    job: Job, outcome: Observed | Missing | Transient | Rejected, s: ReconcileSettings,
    max_bytes: int | None = None, rng: random.Random | None = None, *,
    loss: ProviderSettings = _DEFAULT_PROVIDER, suspected_reads: int = 0, scope: str | None = None,
    in_scope: bool = True, cancelled_by_operator: bool = False,
) -> Decision:
    """COMPLETED_NOT_RETRIEVED found on its own (e.g. after a crash): the output was fetched again."""
    if isinstance(outcome, Observed) and outcome.finished:
        return on_output(job, outcome, max_bytes)
    d = after_poll(job, outcome, s, rng, loss=loss, suspected_reads=suspected_reads, scope=scope, in_scope=in_scope,
                   cancelled_by_operator=cancelled_by_operator)
    if d.to in POLLING:  # the provider cannot un-finish; keep trying to fetch
        d = Decision(State.COMPLETED_NOT_RETRIEVED, d.reason, d.changes, d.detail, d.delay, d.go_on, d.cooldown)
    return d


def custody_while_parked(job: Job, outcome: Observed | Missing | Transient | Rejected,
                         max_bytes: int | None = None) -> Decision | None:
    """A parked job's response was read (the custody watch, or its webhook): finished output is
    stored and the job stays parked. Quarantined, it keeps its state, reason and explanation,
    now with its output safe; suspended while its response ran, it resumes into validation.
    A 404 or a dead response is reported once (`parked_response_gone`), never acted on: no loss
    is confirmed and nothing is paid for it while the job is parked. Anything else (still
    running, a transient failure, a status iipub does not know) decides nothing."""
    assert job.state in states.CUSTODY_WATCHED
    named = outcome.metadata.get("iipub_slot") if isinstance(outcome, Observed) else None
    if named is not None and named != f"{job.product}/{job.edition_date.isoformat()}":
        return None  # another slot's response (a restore's ledger pointed elsewhere): never stored here
    if isinstance(outcome, Observed) and outcome.finished:
        d = on_output(job, outcome, max_bytes)
        changes = {k: v for k, v in d.changes.items() if k not in ("retry_count", "last_error")}
        detail: dict[str, Any] = {**d.detail, "while_parked": job.state.value, "response_id": job.response_id}
        if job.quarantine_reason:
            detail["quarantine_reason"] = job.quarantine_reason
        if job.state == State.MANUALLY_SUSPENDED:
            detail["while_suspended"] = True
            if job.suspended_from in {s.value for s in states.RESUMES_INTO_VALIDATION}:
                changes["suspended_from"] = State.RETRIEVED_NOT_VALIDATED.value
        return Decision(job.state, Reason.RETRIEVED, changes, detail)
    facts = {"response_id": job.response_id, "quarantine_reason": job.quarantine_reason}
    if isinstance(outcome, Missing):
        return Decision(job.state, Reason.PARKED_RESPONSE_GONE, detail={**facts, "status": "not_found",
                                                                         "why": outcome.why})
    if isinstance(outcome, Observed) and outcome.gone:
        return Decision(job.state, Reason.PARKED_RESPONSE_GONE, detail={**facts, "status": outcome.status,
                                                                         "why": f"provider reports {outcome.status}"})
    return None


def payment_refused(job: Job, ruling: Ruling) -> Decision:
    """CREATE_ELIGIBLE, and the payment authority refuses the create: park the job with the
    evidence and the remedy that pays nothing."""
    return quarantine(Reason.PAYMENT_REFUSED, ruling.line(), **ruling.detail(), attempts_here=job.generation_attempts)


def replanned(job: Job, recorded: str, deployed: str) -> Decision:
    """CREATE_ELIGIBLE, and the product's configuration changed since the job became eligible:
    nothing was paid and no output exists, so the slot is planned again under the deployed
    configuration, journaled with both fingerprints (never sent silently under a configuration
    it was not planned for; a job holding output parks `config_drift` instead: `config_check`)."""
    return Decision(State.CREATE_ELIGIBLE, Reason.CONFIG_REPLANNED, changes={"config_fingerprint": deployed},
                    detail={"recorded_fingerprint": recorded, "deployed_fingerprint": deployed,
                            "attempts_here": job.generation_attempts}, go_on=True)


def restored_behind_ledger(job: Job, spend: SlotSpend, ahead: Sequence[str] = (), remedy: str = "") -> Decision:
    """CREATE_ELIGIBLE, but the spend ledger knows of paid creates, custody, saves or publications
    this row has forgotten (a database restored from a backup): no create; park it with what the
    ledger knows and what an operator can do without paying again. The lease is kept so the job
    can be adopted at once from the provider or the live site (`adopt_restored`, `adopt_published`)."""
    first = f"the spend ledger records {spend.charged} paid create(s) for {spend.slot}"
    facts = [f"{first}; this row knows of {job.generation_attempts}"]
    if spend.response_id:
        facts.append(f"last accepted response {spend.response_id}")
    if ahead:
        facts.append("it also records " + ", ".join(ahead) + " this database has forgotten")
    why = "; ".join(facts) + (f". Without paying: {remedy}" if remedy else "")
    d = quarantine(Reason.RESTORED_BEHIND_LEDGER, why,
                   ledger_charged=spend.charged, ledger_response_id=spend.response_id,
                   ledger_job_ids=spend.job_ids[-3:], attempts_here=job.generation_attempts,
                   ledger=spend.evidence(), ahead=list(ahead), remedy=remedy or None, ledger_ack=spend.counts())
    return Decision(d.to, d.reason, {**d.changes, "response_id": spend.response_id}, d.detail, go_on=True)


def adopt_restored(job: Job, spend: SlotSpend, outcome: Observed | Missing | Transient | Rejected,
                   scope: str | None = None) -> Decision | None:
    """QUARANTINED restored_behind_ledger: adopt the ledger's response when the provider still
    has it and its metadata names this slot and config; None leaves the job for an operator."""
    if not isinstance(outcome, Observed) or spend.response_id is None:
        return None
    meta = outcome.metadata
    if meta.get("iipub_slot") != spend.slot or outcome.gone:
        return None
    if spend.fingerprint and meta.get("iipub_fingerprint") not in (None, spend.fingerprint):
        return None
    to = _STAGE_STATE.get(outcome.stage, State.COMPLETED_NOT_RETRIEVED if outcome.finished else None)
    if to is None:
        return None
    changes: dict[str, Any] = {"response_id": spend.response_id, "generation_attempts": spend.charged,
                               "poll_count": 0, "retry_count": 0, "quarantine_reason": None, "last_error": None,
                               "create_scope": scope}  # this read succeeded under `scope`: where it lives
    if meta.get("iipub_fingerprint"):
        changes["config_fingerprint"] = meta["iipub_fingerprint"]
    return Decision(to, Reason.RESTORED_ADOPTED, changes,
                    {"response_id": spend.response_id, "status": outcome.status, "attempt": spend.response_attempt,
                     "attempts_added": spend.charged - job.generation_attempts, "ledger_ack": spend.counts()},
                    delay=0, go_on=outcome.finished)


def adopt_published(job: Job, spend: SlotSpend, live: Mapping[str, str] | None,
                    remote: Missing | Observed | None) -> Decision | None:
    """QUARANTINED restored_behind_ledger, the ledger's response gone at the provider (`remote`
    is a 404, a dead response, or there is none to read), and the live site still serving every
    edition the ledger recorded published (`live`, by language): the slot is done. The job is
    closed as published, nothing paid or published again; None leaves it for an operator."""
    if not live or (isinstance(remote, Observed) and not remote.gone):
        return None
    return Decision(State.DELETED, Reason.RESTORED_PUBLISHED,
                    {"generation_attempts": max(job.generation_attempts, spend.charged), "quarantine_reason": None,
                     "last_error": None, "retry_count": 0},
                    {"editions": dict(live), "response_id": spend.custody_response_id or spend.response_id,
                     "remote": "none" if remote is None else ("not_found" if isinstance(remote, Missing)
                                                             else remote.status),
                     "attempts_added": max(0, spend.charged - job.generation_attempts),
                     "ledger_ack": spend.counts()})


def on_validation(job: Job, result: validate.Validation) -> Decision:
    """RETRIEVED_NOT_VALIDATED: a failure parks with the payload kept (never pay twice for
    known-bad output)."""
    if result.ok:
        return Decision(State.READY_TO_COMPOSE, Reason.VALIDATED, go_on=True)
    reasons = list(result.reasons)
    return Decision(
        State.VALIDATION_FAILED_RETAINED, Reason.VALIDATION_FAILED,
        changes={"last_error": "; ".join(reasons)[:_ERROR_MAX]},
        detail={"reasons": reasons, "payload_sha256": job.payload_sha256},
    )


def on_save_conflict(why: str) -> Decision:
    """The save was rolled back whole: an edition for this slot exists already."""
    return quarantine(Reason.EDITION_CONFLICT, why)


def on_delivered() -> Decision:
    """SAVED_NOT_PUBLIC: the relay delivered every outbox event of the job."""
    return Decision(State.PUBLISHED, Reason.ALL_EVENTS_DELIVERED, delay=0)


def on_published(job: Job) -> Decision:
    return Decision(State.CLEANUP_PENDING, Reason.CLEANUP_START, go_on=True)


def before_cleanup(job: Job) -> Decision | None:
    """CLEANUP_PENDING: with no remote response there is nothing to delete; None means delete it."""
    if not job.response_id:
        return Decision(State.DELETED, Reason.NOTHING_REMOTE)
    return None


def cancel_before_delete(job: Job) -> bool:
    """A killed job whose output never reached custody: stop the provider's spend first."""
    return job.kill_requested and job.payload is None


# -- shadow mode ----------------------------------------------------------------------------

# How long a shadowed step waits before it is looked at (and journaled) again: at cutover, a
# slot shadow mode held back goes ahead within this long.
SHADOW_RECHECK_SECONDS = 300.0


def shadowed(job: Job, reason: Reason, **detail: Any) -> Decision:
    """Shadow mode: journal what this step would do (a create, a save and publication, a remote
    delete or cancel) and stay put; the job is looked at again after SHADOW_RECHECK_SECONDS."""
    assert reason in states.SHADOW_REASONS
    return Decision(job.state, reason, detail={"slot": f"{job.product}/{job.edition_date.isoformat()}", **detail},
                    delay=SHADOW_RECHECK_SECONDS)


# -- proof from a verified webhook ------------------------------------------------------


def proves_unknown_create(job: Job, observed: Observed) -> bool:
    """Whether `observed` is the response a create of `job` with an unknown outcome made: its
    metadata names this job, the attempt that was charged and the config it was sent with."""
    meta = observed.metadata
    return (job.state == State.QUARANTINED
            and job.quarantine_reason in states.AMBIGUOUS_CREATE
            and job.response_id is None
            and meta.get("iipub_job_id") == job.id
            and meta.get("iipub_attempt") == str(job.generation_attempts)
            and job.config_fingerprint is not None
            and meta.get("iipub_fingerprint") == job.config_fingerprint)


def auto_link(job: Job, observed: Observed, via: str, scope: str | None = None) -> Decision | None:
    """QUARANTINED create_outcome_unknown / crashed_during_create, and a verified event proved
    which response the create made (`proves_unknown_create`): adopt it, nothing is paid again.
    A finished one goes straight to custody; any other (a failure, a status iipub does not
    know) is adopted as ACCEPTED and read again at once, so the poll's own decisions (loss
    confirmation, the generation budget) apply to it exactly as to any other response."""
    if not proves_unknown_create(job, observed):
        return None
    to = _STAGE_STATE.get(observed.stage) or (State.COMPLETED_NOT_RETRIEVED if observed.finished else State.ACCEPTED)
    # `scope`: where the proving read was made: the response lives there.
    changes: dict[str, Any] = {"response_id": observed.response_id, "poll_count": 0, "retry_count": 0,
                               "quarantine_reason": None, "last_error": None, "create_scope": scope}
    if observed.usage is not None:
        changes.update(input_tokens=observed.usage.input_tokens, output_tokens=observed.usage.output_tokens,
                       total_tokens=observed.usage.total_tokens)
    return Decision(to, Reason.AUTO_LINKED, changes,
                    {"response_id": observed.response_id, "status": observed.status, "via": via,
                     "quarantine_reason": job.quarantine_reason, "attempt": job.generation_attempts},
                    delay=0, go_on=to in (State.COMPLETED_NOT_RETRIEVED, State.ACCEPTED))
