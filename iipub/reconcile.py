"""`iipub reconcile`: one bounded sweep that moves every due job as far as is safe.

Select due jobs (best first), lease each by primary key, run its steps with a bounded
pool of threads (provider calls for different jobs overlap; each job's writes stay
fenced), and stop taking new work at the tick deadline. Every step's decision comes
from `handlers`; this module only does the I/O around them.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import sqlalchemy as sa
import structlog

from . import db, handlers, ledger, outbox, scheduling, settle, validate
from .config import Product, Settings
from .deliveries import Deliveries
from .errors import Contention, DatabaseUnavailable, InvariantViolation, LeaseLost
from .handlers import Decision
from .jobs import Job, new_worker_id
from .outcomes import (
    DEAD_STATUSES,
    CreateOutcome,
    CreateRequest,
    Missing,
    Observed,
    ReadOutcome,
    Refused,
)
from .provider import Provider
from .states import Reason, State
from .store import Store
from .tick import STOP, Tick, TickReport, WriteBatch

log = structlog.get_logger("iipub.reconcile")
__all__ = ["STEPS", "STOP", "Tick", "TickReport", "run"]

# States whose next step calls the provider: skipped while the provider cools down.
PROVIDER_BOUND = frozenset({State.CREATE_ELIGIBLE, State.ACCEPTED, State.QUEUED, State.IN_PROGRESS,
                            State.COMPLETED_NOT_RETRIEVED, State.CLEANUP_PENDING})

# How many times one tick goes back to creates that waited for a health probe.
_PROBE_PASSES = 4

def run(settings: Settings, engine: sa.Engine, *, provider: Provider | None = None,
        worker: str | None = None, rng: random.Random | None = None) -> TickReport:
    """One sweep. Refuses to touch any job without an API key."""
    api_key = settings.require_api_key()
    started = time.monotonic()
    store = Store(engine, worker or new_worker_id("reconcile"), settings.reconcile.lease_seconds)
    own_provider = provider is None
    provider = provider or Provider(settings.provider, api_key)
    try:
        tick = Tick(settings, store, provider, started + settings.reconcile.tick_seconds, rng or random.Random())
        _ensure_today(settings, store)
        _sweep(tick)
    finally:
        if own_provider:
            provider.close()
    tick.report.seconds = round(time.monotonic() - started, 3)
    log.info("tick_done", **tick.report.summary())
    return tick.report


def _ensure_today(settings: Settings, store: Store) -> None:
    with store.engine.connect() as conn:
        today = db.read_now(conn).date()
    scheduling.ensure_scheduled(store, settings.products.values(), today)


def _sweep(tick: Tick) -> None:
    s = tick.settings.reconcile
    seen: set[str] = set()  # jobs dealt with (or deferred) in this tick
    if tick.settings.webhooks.enabled:
        _settle_awaiting(tick)
    with ThreadPoolExecutor(max_workers=s.concurrency, thread_name_prefix="iipub-job") as pool:
        if not tick.cooling():
            suspended = tick.store.suspended_awaiting_custody(s.batch_size)
            wait([pool.submit(_guarded, tick, job, custody_while_suspended) for job in suspended])
        for _ in range(_PROBE_PASSES):
            _pass(tick, pool, seen)
            # Creates held back while another worker probed the provider's health go again
            # now that the probe's outcome is recorded.
            waiting = tick.take_probe_waiters()
            if not waiting or tick.past_deadline():
                return
            tick.wait_for_probe_outcome()
            seen -= waiting


def _settle_awaiting(tick: Tick) -> None:
    """Webhooks that arrived before their job's create answer was recorded (see `settle`)."""
    try:
        settle.awaiting_creates(tick, Deliveries(tick.store.engine), SETTLE_STEPS)
    except (Contention, DatabaseUnavailable) as exc:
        log.warning("awaiting_creates_deferred", worker=tick.store.worker, error=str(exc))


