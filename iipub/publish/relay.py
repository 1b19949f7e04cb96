"""`iipub relay`: deliver outbox events to every configured sink, at least once; the
sinks are idempotent, so the public result is exactly once.

Claims are fenced by primary key and version, so overlapping relays never deliver the
same claim twice; a relay killed after a sink wrote re-delivers (byte-identical) next run.
When every event of a job is delivered, the job moves SAVED_NOT_PUBLIC -> PUBLISHED
through the job store.

The webhook sink is delivered from a small thread pool beside the static sink (`_Background`:
`[sinks.webhook] concurrency` requests at once, none started after `deadline_seconds`), so a
hung receiver never holds up the static site: an event whose webhook delivery was not reached
is given back untried and goes again on the next run. Each sink's receipt is recorded per
event as before, so a sink that has an event is never asked again.
"""

from __future__ import annotations

import os
import queue
import random
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
import structlog

from iipub.core import backoff, tls
from iipub.core.errors import ConfigError, Contention, LeaseLost
from iipub.machine import decisions
from iipub.model.jobs import Job, new_worker_id
from iipub.model.track_views import Hop
from iipub.money.ledger import LedgerError, SpendLedger, slot_of
from iipub.publish.sinks import EditionEvent, Parked, Published, PublishResult, RetryLater, Sink
from iipub.publish.sinks.cms_webhook import WebhookSink
from iipub.publish.sinks.static import StaticSink
from iipub.settings import config
from iipub.settings.config import Settings
from iipub.store import outbox, track_store
from iipub.store.handles import Engine
from iipub.store.job_store import Store
from iipub.store.outbox import Outbox, OutboxEvent

log = structlog.get_logger("iipub.relay")
# Sinks delivered from a thread pool beside the others, under their own deadline (`_Background`).
BACKGROUND_SINKS = frozenset({WebhookSink.name})


@dataclass
class RelayReport:
    worker: str
    claimed: int = 0
    published: int = 0
    retried: int = 0
    parked: int = 0
    deferred: int = 0  # events given back untried by a sink whose deadline passed (due again next run)
    deliveries: dict[str, int] = field(default_factory=dict)
    jobs_published: int = 0
    stopped_at_deadline: bool = False
    seconds: float = 0.0
    # Nothing delivered: shadow mode (`[reconcile] mode = "shadow"`: the legacy system publishes)
    # or `pause --everything`.
    held: str | None = None


def _held(settings: Settings, engine: Engine) -> str | None:
    """Why this run delivers nothing, or None."""
    from iipub.money import gate

    if gate.paused_everything(engine) is not None:
        return "paused_everything"
    return "shadow" if settings.reconcile.shadow else None


def build_sinks(settings: Settings, client: httpx.Client | None = None, engine: Engine | None = None) -> list[Sink]:
    sinks: list[Sink] = []
    if settings.static_sink is not None:
        s = settings.static_sink
        grants = (lambda job_id: outbox.republish_granted(engine, job_id)) if engine is not None else None
        sinks.append(StaticSink(s.root, site_title=s.site_title, base_url=s.base_url, may_replace=grants,
                                products=settings.products, state_dir=s.state_dir))
    if settings.webhook_sink is not None:
        w = settings.webhook_sink
        try:
            secret = settings.webhook_secret(os.environ)  # read here, at the edge
            sinks.append(WebhookSink(w.url, secret, client=client, timeout=w.timeout_seconds))
        except ValueError as exc:  # a malformed secret is a configuration error, not a crash
            raise ConfigError(f"${w.secret_env}: {exc}") from None
    return sinks


def run(settings: Settings, engine: Engine, *, sinks: list[Sink] | None = None, worker: str | None = None,
        rng: random.Random | None = None) -> RelayReport:
    rs = settings.relay
    worker = worker or new_worker_id("relay")
    rng = rng or random.Random()
    started = time.monotonic()
    deadline = started + rs.tick_seconds
    report = RelayReport(worker=worker)
    held = _held(settings, engine)
    if held is not None:
        log.info("relay_held", worker=worker, why=held)
        report.held = held
        return report
    box = Outbox(engine, worker, rs.lease_seconds)
    client = httpx.Client(verify=tls.client_context()) if sinks is None and settings.webhook_sink is not None else None
    hooks: _Background | None = None
    try:
        sinks = sinks if sinks is not None else build_sinks(settings, client, engine)
        if any(s.name in BACKGROUND_SINKS for s in sinks):
            hooks = _Background(settings, started)
        seen: set[int] = set()
        while time.monotonic() < deadline:
            batch = [(i, v) for i, v in box.due(rs.batch_size + len(seen)) if i not in seen]
            if not batch:
                break
            for row_id, version in batch:
                if time.monotonic() >= deadline:
                    report.stopped_at_deadline = True
                    break
                seen.add(row_id)
                ev = box.claim(row_id, version)
                if ev is None:
                    continue
                report.claimed += 1
                _publish_event(box, ev, sinks, settings, rng, report, hooks)
                if hooks is not None:
                    hooks.settle(box, settings, rng, report)
        if hooks is not None:
            hooks.settle(box, settings, rng, report, wait=True)
        def book() -> SpendLedger | None:  # read only when a job is published (an idle run reads nothing)
            from iipub.money import restore

            return restore.ledger_of(settings, engine)

        report.jobs_published = publish_finished_jobs(engine, worker, settings.reconcile.lease_seconds, book)
    finally:
        if hooks is not None:
            hooks.close()
        if client is not None:
            client.close()
    report.seconds = round(time.monotonic() - started, 3)
    log.info("relay_done", **vars(report))
    return report


