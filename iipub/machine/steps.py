"""What each state's step does in a sweep: the provider call or database write around one
`decisions` decision, and the table of steps by state. `sweep` loads this module
with the first job it has leased, so an idle run never imports the decisions, validation and
outbox machinery behind it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager

import structlog

from iipub.core.errors import Contention, DatabaseUnavailable, LeaseLost
from iipub.machine import decisions
from iipub.machine.applying import apply
from iipub.machine.decisions import Decision
from iipub.machine.run.creates import Creates
from iipub.machine.run.run_context import RunContext, SweepContext
from iipub.machine.run.shared_cool_down import SharedCoolDown
from iipub.model.jobs import Job, slot_opened
from iipub.model.states import Reason, State
from iipub.money import budgets, holds, ledger, paying
from iipub.money.authority import Evidence, Route
from iipub.provider.outcomes import (
    Accepted,
    CreateOutcome,
    CreateRequest,
    Missing,
    Observed,
    ReadOutcome,
    RefusalKind,
    Refused,
    Rejected,
    Standing,
    Transient,
)
from iipub.settings.config import PLACEHOLDER_KEY_LINE, Product, max_output_bytes
from iipub.store import installation, spend_rows
from iipub.store.deliveries import Deliveries
from iipub.store.handles import Connection
from iipub.store.job_store import Store

log = structlog.get_logger("iipub.reconcile")
__all__ = ["STEPS", "StepFn", "apply", "custody_watch", "drive", "hold", "run", "run_custody_watch"]


# -- the one runner of a leased job (the sweep's threads and webhook deliveries alike) ----------


def _job_context(job: Job) -> AbstractContextManager[None]:
    """Every log line of this job's step (`provider_trouble` too) names the job, its product and
    its edition date, so `grep job_id` finds them all."""
    return structlog.contextvars.bound_contextvars(job_id=job.id, product=job.product,
                                                   edition_date=str(job.edition_date))


def run(ctx: RunContext, job: Job) -> None:
    """Run a job this worker has leased as far as is safe. A lost race, contention, an
    unreachable database or a bug in one step is logged and counted, never raised: one job never
    stops the sweep or fails a delivery, and it never loops silently (`step_failing`)."""
    with _job_context(job):
        _run_bound(ctx, job)


def _run_bound(ctx: RunContext, job: Job) -> None:
    store = ctx.store
    bound = log.bind(job_id=job.id, product=job.product, worker=store.worker)
    try:
        drive(ctx, job)  # each step that calls the provider checks the cool-down first (`_provider_waits`)
    except LeaseLost as exc:
        ctx.counters.count("lease_lost")
        bound.warning("lease_lost", error=str(exc))
    except Contention as exc:
        ctx.counters.count("contention")
        bound.warning("contention", error=str(exc))
        _release_quietly(store, job.id)
    except DatabaseUnavailable as exc:
        ctx.counters.count("errors")
        bound.error("database_unavailable", error=str(exc))
    except Exception as exc:  # a bug in one job must not stop the sweep, nor loop silently
        ctx.counters.count("errors")
        bound.exception("job_failed", error=str(exc), state=job.state.value)
        _step_failed(ctx, job.id, f"{type(exc).__name__}: {exc}")


def run_custody_watch(ctx: RunContext, job: Job) -> None:
    """The custody watch of one parked job (never leased): a lost race or an unreachable database
    is logged, not raised; the job is looked at again at its next watch."""
    try:
        with _job_context(job):
            custody_watch(ctx, job)
    except (LeaseLost, Contention) as exc:
        log.info("custody_deferred", job_id=job.id, worker=ctx.store.worker, error=str(exc))
    except Exception as exc:  # logged as an error; the job is untouched and looked at next tick
        ctx.counters.count("errors")
        log.error("custody_failed", job_id=job.id, worker=ctx.store.worker, error=f"{type(exc).__name__}: {exc}")


def _step_failed(ctx: RunContext, job_id: str, error: str) -> None:
    """Count the failure on the job (WARN from the first); park it `step_failing` once it
    happened `max_step_failures` times in a row. Best effort: the lease expires anyway."""
    store = ctx.store
    try:
        job = store.find(job_id)
        if job is None or job.lease_owner != store.worker:
            return
        d, failures = decisions.step_failed(job, error[:500], ctx.settings.reconcile.max_step_failures)
        if d is not None:
            apply(ctx, job, d)
        else:
            store.note_failure(job, f"step_failed: {error}"[:2000], failures)
    except Exception:  # the database itself may be what failed
        log.warning("step_failure_not_recorded", job_id=job_id, worker=store.worker)
        _release_quietly(store, job_id)


def _release_quietly(store: Store, job_id: str) -> None:
    try:
        store.release_if_held(job_id)
    except Exception:  # best effort: the lease expires on its own anyway
        log.warning("release_failed", job_id=job_id)


def drive(ctx: RunContext, job: Job) -> None:
    """Take as many safe steps as this tick allows; the last write releases the lease."""
    while True:
        step = STEPS.get(job.state)
        if step is None:
            ctx.store.release(job)
            return
        result = step(ctx, job)
        if result is None:  # the step gave the lease back without a transition
            return
        job = result
        if job.lease_owner != ctx.store.worker:
            return


def _product(ctx: RunContext, job: Job) -> Product | None:
    """The job's product as configured now; None if it was removed from the config."""
    return ctx.settings.products.get(job.product)


