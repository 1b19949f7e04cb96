"""The job store: the only code that writes `jobs` rows.

Every write is fenced on the primary key and the version the writer last saw, bumps
the version, and appends its `job_events` row in the same transaction. A write that
matches no row raises `LeaseLost`; contention (deadlock, lock wait) raises
`Contention` after the transaction was rolled back.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import sqlalchemy as sa
import structlog
from sqlalchemy.engine import Connection, Engine

from iipub.core.errors import Contention, IllegalTransition, LeaseLost, UnknownId
from iipub.core.timefmt import as_date
from iipub.model import states
from iipub.model.jobs import Job, JournalEntry, new_worker_id, slot_row
from iipub.model.states import Reason, State
from iipub.model.track_views import TrackView
from iipub.settings.config import Product
from iipub.store import clock, db, spend_rows, tables

log = structlog.get_logger("iipub.store")
jobs_table = tables.jobs
events_table = tables.job_events
# A track read names this many jobs at most per IN list.
_IN_CHUNK = 500
_TRACK_VIEW_COLUMNS = [tables.tracks.c[f.name] for f in dataclasses.fields(TrackView)]

__all__ = ["Job", "JournalEntry", "Store", "new_worker_id"]

@dataclasses.dataclass(frozen=True)
class PlannedWrite:
    """One checked transition (edge, reason, columns) waiting to be written."""

    job: Job
    to_state: State
    reason: Reason
    values: Mapping[str, Any]
    journal: Mapping[str, Any]
    delay: float | None
    keep_lease: bool


class Store:
    def __init__(self, engine: Engine, worker: str, lease_seconds: float = 60.0) -> None:
        self.engine = engine
        self.worker = worker
        self.lease_seconds = lease_seconds

    # -- transactions -------------------------------------------------------------

    def _tx(self) -> AbstractContextManager[Connection]:
        return db.transaction(self.engine)

    # -- reads ----------------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        """The job with exactly this id (UnknownId otherwise)."""
        job = self.find(job_id)
        if job is None:
            raise UnknownId(f"no job with id {job_id!r}")
        return job

    def lookup(self, text: str) -> Job:
        """The job an operator named: its id or a unique prefix of it (UnknownId otherwise).
        Operator input only; the machine always knows whole ids (`get`)."""
        with self.engine.connect() as conn:
            row = db.by_id_or_prefix(conn, jobs_table, jobs_table.c.id, text)
        if row is None:
            raise UnknownId(f"no job with id {text!r}")
        return Job.from_row(row._mapping)

    def find(self, job_id: str) -> Job | None:
        """The job with exactly this id, or None (ids from untrusted input: no prefix match)."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(jobs_table).where(jobs_table.c.id == job_id[:36])).mappings().first()
        return Job.from_row(row) if row is not None else None

    def by_response(self, response_id: str) -> Job | None:
        """The job that recorded `response_id` as its response, if any."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(jobs_table).where(jobs_table.c.response_id == response_id)
                               .order_by(jobs_table.c.updated_at.desc()).limit(1)).mappings().first()
        return Job.from_row(row) if row is not None else None

    def list_jobs(
        self, *, state: str | None = None, product: str | None = None, day: dt.date | None = None,
        limit: int = 1000,
    ) -> list[Job]:
        q = sa.select(jobs_table).order_by(jobs_table.c.edition_date.desc(), jobs_table.c.product).limit(limit)
        if state:
            q = q.where(jobs_table.c.state == state)
        if product:
            q = q.where(jobs_table.c.product == product)
        if day:
            q = q.where(jobs_table.c.edition_date == day)
        with self.engine.connect() as conn:
            return [Job.from_row(r) for r in conn.execute(q).mappings()]

    def products_scheduled(self, products: Sequence[str], day: dt.date) -> set[str]:
        """Which of `products` have a slot on `day` (an index lookup on the slot key)."""
        if not products:
            return set()
        q = sa.select(jobs_table.c.product).where(jobs_table.c.product.in_(list(products)),
                                                  jobs_table.c.edition_date == day)
        with self.engine.connect() as conn:
            return set(conn.execute(q).scalars())

    def slots_between(self, products: Sequence[str], first: dt.date, last: dt.date) -> set[tuple[str, dt.date]]:
        """The (product, date) slots that exist from `first` to `last` (one range read on the slot key)."""
        if not products:
            return set()
        q = sa.select(jobs_table.c.product, jobs_table.c.edition_date).where(
            jobs_table.c.product.in_(list(products)), jobs_table.c.edition_date.between(first, last))
        with self.engine.connect() as conn:
            return {(p, as_date(d)) for p, d in conn.execute(q)}

    def first_slot(self, product: str) -> dt.date | None:
        """The product's earliest slot (an index lookup), or None if it never had one."""
        q = sa.select(sa.func.min(jobs_table.c.edition_date)).where(jobs_table.c.product == product)
        with self.engine.connect() as conn:
            first = conn.execute(q).scalar()
        return as_date(first) if first is not None else None

    def events(self, job_id: str) -> list[JournalEntry]:
        q = sa.select(events_table).where(events_table.c.job_id == job_id).order_by(events_table.c.id)
        with self.engine.connect() as conn:
            return [
                JournalEntry(
                    id=r.id, job_id=r.job_id, from_state=r.from_state, to_state=r.to_state,
                    version=r.version, worker=r.worker, reason=r.reason,
                    detail=json.loads(r.detail) if r.detail else {}, at=r.at, lang=r.lang,
                )
                for r in conn.execute(q)
            ]

    def tracks_of(self, job_ids: Sequence[str], *, chunk: int = _IN_CHUNK) -> dict[str, list[TrackView]]:
        """The language tracks of each of `job_ids` (languages in order), without payloads; a
        job without tracks is absent. One query per `chunk` jobs (the IN list's length)."""
        ids = list(dict.fromkeys(job_ids))
        t = tables.tracks.c
        found: dict[str, list[TrackView]] = {}
        with self.engine.connect() as conn:
            for start in range(0, len(ids), chunk):
                q = (sa.select(*_TRACK_VIEW_COLUMNS).where(t.job_id.in_(ids[start:start + chunk]))
                     .order_by(t.job_id, t.lang))
                for row in conn.execute(q).mappings():
                    track = TrackView.from_row(row)
                    found.setdefault(track.job_id, []).append(track)
        return found

    def suspected_loss_reads(self, job_id: str, most: int) -> int:
        """How many reads in a row (transient failures between them aside) suspected the job's
        response lost: the `loss_suspected` entries since its last other journal entry."""
        q = (sa.select(events_table.c.reason).where(events_table.c.job_id == job_id, events_table.c.lang.is_(None))
             .order_by(events_table.c.id.desc()).limit(3 * most + 3))
        with self.engine.connect() as conn:
            reasons = list(conn.execute(q).scalars())
        count = 0
        for reason in reasons:
            if reason == Reason.LOSS_SUSPECTED:
                count += 1
            elif reason != Reason.POLL_FAILED:
                break
        return count

    def cancelled_by_operator(self, job_id: str, response_id: str) -> bool:
        """Whether an operator's `iipub cancel` asked the provider to stop this response (its
        `operator_cancel` journal entries name the response)."""
        q = (sa.select(events_table.c.detail)
             .where(events_table.c.job_id == job_id, events_table.c.reason == Reason.OPERATOR_CANCEL.value))
        with self.engine.connect() as conn:
            details = list(conn.execute(q).scalars())
        return any(json.loads(d or "{}").get("response_id") == response_id for d in details)

    def due_candidates(self, limit: int, only: frozenset[State] | None = None,
                       job_id: str | None = None) -> list[tuple[str, int, State]]:
        """Due, unleased (or lease-expired) jobs in the states `reconcile` works on (or `only`
        these), best first: accepted (paid) work before new creates, today's slots before
        backfill. A forked slot is due only when its tracks let it move (`states.track_blocks`),
        so a slot waiting on a parked track costs nothing per tick."""
        active = states.ACTIVE if only is None else only
        with self.engine.connect() as conn:
            now = clock.now(conn)
            phase = sa.case(
                (jobs_table.c.state.in_([s.value for s in states.CREATE_NEXT]), 2),
                (jobs_table.c.state.in_([s.value for s in states.CLEANING_UP]), 3),
                else_=0,
            )
            q = (
                sa.select(jobs_table.c.id, jobs_table.c.version, jobs_table.c.state)
                .where(
                    jobs_table.c.state.in_([s.value for s in active]),
                    jobs_table.c.next_attempt_at <= now,
                    sa.or_(jobs_table.c.lease_expiry.is_(None), jobs_table.c.lease_expiry < now),
                    _tracks_let_move(),
                )
                .order_by(phase, jobs_table.c.is_backfill, jobs_table.c.priority, jobs_table.c.next_attempt_at,
                          jobs_table.c.id)
                .limit(limit)
            )
            if job_id is not None:
                q = q.where(jobs_table.c.id == job_id)
            return [(r.id, r.version, State(r.state)) for r in conn.execute(q)]

    def tracks_due(self) -> bool:
        """Whether some language track is due (one indexed read; an idle tick stops here)."""
        t = tables.tracks.c
        with self.engine.connect() as conn:
            q = (sa.select(t.id).where(t.state.in_([s.value for s in states.TRACK_ACTIVE]),
                                       t.next_attempt_at <= clock.now(conn)).limit(1))
            return conn.execute(q).first() is not None

    def custody_watch_due(self, limit: int) -> list[Job]:
        """Parked jobs (quarantined, suspended) that hold a response and no payload, due for the
        custody watch (`custody_watch_at` passed or never set), least recently read first. Never
        leased: custody of their output is written fenced on the version read here. A killed job
        is not watched (its remote data is cancelled and deleted by its cleanup)."""
        j = jobs_table.c
        with self.engine.connect() as conn:
            now = clock.now(conn)
            q = (sa.select(jobs_table)
                 .where(j.state.in_([s.value for s in states.CUSTODY_WATCHED]),
                        j.response_id.is_not(None), j.payload.is_(None), j.kill_requested == sa.false(),
                        sa.or_(j.custody_watch_at.is_(None), j.custody_watch_at <= now),
                        sa.or_(j.lease_expiry.is_(None), j.lease_expiry < now))
                 .order_by(j.custody_watch_at, j.id).limit(limit))
            return [Job.from_row(r) for r in conn.execute(q).mappings()]

    def watch_again(self, job: Job, after_seconds: float) -> bool:
        """The custody watch read `job`'s response and found nothing to store: its next read is
        `after_seconds` from now (database clock). Not a state write: fenced on the version read,
        without a new version or a journal row, so an operator's lease or a custody write wins."""
        with self._tx() as conn:
            res = conn.execute(
                jobs_table.update()
                .where(jobs_table.c.id == job.id, jobs_table.c.version == job.version)
                .values(custody_watch_at=clock.now(conn, after_seconds))
            )
            return res.rowcount == 1

    def last_reason(self, job_id: str) -> str | None:
        """The reason of the job's last journal entry of its own (not a language track's)."""
        e = events_table.c
        with self.engine.connect() as conn:
            return conn.execute(sa.select(e.reason).where(e.job_id == job_id, e.lang.is_(None))
                                .order_by(e.id.desc()).limit(1)).scalar()

    def count_in_flight(self) -> int:
        """Accepted-but-unfinished provider jobs (admission control for new creates)."""
        live = [s.value for s in states.GENERATING]
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).where(jobs_table.c.state.in_(live))).scalar_one())

    def awaits_unknown_create(self, within_seconds: float) -> bool:
        """Whether some job was quarantined with an unknown create outcome (no response recorded)
        in the last `within_seconds`: a response no job holds may then be its proof, worth a read."""
        j = jobs_table.c
        with self.engine.connect() as conn:
            return conn.execute(sa.select(j.id).where(
                j.state == State.QUARANTINED.value, j.response_id.is_(None),
                j.quarantine_reason.in_([r.value for r in states.AMBIGUOUS_CREATE]),
                j.state_entered_at >= clock.now(conn, -within_seconds)).limit(1)).first() is not None

    def creates_in_flight(self) -> bool:
        """Whether some job's create is being sent now (its answer not recorded yet)."""
        with self.engine.connect() as conn:
            return conn.execute(sa.select(jobs_table.c.id).where(
                jobs_table.c.state == State.CREATE_IN_FLIGHT.value).limit(1)).first() is not None

    # -- writes ---------------------------------------------------------------------

    def schedule(self, product: Product, day: dt.date, *, backfill: bool = False) -> bool:
        """Create the slot (state NO_JOB) if missing. True if this call created it."""
        job_id = str(uuid.uuid4())
        opens = product.opens_on(day)
        try:
            with self._tx() as conn:
                now = clock.now(conn)
                conn.execute(jobs_table.insert().values(slot_row(
                    job_id=job_id, product=product.name, day=day, priority=product.priority + (1000 if backfill else 0),
                    opens_at=opens, now=now, backfill=backfill)))
                self.journal(conn, [self.journal_row(job_id, None, State.NO_JOB, 1, Reason.SCHEDULED,
                                                       {"backfill": backfill})], clock.clock_offset(conn))
        except (sa.exc.IntegrityError, Contention) as exc:
            if not db.slot_taken(exc):
                raise
            if isinstance(exc, Contention):
                # Galera: another node inserted the same slot at the same moment and won
                # certification (1213 at COMMIT, where one server says 1062). Nothing was written;
                # the slot is the other node's, or the next tick's if it rolled back too.
                log.info("schedule_conflict", product=product.name, edition_date=day.isoformat(),
                         worker=self.worker, error=str(exc))
            return False
        return True

    def acquire_lease(self, job_id: str, seen_version: int, *, operator: bool = False) -> Job | None:
        """Fenced claim: succeeds only if nobody wrote since `seen_version` and the lease
        is free or expired (by the database clock). Returns the leased job, or None."""
        jobs = self.claim([(job_id, seen_version)], operator=operator)
        return jobs[0] if jobs else None

    def claim(self, seen: Sequence[tuple[str, int]], *, operator: bool = False) -> list[Job]:
        """`acquire_lease` for several jobs in one transaction: each (id, seen version) is
        leased on the same terms, independently. Returns the jobs leased, in the order given."""
        if not seen:
            return []
        ids = [job_id for job_id, _ in seen]
        with self._tx() as conn:
            update, select = _claim_statements(db.dialect_family(conn), operator)
            params = {"k_ids": ids, "k_pairs": [tuple(p) for p in seen], "c_now": clock.clock_offset(conn),
                      "c_lease": clock.clock_offset(conn, self.lease_seconds), "v_worker": self.worker}
            if conn.execute(update, params).rowcount == 0:
                return []
            result = conn.execute(select, {"k_ids": ids, "k_pairs": [(job_id, v + 1) for job_id, v in seen],
                                           "v_worker": self.worker})
            keys = list(result.keys())
            rows = result.all()
        jobs = (Job.from_columns(keys, row) for row in rows)
        leased = {job.id: job for job in jobs}
        return [leased[job_id] for job_id in ids if job_id in leased]

    def transition(
        self,
        job: Job,
        to_state: State,
        *,
        reason: Reason,
        changes: Mapping[str, Any] | None = None,
        detail: Mapping[str, Any] | None = None,
        delay: float | None = None,
        keep_lease: bool = False,
        operator: bool = False,
        extra: Callable[[Connection], object] | None = None,
    ) -> Job:
        """The one write path for job state. Checks the edge, runs the fenced update on
        the primary key, journals it, and runs `extra` (editions, outbox) in the same
        transaction. `delay` sets `next_attempt_at` to database time + delay.

        Returns the job as written, without another read: state, version, lease owner and
        `changes` are current; database-clock columns (`next_attempt_at`, `lease_expiry`,
        `updated_at`, `state_entered_at`) keep their old values — read with `get` if needed."""
        w = self._planned(job, to_state, reason=reason, changes=changes, detail=detail, delay=delay,
                          keep_lease=keep_lease, operator=operator)
        with self._tx() as conn:
            now = clock.clock_offset(conn)
            if not self._write(conn, w, now):
                raise LeaseLost(f"job {job.id} changed since version {job.version}; {job.state} -> {w.to_state} "
                                "rejected", job_id=job.id)
            self.journal(conn, [w.journal], now)
            if changes and "payload" in changes and "total_tokens" in changes:
                # Custody with the provider's usage: the paid create's spend row learns it, in
                # this same transaction (every custody path comes through here).
                spend_rows.record_usage(conn, job, changes, detail or {})
            if extra is not None:
                extra(conn)
        return self._written(w)

    def transition_many(self, writes: Sequence[PlannedWrite]) -> list[Job | None]:
        """Several jobs' transitions in one transaction: each UPDATE fenced on its own (id,
        version) with its row count checked, the journal rows in one multi-row INSERT, one
        COMMIT. A job whose fence no longer holds is dropped (None in its place; nothing written
        for it); the others commit. Contention rolls the whole batch back (`Contention`)."""
        if not writes:
            return []
        with self._tx() as conn:
            now = clock.clock_offset(conn)
            done = [self._write(conn, w, now) for w in writes]
            self.journal(conn, [w.journal for w, ok in zip(writes, done, strict=True) if ok], now)
        return [self._written(w) if ok else None for w, ok in zip(writes, done, strict=True)]

    def plan(self, job: Job, to_state: State, *, reason: Reason, changes: Mapping[str, Any] | None = None,
             detail: Mapping[str, Any] | None = None, delay: float | None = None) -> PlannedWrite:
        """A machine transition checked now and written later by `transition_many`."""
        return self._planned(job, to_state, reason=reason, changes=changes, detail=detail, delay=delay,
                             keep_lease=False, operator=False)

    def _planned(self, job: Job, to_state: State, *, reason: Reason, changes: Mapping[str, Any] | None,
                 detail: Mapping[str, Any] | None, delay: float | None, keep_lease: bool,
                 operator: bool) -> PlannedWrite:
        to_state = State(to_state)
        reason = declared(reason, operator=operator, job_id=job.id)
        if not states.allowed(job.state, to_state, operator=operator):
            raise IllegalTransition(f"{job.state} -> {to_state} is not an allowed transition", job_id=job.id)
        values: dict[str, Any] = dict(changes or {})
        bad = set(values) - {c.name for c in jobs_table.columns} | ({"id", "version", "state"} & set(values))
        if bad:
            raise IllegalTransition(f"cannot set {sorted(bad)} through a transition")
        if job.custody_watch_at is not None and "custody_watch_at" not in values and (
                values.get("response_id", job.response_id) != job.response_id
                or (to_state in states.CUSTODY_WATCHED and job.state not in states.CUSTODY_WATCHED)):
            # The custody watch's next read was of an earlier parking or another response: a job
            # parked now (or holding a new response) is read at the watch's next pass.
            values["custody_watch_at"] = None
        journal = self.journal_row(job.id, job.state, to_state, job.version + 1, reason, detail)
        return PlannedWrite(job, to_state, reason, values, journal, delay, keep_lease)

    def _write(self, conn: Connection, w: PlannedWrite, now: int | str) -> bool:
        """The fenced UPDATE of one planned write at clock offset `now`; True if it matched its
        (id, version)."""
        job = w.job
        params: dict[str, Any] = {f"v_{k}": v for k, v in w.values.items()}
        params.update(k_id=job.id, k_version=job.version, v_state=w.to_state.value, c_now=now)
        if w.delay is not None:
            params["c_due"] = clock.clock_offset(conn, w.delay)
        if w.keep_lease:
            params.update(v_lease_owner=self.worker, c_lease=clock.clock_offset(conn, self.lease_seconds))
        stmt = _transition_statement(db.dialect_family(conn), tuple(sorted(w.values)), w.to_state != job.state,
                                     w.delay is not None, w.keep_lease)
        return bool(conn.execute(stmt, params).rowcount == 1)

    def _written(self, w: PlannedWrite) -> Job:
        job = w.job
        # Into QUARANTINED is the one transition that needs a human: a warning, with its reason.
        # A write that keeps the state (a poll that found the response still running, a retry
        # put off) is a debug line: the journal has it, and at 10,000 polls a minute info would
        # be a line per poll in cron's log.
        emit = (log.warning if w.to_state == State.QUARANTINED != job.state
                else log.info if w.reason == Reason.RETRIEVED
                else log.debug if w.to_state == job.state else log.info)
        emit(
            "transition", job_id=job.id, product=job.product, edition_date=str(job.edition_date),
            from_state=job.state.value, to_state=w.to_state.value, version=job.version + 1, reason=w.reason.value,
            worker=self.worker,
        )
        return dataclasses.replace(job, state=w.to_state, version=job.version + 1,
                                   lease_owner=self.worker if w.keep_lease else None, **w.values)

    def record_edition_action(self, job: Job, reason: Reason, detail: Mapping[str, Any],
                              extra: Callable[[Connection], object]) -> Job:
        """An operator's action on the slot's public editions (`states.EDITION_ACTIONS`: withdraw,
        correct), which does not move the job: its version +1, fenced on the version read and a
        free lease (nobody, not even a relay publishing it, holds the job), the journal row (from
        and to its own state) and `extra` (the editions, the outbox) in one transaction. Raises
        `LeaseLost` when the job changed or is leased, `IllegalTransition` for another reason or
        a job whose editions are not saved."""
        reason = declared(reason, operator=True, job_id=job.id)
        if reason not in states.EDITION_ACTIONS or job.state not in states.EDITIONS_SAVED:
            raise IllegalTransition(f"{reason} is not an edition action of a {job.state} job", job_id=job.id)
        with self._tx() as conn:
            now = clock.now(conn)
            res = conn.execute(
                jobs_table.update()
                .where(jobs_table.c.id == job.id, jobs_table.c.version == job.version,
                       sa.or_(jobs_table.c.lease_owner.is_(None), jobs_table.c.lease_expiry < now))
                .values(version=jobs_table.c.version + 1, lease_owner=None, lease_expiry=None, updated_at=now)
            )
            if res.rowcount != 1:
                raise LeaseLost(f"job {job.id} changed since version {job.version} or is leased; nothing written",
                                job_id=job.id)
            self.journal(conn, [self.journal_row(job.id, job.state, job.state, job.version + 1, reason, detail)],
                         clock.clock_offset(conn))
            extra(conn)
        log.warning("edition_action", job_id=job.id, reason=reason.value, worker=self.worker, **{
            k: v for k, v in detail.items() if k in ("lang", "revision")})
        return dataclasses.replace(job, version=job.version + 1, lease_owner=None)

    def note_failure(self, job: Job, error: str, failures: int) -> bool:
        """Give the lease back after a step failed unexpectedly (not a transition: no journal
        row): the failure count and the error are recorded, fenced; the next tick tries again."""
        with self._tx() as conn:
            res = conn.execute(
                jobs_table.update()
                .where(jobs_table.c.id == job.id, jobs_table.c.version == job.version,
                       jobs_table.c.lease_owner == self.worker)
                .values(lease_owner=None, lease_expiry=None, version=jobs_table.c.version + 1,
                        retry_count=failures, last_error=error, updated_at=clock.now(conn))
            )
            return res.rowcount == 1

    def make_due(self, job: Job) -> bool:
        """Bring the next look at `job` forward to now (a webhook says its response finished but
        another worker holds it). Fenced on the version read; neither a transition nor a new
        version: the lease holder's own next write stays valid and decides for itself."""
        with self._tx() as conn:
            now = clock.now(conn)
            res = conn.execute(
                jobs_table.update()
                .where(jobs_table.c.id == job.id, jobs_table.c.version == job.version,
                       jobs_table.c.next_attempt_at > now)
                .values(next_attempt_at=now)
            )
            return res.rowcount == 1

    def release_if_held(self, job_id: str) -> bool:
        """Give back the lease this worker may still hold on `job_id` (after a failed step or
        command), whatever version it wrote last: one statement guarded by the lease owner; the
        row count says whether it was held."""
        with self._tx() as conn:
            res = conn.execute(
                jobs_table.update()
                .where(jobs_table.c.id == job_id, jobs_table.c.lease_owner == self.worker)
                .values(lease_owner=None, lease_expiry=None, version=jobs_table.c.version + 1)
            )
            return res.rowcount == 1

    def release(self, job: Job) -> bool:
        """Give the lease back early (fenced). False if the job moved on without us."""
        with self._tx() as conn:
            res = conn.execute(
                jobs_table.update()
                .where(jobs_table.c.id == job.id, jobs_table.c.version == job.version,
                       jobs_table.c.lease_owner == self.worker)
                .values(lease_owner=None, lease_expiry=None, version=jobs_table.c.version + 1)
            )
            return res.rowcount == 1

    def journal_row(self, job_id: str, from_state: State | None, to_state: State, version: int,
                     reason: Reason, detail: Mapping[str, Any] | None, lang: str | None = None) -> Mapping[str, Any]:
        """One journal row's values: the slot's own (`lang` None) or a language track's."""
        return {"e_job_id": job_id, "e_from_state": from_state.value if from_state else None,
                "e_to_state": to_state.value, "e_version": version, "e_worker": self.worker,
                "e_reason": reason.value, "e_lang": lang,
                "e_detail": json.dumps(dict(detail), sort_keys=True, default=str) if detail else None}

    def journal(self, conn: Connection, rows: Sequence[Mapping[str, Any]], now: int | str) -> None:
        """The one journal writer, in the transaction of the job rows it records. One row is
        timed by the database clock in the INSERT itself; several read that clock once, so the
        INSERT carries only plain values and the driver sends it as one multi-row INSERT."""
        if len(rows) == 1:
            conn.execute(_journal_statement(db.dialect_family(conn)), {**rows[0], "c_now": now})
        elif rows:
            at = clock.read_now(conn)
            conn.execute(_journal_rows_statement(), [{**row, "e_at": at} for row in rows])