def _pass(tick: Tick, pool: ThreadPoolExecutor, seen: set[str]) -> None:
    s = tick.settings.reconcile
    pending: set[Future[None]] = set()
    while not tick.past_deadline():
        # The next batch is fetched while the previous one's tail still runs: no
        # drain bubble at batch boundaries.
        batch = [c for c in tick.store.due_candidates(s.batch_size + len(seen)) if c[0] not in seen]
        if not batch:
            break
        for start in range(0, len(batch), s.concurrency):
            # Claim only when a worker is about to be free, so a claimed job waits in
            # the queue for at most about one job's time, well inside its lease.
            while len(pending) >= s.concurrency:
                _, pending = wait(pending, return_when=FIRST_COMPLETED)
            if tick.past_deadline():
                tick.report.stopped_at_deadline = True
                break
            chunk = batch[start : start + s.concurrency]
            seen.update(job_id for job_id, _, _ in chunk)
            # While the provider cools down, jobs that would call it are left for the
            # next tick: leasing them only to hand them back would be two writes for nothing.
            wanted = [(job_id, v) for job_id, v, state in chunk
                      if not (state in PROVIDER_BOUND and tick.cooling())
                      and not (state == State.CREATE_ELIGIBLE and tick.creates_blocked)]
            claimed = _claim(tick, wanted)
            writes = tick.batch([job.id for job in claimed])
            pending.update(pool.submit(_handle_in_batch, tick, job, writes) for job in claimed)
    wait(pending)


def _claim(tick: Tick, wanted: list[tuple[str, int]]) -> list[Job]:
    """Lease a chunk of candidates in one fenced transaction (one commit, not one per job).
    A chunk rolled back by a deadlock or lock wait wrote nothing, so it is claimed again
    one job at a time: one contended row does not hold the others back."""
    parts = [wanted] if wanted else []
    jobs: list[Job] = []
    while parts:
        part = parts.pop(0)
        ids = [job_id for job_id, _ in part]
        try:
            jobs += _counted_claim(tick, part)
        except Contention as exc:
            tick.count("contention")
            log.warning("contention", job_ids=ids, worker=tick.store.worker, error=str(exc))
            if len(part) > 1:
                parts = [[one] for one in part]
        except DatabaseUnavailable as exc:
            tick.count("errors", len(part))
            log.error("database_unavailable", job_ids=ids, worker=tick.store.worker, error=str(exc))
    return jobs


def _counted_claim(tick: Tick, wanted: list[tuple[str, int]]) -> list[Job]:
    jobs = tick.store.claim(wanted)
    tick.count("leased", len(jobs))
    tick.count("taken", len(wanted) - len(jobs))  # another worker wrote first
    return jobs


def _handle_in_batch(tick: Tick, job: Job, batch: WriteBatch) -> None:
    try:
        _handle(tick, job)
    finally:
        batch.done(job.id)  # the chunk's last job writes the chunk's deferred polls


def _handle(tick: Tick, job: Job) -> None:
    store = tick.store
    bound = log.bind(job_id=job.id, product=job.product, worker=store.worker)
    try:
        if job.state in PROVIDER_BOUND and tick.cooling():
            _hold(tick, job)  # the provider cooled down while this job waited in the queue
            return
        _drive(tick, job)
    except LeaseLost as exc:
        tick.count("lease_lost")
        bound.warning("lease_lost", error=str(exc))
    except Contention as exc:
        tick.count("contention")
        bound.warning("contention", error=str(exc))
        _release_quietly(store, job.id)
    except DatabaseUnavailable as exc:
        tick.count("errors")
        bound.error("database_unavailable", error=str(exc))
    except Exception as exc:  # a bug in one job must not stop the sweep, nor loop silently
        tick.count("errors")
        bound.exception("job_failed", error=str(exc), state=job.state.value)
        _step_failed(tick, job.id, f"{type(exc).__name__}: {exc}")


def _step_failed(tick: Tick, job_id: str, error: str) -> None:
    """Count the failure on the job (WARN from the first); park it `step_failing` once it
    happened `max_step_failures` times in a row. Best effort: the lease expires anyway."""
    store = tick.store
    try:
        job = store.get(job_id)
        if job.lease_owner != store.worker:
            return
        d, failures = handlers.step_failed(job, error[:500], tick.settings.reconcile.max_step_failures)
        if d is not None:
            _apply(tick, job, d)
        else:
            store.note_failure(job, f"step_failed: {error}"[:2000], failures)
    except Exception:  # the database itself may be what failed
        log.warning("step_failure_not_recorded", job_id=job_id, worker=store.worker)
        _release_quietly(store, job_id)