def hold(ctx: RunContext, job: Job) -> None:
    """Nothing to do now (cool-down, admission control, deadline): hand the lease back."""
    ctx.store.release(job)


def _provider_waits(ctx: RunContext, cooling: SharedCoolDown, job: Job) -> bool:
    """Before a provider call: while that kind of call cools down (`cooling`: the creates' for a
    create, the reads' for any other call; a create's 429 holds creates only, a read's holds reads
    only) or past the deadline, the job waits (its lease handed back, no transition)."""
    if cooling.cooling() or ctx.deadline.passed():
        hold(ctx, job)
        return True
    return False


# -- steps, one per state -----------------------------------------------------------


def step_no_job(ctx: RunContext, job: Job) -> Job:
    product = _product(ctx, job)
    if product is None:
        return apply(ctx, job, _checked(decisions.config_check(job, product)))
    if ctx.shadow:  # the slot stays NO_JOB, so `iipub adopt` can still take the legacy's response over
        return apply(ctx, job, decisions.shadowed(job, Reason.SHADOW_WOULD_CREATE,
                                                  attempt=job.generation_attempts + 1))
    return apply(ctx, job, decisions.on_window_open(job, product.fingerprint()))


def _checked(d: Decision | None) -> Decision:
    assert d is not None
    return d