# -- statements built once per shape ---------------------------------------------------------
# Building an UPDATE with its clock expressions cost more than its round trips; the hot writes
# take a statement made once per shape and send only values.


@functools.lru_cache(maxsize=1024)
def _transition_statement(family: str, keys: tuple[str, ...], entered: bool, due: bool,
                          keep_lease: bool) -> sa.Update:
    values: dict[str, Any] = {k: sa.bindparam(f"v_{k}", type_=jobs_table.c[k].type) for k in keys}
    values.update(state=sa.bindparam("v_state", type_=jobs_table.c.state.type), version=jobs_table.c.version + 1,
                  updated_at=clock.clock_at(family, "c_now"))
    if entered:
        values["state_entered_at"] = clock.clock_at(family, "c_now")
    if due:
        values["next_attempt_at"] = clock.clock_at(family, "c_due")
    if keep_lease:
        values.update(lease_owner=sa.bindparam("v_lease_owner", type_=jobs_table.c.lease_owner.type),
                      lease_expiry=clock.clock_at(family, "c_lease"))
    else:
        values.update(lease_owner=sa.null(), lease_expiry=sa.null())
    return (jobs_table.update()
            .where(jobs_table.c.id == sa.bindparam("k_id"), jobs_table.c.version == sa.bindparam("k_version"))
            .values(values))