def _guarded(tick: Tick, job: Job, action: Callable[[Tick, Job], None]) -> None:
    """One side task of the sweep: a lost race or an unreachable database is logged, not raised."""
    try:
        action(tick, job)
    except (LeaseLost, Contention) as exc:
        log.info("custody_deferred", job_id=job.id, worker=tick.store.worker, error=str(exc))
    except Exception as exc:  # logged as an error; the job is untouched and looked at next tick
        tick.count("errors")
        log.error("custody_failed", job_id=job.id, worker=tick.store.worker, error=f"{type(exc).__name__}: {exc}")


def _release_quietly(store: Store, job_id: str) -> None:
    try:
        store.release_if_held(job_id)
    except Exception:  # best effort: the lease expires on its own anyway
        log.warning("release_failed", job_id=job_id)


def _apply(tick: Tick, job: Job, d: Decision, *, extra: Callable[[sa.Connection], object] | None = None) -> Job:
    # A dispatch always keeps its lease: the POST follows, deadline or not, and a free
    # CREATE_IN_FLIGHT row would look like a crashed worker to the next tick.
    go_on = d.to == State.CREATE_IN_FLIGHT or (d.go_on and not tick.past_deadline())
    new = tick.store.transition(
        job, d.to, reason=d.reason, changes=d.changes, detail=d.detail, delay=d.delay,
        keep_lease=go_on, extra=extra,
    )
    tick.counted(d.to)
    if d.cooldown is not None:
        tick.cool_down(d.cooldown)
    return new


def _drive(tick: Tick, job: Job) -> None:
    """Take as many safe steps as this tick allows; the last write releases the lease."""
    while True:
        step = STEPS.get(job.state)
        if step is None:
            tick.store.release(job)
            return
        result = step(tick, job)
        if result is None:  # the step gave the lease back without a transition
            return
        job = result
        if job.lease_owner != tick.store.worker:
            return


def _product(tick: Tick, job: Job) -> Product | None:
    """The job's product as configured now; None if it was removed from the config."""
    return tick.settings.products.get(job.product)


def _max_output_bytes(product: Product | None) -> int:
    return product.max_output_bytes if product is not None else Product.max_output_bytes


def _hold(tick: Tick, job: Job) -> None:
    """Nothing to do now (cool-down, admission control, deadline): hand the lease back."""
    tick.store.release(job)


def _provider_waits(tick: Tick, job: Job) -> bool:
    """Before a provider call: while the provider cools down or past the deadline, the job
    waits (its lease handed back, no transition)."""
    if tick.cooling() or tick.past_deadline():
        _hold(tick, job)
        return True
    return False


# -- steps, one per state -----------------------------------------------------------


def step_no_job(tick: Tick, job: Job) -> Job:
    product = _product(tick, job)
    if product is None:
        return _apply(tick, job, _checked(handlers.config_check(job, product)))
    return _apply(tick, job, handlers.on_window_open(job, product.fingerprint()))


def _checked(d: Decision | None) -> Decision:
    assert d is not None
    return d


def step_create_eligible(tick: Tick, job: Job) -> Job | None:
    product = _product(tick, job)
    if product is None:
        return _apply(tick, job, _checked(handlers.config_check(job, product)))
    fingerprint = product.fingerprint()
    d = handlers.before_dispatch(job, fingerprint, tick.settings.budgets)
    if d.to == State.QUARANTINED:
        return _apply(tick, job, d)
    slot = ledger.slot_of(job.product, job.edition_date.isoformat())
    spend = tick.spend(slot)
    if ledger.behind(job, spend):
        assert spend is not None
        return _adopt_from_ledger(tick, _apply(tick, job, handlers.restored_behind_ledger(job, spend)), spend)
    if _provider_waits(tick, job):
        return None
    verdict = tick.gate.admit(job.id)  # paused, breaker open, shared cool-down, global rate
    if not verdict.allowed:
        if verdict.wait_briefly:
            tick.wait_for_probe(job.id)
        tick.count("held_back")
        _hold(tick, job)
        return None
    if not tick.admit_create():
        _hold(tick, job)
        return None
    in_flight = _apply(tick, job, d)  # committed before any byte goes out
    attempt = in_flight.generation_attempts
    outcome: CreateOutcome
    try:
        tick.record_intent(job.id, slot, attempt, fingerprint)  # fsync'd before the POST
    except ledger.LedgerError as exc:
        log.error("ledger_unwritable", job_id=job.id, worker=tick.store.worker, error=str(exc))
        outcome = Refused(None, f"not sent: {exc}")  # nothing went out: the attempt is refunded
    else:
        outcome = tick.provider.create(CreateRequest(
            job_id=job.id, product=product, edition_date=job.edition_date, attempt=attempt, fingerprint=fingerprint,
        ))
        tick.record_outcome(job.id, slot, attempt, outcome)
    after = _apply(tick, in_flight, dataclasses.replace(
        handlers.after_create(in_flight, outcome, tick.poll_settings, tick.rng), go_on=False))
    tick.gate.record(job.id, outcome, probe=verdict.probe)  # after the job's own outcome is safe
    return after