def step_create_eligible(ctx: RunContext, job: Job) -> Job | None:
    if not isinstance(ctx, SweepContext):
        # A webhook delivery's context has no create pieces (a create needs its full timeout, more
        # than a request's budget): the lease is handed back and a sweep creates.
        hold(ctx, job)
        return None
    creates = ctx.creates
    product = _product(ctx, job)
    if product is None:
        return apply(ctx, job, _checked(decisions.config_check(job, product)))
    fingerprint = product.fingerprint()
    d = decisions.before_dispatch(job, fingerprint, ctx.settings.budgets)
    if d.to == State.QUARANTINED:
        return apply(ctx, job, d)
    if ctx.shadow:
        return apply(ctx, job, decisions.shadowed(job, Reason.SHADOW_WOULD_CREATE, attempt=d.detail.get("attempt")))
    from iipub.money import restore  # the restore fence (and the site it reads): for creates, not for polls

    # The ledger missing, replaced, truncated or behind the database (or its mirror): nothing is
    # decided from it and no create is sent until the right copy is back or it is acknowledged.
    trouble = creates.records.problem()
    if trouble is not None:
        log.error("ledger_problem", job_id=job.id, worker=ctx.store.worker, kind=trouble.kind, why=trouble.line())
        ctx.counters.count("held_back")
        hold(ctx, job)
        return None
    slot = ledger.slot_of(job.product, job.edition_date.isoformat())
    in_ledger = ctx.ledger.spend(slot)
    ahead = restore.ahead(ctx.store.engine, job, in_ledger)
    if ledger.behind(job, in_ledger) or ahead:
        assert in_ledger is not None
        remedy = restore.remedy(job, in_ledger)
        parked = apply(ctx, job, decisions.restored_behind_ledger(job, in_ledger, ahead, remedy))
        return _adopt_from_ledger(ctx, parked, in_ledger)
    # The payment authority: output held, the legacy system's or the live site's edition, nothing
    # left to buy, or a configuration changed since the job became eligible: no create.
    ruling = paying.ruling(ctx.settings, ctx.store.engine, job, Route.SWEEP)
    if not ruling.allowed and ruling.evidence == Evidence.CONFIG:
        assert job.config_fingerprint is not None
        log.warning("config_replanned", job_id=job.id, worker=ctx.store.worker, why=ruling.why)
        return apply(ctx, job, decisions.replanned(job, job.config_fingerprint, fingerprint))  # then asked again
    if not ruling.allowed:
        return apply(ctx, job, decisions.payment_refused(job, ruling))
    if ruling.overridden:
        log.warning("paying_again", job_id=job.id, overrides=list(ruling.overridden), worker=ctx.store.worker)
    if _provider_waits(ctx, creates.cool_down, job):
        return None
    if ctx.deadline.too_late_for(ctx.settings.create_window(product.service_tier == budgets.FLEX)):
        log.info("create_deferred", job_id=job.id, worker=ctx.store.worker,
                 why="too late in the run: it could not finish before the cron wrapper stops it")
        ctx.counters.count("held_back")
        hold(ctx, job)
        return None
    request = holds.request_fingerprint(product, ctx.settings.provider.tokens_per_minute)
    # Until one create of this request was accepted in this run, this process sends them one at a
    # time: a parameter the provider refuses then costs one refused create, not one per thread.
    # So are a model's, whatever the product: no access to the model then costs one refused create.
    with creates.first.one_at_a_time(_model_key(product)), creates.first.one_at_a_time(request):
        return _create(ctx, creates, job, product, fingerprint, slot, request)