@dataclass
class _EventPublication:
    """One claimed event on its way through the sinks: what each answered so far."""

    ev: OutboxEvent
    event: EditionEvent
    waits: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    parked: bool = False
    deferred: bool = False  # a sink was not reached before its deadline
    outstanding: int = 0  # background deliveries not answered yet


class _Background:
    """Deliveries to remote sinks (the webhook) in a small thread pool, so a hung receiver
    delays neither the static site nor the other events: at most `[sinks.webhook] concurrency`
    requests at once, and none started after `deadline_seconds` into the run (each is bounded
    by its own timeout). The threads only talk HTTP; every database write stays in the relay's
    thread (`settle`), so each sink's receipt is recorded exactly as before."""

    def __init__(self, settings: Settings, started: float) -> None:
        conf = settings.webhook_sink
        concurrency = conf.concurrency if conf is not None else config.WebhookSinkSettings.concurrency
        deadline = conf.deadline_seconds if conf is not None else config.WebhookSinkSettings.deadline_seconds
        self.until = started + deadline
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="relay-webhook")
        self._answers: queue.SimpleQueue[tuple[_EventPublication, str, Future[PublishResult | None]]] = (
            queue.SimpleQueue())
        self._pending = 0

    def submit(self, d: _EventPublication, sink: Sink) -> None:
        d.outstanding += 1
        self._pending += 1
        future = self._pool.submit(_publish_before, sink, d.event, self.until)
        future.add_done_callback(lambda f: self._answers.put((d, sink.name, f)))

    def settle(self, box: Outbox, settings: Settings, rng: random.Random, report: RelayReport, *,
               wait: bool = False) -> None:
        """Record the answers that arrived and finish their events; with `wait`, until every
        delivery is answered (a queued one past the deadline answers at once: not reached)."""
        while self._pending:
            try:
                d, name, future = self._answers.get(block=wait)
            except queue.Empty:
                return
            self._pending -= 1
            d.outstanding -= 1
            result = future.result()  # `_publish_before` never raises
            if result is None:
                d.deferred = True
            else:
                _record(box, d, name, result, settings, rng, report)
            if not d.outstanding:
                _finish(box, d, settings, report)

    def close(self) -> None:
        # Normally idle by now; after an error, queued deliveries are dropped (their events
        # stay claimed until the lease expires, then go again: the receiver deduplicates).
        self._pool.shutdown(wait=True, cancel_futures=True)


def _publish_before(sink: Sink, event: EditionEvent, until: float) -> PublishResult | None:
    """A background delivery, or None if its deadline passed before a thread was free."""
    if time.monotonic() >= until:
        return None
    return _attempt(sink, event)


def _attempt(sink: Sink, event: EditionEvent) -> PublishResult:
    try:
        return sink.publish(event)
    except Exception as exc:  # a sink bug must not stop the other sinks or events
        log.exception("sink_failed", sink=sink.name, event_id=event.event_id)
        return RetryLater(None, f"{type(exc).__name__}: {exc}")


def _publish_event(box: Outbox, ev: OutboxEvent, sinks: list[Sink], settings: Settings, rng: random.Random,
             report: RelayReport, hooks: _Background | None = None) -> None:
    rs = settings.relay
    try:
        event = EditionEvent.from_payload(ev.payload)
    except ValueError as exc:
        box.retry_later(ev, rs.backoff_cap_seconds, f"corrupt outbox payload: {exc}")
        report.parked += 1
        return
    settled = box.settled_sinks(ev.event_id)
    d = _EventPublication(ev, event)
    for sink in sinks:
        if sink.name in settled:
            d.parked = d.parked or settled[sink.name] == "parked"
            continue
        if hooks is not None and sink.name in BACKGROUND_SINKS:
            hooks.submit(d, sink)
            continue
        _record(box, d, sink.name, _attempt(sink, event), settings, rng, report)
    if not d.outstanding:
        _finish(box, d, settings, report)