def _adopt_from_ledger(tick: Tick, parked: Job, spend: ledger.SlotSpend) -> Job | None:
    """Right after `restored_behind_ledger`: if the provider still has the response the ledger
    recorded, and it names this slot, take it back (nothing is paid again)."""
    if parked.lease_owner != tick.store.worker:
        return parked
    if spend.response_id is None or tick.cooling():
        tick.store.release(parked)
        return None
    outcome = tick.provider.retrieve(spend.response_id)
    d = handlers.adopt_restored(parked, spend, outcome)
    if d is None:
        tick.store.release(parked)  # stays quarantined for an operator, with the ledger's facts
        return None
    return _apply(tick, parked, d)


def step_create_in_flight(tick: Tick, job: Job) -> Job:
    # We only ever lease this state when the previous owner's lease expired mid-POST.
    return _apply(tick, job, handlers.crashed_in_flight(job))


def step_poll(tick: Tick, job: Job) -> Job | None:
    product = _product(tick, job)
    pre = handlers.before_poll(job, product.fingerprint() if product else None, tick.settings.budgets)
    if pre is not None:
        return _apply(tick, job, pre)
    if _provider_waits(tick, job):
        return None
    assert job.response_id
    outcome = tick.provider.retrieve(job.response_id)
    d = handlers.after_poll(job, outcome, tick.poll_settings, tick.rng, loss=tick.settings.provider,
                            suspected_reads=_suspected_reads(tick, job, outcome))
    batch = tick.batch_of(job.id)
    if batch is not None and not d.go_on:
        # Nothing more to do for this job this tick: its write joins the chunk's one commit.
        if d.cooldown is not None:
            tick.cool_down(d.cooldown)
        batch.defer(tick.store.plan(job, d.to, reason=d.reason, changes=d.changes, detail=d.detail, delay=d.delay))
        return None
    new = _apply(tick, job, d)
    if d.reason == Reason.PROVIDER_FINISHED and tick.settings.webhooks.enabled:
        _note_if_missed(tick, job)
    if d.to == State.COMPLETED_NOT_RETRIEVED and isinstance(outcome, Observed) and new.lease_owner:
        # The poll already carried the output: take custody in the same tick.
        return _apply(tick, new, handlers.on_output(new, outcome, _max_output_bytes(product)))
    return new


def _note_if_missed(tick: Tick, job: Job) -> None:
    """A poll found the response finished before any webhook said so: polling stops relaxing
    until deliveries arrive again (a late webhook clears this)."""
    assert job.response_id
    try:
        if Deliveries(tick.store.engine).note_miss(job.response_id, job.id):
            log.info("webhook_missed", job_id=job.id, response_id=job.response_id, relaxed=tick.webhooks_healthy)
    except (Contention, DatabaseUnavailable) as exc:  # only the relaxation depends on it
        log.warning("webhook_miss_not_recorded", job_id=job.id, error=str(exc))


def step_completed(tick: Tick, job: Job) -> Job | None:
    """COMPLETED_NOT_RETRIEVED found on its own (e.g. after a crash): fetch the output now."""
    if tick.cooling():
        _hold(tick, job)
        return None
    assert job.response_id
    outcome = tick.provider.retrieve(job.response_id)
    return _apply(tick, job, handlers.after_refetch(
        job, outcome, tick.settings.reconcile, _max_output_bytes(_product(tick, job)), tick.rng,
        loss=tick.settings.provider, suspected_reads=_suspected_reads(tick, job, outcome)))


def _suspected_reads(tick: Tick, job: Job, outcome: ReadOutcome) -> int:
    """Earlier reads that suspected this response lost (read from the journal only when this
    read is suspicious too)."""
    suspicious = isinstance(outcome, Missing) or (isinstance(outcome, Observed) and outcome.status in DEAD_STATUSES)
    if not suspicious:
        return 0
    return tick.store.suspected_loss_reads(job.id, tick.settings.provider.loss_confirm_reads)