def _create(ctx: RunContext, creates: Creates, job: Job, product: Product, fingerprint: str, slot: str,
            request: str) -> Job | None:
    """The create of a CREATE_ELIGIBLE job that passed its checks: the product hold, the gate,
    the dispatch committed before the POST, the POST, its outcome."""
    if ctx.settings.api_key_is_placeholder:  # nothing can be created with it: not even a refused create
        ctx.counters.count("held_by_key")
        _placeholder_said(ctx)
        hold(ctx, job)
        return None
    if _model_held(ctx, product.model):  # no access to the model, or no such model: none of its creates
        ctx.counters.count("held_by_model")
        hold(ctx, job)
        return None
    held = holds.holding(ctx.store.engine, product, ctx.store.worker, ctx.settings.provider.tokens_per_minute)
    if held is not None:  # a parameter refused, a request too large: no create of this product until it changes
        ctx.counters.count("held_by_product")
        hold(ctx, job)
        return None
    # Paused, a daily spend ceiling, breaker open, shared cool-down, global rate.
    verdict = creates.gate.admit(job.id, job.product)
    if not verdict.allowed:
        if verdict.wait_briefly:
            creates.probes.add(job.id)
        ctx.counters.count("held_by_ceiling" if verdict.ceiling else "held_back")
        hold(ctx, job)
        return None
    assert verdict.at is not None
    opened = slot_opened(job.opens_at, job.created_at)
    tier = budgets.tier_for(product, opened, verdict.at)  # flex until its deadline, then the default tier
    deadline = budgets.flex_deadline(product, opened)
    d = decisions.before_dispatch(job, fingerprint, ctx.settings.budgets, tier)
    if not creates.admission.admit():
        hold(ctx, job)
        return None
    paid: list[int] = []  # the spend row, written with the dispatch: counted from this moment
    try:
        in_flight = apply(ctx, job, d, extra=lambda conn: paid.append(
            spend_rows.record_dispatch(conn, job, job.generation_attempts + 1, product, tier,
                                       creates.records.ledger_id)))  # before any byte
    finally:
        creates.admission.admitted()
    attempt = in_flight.generation_attempts
    outcome: CreateOutcome
    try:
        creates.records.intent(job.id, slot, attempt, fingerprint)  # fsync'd before the POST
    except ledger.LedgerError as exc:
        log.error("ledger_unwritable", job_id=job.id, worker=ctx.store.worker, error=str(exc))
        # Nothing went out: the attempt is refunded.
        outcome = Refused(None, f"not sent: {exc}", kind=RefusalKind.UNSENT)
    else:
        outcome = ctx.provider.create(CreateRequest(
            job_id=job.id, product=product, edition_date=job.edition_date, attempt=attempt, fingerprint=fingerprint,
            installation=ctx.installation,
            tier=tier,
        ))
        ctx.counters.called(outcome)
        creates.records.outcome(job.id, slot, attempt, outcome)
    if isinstance(outcome, Refused):
        ctx.counters.create_refused()
    runs_at = (outcome.tier or tier) if isinstance(outcome, Accepted) else tier
    decision = decisions.after_create(in_flight, outcome, ctx.polls.for_tier(runs_at), ctx.rng, tier=tier,
                                     flex_left=(deadline - verdict.at).total_seconds() if deadline else None,
                                     scope=ctx.scope)

    placed: list[bool] = []

    def outcome_rows(conn: Connection) -> None:
        spend_rows.record_outcome(conn, paid[0], outcome)
        if not isinstance(outcome, Refused):
            return
        # What the refusal holds, with the refund, atomically: the model, or the product.
        if outcome.kind is RefusalKind.ACCESS:
            placed.append(holds.place_model(conn, outcome.model or product.model, ctx.scope, outcome, job.id,
                                            ctx.store.worker))
        else:
            holds.place(conn, product, outcome, job.id, ctx.store.worker, ctx.settings.provider.tokens_per_minute)

    after = apply(ctx, in_flight, dataclasses.replace(decision, go_on=False), extra=outcome_rows,
                  cools=creates.cool_down)
    if any(placed):  # said once, by the process that placed it
        log.warning("creates_held", worker=ctx.store.worker, model=outcome_model(outcome, product),
                    project=ctx.settings.provider.project or "the key's project",
                    why=getattr(outcome, "why", ""), remedy="allow the model in the project's limits, or change the "
                    "products' model; `iipub doctor` checks it for free")
    if isinstance(outcome, Accepted):
        ctx.polls.runs_at(job.id, runs_at)
        creates.first.proven(request)
        creates.first.proven(_model_key(product))
    creates.gate.record(job.id, outcome, probe=verdict.probe)  # after the job's own outcome is safe
    return after


def _model_key(product: Product) -> str:
    """The first-create rule's key for the product's model (a request fingerprint is hex)."""
    return f"model:{product.model.lower()}"


def outcome_model(outcome: CreateOutcome, product: Product) -> str:
    return (outcome.model if isinstance(outcome, Refused) else None) or product.model


def _model_held(ctx: RunContext, model: str) -> bool:
    """Whether `model`'s creates are held under this run's scope. Now and then (one process at a
    time) the provider is asked, free of charge, whether the model can be used now: if so, the
    hold is lifted and the create goes ahead."""
    engine, worker = ctx.store.engine, ctx.store.worker
    held = holds.model_holding(engine, model, ctx.scope, worker)
    if held is None:
        return False
    if not holds.check_due(engine, held):
        return True
    found = ctx.provider.look_up(model)
    if found.standing is not Standing.AVAILABLE:
        return True
    holds.lift_model(engine, held, worker, f"the models endpoint answers for {model}")
    return False


