"""`iipub reconcile`: one bounded sweep that moves every due job as far as is safe.

Select due jobs (best first), lease each by primary key, run its steps with a bounded
pool of threads (provider calls for different jobs overlap; each job's writes stay
fenced), and stop taking new work at the tick deadline. What each state's step does is in
`steps` (loaded with the first leased job), every step's decision in `decisions`.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import structlog

from iipub.core.errors import Contention, DatabaseUnavailable
from iipub.machine import scheduling
from iipub.machine.run import run_context
from iipub.machine.run.counters import SweepReport
from iipub.machine.run.deadline import STOP
from iipub.machine.run.run_context import SweepContext
from iipub.machine.run.write_batch import WriteBatch
from iipub.model.jobs import Job, new_worker_id
from iipub.model.states import LOCAL_STEPS, PROVIDER_BOUND, TRACKS_RUN_IN, State
from iipub.money import gate
from iipub.provider import factory  # cheap: a provider's SDK and HTTP client load at its first call
from iipub.provider.interface import Provider
from iipub.settings.config import Settings
from iipub.store import clock
from iipub.store.deliveries import Deliveries
from iipub.store.handles import Engine
from iipub.store.job_store import Store

log = structlog.get_logger("iipub.reconcile")
__all__ = ["STOP", "SweepReport", "run"]

# How many times one tick goes back to creates that waited for a health probe.
_PROBE_PASSES = 4


def run(settings: Settings, engine: Engine, *, provider: Provider | None = None,
        worker: str | None = None, rng: random.Random | None = None) -> SweepReport:
    """One sweep. Refuses to touch any job without an API key. Under `pause --everything` it
    does nothing at all (the cron command still records its heartbeat). It first makes today's
    slots and the catch-up days' unless `[reconcile] auto_schedule` is off."""
    settings.require_api_key()
    started = time.monotonic()
    store = Store(engine, worker or new_worker_id("reconcile"), settings.reconcile.lease_seconds)
    paused = gate.paused_everything(engine)
    if paused is not None:
        log.warning("paused_everything", worker=store.worker, by=paused.paused_by, why=paused.paused_reason)
        return SweepReport(worker=store.worker, shadow=settings.reconcile.shadow, paused_everything=True)
    own_provider = provider is None
    provider = provider or factory.build(settings)
    try:
        ctx = run_context.for_sweep(settings, store, provider, started + settings.reconcile.tick_seconds,
                                    rng or random.Random())
        if settings.reconcile.auto_schedule:
            _ensure_today(settings, store)
        _sweep(ctx)
    finally:
        if own_provider:
            provider.close()
    report = ctx.counters.report
    report.seconds = round(time.monotonic() - started, 3)
    log.info("tick_done", **report.summary())
    return report


def _ensure_today(settings: Settings, store: Store) -> None:
    with store.engine.connect() as conn:
        today = clock.read_now(conn).date()
    scheduling.ensure_scheduled(store, settings.products.values(), today, settings.reconcile.catch_up_days)


def _sweep(ctx: SweepContext) -> None:
    s = ctx.settings.reconcile
    seen: set[str] = set()  # jobs dealt with (or deferred) in this tick
    if ctx.settings.webhooks.enabled:
        _settle_awaiting(ctx)
    with ThreadPoolExecutor(max_workers=s.concurrency, thread_name_prefix="iipub-job") as pool:
        if not ctx.reads.cooling():
            # The custody watch: parked jobs whose response may still finish, at their own slow
            # cadence (`custody_watch_seconds`), at most a batch a tick, whatever their poll budget.
            parked = ctx.store.custody_watch_due(s.batch_size)
            if parked:
                from iipub.machine import steps

                wait([pool.submit(steps.run_custody_watch, ctx, job) for job in parked])
        for _ in range(_PROBE_PASSES):
            _pass(ctx, pool, seen)
            # Creates held back while another worker probed the provider's health go again
            # now that the probe's outcome is recorded.
            waiting = ctx.creates.probes.take()
            if not waiting or ctx.deadline.passed():
                break
            ctx.creates.probes.wait_for_outcome()
            seen -= waiting
        _tracks(ctx, pool)


def _tracks(ctx: SweepContext, pool: ThreadPoolExecutor) -> None:
    """The language tracks of forked slots, then the slots that follow them: one tick still takes
    a finished response to SAVED_NOT_PUBLIC. Loaded only when some track is due."""
    if ctx.deadline.passed() or not ctx.store.tracks_due():
        return
    from iipub.machine import track_steps

    if track_steps.track_pass(ctx, pool):
        _pass(ctx, pool, set(), only=TRACKS_RUN_IN)


def _settle_awaiting(ctx: SweepContext) -> None:
    """Webhooks that arrived before their job's create answer was recorded (see `settle`)."""
    from iipub.machine import settle

    try:
        settle.awaiting_creates(ctx, Deliveries(ctx.store.engine))
    except (Contention, DatabaseUnavailable) as exc:
        log.warning("awaiting_creates_deferred", worker=ctx.store.worker, error=str(exc))


