"""`iipub reconcile`: one bounded sweep that moves every due job as far as is safe.

Select due jobs (best first), lease each by primary key, run its steps with a bounded
pool of threads (provider calls for different jobs overlap; each job's writes stay
fenced), and stop taking new work at the tick deadline. What each state's step does is in
`steps` (loaded with the first leased job), every step's decision in `handlers`.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import sqlalchemy as sa
import structlog

from iipub.core.errors import Contention, DatabaseUnavailable
from iipub.machine import scheduling
from iipub.machine.tick import STOP, Tick, TickReport, WriteBatch
from iipub.model.jobs import Job, new_worker_id
from iipub.model.states import TRACKS_RUN_IN, State
from iipub.money import gate
from iipub.provider.adapter import Provider
from iipub.settings.config import Settings
from iipub.store import clock
from iipub.store.deliveries import Deliveries
from iipub.store.job_store import Store

log = structlog.get_logger("iipub.reconcile")
__all__ = ["STOP", "Tick", "TickReport", "run"]

# States whose steps in this tick never reach the provider (they end at SAVED_NOT_PUBLIC or in
# quarantine); any other may, directly or by the steps it goes on to (NO_JOB -> a create,
# PUBLISHED -> a delete), so the provider's client is set up before such a job is leased.
LOCAL_ONLY = frozenset({State.RETRIEVED_NOT_VALIDATED, State.READY_TO_COMPOSE, State.COMPOSED_NOT_SAVED})

# How many times one tick goes back to creates that waited for a health probe.
_PROBE_PASSES = 4


def run(settings: Settings, engine: sa.Engine, *, provider: Provider | None = None,
        worker: str | None = None, rng: random.Random | None = None) -> TickReport:
    """One sweep. Refuses to touch any job without an API key. Under `pause --everything` it
    does nothing at all (the cron command still records its heartbeat). It first makes today's
    slots and the catch-up days' unless `[reconcile] auto_schedule` is off."""
    api_key = settings.require_api_key()
    started = time.monotonic()
    store = Store(engine, worker or new_worker_id("reconcile"), settings.reconcile.lease_seconds)
    paused = gate.paused_everything(engine)
    if paused is not None:
        log.warning("paused_everything", worker=store.worker, by=paused.paused_by, why=paused.paused_reason)
        return TickReport(worker=store.worker, shadow=settings.reconcile.shadow, paused_everything=True)
    own_provider = provider is None
    provider = provider or Provider(settings.provider, api_key)
    try:
        tick = Tick(settings, store, provider, started + settings.reconcile.tick_seconds, rng or random.Random())
        if settings.reconcile.auto_schedule:
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
        today = clock.read_now(conn).date()
    scheduling.ensure_scheduled(store, settings.products.values(), today, settings.reconcile.catch_up_days)


def _sweep(tick: Tick) -> None:
    s = tick.settings.reconcile
    seen: set[str] = set()  # jobs dealt with (or deferred) in this tick
    if tick.settings.webhooks.enabled:
        _settle_awaiting(tick)
    with ThreadPoolExecutor(max_workers=s.concurrency, thread_name_prefix="iipub-job") as pool:
        if not tick.reads_cooling():
            # The custody watch: parked jobs whose response may still finish, at their own slow
            # cadence (`custody_watch_seconds`), at most a batch a tick, whatever their poll budget.
            parked = tick.store.custody_watch_due(s.batch_size)
            if parked:
                from iipub.machine import steps

                wait([pool.submit(steps.run_custody_watch, tick, job) for job in parked])
        for _ in range(_PROBE_PASSES):
            _pass(tick, pool, seen)
            # Creates held back while another worker probed the provider's health go again
            # now that the probe's outcome is recorded.
            waiting = tick.take_probe_waiters()
            if not waiting or tick.past_deadline():
                break
            tick.wait_for_probe_outcome()
            seen -= waiting
        _tracks(tick, pool)


def _tracks(tick: Tick, pool: ThreadPoolExecutor) -> None:
    """The language tracks of forked slots, then the slots that follow them: one tick still takes
    a finished response to SAVED_NOT_PUBLIC. Loaded only when some track is due."""
    if tick.past_deadline() or not tick.store.tracks_due():
        return
    from iipub.machine import track_steps

    if track_steps.track_pass(tick, pool):
        _pass(tick, pool, set(), only=TRACKS_RUN_IN)


def _settle_awaiting(tick: Tick) -> None:
    """Webhooks that arrived before their job's create answer was recorded (see `settle`)."""
    from iipub.machine import settle

    try:
        settle.awaiting_creates(tick, Deliveries(tick.store.engine))
    except (Contention, DatabaseUnavailable) as exc:
        log.warning("awaiting_creates_deferred", worker=tick.store.worker, error=str(exc))


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


def _pass(tick: Tick, pool: ThreadPoolExecutor, seen: set[str], only: frozenset[State] | None = None) -> None:
    s = tick.settings.reconcile
    pending = _InFlight()
    while not tick.past_deadline():
        # The next batch is fetched while the previous one's tail still runs: no
        # drain bubble at batch boundaries.
        batch = [c for c in tick.store.due_candidates(s.batch_size + len(seen), only) if c[0] not in seen]
        if not batch:
            break
        for start in range(0, len(batch), s.concurrency):
            # Claim only when a worker is about to be free, so a claimed job waits in
            # the queue for at most about one job's time, well inside its lease.
            pending.wait_below(s.concurrency)
            if tick.past_deadline():
                tick.report.stopped_at_deadline = True
                break
            chunk = batch[start : start + s.concurrency]
            seen.update(job_id for job_id, _, _ in chunk)
            # While the provider cools down, jobs that would call it are left for the
            # next tick: leasing them only to hand them back would be two writes for nothing.
            wanted = [(job_id, v) for job_id, v, state in chunk
                      if not tick.waits_for_provider(state)
                      and not (state == State.CREATE_ELIGIBLE and tick.creates_blocked)]
            if any(state not in LOCAL_ONLY for _, _, state in chunk):
                tick.provider.ready()  # a broken HTTP set-up fails the run here, before any lease
            claimed = _claim(tick, wanted)
            writes = tick.batch([job.id for job in claimed])
            for job in claimed:
                pending.submit(pool, _handle_in_batch, tick, job, writes)
    pending.wait_below(1)


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
        from iipub.machine import steps  # with the decisions, validation and outbox machinery: not for an idle run

        steps.run(tick, job)
    except Exception as exc:  # `steps.run` raises nothing: only a broken installation gets here
        tick.count("errors")
        log.exception("job_failed", job_id=job.id, worker=tick.store.worker, error=str(exc))
    finally:
        batch.done(job.id)  # the chunk's last job writes the chunk's deferred polls