def _placeholder_said(ctx: RunContext) -> None:
    """One warning per run that creates are held for the placeholder key."""
    if ctx.counters.report.held_by_key == 1:
        log.warning("creates_held", worker=ctx.store.worker, why=PLACEHOLDER_KEY_LINE)


def _adopt_from_ledger(ctx: RunContext, parked: Job, in_ledger: ledger.SlotSpend) -> Job | None:
    """Right after `restored_behind_ledger`: if the provider still has the response the ledger
    recorded, and it names this slot, take it back; if it is gone and the live site still serves
    the editions the ledger recorded published, the slot is done. Nothing is paid again."""
    if parked.lease_owner != ctx.store.worker:
        return parked
    if ctx.reads.cooling():
        ctx.store.release(parked)
        return None
    outcome = ctx.provider.retrieve(in_ledger.response_id) if in_ledger.response_id else None
    d = decisions.adopt_restored(parked, in_ledger, outcome, ctx.scope) if outcome is not None else None
    if d is None and not isinstance(outcome, (Transient, Rejected)):
        from iipub.money import restore

        d = decisions.adopt_published(parked, in_ledger, restore.published_live(ctx.settings, in_ledger), outcome)
    if d is None:
        ctx.store.release(parked)  # stays quarantined for an operator, with the ledger's facts
        return None
    return apply(ctx, parked, d)


def step_create_in_flight(ctx: RunContext, job: Job) -> Job:
    # We only ever lease this state when the previous owner's lease expired mid-POST.
    spend = ctx.ledger.spend(ledger.slot_of(job.product, job.edition_date.isoformat()))
    return apply(ctx, job, decisions.in_flight_on_ledger(job, spend, ctx.scope) or decisions.crashed_in_flight(job))


def step_poll(ctx: RunContext, job: Job) -> Job | None:
    product = _product(ctx, job)
    pre = decisions.before_poll(job, ctx.settings.budgets)
    if pre is not None:
        return apply(ctx, job, pre)
    if _provider_waits(ctx, ctx.reads, job):
        return None
    assert job.response_id
    outcome = ctx.provider.retrieve(job.response_id)
    ctx.counters.called(outcome)
    d = decisions.after_poll(job, outcome, ctx.polls.of(job), ctx.rng, loss=ctx.settings.provider,
                            suspected_reads=_suspected_reads(ctx, job, outcome), scope=ctx.scope,
                            in_scope=_in_scope(ctx, job), cancelled_by_operator=_cancelled(ctx, job, outcome))
    batch = ctx.batches.of(job.id) if isinstance(ctx, SweepContext) else None  # a delivery writes at once
    if batch is not None and not d.go_on:
        # Nothing more to do for this job this tick: its write joins the chunk's one commit.
        if d.cooldown is not None:
            ctx.reads.cool_down(d.cooldown)
        batch.defer(ctx.store.plan(job, d.to, reason=d.reason, changes=d.changes, detail=d.detail, delay=d.delay))
        return None
    new = apply(ctx, job, d)
    if d.reason == Reason.PROVIDER_FINISHED and ctx.settings.webhooks.enabled:
        _note_if_missed(ctx, job)
    if d.to == State.COMPLETED_NOT_RETRIEVED and isinstance(outcome, Observed) and new.lease_owner:
        # The poll already carried the output: take custody in the same tick.
        return apply(ctx, new, decisions.on_output(new, outcome, max_output_bytes(product)))
    return new