def _tracks_let_move() -> sa.ColumnElement[bool]:
    """A job not forked, or forked and no track holds it where it is, or every track parked with
    none saved (the slot parks with them)."""
    t, j = tables.tracks.c, jobs_table.c
    unparked = sa.select(t.id).where(t.job_id == j.id, t.state.not_in([s.value for s in states.TRACK_PARKED]))

    def held(state: State) -> sa.ColumnElement[bool]:
        blocking = sa.select(t.id).where(t.job_id == j.id, t.state.in_([s.value for s in states.track_blocks(state)]))
        return sa.and_(j.state == state.value, blocking.exists(), unparked.exists())

    return ~sa.or_(*(held(s) for s in sorted(states.TRACKS_RUN_IN)))


@functools.lru_cache(maxsize=8)
@functools.lru_cache(maxsize=4)
def _claim_statements(family: str, operator: bool) -> tuple[sa.Update, sa.Select[Any]]:
    """The chunk lease (each (id, version) pair fenced on its own; the primary key drives the
    lookup) and the read of what was leased; one statement whatever the chunk's size."""
    ids: sa.BindParameter[Any] = sa.bindparam("k_ids", expanding=True)
    pairs: sa.BindParameter[Any] = sa.bindparam("k_pairs", expanding=True)
    # The same shape fences the lease and the re-read (which is given the versions it wrote).
    by_pairs = (jobs_table.c.id.in_(ids), sa.tuple_(jobs_table.c.id, jobs_table.c.version).in_(pairs))
    free = sa.or_(jobs_table.c.lease_expiry.is_(None), jobs_table.c.lease_expiry < clock.clock_at(family, "c_now"))
    update = (jobs_table.update()
              .where(*by_pairs, free)
              .values(lease_owner=sa.bindparam("v_worker"), lease_expiry=clock.clock_at(family, "c_lease"),
                      version=jobs_table.c.version + 1))
    if not operator:
        update = update.where(jobs_table.c.state != State.MANUALLY_SUSPENDED.value)
    select = sa.select(jobs_table).where(*by_pairs, jobs_table.c.lease_owner == sa.bindparam("v_worker"))
    return update, select


