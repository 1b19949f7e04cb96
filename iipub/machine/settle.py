"""What a verified webhook does: it is a hint that a response finished, never proof of how.

A known response's job is read now, through the same steps and the same fenced writes as any
worker (custody in seconds instead of a poll interval later). A response no job holds is
someone else's unless this database has a reason to read it (`_may_be_ours`) and its metadata
names this installation (`owners`): a foreign one is answered 200, counted and left alone. Of
this installation's: when its metadata proves it is the response of a create whose outcome was
unknown, that job adopts it (`auto_linked`); otherwise it is an orphan, kept with its output
(never deleted automatically). A 404 of one is evidence, re-read by later ticks until reads
agree (`unconfirmed`). Called by the receiver (`iipub.webhooks.receiver`) per delivery and by `reconcile`
for deliveries that arrived while their job's create was still being recorded or unconfirmed.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

import structlog

from iipub.core.errors import Contention, LeaseLost
from iipub.machine import decisions
from iipub.machine.run.run_context import RunContext
from iipub.model import deliveries, owners, states
from iipub.model.jobs import Job
from iipub.model.states import State
from iipub.provider.outcomes import Missing, Observed, Transient
from iipub.store import clock
from iipub.store.deliveries import Deliveries

log = structlog.get_logger("iipub.settle")

def _run(ctx: RunContext, job: Job) -> None:
    """A leased job's steps, exactly as the sweep runs them (`steps.run`); loaded with the first
    delivery that has a job to move, so a tick that only checks for late deliveries never does."""
    from iipub.machine import steps

    steps.run(ctx, job)
    # The slot's language tracks, in this thread, then the slot following them: a delivery takes
    # a finished response as far as a tick does.
    run_slot(ctx, job.id)


def _custody_watch(ctx: RunContext, job: Job) -> None:
    from iipub.machine import steps

    steps.run_custody_watch(ctx, job)

# After this long a delivery still awaiting its job's create is judged as it stands.
_AWAIT_CREATE_SECONDS = 3600.0
# How long after a create's outcome became unknown an unannounced response may still be its proof.
_PROOF_WINDOW_SECONDS = 86400.0


class Retry(Exception):
    """The event cannot be settled now (the provider or the database did not answer): nothing was
    decided, and the sender should deliver it again."""


@dataclass(frozen=True)
class Settled:
    outcome: str
    job_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def response_event(ctx: RunContext, ds: Deliveries, response_id: str, event_type: str,
                   *, lease_wait: float) -> Settled:
    job = ctx.store.by_response(response_id)
    if job is None:
        return unknown_response(ctx, ds, response_id, lease_wait=lease_wait)
    ds.clear_miss(response_id)  # a late webhook: it was not lost after all
    return _known(ctx, job, event_type, lease_wait)


def _known(ctx: RunContext, job: Job, event_type: str, lease_wait: float) -> Settled:
    facts = {"event": event_type, "state": job.state.value}
    if job.state in states.CUSTODY_WATCHED:
        # Parked (quarantined, suspended): decisions wait for an operator, custody never does.
        if job.owes_custody:
            _custody_watch(ctx, job)
            return Settled(_after(ctx, job.id), job.id, facts)
        return Settled(deliveries.NO_OP, job.id, facts)
    if job.state not in states.CUSTODY_PENDING:
        # Published, kept, parked, or in custody already (a duplicate, or the poll was first).
        return Settled(deliveries.NO_OP, job.id, facts)
    claimed = _claim(ctx, job, lease_wait)
    if claimed is None:
        current = ctx.store.find(job.id)
        if current is not None and current.state in states.CUSTODY_PENDING and ctx.store.make_due(current):
            return Settled(deliveries.DEFERRED, job.id, facts)
        return Settled(deliveries.NO_OP, job.id, facts | {"moved_to": current.state.value if current else None})
    _run(ctx, claimed)
    return Settled(_after(ctx, job.id), job.id, facts)


def _after(ctx: RunContext, job_id: str) -> str:
    job = ctx.store.find(job_id)
    return deliveries.CUSTODY if job is not None and job.payload is not None else deliveries.POLLED


def _claim(ctx: RunContext, job: Job, lease_wait: float) -> Job | None:
    """Lease `job` like any worker; while another holds it, wait up to `lease_wait` seconds (a
    poll in hand ends in well under a second). None if it stays held or moved on."""
    until = min(ctx.deadline.at, time.monotonic() + lease_wait)
    while True:
        got = ctx.store.claim([(job.id, job.version)])
        if got:
            return got[0]
        if time.monotonic() >= until:
            return None
        time.sleep(0.1)
        current = ctx.store.find(job.id)
        if current is None or current.state not in states.CUSTODY_PENDING:
            return None
        job = current


def unknown_response(ctx: RunContext, ds: Deliveries, response_id: str, *,
                     lease_wait: float, reads: int = 0) -> Settled:
    """A response no job recorded. It is read only when this database has a reason to think it
    could be its own (`_may_be_ours`); its metadata then says whose it is (`owners`). Anything
    else is foreign: not read, not recorded, not deleted."""
    if not _may_be_ours(ctx, ds, response_id):
        if ctx.store.creates_in_flight():  # it may be the answer still on its way: judged later, unread
            return Settled(deliveries.AWAITING_CREATE, None, {"why": "a create's answer is being recorded"})
        return Settled(deliveries.FOREIGN, None, {"why": "no job, ledger line or unknown create of this database "
                                                         "can be its; not read"})
    outcome = ctx.provider.retrieve(response_id)
    if isinstance(outcome, Transient):
        raise Retry(f"could not read response {response_id}: {outcome.why}")
    if not isinstance(outcome, Observed):
        # Evidence, not proof: one 404 is re-read by later ticks until reads agree, as a poll's is.
        status = "not_found" if isinstance(outcome, Missing) else "unreadable"
        why = (outcome.why if isinstance(outcome, Missing) else f"HTTP {outcome.status}: {outcome.why}")
        reads += 1
        confirm = ctx.settings.provider.loss_confirm_reads
        if reads < confirm:
            return Settled(deliveries.UNCONFIRMED, None, {"reads": reads, "of": confirm, "status": status,
                                                          "why": why})
        return _orphan(ctx, ds, None, response_id, status, f"announced but not readable ({reads} reads): {why}")
    named = outcome.metadata.get("iipub_job_id")
    job = ctx.store.find(named) if named else None
    whose = owners.owner(outcome.metadata, ctx.installation, job, response_id)
    if whose == owners.Owner.FOREIGN:
        return Settled(deliveries.FOREIGN, None, {"why": owners.why_foreign(outcome.metadata, ctx.installation),
                                                  "read": True})
    if job is None:
        return _orphan(ctx, ds, outcome, response_id, outcome.status,
                       f"its metadata names job {named!r}, which does not exist" if named
                       else "it carries no iipub_job_id metadata")
    if job.response_id == response_id:  # recorded meanwhile by the create's own answer
        return _known(ctx, job, "response", lease_wait)
    if decisions.proves_unknown_create(job, outcome):
        return _auto_link(ctx, job, outcome, lease_wait)
    if job.state == State.CREATE_IN_FLIGHT and outcome.metadata.get("iipub_attempt") == str(job.generation_attempts):
        # The webhook beat the create's answer. `reconcile` looks again once the job moved on.
        return Settled(deliveries.AWAITING_CREATE, job.id, {"attempt": job.generation_attempts})
    return _orphan(ctx, ds, outcome, response_id, outcome.status,
                   f"its metadata names job {job.id} (attempt {outcome.metadata.get('iipub_attempt')!r}), which "
                   f"is {job.state.value} with attempt {job.generation_attempts} and response {job.response_id}",
                   named=job)


def _may_be_ours(ctx: RunContext, ds: Deliveries, response_id: str) -> bool:
    """Worth one read: the spend ledger recorded it (a restore forgot its job), it is a kept orphan
    already, or a create's outcome became unknown recently (the read may prove which response it
    made; nothing but that read follows for a response that turns out not to be ours)."""
    return (ctx.ledger.knows(response_id) or ds.orphan(response_id) is not None
            or ctx.store.awaits_unknown_create(_PROOF_WINDOW_SECONDS))


def _auto_link(ctx: RunContext, job: Job, observed: Observed, lease_wait: float) -> Settled:
    claimed = _claim(ctx, job, lease_wait)
    if claimed is None:  # an operator command holds it: look again from the tick
        return Settled(deliveries.AWAITING_CREATE, job.id, {"held": True})
    d = decisions.auto_link(claimed, observed, via="webhook", scope=ctx.scope)
    if d is None:  # changed while we waited for the lease
        ctx.store.release(claimed)
        return Settled(deliveries.AWAITING_CREATE, job.id, {"changed": True})
    linked = ctx.store.transition(claimed, d.to, reason=d.reason, changes=d.changes, detail=d.detail,
                                   delay=d.delay, keep_lease=True)
    ctx.counters.entered(d.to)
    log.info("auto_linked", job_id=job.id, response_id=observed.response_id, status=observed.status,
             quarantine_reason=job.quarantine_reason)
    _run(ctx, linked)
    return Settled(deliveries.AUTO_LINKED, job.id, {"response_id": observed.response_id, "status": observed.status})


def _orphan(ctx: RunContext, ds: Deliveries, observed: Observed | None, response_id: str, status: str,
            why: str, named: Job | None = None) -> Settled:
    """A response of this installation that no job holds (a restored database forgot its job, or
    its job moved on): keep it in custody, output included, and never delete it automatically.
    `iipub orphans adopt` uses its output for a job; `iipub orphans discard` deletes it."""
    limit = max((p.max_output_bytes for p in ctx.settings.products.values()), default=1_000_000)
    new = ds.record_orphan(observed, response_id, why, status, limit)
    log.warning("orphan_response", response_id=response_id, status=status, why=why, new=new)
    detail: dict[str, Any] = {"status": status, "why": why, "kept": True}
    if named is not None:
        detail["named_job_state"] = named.state.value
    return Settled(deliveries.ORPHAN, observed.metadata.get("iipub_job_id") if observed else None, detail)


def awaiting_creates(ctx: RunContext, ds: Deliveries) -> int:
    """Deliveries to look at again: those that arrived before their job's create answer was
    recorded (settled once the job has moved on: recorded the response, or was quarantined with
    an unknown outcome), and those whose one read found nothing (read again, once per tick,
    until `loss_confirm_reads` reads over `loss_confirm_seconds` agree)."""
    settled = 0
    loss = ctx.settings.provider
    for d in ds.awaiting_create():
        if ctx.deadline.passed() or ctx.reads.cooling():
            break
        waited = (_db_now(ctx) - d.received_at).total_seconds()
        reads = 0
        if d.outcome == deliveries.UNCONFIRMED:
            reads = int(d.detail.get("reads") or 0)
            if reads + 1 >= loss.loss_confirm_reads and waited < loss.loss_confirm_seconds:
                continue  # the last read waits until the confirmation window has passed
        else:
            job = ctx.store.find(d.job_id) if d.job_id else None
            if job is not None and job.state == State.CREATE_IN_FLIGHT and waited < _AWAIT_CREATE_SECONDS:
                continue
            if job is not None and job.state == State.QUARANTINED and job.lease_owner is not None:
                continue  # an operator is on it
        assert d.response_id is not None
        try:
            result = unknown_response(ctx, ds, d.response_id, lease_wait=0, reads=reads)
        except (Retry, LeaseLost, Contention) as exc:
            log.info("awaiting_create_deferred", webhook_id=d.webhook_id, error=str(exc))
            continue
        if result.outcome == deliveries.AWAITING_CREATE:
            continue
        ds.settle(d.webhook_id, result.outcome, job_id=result.job_id, detail=result.detail | {"late": True})
        if result.outcome != deliveries.UNCONFIRMED:
            settled += 1
    return settled


def _db_now(ctx: RunContext) -> dt.datetime:
    with ctx.store.engine.connect() as conn:
        return clock.read_now(conn)


def run_slot(ctx: RunContext, job_id: str) -> None:
    """One slot's due tracks run here (a webhook delivery's thread), then the slot follows them."""
    from iipub.machine import steps, track_steps
    from iipub.store.track_store import TrackStore

    ts = TrackStore(ctx.store)
    due = ts.due_of(job_id)
    if not due or ctx.deadline.passed():
        return
    for one in due:
        track_steps.claim_and_run(ctx, ts, one)
    for job_id_, version, _ in ctx.store.due_candidates(1, states.TRACKS_RUN_IN, job_id=job_id):
        job = ctx.store.acquire_lease(job_id_, version)
        if job is not None:
            steps.run(ctx, job)
