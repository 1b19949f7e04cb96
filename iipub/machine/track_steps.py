"""The sweep's side of language tracks: the fork of a validated slot, one track's step (its
language's checks, composition and save in one transaction), and the slot following its slowest
track. Decisions are `track_decisions`'; every track write goes through `track_store.TrackStore`."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import structlog

from iipub.core.errors import Contention, DatabaseUnavailable, LeaseLost
from iipub.edition import validate
from iipub.edition.compose import Artifact
from iipub.machine import revisions, track_decisions
from iipub.machine.applying import apply
from iipub.machine.run.run_context import RunContext
from iipub.model.jobs import Job
from iipub.model.states import TRACKS_RUN_IN, EditionStatus, Reason
from iipub.model.track_views import Hop
from iipub.store import db, edition_changes, outbox, track_store
from iipub.store.edition_changes import SavedEdition
from iipub.store.handles import IntegrityError
from iipub.store.track_store import Track, TrackStore

log = structlog.get_logger("iipub.reconcile")
__all__ = ["follow", "fork", "run_track", "track_pass"]


def fork(ctx: RunContext, job: Job) -> Job:
    """RETRIEVED_NOT_VALIDATED, its product configured as the job knows it: the shared checks;
    passed, the slot waits for its tracks and the fork (a track per language holding its part) is
    written in the same transaction."""
    product = ctx.settings.products[job.product]
    d, parts = track_decisions.on_shared_validation(job, validate.shared(job.payload, product))
    store = ctx.store
    correction = revisions.pending(store.engine, job.id) if parts else None
    replacing = correction.languages if correction is not None else ()
    return apply(ctx, job, d, extra=(lambda conn: track_store.fork(
        conn, store, job, parts, job.payload_sha256, {"correcting": True} if replacing else None, replacing))
                 if parts else None)


def track_pass(ctx: RunContext, pool: ThreadPoolExecutor) -> int:
    """Every due track of a slot that lets its tracks run, each claimed and run in a pool thread
    (the languages of one slot run concurrently; no lock is held across tracks). Returns how many
    tracks were leased."""
    ts = TrackStore(ctx.store)
    seen: set[str] = set()
    leased = 0
    s = ctx.settings.reconcile
    while not ctx.deadline.passed():
        batch = [(tid, v) for tid, v in ts.due(s.batch_size + len(seen)) if tid not in seen]
        if not batch:
            break
        seen.update(tid for tid, _ in batch)
        results = [pool.submit(claim_and_run, ctx, ts, one) for one in batch]
        leased += sum(f.result() for f in results)
    ctx.counters.count("tracks_leased", leased)
    return leased


def claim_and_run(ctx: RunContext, ts: TrackStore, seen: tuple[str, int]) -> int:
    try:
        claimed = ts.claim([seen])
    except (Contention, DatabaseUnavailable) as exc:
        ctx.counters.count("contention" if isinstance(exc, Contention) else "errors")
        log.warning("track_claim_failed", track_id=seen[0], worker=ts.worker, error=str(exc))
        return 0
    for track in claimed:
        run_track(ctx, ts, track)
    return len(claimed)


def follow(ctx: RunContext, job: Job) -> Job | None:
    """READY_TO_COMPOSE / COMPOSED_NOT_SAVED: the slot follows its tracks. A slot without tracks
    (a row from before them, or restored from an older backup) gets them first."""
    store = ctx.store
    with store.engine.connect() as conn:
        rows = track_store.of_job(conn, job.id)
    if not rows:
        _convert_only(ctx, job)
        return None
    d = track_decisions.slot_follows(job, {t.lang: (t.state, t.composed) for t in rows}) \
        or track_decisions.slot_parks({t.lang: (t.state, t.quarantine_reason, t.last_error) for t in rows})
    if d is None:
        store.release(job)
        return None
    return apply(ctx, job, d)


def _convert_only(ctx: RunContext, job: Job) -> None:
    """Convert the slot's row into tracks (its own transaction) and give the lease back: the
    tracks' pass moves them, and the slot follows them."""
    store = ctx.store
    with db.transaction(store.engine) as conn:
        langs = track_store.convert(conn, store, job)
    log.info("tracks_converted", job_id=job.id, languages=langs, worker=store.worker)
    store.release(job)


