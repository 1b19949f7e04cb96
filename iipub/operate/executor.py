"""Operator actions: the thin executor of `remedies`.

Every action reads the job, asks `remedies` for the decision (a refusal writes nothing),
takes the job's lease on exactly the version it judged, like any worker (so it never races
a live tick), calls the provider where the remedy needs it, and writes through
`Store.transition(..., operator=True)`, journaling who acted and why. Harvested or adopted
output enters the normal pipeline.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import structlog

from iipub.core.closing import Closing
from iipub.core.errors import Contention, JobTaken, LeaseLost, OperatorRefused, UnknownId, UsageError
from iipub.core.timefmt import iso_z, naive_utc
from iipub.machine.decisions import Decision
from iipub.model import states
from iipub.model.jobs import Job
from iipub.model.states import QUARANTINE_REASONS, Reason, State
from iipub.model.track_views import Hop
from iipub.money import budgets, paying, restore
from iipub.money.authority import Route
from iipub.money.breaker import GateState
from iipub.money.gate import CreateGate
from iipub.money.ledger import LedgerError, slot_of
from iipub.money.payment_values import Override
from iipub.money.spend import SlotSpend
from iipub.operate import corrections, remedies
from iipub.operate.remedies import ReleaseMode
from iipub.provider import factory
from iipub.provider.interface import Provider
from iipub.provider.outcomes import (
    Missing,
    Observed,
    ReadOutcome,
    Rejected,
    Stage,
    Transient,
)
from iipub.settings.config import Settings, max_output_bytes
from iipub.store import clock, installation, job_queries, outbox, track_store
from iipub.store.deliveries import Deliveries
from iipub.store.handles import Connection, Engine
from iipub.store.job_store import Store

log = structlog.get_logger("iipub.actions")
__all__ = ["BulkResult", "Operator", "Quarantined", "ReleaseMode"]
_LEASE_TRIES = 3
log = structlog.get_logger("iipub.actions")
T = TypeVar("T")


@dataclass(frozen=True)
class BulkResult:
    job: Job
    outcome: str  # released | would release | refused
    state: str  # where the job is (or would be) afterwards
    message: str

    def public(self) -> dict[str, Any]:
        return {"id": self.job.id, "product": self.job.product, "edition_date": self.job.edition_date.isoformat(),
                "outcome": self.outcome, "state": self.state, "message": self.message}


@dataclass(frozen=True)
class Quarantined:
    job: Job
    age_seconds: float  # since the job entered QUARANTINED, by the database clock

    def public(self) -> dict[str, Any]:
        return {**self.job.public(), "age_seconds": round(self.age_seconds, 3)}


class Operator(Closing):
    """Operator actions against one database. The provider is only needed by
    `release(LINK)` and `cancel`; without one, it is built on first use (after the
    API key check, before any lease) and closed by `close()`."""

    def __init__(self, settings: Settings, engine: Engine, provider: Provider | None = None) -> None:
        self.settings = settings
        self.engine = engine
        self._provider = provider
        self._own_provider = False

    def close(self) -> None:
        if self._own_provider and self._provider is not None:
            self._provider.close()
            self._provider = None

    # -- reads ----------------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        """One job by id or unique prefix (UnknownId otherwise)."""
        return Store(self.engine, "operator:read").lookup(job_id)

    def quarantine_list(self) -> list[Quarantined]:
        """Quarantined jobs, longest waiting first."""
        store = Store(self.engine, "operator:list")
        found = store.list_jobs(state=State.QUARANTINED.value, limit=100_000)
        with self.engine.connect() as conn:
            now = clock.read_now(conn)
        found.sort(key=lambda j: (j.state_entered_at, j.id))
        return [Quarantined(j, max(0.0, (now - naive_utc(j.state_entered_at)).total_seconds())) for j in found]

    # -- leaving quarantine ---------------------------------------------------------

    def release(self, job_id: str, mode: ReleaseMode | str, reason: str, by: str,
                link_response_id: str | None = None, *, pay_again: bool = False) -> Job:
        mode = ReleaseMode(mode)
        if (mode == ReleaseMode.LINK) != bool(link_response_id):
            raise UsageError("a response id is required with --link, and only with --link")
        remedies.check_input(by, reason)
        if pay_again and mode != ReleaseMode.VERIFIED_LOST:
            raise UsageError("--pay-again goes with --verified-lost (the release that leads to a paid create)")
        if mode == ReleaseMode.VERIFIED_LOST:
            return self._act(job_id, by, lambda job: self._verified_lost(job, by, reason, pay_again))
        if mode == ReleaseMode.RESUME_POLLING:
            return self._act(job_id, by, lambda job: remedies.release_resume_polling(
                job, self._fingerprint(job), by, reason))
        assert link_response_id is not None
        return self._release_link(job_id, link_response_id, reason, by)

    def _release_link(self, job_id: str, response_id: str, reason: str, by: str) -> Job:
        provider = self._need_provider()  # the key check comes before any lease
        seen = self.get(job_id)
        remedies.check_link(seen)
        # Read-only and safe to repeat, so it happens before the lease: a refusal writes nothing.
        try:
            outcome = provider.retrieve(response_id)
        except ValueError:
            raise OperatorRefused(f"{response_id!r} is not a well-formed response id") from None
        observed = remedies.adoptable(seen, response_id, outcome, installation.read(self.engine))
        store, job, d = self._lease(seen.id, by, lambda job: remedies.link(job, observed, by, reason,
                                                                                  scope=provider.scope))
        linked = self._write(store, job, d)
        if linked.state != State.COMPLETED_NOT_RETRIEVED:
            return self._finish(store, linked)
        return self._finish(store, self._harvest(store, linked, observed, by, reason))

    def release_all(self, quarantine_reason: str, mode: ReleaseMode | str, reason: str, by: str, *,
                    since: dt.datetime | None = None, dry_run: bool = False,
                    pay_again: bool = False) -> list[BulkResult]:
        """One remedy for every job quarantined with `quarantine_reason` (since `since`, by the
        time it entered quarantine): each through the same path as the single-job command, and
        refused where that would refuse. `--link` needs a response id per job, so it is not offered."""
        mode = ReleaseMode(mode)
        if mode == ReleaseMode.LINK:
            raise UsageError("--all releases with --verified-lost or --resume-polling; --link names one response")
        if quarantine_reason not in QUARANTINE_REASONS:
            raise UsageError(f"unknown quarantine reason {quarantine_reason!r} "
                             f"(one of: {', '.join(sorted(QUARANTINE_REASONS))})")
        remedies.check_input(by, reason)
        results: list[BulkResult] = []
        for q in self.quarantine_list():
            job = q.job
            if job.quarantine_reason != quarantine_reason:
                continue
            if since is not None and naive_utc(job.state_entered_at) < naive_utc(since):
                continue
            try:
                if dry_run:
                    d = self._release_decision(job, mode, reason, by, pay_again)
                    results.append(BulkResult(job, "would release", d.to.value, ""))
                else:
                    done = self.release(job.id, mode, reason, by, pay_again=pay_again)
                    results.append(BulkResult(job, "released", done.state.value, ""))
            except (OperatorRefused, JobTaken, LeaseLost, Contention) as exc:
                results.append(BulkResult(job, "refused", job.state.value, str(exc)))
        return results

    def _verified_lost(self, job: Job, by: str, reason: str, pay_again: bool = False) -> Decision:
        """`release_verified_lost`, asked of the payment authority first, with this installation's
        spend ledger record of the slot (charged to the job when it was parked behind it)."""
        spend = self._slot_spend(job)
        live = None
        if job.quarantine_reason == Reason.RESTORED_BEHIND_LEDGER and spend is not None:
            live = restore.published_live(self.settings, spend)
        d = remedies.release_verified_lost(job, self.settings.budgets.max_generation_attempts, by, reason,
                                           spend if job.quarantine_reason == Reason.RESTORED_BEHIND_LEDGER else None,
                                           live)
        return self._authorized(job, d, Route.RELEASE, spend, reason if pay_again else None)

    def _slot_spend(self, job: Job) -> SlotSpend | None:
        """This installation's spend ledger record of the job's slot (None: no ledger, or nothing)."""
        book = restore.ledger_of(self.settings, self.engine)
        if book is None:
            return None
        try:
            slots, _ = book.read()
        except LedgerError as exc:
            raise OperatorRefused(f"job {job.id}: {exc}; its paid creates cannot be counted") from None
        return slots.get(slot_of(job.product, job.edition_date.isoformat()))

    def _authorized(self, job: Job, d: Decision, route: Route, spend: SlotSpend | None,
                    pay_again: str | None, replacing: tuple[str, ...] = ()) -> Decision:
        """The payment authority on a decision that sends `job` back to CREATE_ELIGIBLE: a refusal
        raises its one line; an allowed create is made under the deployed configuration, and a
        pay-again is journaled with the evidence it overrides (the sweep lets that create through)."""
        ruling = paying.ruling(self.settings, self.engine, job, route, spend=spend, pay_again=pay_again,
                               replacing=replacing)
        if not ruling.allowed:
            raise OperatorRefused(ruling.line())
        changes, detail = dict(d.changes), dict(d.detail)
        product = self.settings.products.get(job.product)
        if product is not None:
            changes["config_fingerprint"] = product.fingerprint()
        if pay_again:
            detail["pay_again"] = {"why": pay_again, "overrides": list(ruling.overridden)}
        return dataclasses.replace(d, changes=changes, detail=detail)

    def _release_decision(self, job: Job, mode: ReleaseMode, reason: str, by: str,
                          pay_again: bool = False) -> Decision:
        if mode == ReleaseMode.VERIFIED_LOST:
            return self._verified_lost(job, by, reason, pay_again)
        return remedies.release_resume_polling(job, self._fingerprint(job), by, reason)

    # -- republish -------------------------------------------------------------------

    def republish(self, job_id: str, reason: str, by: str) -> int:
        """Let a job's editions replace pages that are live with different content (parked as
        `conflicting_republish`); returns the deliveries re-queued."""
        remedies.check_input(by, reason)
        job = self.get(job_id)
        if job.effective_state not in states.EDITIONS_SAVED:
            raise OperatorRefused(f"job {job.id} is {job.state}: it has no saved editions to republish")
        return outbox.grant_republish(self.engine, job.id, by, reason)

    # -- pause / unpause ------------------------------------------------------------

    def pause(self, by: str, reason: str, *, everything: bool = False) -> GateState:
        """Stop new paid creates in every process; custody, cleanup and the relay go on. With
        `everything` (the immediate abort), every automated command only records its heartbeat."""
        remedies.check_input(by, reason)
        return self._gate(by).pause(by, reason, everything=everything)

    def unpause(self, by: str, reason: str | None = None) -> GateState:
        remedies.check_input(by, reason)
        return self._gate(by).unpause(by, reason)

    def budget_override(self, tokens: int, reason: str, by: str, *, product: str | None = None,
                        until: dt.datetime | None = None) -> Override:
        """Raise a daily spend ceiling (the global one, or `product`'s) by `tokens` until `until`
        (default: the next UTC midnight); journaled in `gate_events` with who and why."""
        remedies.check_input(by, reason)
        if not 1 <= tokens <= 10**12:
            raise UsageError(f"--tokens must be between 1 and 10^12 (got {tokens})")
        if product is not None:
            self.settings.product(product)  # an unknown product is one clear error
        gate = CreateGate(self.engine, _worker(by), self.settings.provider, self.settings.reconcile.lease_seconds,
                          self.settings.budgets, self.settings.products)  # the ceilings it must raise
        return gate.override(product or budgets.GLOBAL, tokens, until, by, reason)

    def _gate(self, by: str) -> CreateGate:
        return CreateGate(self.engine, _worker(by), self.settings.provider, self.settings.reconcile.lease_seconds)

    # -- suspend / resume -----------------------------------------------------------

    def suspend(self, job_id: str, reason: str, by: str) -> Job:
        remedies.check_input(by, reason)
        return self._act(job_id, by, lambda job: remedies.suspend(job, by, reason))

    def resume(self, job_id: str, by: str, reason: str | None = None) -> Job:
        remedies.check_input(by, reason)
        return self._act(job_id, by, lambda job: remedies.resume(job, by, reason))

    # -- cancel / kill --------------------------------------------------------------

    def cancel(self, job_id: str, reason: str, by: str) -> Job:
        """Best-effort remote cancel; see `remedies.after_cancel` for what follows. A transient
        failure is refused: nothing changed but the lease taken and given back."""
        remedies.check_input(by, reason)
        provider = self._need_provider()
        store, job, _ = self._lease(job_id, by, remedies.check_cancel)
        assert job.response_id
        try:
            outcome = _actual_status(provider, job.response_id)
        except ValueError:  # an id the provider cannot be asked about (a row written by hand)
            _release_quietly(store, job)
            raise OperatorRefused(f"job {job.id} holds response id {job.response_id[:80]!r}, which the provider "
                                  "cannot be asked about; nothing changed (`iipub kill` ends the slot)") from None
        except BaseException:
            _release_quietly(store, job)  # never leave the command's lease behind
            raise
        done = self._write(store, job, remedies.after_cancel(job, outcome, by, reason))
        if done.state == State.COMPLETED_NOT_RETRIEVED and isinstance(outcome, Observed):
            # The provider finished before the cancel landed: take custody now.
            done = self._harvest(store, done, outcome, by, reason)
        return self._finish(store, done)

    def kill(self, job_id: str, reason: str, by: str) -> Job:
        """Terminate: the job will not publish. The next tick cancels and deletes any remote data;
        the slot's unpublished language tracks end with it, in the same transaction."""
        remedies.check_input(by, reason)

        def decide(job: Job) -> Decision:
            saved = sorted(t.lang for t in self.tracks_of(job.id) if t.state in states.TRACK_SAVED)
            return remedies.kill(job, by, reason, saved)

        store, job, d = self._lease(job_id, by, decide)
        detail = remedies.who(by, reason)
        killed = self._finish(store, self._write(store, job, d, extra=lambda conn: track_store.kill_unpublished(
            conn, store, job.id, detail)))
        self._ledger_kill(killed)
        return killed

    def _ledger_kill(self, job: Job) -> None:
        """The spend ledger remembers the kill (its remote data may go without custody), so a
        database restored from before it still explains the delete. Best effort: the kill is
        committed already."""
        book = restore.ledger_of(self.settings, self.engine)
        if book is None or not job.response_id:
            return
        try:
            book.killed(job.id, slot_of(job.product, job.edition_date.isoformat()),
                                     job.generation_attempts, job.response_id)
        except LedgerError as exc:
            log.error("ledger_unwritable", job_id=job.id, error=str(exc))

    # -- out of a validation failure ------------------------------------------------

    def revalidate(self, job_id: str, reason: str, by: str, lang: str | None = None) -> Job:
        """The kept payload checked again for free: one language's track (`lang`), or the job
        itself when it is parked, else every parked track of the job."""
        remedies.check_input(by, reason)
        job = Store(self.engine, _worker(by)).lookup(job_id)
        found = self.tracks_of(job.id)
        if lang is not None or (job.state not in states.PARKED and any(
                t.state in states.TRACK_PARKED for t in found)):
            langs = [lang] if lang is not None else [t.lang for t in found if t.state in states.TRACK_PARKED]
            for one in langs:
                self.revalidate_track(job, one, reason, by)
            return self._finish(Store(self.engine, _worker(by)), job)
        return self._act(job.id, by, lambda job: remedies.revalidate(job, by, reason, self._fingerprint(job)))

    def revalidate_track(self, job: Job, lang: str, reason: str, by: str) -> track_store.Track:
        """`revalidate ID --lang L`: fenced on the track; a slot parked with all its tracks is
        taken back to READY_TO_COMPOSE in the same transaction (`remedies.reopen_for_track`), so
        the track pass runs the language to publication. Refused where the track could not move."""
        track = next((t for t in self.tracks_of(job.id) if t.lang == lang), None)
        to, why, changes, detail = remedies.revalidate_track(job, lang, track.state if track else None, by, reason,
                                                              track.quarantine_reason if track else None)
        assert track is not None
        remedies.reopen_for_track(job, lang, by, reason, self._fingerprint(job))  # refuses before any lease
        store = Store(self.engine, _worker(by), self.settings.reconcile.lease_seconds)
        ts = track_store.TrackStore(store)
        if track.lease_owner is not None:
            raise JobTaken(f"job {job.id}: the {lang} track is leased by {track.lease_owner}; retry in a minute")
        hop = [Hop(to, why, detail)]
        if job.state in states.TRACKS_RUN_IN:
            return ts.advance(track, hop, changes=changes, delay=0, operator=True)
        store, slot, d = self._lease(job.id, by, lambda j: remedies.reopen_for_track(
            j, lang, by, reason, self._fingerprint(j)))
        if d is None:  # the slot moved on its own meanwhile: the track alone, as above
            store.release(slot)
            return ts.advance(track, hop, changes=changes, delay=0, operator=True)
        moved: list[track_store.Track] = []
        self._write(store, slot, d, extra=lambda conn: moved.append(track_store.advance_in(
            conn, store, track, hop, changes=changes, delay=0, operator=True)))
        return moved[0]

    def regenerate(self, job_id: str, reason: str, by: str, *, pay_again: bool = False) -> Job:
        """A new paid generation for the slot's unpublished languages (the journal names them),
        asked of the payment authority first."""
        remedies.check_input(by, reason)
        max_gen = self.settings.budgets.max_generation_attempts
        return self._act(job_id, by, lambda job: self._authorized(job, remedies.regenerate(
            job, max_gen, by, reason, {t.lang: t.state for t in self.tracks_of(job.id)}), Route.REGENERATE,
            self._slot_spend(job), reason if pay_again else None))

    def correct_regenerate(self, job_id: str, chosen: Sequence[corrections.PublicEdition], reason: str, by: str,
                           note: str | None) -> Job:
        """`correct --regenerate --pay-again`: the published slot back to CREATE_ELIGIBLE for one
        paid generation whose output replaces `chosen` (`corrections.regenerate`), asked of the
        payment authority on its own route with the operator's pay-again (journaled with the
        evidence it overrides); the sweep then lets that one create through."""
        remedies.check_input(by, reason)
        max_gen = self.settings.budgets.max_generation_attempts
        langs = tuple(sorted(e.lang for e in chosen))
        return self._act(job_id, by, lambda job: self._authorized(
            job, corrections.regenerate(job, chosen, max_gen, by, reason, note), Route.CORRECT,
            self._slot_spend(job), reason, replacing=langs))

    def tracks_of(self, job_id: str) -> list[track_store.Track]:
        with self.engine.connect() as conn:
            return track_store.of_job(conn, job_id)

    # -- output recovered by hand ---------------------------------------------------

    def import_payload(self, job_id: str, path: Path, reason: str, by: str) -> Job:
        """Take output an operator recovered (the provider's dashboard) into custody: the job goes
        to RETRIEVED_NOT_VALIDATED, due now, and the next tick validates and publishes it. See
        `remedies.parse_import` for what the file may hold. Nothing is written on a refusal."""
        remedies.check_input(by, reason)
        seen = self.get(job_id)
        remedies.check_import(seen)  # before the file is read: the likelier mistake is the job
        max_bytes = max_output_bytes(self.settings.products.get(seen.product))
        limit = remedies.import_file_limit(max_bytes)
        try:
            with path.open("rb") as f:
                raw = f.read(limit + 1)  # bounded: a device or a huge file is never read whole
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
        if len(raw) > limit:
            raise OperatorRefused(f"{path} is larger than {limit} bytes (4 x max_output_bytes + 1 MiB); nothing "
                                  "written")
        imported = remedies.parse_import(raw, max_bytes, factory.saved_response_reader(self.settings))
        return self._act(seen.id, by, lambda job: remedies.import_payload(job, imported, max_bytes, by, reason))

    # -- orphans --------------------------------------------------------------------

    def orphan(self, response_id: str) -> remedies.Orphan:
        found = Deliveries(self.engine).orphan(response_id.strip())
        if found is None:
            raise UnknownId(f"no orphan {response_id!r} (see `iipub orphans list`)")
        return remedies.Orphan.from_row(found)

    def adopt_orphan(self, response_id: str, job_id: str, reason: str, by: str, *, other_slot: bool = False) -> Job:
        """Use an orphan's kept output for a job: custody through the fenced path (the orphan is
        marked adopted in the same transaction), validated and published by the next tick. Nothing
        is sent to the provider."""
        remedies.check_input(by, reason)
        orphan = self.orphan(response_id)
        ours = installation.read(self.engine)
        seen = self.get(job_id)
        max_bytes = max_output_bytes(self.settings.products.get(seen.product))

        def decide(job: Job) -> Decision:
            return remedies.adopt_orphan(job, orphan, installation_id=ours, live_editions=self._editions(job),
                                         max_output_bytes=max_bytes, other_slot=other_slot, by=by, reason=reason)

        store, job, d = self._lease(seen.id, by, decide)
        ds = Deliveries(self.engine)
        try:
            adopted = store.transition(job, d.to, reason=d.reason, operator=True, changes=d.changes, detail=d.detail,
                                       delay=d.delay, extra=lambda conn: ds.orphan_fate(
                                           orphan.response_id, "adopted", job.id, reason, by, conn=conn))
        except Exception:
            _release_quietly(store, job)
            raise
        log.warning("orphan_adopted", response_id=orphan.response_id, job_id=job.id, by=by, reason=reason)
        return self._finish(store, adopted)

    def discard_orphan(self, response_id: str, reason: str, by: str) -> remedies.Orphan:
        """The operator's explicit choice: an orphan is dropped and deleted at the provider (an
        unfinished one is cancelled first). The decision is recorded before the DELETE is sent."""
        remedies.check_input(by, reason)
        orphan = self.orphan(response_id)
        remedies.check_discard(orphan)
        provider = self._need_provider()
        ds = Deliveries(self.engine)
        ds.orphan_fate(orphan.response_id, "discarded", None, reason, by)
        installation.record_delete(self.engine, orphan.response_id, None, "discard", _worker(by))
        log.warning("orphan_discarded", response_id=orphan.response_id, by=by, reason=reason)
        if provider.stage_of(orphan.status) is not Stage.FINISHED:
            provider.cancel(orphan.response_id)  # best effort: stop its spend first
        outcome = provider.delete(orphan.response_id, has_custody=orphan.output is not None,
                                  kill_requested=orphan.output is None)
        if isinstance(outcome, (Transient, Rejected)):
            raise OperatorRefused(f"orphan {orphan.response_id} is discarded, but the provider's DELETE failed: "
                                  f"{outcome.why}; run the command again to retry it")
        ds.orphan_deleted(orphan.response_id)
        return self.orphan(orphan.response_id)

    def _editions(self, job: Job) -> int:
        return job_queries.editions_of_slot(self.engine, job.product, job.edition_date)

    # -- internals ------------------------------------------------------------------

    def _fingerprint(self, job: Job) -> str | None:
        """The product's fingerprint as the job knows it: its recorded value while that still
        names the deployed config (in any fingerprint version), else the current one."""
        product = self.settings.products.get(job.product)
        if product is None:
            return None
        recorded = job.config_fingerprint
        return recorded if recorded and product.fingerprint_matches(recorded) else product.fingerprint()

    def _need_provider(self) -> Provider:
        if self._provider is None:
            provider = factory.build(self.settings)
            provider.ready()  # a broken HTTP set-up is one error line now, before any lease
            self._provider = provider
            self._own_provider = True
        return self._provider

    def _act(self, job_id: str, by: str, decide: Callable[[Job], Decision]) -> Job:
        store, job, d = self._lease(job_id, by, decide)
        return self._finish(store, self._write(store, job, d))

    def _write(self, store: Store, job: Job, d: Decision,
               extra: Callable[[Connection], object] | None = None) -> Job:
        try:
            return store.transition(job, d.to, reason=d.reason, operator=True, changes=d.changes, detail=d.detail,
                                    delay=d.delay, keep_lease=d.go_on, extra=extra)
        except Exception:
            _release_quietly(store, job)  # never leave the command's lease behind
            raise

    def _lease(self, job_id: str, by: str, decide: Callable[[Job], T]) -> tuple[Store, Job, T]:
        """Read, decide (a refusal raises before anything is written), and take the lease on
        exactly the version judged."""
        store = Store(self.engine, _worker(by), self.settings.reconcile.lease_seconds)
        job_id = store.lookup(job_id).id  # the operator's id or prefix, once; whole ids from here
        for _ in range(_LEASE_TRIES):
            job = store.get(job_id)
            d = decide(job)
            if job.lease_owner and job.lease_expiry is not None:
                with self.engine.connect() as conn:
                    now = clock.read_now(conn)
                if naive_utc(job.lease_expiry) >= now:
                    raise JobTaken(
                        f"job {job.id} is leased by {job.lease_owner} until "
                        f"{iso_z(job.lease_expiry, 'seconds')}; retry in a minute"
                    )
            leased = store.acquire_lease(job.id, job.version, operator=True)
            if leased is not None:
                return store, leased, d
            # Someone wrote between our read and our claim: look again.
        raise JobTaken(f"job {job_id} keeps changing under us (a worker is active on it); retry in a minute")

    def _harvest(self, store: Store, job: Job, observed: Observed, by: str, reason: str) -> Job:
        if observed.output_text is None:
            # A cancel reply may omit the output; fetch the full response once.
            assert job.response_id
            again = _finished_output(self._need_provider(), job.response_id)
            if again is None:
                store.release(job)  # COMPLETED_NOT_RETRIEVED: the next tick fetches it
                return job
            observed = again
        max_bytes = self.settings.products[job.product].max_output_bytes if job.product in self.settings.products \
            else None
        return self._write(store, job, remedies.harvest(job, observed, max_bytes, by, reason))

    def _finish(self, store: Store, job: Job) -> Job:
        # The row as stored (times set by the database), not the in-memory copy.
        return store.get(job.id)


def _release_quietly(store: Store, job: Job) -> None:
    with contextlib.suppress(Exception):  # best effort: the lease expires on its own anyway
        store.release_if_held(job.id)


def _finished_output(provider: Provider, response_id: str) -> Observed | None:
    """The finished response with its output, or None if it cannot be read now."""
    outcome = provider.retrieve(response_id)
    if isinstance(outcome, Observed) and outcome.finished and outcome.output_text is not None:
        return outcome
    return None


def _actual_status(provider: Provider, response_id: str) -> Observed | Missing:
    """Cancel, then make sure we know the response's real status (cancelling a finished
    response answers 400: read it instead). Raises OperatorRefused when we cannot tell."""
    outcome: ReadOutcome = provider.cancel(response_id)
    if isinstance(outcome, Transient):
        raise OperatorRefused(f"cancel of {response_id} failed, nothing changed; retry: {outcome.why}")
    if isinstance(outcome, Missing):
        return outcome
    if isinstance(outcome, Observed) and (outcome.gone or (outcome.finished and outcome.output_text is not None)):
        return outcome
    rejected = outcome if isinstance(outcome, Rejected) else None
    again = provider.retrieve(response_id)
    if isinstance(again, (Observed, Missing)):
        return again
    why = again.why if isinstance(again, Transient) else f"HTTP {again.status}: {again.why}"
    first = f"cancel answered HTTP {rejected.status}: {rejected.why}; " if rejected else ""
    raise OperatorRefused(f"cannot tell what happened to {response_id}: {first}retrieve failed: {why}; "
                          "nothing changed, retry")


def _worker(by: str) -> str:
    return f"operator:{by.strip()}"[:128]
