"""`iipub relay`: deliver outbox events to every configured sink, at least once; the
sinks are idempotent, so the public result is exactly once.

Claims are fenced by primary key and version, so overlapping relays never deliver the
same claim twice; a relay killed after a sink wrote re-delivers (byte-identical) next run.
When every event of a job is delivered, the job moves SAVED_NOT_PUBLIC -> PUBLISHED
through the job store.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import httpx
import sqlalchemy as sa
import structlog

from . import backoff, db, handlers, outbox
from .config import Settings
from .errors import ConfigError, Contention, LeaseLost
from .jobs import new_worker_id
from .outbox import Outbox, OutboxEvent
from .sinks import Delivered, Event, Parked, RetryLater, Sink
from .sinks.static import StaticSink
from .sinks.webhook import WebhookSink
from .states import State
from .store import Store

log = structlog.get_logger("iipub.relay")


@dataclass
class RelayReport:
    worker: str
    claimed: int = 0
    published: int = 0
    retried: int = 0
    parked: int = 0
    deliveries: dict[str, int] = field(default_factory=dict)
    jobs_published: int = 0
    stopped_at_deadline: bool = False
    seconds: float = 0.0


def build_sinks(settings: Settings, client: httpx.Client | None = None, engine: sa.Engine | None = None) -> list[Sink]:
    sinks: list[Sink] = []
    if settings.static_sink is not None:
        s = settings.static_sink
        grants = (lambda job_id: outbox.republish_granted(engine, job_id)) if engine is not None else None
        sinks.append(StaticSink(s.root, site_title=s.site_title, base_url=s.base_url, may_replace=grants))
    if settings.webhook_sink is not None:
        w = settings.webhook_sink
        try:
            sinks.append(WebhookSink(w.url, settings.webhook_secret(), client=client, timeout=w.timeout_seconds))
        except ValueError as exc:  # a malformed secret is a configuration error, not a crash
            raise ConfigError(f"${w.secret_env}: {exc}") from None
    return sinks


def run(settings: Settings, engine: sa.Engine, *, sinks: list[Sink] | None = None, worker: str | None = None,
        rng: random.Random | None = None) -> RelayReport:
    rs = settings.relay
    worker = worker or new_worker_id("relay")
    rng = rng or random.Random()
    started = time.monotonic()
    deadline = started + rs.tick_seconds
    report = RelayReport(worker=worker)
    box = Outbox(engine, worker, rs.lease_seconds)
    client = httpx.Client() if sinks is None and settings.webhook_sink is not None else None
    try:
        sinks = sinks if sinks is not None else build_sinks(settings, client, engine)
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
                _deliver(box, ev, sinks, settings, rng, report)
        report.jobs_published = publish_finished_jobs(engine, worker, settings.reconcile.lease_seconds)
    finally:
        if client is not None:
            client.close()
    report.seconds = round(time.monotonic() - started, 3)
    log.info("relay_done", **vars(report))
    return report


def _deliver(box: Outbox, ev: OutboxEvent, sinks: list[Sink], settings: Settings, rng: random.Random,
             report: RelayReport) -> None:
    rs = settings.relay
    try:
        event = Event.from_payload(ev.payload)
    except ValueError as exc:
        box.retry_later(ev, rs.backoff_cap_seconds, f"corrupt outbox payload: {exc}")
        report.parked += 1
        return
    settled = box.settled_sinks(ev.event_id)
    waits: list[float] = []
    errors: list[str] = []
    parked = False
    for sink in sinks:
        if sink.name in settled:
            parked = parked or settled[sink.name] == "parked"
            continue
        try:
            result = sink.deliver(event)
        except Exception as exc:  # a sink bug must not stop the other sinks or events
            log.exception("sink_failed", sink=sink.name, event_id=ev.event_id)
            result = RetryLater(None, f"{type(exc).__name__}: {exc}")
        if isinstance(result, Delivered):
            box.record(ev.event_id, sink.name, delivered=True)
            report.deliveries[sink.name] = report.deliveries.get(sink.name, 0) + 1
        elif isinstance(result, Parked):
            box.record(ev.event_id, sink.name, parked=True, error=result.why)
            log.warning("sink_parked", sink=sink.name, event_id=ev.event_id, why=result.why)
            parked = True
            errors.append(f"{sink.name}: parked: {result.why}")
        else:
            box.record(ev.event_id, sink.name, error=result.why)
            hinted = result.delay
            waits.append(hinted if hinted is not None else
                         backoff.exponential(ev.attempts + 1, rs.backoff_base_seconds, rs.backoff_cap_seconds, rng))
            errors.append(f"{sink.name}: {result.why}")
    if not errors and not parked:
        if box.mark_published(ev):
            report.published += 1
        return
    if parked and not waits:
        # Only an operator can move a parked sink; look again at the cap.
        box.retry_later(ev, rs.backoff_cap_seconds, "; ".join(errors) or "a sink is parked")
        report.parked += 1
        return
    box.retry_later(ev, min(min(waits), rs.backoff_cap_seconds), "; ".join(errors))
    report.retried += 1


def publish_finished_jobs(engine: sa.Engine, worker: str, lease_seconds: float) -> int:
    """SAVED_NOT_PUBLIC jobs whose every event is delivered move to PUBLISHED. Run after
    each relay pass, so a crash between the two writes heals on the next run."""
    jobs_table, outbox_table = db.jobs, db.outbox
    with engine.connect() as conn:
        pending = sa.select(outbox_table.c.id).where(
            outbox_table.c.job_id == jobs_table.c.id, outbox_table.c.published_at.is_(None)
        ).exists()
        has_events = sa.select(outbox_table.c.id).where(outbox_table.c.job_id == jobs_table.c.id).exists()
        rows = conn.execute(
            sa.select(jobs_table.c.id, jobs_table.c.version)
            .where(jobs_table.c.state == State.SAVED_NOT_PUBLIC.value, has_events, ~pending)
        ).all()
    store = Store(engine, worker, lease_seconds)
    done = 0
    for job_id, version in rows:
        try:
            job = store.acquire_lease(job_id, version)
            if job is None:
                continue
            d = handlers.on_delivered()
            store.transition(job, d.to, reason=d.reason, delay=d.delay)
            done += 1
        except (LeaseLost, Contention) as exc:
            log.warning("publish_deferred", job_id=job_id, error=str(exc))
    return done