def run_track(ctx: RunContext, ts: TrackStore, track: Track) -> None:
    """Run a leased track as far as one transaction takes it. Like `steps.run`, nothing is
    raised: a lost race, contention or a bug is logged and counted."""
    bound = log.bind(job_id=track.job_id, lang=track.lang, worker=ts.worker)
    try:
        _run(ctx, ts, track)
    except LeaseLost as exc:
        ctx.counters.count("lease_lost")
        bound.warning("lease_lost", error=str(exc))
    except (Contention, DatabaseUnavailable) as exc:
        ctx.counters.count("contention" if isinstance(exc, Contention) else "errors")
        bound.warning("track_deferred", error=str(exc))
    except Exception as exc:  # one track's bug never stops the sweep, nor loops silently
        ctx.counters.count("errors")
        bound.exception("track_failed", error=str(exc), state=track.state.value)
        try:
            _failed(ctx, ts, track, f"{type(exc).__name__}: {exc}")
        except Exception:  # the database itself may be what failed; the lease expires anyway
            bound.warning("track_failure_not_recorded")


def _failed(ctx: RunContext, ts: TrackStore, track: Track, error: str) -> None:
    """Count the failure on the track; park it `step_failing` once it happened
    `max_step_failures` times in a row (its part kept)."""
    failures = track.retry_count + 1
    if failures < ctx.settings.reconcile.max_step_failures:
        ts.note_failure(track, f"step_failed: {error}")
        return
    from iipub.machine import decisions

    d = decisions.quarantine(Reason.STEP_FAILING, f"{failures} failures in a row: {error}",
                            failures=failures, failed_in=track.state.value)
    plan = track_decisions.quarantined(d)
    ts.advance(track, plan.hops, changes=plan.changes)


def _run(ctx: RunContext, ts: TrackStore, track: Track) -> None:
    job = ctx.store.find(track.job_id)
    if job is None or job.state not in TRACKS_RUN_IN:
        ts.release(track)  # the slot moved (suspended, killed) since the track was found due
        return
    correction = _correction(ctx, job, track.lang)
    plan = track_decisions.step(job, track.lang, track.state, track.payload, track.composed,
                               ctx.settings.products.get(job.product), shadow=ctx.shadow,
                               correcting=correction is not None)
    detail_thread = threading.current_thread().name
    hops = tuple(Hop(h.to, h.reason, {**h.detail, "thread": detail_thread}) for h in plan.hops)
    artifact = plan.save
    if artifact is not None and correction is not None:
        _save_correction(ctx, ts, track, job, hops, plan, artifact, *correction)
        return
    try:
        written = ts.advance(track, hops, changes=plan.changes, delay=plan.delay,
                             extra=(lambda conn: outbox.save_editions(conn, job, {track.lang: artifact}))
                             if artifact is not None else None)
    except IntegrityError as exc:
        # Rolled back whole: an edition of this language exists already. Report, never half-write.
        conflict = track_decisions.on_save_conflict(db.describe_error(exc))
        written = ts.advance(track, conflict.hops, changes=conflict.changes)
    ctx.counters.track_entered(written.state)


def _correction(ctx: RunContext, job: Job, lang: str) -> tuple[revisions.Pending, SavedEdition] | None:
    """The operator's `correct --regenerate` this track's output is for, and the edition it
    replaces; None for a first publication."""
    found = revisions.pending(ctx.store.engine, job.id)
    if found is None or lang not in found.languages:
        return None
    edition = next((e for e in edition_changes.editions_of(ctx.store.engine, job.id) if e.lang == lang), None)
    return (found, edition) if edition is not None else None


def _save_correction(ctx: RunContext, ts: TrackStore, track: Track, job: Job, hops: tuple[Hop, ...],
                     plan: track_decisions.TrackPlan, artifact: Artifact, correction: revisions.Pending,
                     edition: SavedEdition) -> None:
    """The paid generation of a correction, checked and composed: saved as the edition's new
    revision (`edition.corrected`, naming the sha256 it supersedes, with the operator's notice),
    in the track's transaction, exactly as `correct --from-file` writes it; then the ledger's line."""
    spend = revisions.slot_spend(ctx.settings, ctx.store.engine, job)
    change = revisions.corrected(job, edition, spend, revisions.now(ctx.store.engine), correction.public_note,
                                 artifact)
    last = hops[-1]
    hops = (*hops[:-1], Hop(last.to, last.reason, {**last.detail, "revision": change.revision,
                                                   "supersedes": edition.sha256, "by": correction.by}))
    written = ts.advance(track, hops, changes=plan.changes, delay=plan.delay, extra=lambda conn: revisions.write_in(
        conn, job, [edition], [change], EditionStatus.CORRECTED, correction.why, correction.by,
        correction.public_note))
    ctx.counters.track_entered(written.state)
    log.warning("correction_saved", job_id=job.id, lang=track.lang, revision=change.revision, by=correction.by,
                worker=ts.worker)
    revisions.ledger_revised(ctx.settings, ctx.store.engine, job, [edition], [change],
                             EditionStatus.CORRECTED.value)