def _record(box: Outbox, d: _EventPublication, sink: str, result: PublishResult, settings: Settings, rng: random.Random,
            report: RelayReport) -> None:
    """One sink's answer: its per-sink delivery record, and what it means for the event."""
    rs = settings.relay
    if isinstance(result, Published):
        box.record(d.ev.event_id, sink, delivered=True)
        report.deliveries[sink] = report.deliveries.get(sink, 0) + 1
    elif isinstance(result, Parked):
        box.record(d.ev.event_id, sink, parked=True, error=result.why)
        log.warning("sink_parked", sink=sink, event_id=d.ev.event_id, why=result.why)
        d.parked = True
        d.errors.append(f"{sink}: parked: {result.why}")
    else:
        box.record(d.ev.event_id, sink, error=result.why)
        log.warning("sink_failed_retry_later", sink=sink, event_id=d.ev.event_id, job_id=d.ev.job_id, why=result.why)
        hinted = result.delay
        d.waits.append(hinted if hinted is not None else
                       backoff.exponential(d.ev.attempts + 1, rs.backoff_base_seconds, rs.backoff_cap_seconds, rng))
        d.errors.append(f"{sink}: {result.why}")


def _finish(box: Outbox, d: _EventPublication, settings: Settings, report: RelayReport) -> None:
    """Every sink answered (or was not reached): mark the event published, or give it back."""
    rs = settings.relay
    ev = d.ev
    if not d.errors and not d.parked and not d.deferred:
        if box.mark_published(ev):
            report.published += 1
        return
    if d.waits:
        box.retry_later(ev, min(min(d.waits), rs.backoff_cap_seconds), "; ".join(d.errors))
        report.retried += 1
        return
    if d.deferred:
        # Nothing failed; a sink was not reached before its deadline: due again at once, no attempt counted.
        box.release(ev)
        report.deferred += 1
        return
    # Only an operator can move a parked sink; look again at the cap.
    box.retry_later(ev, rs.backoff_cap_seconds, "; ".join(d.errors) or "a sink is parked")
    report.parked += 1


def publish_finished_jobs(engine: Engine, worker: str, lease_seconds: float,
                          spend_ledger: SpendLedger | Callable[[], SpendLedger | None] | None = None) -> int:
    """SAVED_NOT_PUBLIC language tracks whose every event is delivered move to PUBLISHED; then
    SAVED_NOT_PUBLIC slots with no unpublished track (a slot from before tracks: every event
    delivered) move to PUBLISHED, and the spend ledger records the editions published. Run after
    each relay pass, so a crash between the writes heals on the next run."""
    store = Store(engine, worker, lease_seconds)
    _publish_finished_tracks(store)
    rows = outbox.delivered_slots(engine)
    done = 0
    if callable(spend_ledger) and rows:
        spend_ledger = spend_ledger()
    for job_id, version in rows:
        try:
            job = store.acquire_lease(job_id, version)
            if job is None:
                continue
            d = decisions.on_delivered()
            published = store.transition(job, d.to, reason=d.reason, delay=d.delay)
            done += 1
            if isinstance(spend_ledger, SpendLedger):
                _record_published(engine, spend_ledger, published)
        except (LeaseLost, Contention) as exc:
            log.warning("publish_deferred", job_id=job_id, error=str(exc))
    return done


def _publish_finished_tracks(store: Store) -> int:
    """SAVED_NOT_PUBLIC tracks whose language's events are all delivered: PUBLISHED (fenced on
    the track; the slot's row is not touched)."""
    rows = outbox.delivered_tracks(store.engine)
    ts = track_store.TrackStore(store)
    done = 0
    for row in rows:
        track = track_store.Track.from_row(row)
        d = decisions.on_delivered()
        try:
            ts.advance(track, [Hop(d.to, d.reason)])
            done += 1
        except (LeaseLost, Contention) as exc:
            log.warning("publish_deferred", job_id=track.job_id, lang=track.lang, error=str(exc))
    return done


def _record_published(engine: Engine, spend_ledger: SpendLedger, job: Job) -> None:
    """The published link of the ledger's chain (best effort, after the commit: a line missing
    leaves the ledger behind the database, the safe direction)."""
    rows = outbox.edition_hashes(engine, job.id)
    try:
        spend_ledger.published(job.id, slot_of(job.product, job.edition_date.isoformat()), job.generation_attempts,
                               job.response_id, {str(lang): str(sha) for lang, sha in rows})
    except LedgerError as exc:
        log.error("ledger_unwritable", job_id=job.id, error=str(exc))