class _InFlight:
    """How many of this pass's jobs are submitted and not finished. `wait(FIRST_COMPLETED)` over
    the pending futures did the same at a cost per call that grew with the concurrency (a waiter
    on every pending future, each time a worker came free)."""

    def __init__(self) -> None:
        self._n = 0
        self._changed = threading.Condition()

    def submit(self, pool: ThreadPoolExecutor, fn: Callable[..., None], *args: Any) -> None:
        with self._changed:
            self._n += 1
        try:
            future = pool.submit(fn, *args)
        except BaseException:
            self._done(None)
            raise
        future.add_done_callback(self._done)

    def _done(self, _: Future[None] | None) -> None:
        with self._changed:
            self._n -= 1
            self._changed.notify_all()

    def wait_below(self, limit: int) -> None:
        with self._changed:
            while self._n >= limit:
                self._changed.wait()


def _pass(ctx: SweepContext, pool: ThreadPoolExecutor, seen: set[str], only: frozenset[State] | None = None) -> None:
    s = ctx.settings.reconcile
    pending = _InFlight()
    while not ctx.deadline.passed():
        # The next batch is fetched while the previous one's tail still runs: no
        # drain bubble at batch boundaries.
        batch = [c for c in ctx.store.due_candidates(s.batch_size + len(seen), only) if c[0] not in seen]
        if not batch:
            break
        for start in range(0, len(batch), s.concurrency):
            # Claim only when a worker is about to be free, so a claimed job waits in
            # the queue for at most about one job's time, well inside its lease.
            pending.wait_below(s.concurrency)
            if ctx.deadline.passed():
                ctx.counters.stopped_at_deadline()
                break
            chunk = batch[start : start + s.concurrency]
            seen.update(job_id for job_id, _, _ in chunk)
            # While the provider cools down, jobs that would call it are left for the
            # next tick: leasing them only to hand them back would be two writes for nothing.
            wanted = [(job_id, v) for job_id, v, state in chunk
                      if not _waits_for_provider(ctx, state)
                      and not (state == State.CREATE_ELIGIBLE and ctx.creates.blocked)]
            if any(state not in LOCAL_STEPS for _, _, state in chunk):
                ctx.provider.ready()  # a broken HTTP set-up fails the run here, before any lease
            claimed = _claim(ctx, wanted)
            writes = ctx.batches.open([job.id for job in claimed])
            for job in claimed:
                pending.submit(pool, _handle_in_batch, ctx, job, writes)
    pending.wait_below(1)


def _waits_for_provider(ctx: SweepContext, state: State) -> bool:
    """Whether the sweep should not even lease a job in `state` now: its next step calls the
    provider, and that kind of call cools down (a create's 429 holds creates, a read's holds every
    other provider call). A leased job's step asks again right before its call: a cool-down may
    begin while it waits in the queue."""
    if state not in PROVIDER_BOUND:
        return False
    return (ctx.creates.cool_down if state == State.CREATE_ELIGIBLE else ctx.reads).cooling()


def _claim(ctx: SweepContext, wanted: list[tuple[str, int]]) -> list[Job]:
    """Lease a chunk of candidates in one fenced transaction (one commit, not one per job).
    A chunk rolled back by a deadlock or lock wait wrote nothing, so it is claimed again
    one job at a time: one contended row does not hold the others back."""
    parts = [wanted] if wanted else []
    jobs: list[Job] = []
    while parts:
        part = parts.pop(0)
        ids = [job_id for job_id, _ in part]
        try:
            jobs += _counted_claim(ctx, part)
        except Contention as exc:
            ctx.counters.count("contention")
            log.warning("contention", job_ids=ids, worker=ctx.store.worker, error=str(exc))
            if len(part) > 1:
                parts = [[one] for one in part]
        except DatabaseUnavailable as exc:
            ctx.counters.count("errors", len(part))
            log.error("database_unavailable", job_ids=ids, worker=ctx.store.worker, error=str(exc))
    return jobs


def _counted_claim(ctx: SweepContext, wanted: list[tuple[str, int]]) -> list[Job]:
    jobs = ctx.store.claim(wanted)
    ctx.counters.count("leased", len(jobs))
    ctx.counters.count("taken", len(wanted) - len(jobs))  # another worker wrote first
    return jobs


def _handle_in_batch(ctx: SweepContext, job: Job, batch: WriteBatch) -> None:
    try:
        from iipub.machine import steps  # with the decisions, validation and outbox machinery: not for an idle run

        steps.run(ctx, job)
    except Exception as exc:  # `steps.run` raises nothing: only a broken installation gets here
        ctx.counters.count("errors")
        log.exception("job_failed", job_id=job.id, worker=ctx.store.worker, error=str(exc))
    finally:
        batch.done(job.id)  # the chunk's last job writes the chunk's deferred polls