def _note_if_missed(ctx: RunContext, job: Job) -> None:
    """A poll found the response finished before any webhook said so: polling stops relaxing
    until deliveries arrive again (a late webhook clears this)."""
    assert job.response_id
    try:
        if Deliveries(ctx.store.engine).note_miss(job.response_id, job.id):
            log.info("webhook_missed", job_id=job.id, response_id=job.response_id, relaxed=ctx.polls.webhooks_healthy)
    except (Contention, DatabaseUnavailable) as exc:  # only the relaxation depends on it
        log.warning("webhook_miss_not_recorded", job_id=job.id, error=str(exc))


def step_completed(ctx: RunContext, job: Job) -> Job | None:
    """COMPLETED_NOT_RETRIEVED found on its own (e.g. after a crash): fetch the output now."""
    if ctx.reads.cooling():
        hold(ctx, job)
        return None
    assert job.response_id
    outcome = ctx.provider.retrieve(job.response_id)
    ctx.counters.called(outcome)
    return apply(ctx, job, decisions.after_refetch(
        job, outcome, ctx.settings.reconcile, max_output_bytes(_product(ctx, job)), ctx.rng,
        loss=ctx.settings.provider, suspected_reads=_suspected_reads(ctx, job, outcome),
        scope=ctx.scope, in_scope=_in_scope(ctx, job), cancelled_by_operator=_cancelled(ctx, job, outcome)))


def _in_scope(ctx: RunContext, job: Job) -> bool:
    """Whether this run's reads reach the scope the job's response was created under."""
    return not job.create_scope or ctx.provider.reaches(job.create_scope)


def _suspicious(outcome: ReadOutcome) -> bool:
    return isinstance(outcome, Missing) or (isinstance(outcome, Observed) and outcome.gone)


def _suspected_reads(ctx: RunContext, job: Job, outcome: ReadOutcome) -> int:
    """Earlier reads that suspected this response lost (read from the journal only when this
    read is suspicious too)."""
    if not _suspicious(outcome):
        return 0
    return ctx.store.suspected_loss_reads(job.id, ctx.settings.provider.loss_confirm_reads)


def _cancelled(ctx: RunContext, job: Job, outcome: ReadOutcome) -> bool:
    """Whether a response that reads gone was cancelled by an operator (the journal, read only then)."""
    return bool(job.response_id) and _suspicious(outcome) and ctx.store.cancelled_by_operator(job.id,
                                                                                                str(job.response_id))


def step_validate(ctx: RunContext, job: Job) -> Job:
    """The shared checks, and the fork into language tracks (`track_steps`)."""
    product = _product(ctx, job)
    parked = decisions.config_check(job, product) or decisions.before_validation(job, product)
    if parked is not None:
        return apply(ctx, job, parked)
    from iipub.machine import track_steps  # tracks, outbox and their writers: a tick that only polls never loads them

    return track_steps.fork(ctx, job)


def step_follow(ctx: RunContext, job: Job) -> Job | None:
    """A forked slot follows its slowest language track (`track_steps.follow`); each track
    checks the config itself before it saves, so a slot whose tracks are saved is not parked."""
    from iipub.machine import track_steps

    return track_steps.follow(ctx, job)


def step_published(ctx: RunContext, job: Job) -> Job:
    return apply(ctx, job, decisions.on_published(job))


def step_cleanup(ctx: RunContext, job: Job) -> Job | None:
    nothing = decisions.before_cleanup(job)
    if nothing is not None:
        return apply(ctx, job, nothing)
    assert job.response_id
    if ctx.shadow:  # the response stays at the provider (the legacy system may still read it)
        why = Reason.SHADOW_WOULD_CANCEL if decisions.cancel_before_delete(job) else Reason.SHADOW_WOULD_DELETE
        return apply(ctx, job, decisions.shadowed(job, why, response_id=job.response_id))
    if _provider_waits(ctx, ctx.reads, job):
        return None
    if decisions.cancel_before_delete(job):
        ctx.provider.cancel(job.response_id)  # best effort: stop the spend first
    # The provider adapter refuses (InvariantViolation) a delete without custody or kill flag.
    # Custody: the slot's payload and every language track's part.
    custody = job.payload is not None and _tracks_hold_custody(ctx, job)
    if custody or job.kill_requested:  # journaled first, so `iipub check` sees every one
        installation.record_delete(ctx.store.engine, job.response_id, job.id,
                                   "custody" if custody else "kill", ctx.store.worker)
    outcome = ctx.provider.delete(job.response_id, has_custody=custody, kill_requested=job.kill_requested)
    ctx.counters.called(outcome)
    return apply(ctx, job, decisions.after_delete(job, outcome, ctx.settings.reconcile, ctx.rng))