# The journal's columns a transition writes, each bound as `e_<column>`.
_JOURNAL_COLUMNS = ("job_id", "from_state", "to_state", "version", "worker", "reason", "detail", "lang")


def _journal_binds(columns: Sequence[str]) -> dict[str, sa.BindParameter[Any]]:
    return {c: sa.bindparam(f"e_{c}", type_=events_table.c[c].type) for c in columns}


@functools.lru_cache(maxsize=1)
def _journal_rows_statement() -> sa.Insert:
    return events_table.insert().values(_journal_binds((*_JOURNAL_COLUMNS, "at")))


@functools.lru_cache(maxsize=4)
def _journal_statement(family: str) -> sa.Insert:
    return events_table.insert().values(_journal_binds(_JOURNAL_COLUMNS) | {"at": clock.clock_at(family, "c_now")})


def declared(reason: Reason | str, *, operator: bool, job_id: str) -> Reason:
    """The journal speaks one declared vocabulary, and an operator's entries are its own."""
    try:
        declared = Reason(reason)
    except ValueError:
        raise IllegalTransition(f"{reason!r} is not a declared journal reason", job_id=job_id) from None
    if declared.operator != operator:
        who = "an operator command" if operator else "the machine"
        raise IllegalTransition(f"reason {declared} cannot be written by {who}", job_id=job_id)
    return declared
