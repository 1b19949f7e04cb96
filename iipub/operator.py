"""Operator actions: the remedies a human applies to one job, and backfills.

Every action leases the job like any worker (so it never races a live tick), writes
through `Store.transition(..., operator=True)` and journals who acted and why in the
event detail. Preconditions are checked before the lease, so a refusal writes nothing.
Provider calls reuse the adapter's closed set of outcomes and the tick's decisions
(`handlers.on_output`), so adopted or harvested output enters the normal pipeline.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import sqlalchemy as sa

from . import db, handlers, states
from .config import Settings
from .errors import JobTaken, OperatorRefused, UsageError
from .provider import NotFound, Observed, Provider, ReadOutcome, Rejected, Transient
from .states import State
from .store import Job, Store

FINISHED = ("completed", "incomplete")  # the provider holds output we must take custody of
DEAD = ("failed", "cancelled")  # nothing to adopt
POLLING_STATUS = {"queued": State.QUEUED, "in_progress": State.IN_PROGRESS}
# A typo in a date must not schedule decades of paid generations.
MAX_BACKFILL_DAYS = 366
_LEASE_TRIES = 3


class ReleaseMode(enum.StrEnum):
    VERIFIED_LOST = "verified-lost"
    LINK = "link"
    RESUME_POLLING = "resume-polling"


@dataclass(frozen=True)
class Quarantined:
    job: Job
    age_seconds: float  # since the job entered QUARANTINED, by the database clock

    def public(self) -> dict[str, Any]:
        return {**self.job.public(), "age_seconds": round(self.age_seconds, 3)}


@dataclass
class BackfillReport:
    product: str
    from_date: dt.date
    to_date: dt.date
    dry_run: bool
    created: list[dt.date] = field(default_factory=list)  # would be created, on a dry run
    present: list[dt.date] = field(default_factory=list)


Progress = Callable[[dt.date, bool], None]  # (date, created or would be created)


class Operator:
    """Operator actions against one database. The provider is only needed by
    `release(LINK)` and `cancel`; without one, it is built on first use (after the
    API key check, before any lease) and closed by `close()`."""

    def __init__(self, settings: Settings, engine: sa.Engine, provider: Provider | None = None) -> None:
        self.settings = settings
        self.engine = engine
        self._provider = provider
        self._own_provider = False

    def close(self) -> None:
        if self._own_provider and self._provider is not None:
            self._provider.close()
            self._provider = None

    def __enter__(self) -> Operator:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- reads ----------------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        """One job by id or unique prefix (NotFound otherwise)."""
        return Store(self.engine, "operator:read").get(job_id)

    def quarantine_list(self) -> list[Quarantined]:
        """Quarantined jobs, longest waiting first."""
        store = Store(self.engine, "operator:list")
        found = store.list_jobs(state=State.QUARANTINED.value, limit=100_000)
        with self.engine.connect() as conn:
            now = db.read_now(conn)
        found.sort(key=lambda j: (j.state_entered_at, j.id))
        return [Quarantined(j, max(0.0, (now - _naive(j.state_entered_at)).total_seconds())) for j in found]

    # -- leaving quarantine ---------------------------------------------------------

    def release(self, job_id: str, mode: ReleaseMode | str, reason: str, by: str,
                link_response_id: str | None = None) -> Job:
        mode = ReleaseMode(mode)
        if (mode == ReleaseMode.LINK) != bool(link_response_id):
            raise UsageError("a response id is required with --link, and only with --link")
        if mode == ReleaseMode.VERIFIED_LOST:
            return self._release_verified_lost(job_id, reason, by)
        if mode == ReleaseMode.RESUME_POLLING:
            return self._release_resume_polling(job_id, reason, by)
        assert link_response_id is not None
        return self._release_link(job_id, link_response_id, reason, by)

    def _release_verified_lost(self, job_id: str, reason: str, by: str) -> Job:
        max_gen = self.settings.budgets.max_generation_attempts

        def check(job: Job) -> None:
            _require_quarantined(job)
            if job.generation_attempts >= max_gen:
                raise OperatorRefused(
                    f"job {job.id}: all {max_gen} paid creates are used ({job.generation_attempts}/{max_gen}); "
                    "a new create would exceed the generation budget. Raise budgets.max_generation_attempts "
                    "or `iipub kill` the job"
                )

        store, job = self._lease(job_id, by, check)
        return self._finish(store, store.transition(
            job, State.CREATE_ELIGIBLE, reason="operator_release_verified_lost", operator=True, delay=0,
            changes={"response_id": None, "poll_count": 0, "quarantine_reason": None, "retry_count": 0,
                     "last_error": None},
            detail=_who(by, reason, quarantine_reason=job.quarantine_reason, lost_response_id=job.response_id,
                        attempts_used=job.generation_attempts),
        ))

    def _release_resume_polling(self, job_id: str, reason: str, by: str) -> Job:
        def check(job: Job) -> None:
            _require_quarantined(job)
            if not job.response_id:
                raise OperatorRefused(
                    f"job {job.id} has no response id to poll ({job.quarantine_reason}); use --link RESP_ID "
                    "if you found its response, or --verified-lost if it never ran"
                )
            if job.config_fingerprint and job.config_fingerprint != self.settings.product(job.product).fingerprint():
                # The first poll would quarantine it again as config_drift.
                raise OperatorRefused(
                    f"job {job.id}: the deployed config of {job.product} differs from the one its response was "
                    "generated under; redeploy that config, or use --verified-lost to generate under the new one"
                )

        store, job = self._lease(job_id, by, check)
        return self._finish(store, store.transition(
            job, State.ACCEPTED, reason="operator_resume_polling", operator=True, delay=0,
            changes={"poll_count": 0, "quarantine_reason": None, "retry_count": 0, "last_error": None},
            detail=_who(by, reason, quarantine_reason=job.quarantine_reason, response_id=job.response_id,
                        polls_before=job.poll_count),
        ))

    def _release_link(self, job_id: str, response_id: str, reason: str, by: str) -> Job:
        provider = self._need_provider()  # the key check comes before any lease
        seen = self.get(job_id)
        _require_quarantined(seen)
        # Read-only and safe to repeat, so it happens before the lease: a refusal writes nothing.
        try:
            outcome = provider.retrieve(response_id)
        except ValueError:
            raise OperatorRefused(f"{response_id!r} is not a well-formed response id") from None
        observed = _adoptable(seen, response_id, outcome)

        def check(job: Job) -> None:
            _require_quarantined(job)

        store, job = self._lease(seen.id, by, check)
        changes: dict[str, Any] = {
            "response_id": response_id, "poll_count": 0, "quarantine_reason": None, "retry_count": 0,
            "last_error": None,
        }
        fingerprint = observed.metadata.get("iipub_fingerprint")
        if fingerprint:
            # Compare future polls with the config this response was generated under.
            changes["config_fingerprint"] = fingerprint
        if observed.usage is not None:
            changes.update(input_tokens=observed.usage.input_tokens, output_tokens=observed.usage.output_tokens,
                           total_tokens=observed.usage.total_tokens)
        detail = _who(by, reason, quarantine_reason=job.quarantine_reason, previous_response_id=job.response_id,
                      response_id=response_id, status=observed.status,
                      attempt=observed.metadata.get("iipub_attempt"))
        if observed.status in POLLING_STATUS:
            return self._finish(store, store.transition(
                job, POLLING_STATUS[observed.status], reason="operator_link", operator=True, delay=0,
                changes=changes, detail=detail))
        linked = store.transition(job, State.COMPLETED_NOT_RETRIEVED, reason="operator_link", operator=True,
                                  changes=changes, detail=detail, keep_lease=True, delay=0)
        return self._finish(store, self._harvest(store, linked, observed, by, reason))

    # -- suspend / resume -----------------------------------------------------------

    def suspend(self, job_id: str, reason: str, by: str) -> Job:
        def check(job: Job) -> None:
            if job.state == State.MANUALLY_SUSPENDED:
                raise OperatorRefused(f"job {job.id} is already suspended (from {job.suspended_from})")
            if job.state == State.CREATE_IN_FLIGHT:
                raise OperatorRefused(
                    f"job {job.id} is in CREATE_IN_FLIGHT: a paid create is being sent; retry in a minute, "
                    "once the tick has recorded its outcome"
                )
            if job.state not in states.SUSPENDABLE:
                raise OperatorRefused(f"job {job.id} is {job.state}: there is nothing left to suspend")

        store, job = self._lease(job_id, by, check)
        return self._finish(store, store.transition(
            job, State.MANUALLY_SUSPENDED, reason="operator_suspend", operator=True,
            changes={"suspended_from": job.state.value}, detail=_who(by, reason, suspended_from=job.state.value),
        ))

    def resume(self, job_id: str, by: str, reason: str | None = None) -> Job:
        def check(job: Job) -> None:
            if job.state != State.MANUALLY_SUSPENDED:
                raise OperatorRefused(f"job {job.id} is {job.state}, not suspended; nothing to resume")
            if not job.suspended_from or job.suspended_from not in State.__members__:
                raise OperatorRefused(f"job {job.id} does not record the state it was suspended from")

        store, job = self._lease(job_id, by, check)
        back = State(job.suspended_from)
        return self._finish(store, store.transition(
            job, back, reason="operator_resume", operator=True, delay=0, changes={"suspended_from": None},
            detail=_who(by, reason, resumed_to=back.value),
        ))

    # -- cancel / kill --------------------------------------------------------------

    def cancel(self, job_id: str, reason: str, by: str) -> Job:
        """Best-effort remote cancel. Whatever the provider says it actually did decides:
        finished anyway -> harvested (paid work is never discarded); cancelled, failed or
        gone -> QUARANTINED (operator_cancelled); a transient failure -> refused, nothing
        changed but the lease taken and given back."""
        provider = self._need_provider()

        def check(job: Job) -> None:
            if job.state not in states.POLLING:
                raise OperatorRefused(
                    f"job {job.id} is {job.state}: only a job waiting on the provider (ACCEPTED, QUEUED, "
                    "IN_PROGRESS) can be cancelled; see `iipub kill` or `iipub suspend`"
                )

        store, job = self._lease(job_id, by, check)
        assert job.response_id
        try:
            outcome = _actual_status(provider, job.response_id)
        except OperatorRefused:
            store.release(job)
            raise
        base = _who(by, reason, response_id=job.response_id)
        if isinstance(outcome, NotFound):
            return self._finish(store, self._cancelled(store, job, by, reason, {**base, "why_gone": outcome.why},
                                                       f"response {job.response_id} not found at the provider"))
        if outcome.status in FINISHED:
            # The provider finished before the cancel landed: take custody now.
            done = store.transition(
                job, State.COMPLETED_NOT_RETRIEVED, reason="operator_cancel", operator=True, keep_lease=True,
                delay=0, changes={"retry_count": 0}, detail={**base, "status": outcome.status, "race": True},
            )
            return self._finish(store, self._harvest(store, done, outcome, by, reason))
        note = f"provider reports {outcome.status}"
        if outcome.status not in DEAD:
            note += " after the cancel request; the response id is kept (release --resume-polling to watch it)"
        return self._finish(store, self._cancelled(store, job, by, reason, {**base, "status": outcome.status}, note))

    def kill(self, job_id: str, reason: str, by: str) -> Job:
        """Terminate: the job will not publish. The next tick cancels and deletes any remote data."""

        def check(job: Job) -> None:
            if job.state in (State.SAVED_NOT_PUBLIC, State.PUBLISHED, State.CLEANUP_PENDING, State.DELETED):
                raise OperatorRefused(
                    f"job {job.id} is {job.state}: the edition is already saved; kill only stops jobs "
                    "before their edition is saved"
                )
            if job.state == State.CREATE_IN_FLIGHT:
                raise OperatorRefused(
                    f"job {job.id} is in CREATE_IN_FLIGHT: a paid create is being sent; retry in a minute, "
                    "once the tick has recorded its response id"
                )
            if job.state not in states.KILLABLE:
                raise OperatorRefused(f"job {job.id} is {job.state} and cannot be killed")

        store, job = self._lease(job_id, by, check)
        return self._finish(store, store.transition(
            job, State.CLEANUP_PENDING, reason="operator_kill", operator=True, delay=0,
            changes={"kill_requested": True, "suspended_from": None, "retry_count": 0},
            detail=_who(by, reason, killed_in=job.state.value, response_id=job.response_id,
                        had_payload=job.payload is not None),
        ))

    # -- out of a validation failure ------------------------------------------------

    def revalidate(self, job_id: str, reason: str, by: str) -> Job:
        """Validate the retained payload again (after the product's rules were fixed): no
        provider call, no money. The next tick validates and, if it passes, publishes."""

        def check(job: Job) -> None:
            _require_state(job, State.VALIDATION_FAILED_RETAINED, "revalidate")

        store, job = self._lease(job_id, by, check)
        return self._finish(store, store.transition(
            job, State.RETRIEVED_NOT_VALIDATED, reason="operator_revalidate", operator=True, delay=0,
            changes={"last_error": None}, detail=_who(by, reason, payload_sha256=job.payload_sha256),
        ))

    def regenerate(self, job_id: str, reason: str, by: str) -> Job:
        """Pay for a new generation of a slot whose output failed validation, within the
        generation budget. The failed payload's hash stays in the journal."""
        max_gen = self.settings.budgets.max_generation_attempts

        def check(job: Job) -> None:
            _require_state(job, State.VALIDATION_FAILED_RETAINED, "regenerate")
            if job.generation_attempts >= max_gen:
                raise OperatorRefused(
                    f"job {job.id}: all {max_gen} paid creates are used ({job.generation_attempts}/{max_gen}); "
                    "raise budgets.max_generation_attempts or `iipub kill` the job"
                )

        store, job = self._lease(job_id, by, check)
        return self._finish(store, store.transition(
            job, State.CREATE_ELIGIBLE, reason="operator_regenerate", operator=True, delay=0,
            changes={"response_id": None, "poll_count": 0, "retry_count": 0, "payload": None,
                     "payload_sha256": None, "composed": None, "composed_sha256": None, "last_error": None},
            detail=_who(by, reason, failed_payload_sha256=job.payload_sha256, failed_response_id=job.response_id,
                        attempts_used=job.generation_attempts),
        ))

    # -- backfill -------------------------------------------------------------------

    def backfill(self, product: str, from_date: dt.date, to_date: dt.date, *, dry_run: bool = False,
                 today: dt.date | None = None, progress: Progress | None = None) -> BackfillReport:
        """Create the missing slots from `from_date` to `to_date` (inclusive). Past dates get
        backfill priority; today's slot, if in range, keeps its normal priority."""
        p = self.settings.product(product)  # ConfigError names the configured products
        if today is None:
            with self.engine.connect() as conn:
                today = db.read_now(conn).date()
        if from_date > to_date:
            raise UsageError(f"--from {from_date} is after --to {to_date}")
        if to_date > today:
            raise UsageError(f"--to {to_date} is in the future (today is {today} by the database clock)")
        days = (to_date - from_date).days + 1
        if days > MAX_BACKFILL_DAYS:
            raise UsageError(f"{days} days requested; backfill at most {MAX_BACKFILL_DAYS} days per run")
        store = Store(self.engine, "operator:backfill")
        report = BackfillReport(p.name, from_date, to_date, dry_run)
        for i in range(days):
            day = from_date + dt.timedelta(days=i)
            if dry_run:
                created = not store.list_jobs(product=p.name, day=day, limit=1)
            else:
                created = store.schedule(p, day, backfill=day < today)
            (report.created if created else report.present).append(day)
            if progress is not None:
                progress(day, created)
        return report

    # -- internals ------------------------------------------------------------------

    def _need_provider(self) -> Provider:
        if self._provider is None:
            key = self.settings.require_api_key()
            self._provider = Provider(self.settings.provider, key)
            self._own_provider = True
        return self._provider

    def _lease(self, job_id: str, by: str, check: Callable[[Job], None]) -> tuple[Store, Job]:
        """Read, check the preconditions, and take the lease on exactly the version checked."""
        if not by or not by.strip():
            raise UsageError("--by must name who is acting")
        store = Store(self.engine, _worker(by), self.settings.reconcile.lease_seconds)
        for _ in range(_LEASE_TRIES):
            job = store.get(job_id)
            check(job)
            if job.lease_owner and job.lease_expiry is not None:
                with self.engine.connect() as conn:
                    now = db.read_now(conn)
                if _naive(job.lease_expiry) >= now:
                    raise JobTaken(
                        f"job {job.id} is leased by {job.lease_owner} until "
                        f"{_naive(job.lease_expiry).isoformat(timespec='seconds')}Z; retry in a minute"
                    )
            leased = store.acquire_lease(job.id, job.version, operator=True)
            if leased is not None:
                return store, leased
            # Someone wrote between our read and our claim: look again.
        raise JobTaken(f"job {job_id} keeps changing under us (a worker is active on it); retry in a minute")

    def _harvest(self, store: Store, job: Job, observed: Observed, by: str, reason: str) -> Job:
        """COMPLETED_NOT_RETRIEVED -> RETRIEVED_NOT_VALIDATED with the payload, due now, so the
        next tick validates and publishes it like any other output."""
        if observed.output_text is None:
            # A cancel reply may omit the output; fetch the full response once.
            assert job.response_id
            again = _finished_output(self._need_provider(), job.response_id)
            if again is None:
                store.release(job)  # COMPLETED_NOT_RETRIEVED: the next tick fetches it
                return job
            observed = again
        d = handlers.on_output(job, observed, self.settings.product(job.product).max_output_bytes)
        return store.transition(job, d.to, reason="operator_harvest", operator=True, changes=d.changes,
                                detail={**d.detail, **_who(by, reason)}, delay=0)

    def _cancelled(self, store: Store, job: Job, by: str, reason: str, detail: Mapping[str, Any],
                   note: str) -> Job:
        d = handlers.quarantine("operator_cancelled", f"cancelled by {by}: {reason} ({note})")
        return store.transition(job, d.to, reason="operator_cancel", operator=True, changes=d.changes,
                                detail={**detail, "note": note})

    def _finish(self, store: Store, job: Job) -> Job:
        # The row as stored (times set by the database), not the in-memory copy.
        return store.get(job.id)


def _finished_output(provider: Provider, response_id: str) -> Observed | None:
    """The finished response with its output, or None if it cannot be read now."""
    outcome = provider.retrieve(response_id)
    if isinstance(outcome, Observed) and outcome.status in FINISHED and outcome.output_text is not None:
        return outcome
    return None


def _actual_status(provider: Provider, response_id: str) -> Observed | NotFound:
    """Cancel, then make sure we know the response's real status (cancelling a finished
    response answers 400: read it instead). Raises OperatorRefused when we cannot tell."""
    outcome: ReadOutcome = provider.cancel(response_id)
    if isinstance(outcome, Transient):
        raise OperatorRefused(f"cancel of {response_id} failed, nothing changed; retry: {outcome.why}")
    if isinstance(outcome, NotFound):
        return outcome
    if isinstance(outcome, Observed) and (outcome.status in DEAD or
                                          (outcome.status in FINISHED and outcome.output_text is not None)):
        return outcome
    rejected = outcome if isinstance(outcome, Rejected) else None
    again = provider.retrieve(response_id)
    if isinstance(again, (Observed, NotFound)):
        return again
    why = again.why if isinstance(again, Transient) else f"HTTP {again.status}: {again.why}"
    first = f"cancel answered HTTP {rejected.status}: {rejected.why}; " if rejected else ""
    raise OperatorRefused(f"cannot tell what happened to {response_id}: {first}retrieve failed: {why}; "
                          "nothing changed, retry")


def _adoptable(job: Job, response_id: str, outcome: ReadOutcome) -> Observed:
    """The response `--link` may adopt: readable, naming this job, and not dead."""
    if isinstance(outcome, NotFound):
        raise OperatorRefused(f"response {response_id} not found at the provider (expired, deleted or never "
                              "existed); nothing changed")
    if isinstance(outcome, Transient):
        raise OperatorRefused(f"could not read response {response_id}: {outcome.why}; nothing changed, retry")
    if isinstance(outcome, Rejected):
        raise OperatorRefused(f"could not read response {response_id}: HTTP {outcome.status}: {outcome.why}")
    owner = outcome.metadata.get("iipub_job_id")
    if owner != job.id:
        named = f"names job {owner}" if owner else "carries no iipub_job_id metadata"
        raise OperatorRefused(f"response {response_id} {named}, not job {job.id}; refusing to link it")
    if outcome.status in DEAD:
        raise OperatorRefused(f"response {response_id} is {outcome.status}: there is no output to adopt; "
                              "use --verified-lost to generate again")
    if outcome.status not in FINISHED and outcome.status not in POLLING_STATUS:
        raise OperatorRefused(f"response {response_id} has unknown status {outcome.status!r}")
    return outcome


def _require_quarantined(job: Job) -> None:
    if job.state != State.QUARANTINED:
        raise OperatorRefused(f"job {job.id} is {job.state}, not QUARANTINED; release applies only to "
                              "quarantined jobs")


def _who(by: str, why: str | None, **extra: Any) -> dict[str, Any]:
    return {"by": by, "why": why, **{k: v for k, v in extra.items() if v is not None}}


def _worker(by: str) -> str:
    return f"operator:{by.strip()}"[:128]


def _naive(t: dt.datetime) -> dt.datetime:
    return t.replace(tzinfo=None) if t.tzinfo else t


def _require_state(job: Job, state: State, action: str) -> None:
    if job.state != state:
        raise OperatorRefused(f"job {job.id} is {job.state}; only a {state} job can {action}")