def _tracks_hold_custody(ctx: RunContext, job: Job) -> bool:
    """Every language track of the slot holds its part (a slot without tracks: nothing to hold)."""
    from iipub.store import track_store  # the tracks' writer: a tick that only polls never loads it

    with ctx.store.engine.connect() as conn:
        return all(t.payload is not None for t in track_store.of_job(conn, job.id))


# A parked job whose response was found gone is read again this many watch intervals later:
# a 404 may still be spurious (PRODUCT.md section 18), but it is no longer worth a read a minute.
_GONE_WATCH_FACTOR = 10


def custody_watch(ctx: RunContext, job: Job) -> None:
    """A parked job (quarantined, suspended) holding a response and no payload is never leased
    and nothing is decided for it, but output that finishes is stored (custody is never frozen,
    and the poll budget bounds observation only): a fenced write on the version read, so an
    operator's command or another process's custody wins cleanly. A response found gone is
    journaled once and read again much later; nothing is paid for it."""
    assert job.response_id
    outcome = ctx.provider.retrieve(job.response_id)
    ctx.counters.called(outcome)
    d = decisions.custody_while_parked(job, outcome, max_output_bytes(_product(ctx, job)))
    every = ctx.settings.reconcile.custody_watch_seconds
    if d is None:
        ctx.store.watch_again(job, every)
        return
    if d.reason == Reason.PARKED_RESPONSE_GONE:
        if ctx.store.last_reason(job.id) == Reason.PARKED_RESPONSE_GONE:
            ctx.store.watch_again(job, every * _GONE_WATCH_FACTOR)
            return
        log.warning("parked_response_gone", job_id=job.id, response_id=job.response_id,
                    quarantine_reason=job.quarantine_reason, status=d.detail.get("status"))
        gone = ctx.store.transition(job, d.to, reason=d.reason, changes=d.changes, detail=d.detail)
        ctx.store.watch_again(gone, every * _GONE_WATCH_FACTOR)
        return
    stored = ctx.store.transition(job, d.to, reason=d.reason, changes=d.changes, detail=d.detail)
    ctx.counters.entered(d.to)
    ctx.chain.record(stored, d.reason)


def step_expired(ctx: RunContext, job: Job) -> Job:
    if _product(ctx, job) is None:  # no money for a product nobody configures any more
        return apply(ctx, job, _checked(decisions.config_check(job, None)))
    return apply(ctx, job, decisions.after_expired(job, ctx.settings.budgets))


StepFn = Callable[[RunContext, Job], "Job | None"]
STEPS: dict[State, StepFn] = {
    State.NO_JOB: step_no_job,
    State.CREATE_ELIGIBLE: step_create_eligible,
    State.CREATE_IN_FLIGHT: step_create_in_flight,
    State.ACCEPTED: step_poll,
    State.QUEUED: step_poll,
    State.IN_PROGRESS: step_poll,
    State.COMPLETED_NOT_RETRIEVED: step_completed,
    State.RETRIEVED_NOT_VALIDATED: step_validate,
    State.READY_TO_COMPOSE: step_follow,
    State.COMPOSED_NOT_SAVED: step_follow,
    State.PUBLISHED: step_published,
    State.CLEANUP_PENDING: step_cleanup,
    State.PROVIDER_EXPIRED_OR_MISSING: step_expired,
}