def step_validate(tick: Tick, job: Job) -> Job:
    product = _product(tick, job)
    parked = handlers.config_check(job, product)
    if parked is not None or product is None:
        return _apply(tick, job, _checked(parked))
    return _apply(tick, job, handlers.on_validation(job, validate.validate(job.payload, product)))


def step_compose(tick: Tick, job: Job) -> Job:
    product = _product(tick, job)
    parked = handlers.config_check(job, product)
    if parked is not None or product is None:
        return _apply(tick, job, _checked(parked))
    try:
        d = handlers.on_compose(job, product)
    except handlers.NoLongerValid as exc:
        raise InvariantViolation(str(exc), job_id=job.id) from None
    return _apply(tick, job, d)


def step_save(tick: Tick, job: Job) -> Job:
    """One transaction: fenced state change, one edition per language, one outbox row each."""
    parked = handlers.config_check(job, _product(tick, job))
    if parked is not None:
        return _apply(tick, job, parked)
    artifacts = handlers.composed_artifacts(job)
    try:
        return _apply(tick, job, handlers.on_save(job, artifacts),
                      extra=lambda conn: outbox.save_editions(conn, job, artifacts))
    except sa.exc.IntegrityError as exc:
        # Rolled back whole; an edition for this slot exists already. Report, never half-write.
        return _apply(tick, job, handlers.on_save_conflict(db.describe_error(exc)))


def step_published(tick: Tick, job: Job) -> Job:
    return _apply(tick, job, handlers.on_published(job))


def step_cleanup(tick: Tick, job: Job) -> Job | None:
    nothing = handlers.before_cleanup(job)
    if nothing is not None:
        return _apply(tick, job, nothing)
    if _provider_waits(tick, job):
        return None
    assert job.response_id
    if handlers.cancel_before_delete(job):
        tick.provider.cancel(job.response_id)  # best effort: stop the spend first
    # The provider adapter refuses (InvariantViolation) a delete without custody or kill flag.
    outcome = tick.provider.delete(job.response_id, has_custody=job.payload is not None,
                                   kill_requested=job.kill_requested)
    return _apply(tick, job, handlers.after_delete(job, outcome, tick.settings.reconcile, tick.rng))


def custody_while_suspended(tick: Tick, job: Job) -> None:
    """A job suspended while its response ran is never leased and nothing is decided for it,
    but output that finished is stored (custody is never frozen): a fenced write on the version
    read, so an operator's resume or another process's custody wins cleanly."""
    assert job.response_id
    outcome = tick.provider.retrieve(job.response_id)
    d = handlers.custody_while_suspended(job, outcome, _max_output_bytes(_product(tick, job)))
    if d is not None:
        tick.store.transition(job, d.to, reason=d.reason, changes=d.changes, detail=d.detail)
        tick.counted(d.to)


def _custody_guarded(tick: Tick, job: Job) -> None:
    _guarded(tick, job, custody_while_suspended)


# What `settle` (webhook deliveries) runs for a job: exactly what a sweep runs.
SETTLE_STEPS = settle.Steps(drive=_handle, custody_while_suspended=_custody_guarded)


def step_expired(tick: Tick, job: Job) -> Job:
    if _product(tick, job) is None:  # no money for a product nobody configures any more
        return _apply(tick, job, _checked(handlers.config_check(job, None)))
    return _apply(tick, job, handlers.after_expired(job, tick.settings.budgets))


StepFn = Callable[[Tick, Job], "Job | None"]
STEPS: dict[State, StepFn] = {
    State.NO_JOB: step_no_job,
    State.CREATE_ELIGIBLE: step_create_eligible,
    State.CREATE_IN_FLIGHT: step_create_in_flight,
    State.ACCEPTED: step_poll,
    State.QUEUED: step_poll,
    State.IN_PROGRESS: step_poll,
    State.COMPLETED_NOT_RETRIEVED: step_completed,
    State.RETRIEVED_NOT_VALIDATED: step_validate,
    State.READY_TO_COMPOSE: step_compose,
    State.COMPOSED_NOT_SAVED: step_save,
    State.PUBLISHED: step_published,
    State.CLEANUP_PENDING: step_cleanup,
    State.PROVIDER_EXPIRED_OR_MISSING: step_expired,
}
