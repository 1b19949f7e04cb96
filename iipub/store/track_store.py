"""Language tracks: the only code that writes `tracks` rows (PRODUCT.md section 15).

A slot's payload forks, after its shared validation, into one track per language. Every write
of a track is fenced on its primary key and the version its writer saw, checked against
`states.TRACK_EDGES`, and journaled in `job_events` (the track's `lang`, the track's version) in
the same transaction. No write of a track touches its slot's row or another track's row, so the
tracks of one slot never wait for each other's locks.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
import structlog
from sqlalchemy.engine import Connection, Engine

from iipub.core.errors import Contention, IllegalTransition, LeaseLost, OperatorRefused
from iipub.edition import compose, validate
from iipub.edition.parts import Part, parts_of
from iipub.model import states
from iipub.model.jobs import Job, new_worker_id
from iipub.model.states import Reason, State
from iipub.model.track_views import Hop, TrackView
from iipub.store import clock, db, tables
from iipub.store.job_store import Store, declared

log = structlog.get_logger("iipub.tracks")
tracks_table = tables.tracks
_WRITABLE = frozenset(c.name for c in tracks_table.columns) - {"id", "job_id", "product", "edition_date", "lang",
                                                                 "state", "version", "created_at"}


@dataclass(frozen=True)
class Track(TrackView):
    """A track as its writer holds it: the operator's view, its state as a `State`, and the
    language's part and composed artifact it keeps."""

    state: State
    payload: str | None = None
    composed: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> Track:
        values = {f.name: row[f.name] for f in dataclasses.fields(cls)}
        values["state"] = State(values["state"])
        return cls(**values)


class TrackStore:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.engine = store.engine
        self.worker = store.worker

    # -- reads --------------------------------------------------------------------------

    def of_job(self, job_id: str) -> list[Track]:
        with self.engine.connect() as conn:
            return of_job(conn, job_id)

    def due(self, limit: int, job_id: str | None = None) -> list[tuple[str, int]]:
        """Due, unleased tracks the sweep works on (of one slot: `job_id`), of slots that let
        their tracks run (a suspended, parked or killed slot freezes them)."""
        t, j = tracks_table.c, tables.jobs.c
        with self.engine.connect() as conn:
            now = clock.now(conn)
            q = (sa.select(t.id, t.version)
                 .select_from(tracks_table.join(tables.jobs, j.id == t.job_id))
                 .where(t.state.in_([s.value for s in states.TRACK_ACTIVE]), t.next_attempt_at <= now,
                        sa.or_(t.lease_expiry.is_(None), t.lease_expiry < now),
                        j.state.in_([s.value for s in states.TRACKS_RUN_IN]))
                 .order_by(j.is_backfill, j.priority, t.next_attempt_at, t.id)
                 .limit(limit))
            if job_id is not None:
                q = q.where(t.job_id == job_id)
            return [(r.id, r.version) for r in conn.execute(q)]

    def due_of(self, job_id: str) -> list[tuple[str, int]]:
        return self.due(100, job_id)

    # -- writes -------------------------------------------------------------------------

    def claim(self, seen: Sequence[tuple[str, int]]) -> list[Track]:
        """Lease each (id, seen version) that nobody wrote since and whose lease is free: one
        statement per track (its primary key), so no lock is held across tracks."""
        leased: list[Track] = []
        for track_id, version in seen:
            with self.store._tx() as conn:
                now = clock.now(conn)
                t = tracks_table.c
                res = conn.execute(tracks_table.update()
                                   .where(t.id == track_id, t.version == version,
                                          sa.or_(t.lease_expiry.is_(None), t.lease_expiry < now))
                                   .values(lease_owner=self.worker, version=t.version + 1,
                                           lease_expiry=clock.now(conn, self.store.lease_seconds)))
                if res.rowcount != 1:
                    continue
                row = conn.execute(sa.select(tracks_table).where(t.id == track_id)).mappings().one()
            leased.append(Track.from_row(row))
        return leased

    def advance(self, track: Track, hops: Sequence[Hop], *, changes: Mapping[str, Any] | None = None,
                delay: float | None = None, keep_lease: bool = False, operator: bool = False,
                extra: Callable[[Connection], object] | None = None) -> Track:
        """The one write path for track state: every hop's edge checked, one fenced UPDATE on
        the primary key (the version moves by one per hop), one journal row per hop, and `extra`
        (the edition and its outbox rows) in the same transaction."""
        with self.store._tx() as conn:
            written = advance_in(conn, self.store, track, hops, changes=changes, delay=delay, keep_lease=keep_lease,
                                 operator=operator)
            if extra is not None:
                extra(conn)
        log.info("track_transition", job_id=track.job_id, lang=track.lang, from_state=track.state.value,
                 to_state=written.state.value, version=written.version, reasons=[h.reason.value for h in hops],
                 worker=self.worker)
        return written

    def release(self, track: Track) -> bool:
        """Give the lease back (fenced); False if the track moved on without us."""
        t = tracks_table.c
        with self.store._tx() as conn:
            return bool(conn.execute(tracks_table.update()
                                     .where(t.id == track.id, t.version == track.version, t.lease_owner == self.worker)
                                     .values(lease_owner=None, lease_expiry=None, version=t.version + 1)).rowcount == 1)

    def note_failure(self, track: Track, error: str) -> bool:
        """A track step failed unexpectedly: count it on the track and give the lease back."""
        t = tracks_table.c
        with self.store._tx() as conn:
            return bool(conn.execute(
                tracks_table.update()
                .where(t.id == track.id, t.version == track.version, t.lease_owner == self.worker)
                .values(lease_owner=None, lease_expiry=None, version=t.version + 1, retry_count=t.retry_count + 1,
                        last_error=error[:2000], updated_at=clock.now(conn))
            ).rowcount == 1)


def of_job(conn: Connection, job_id: str) -> list[Track]:
    q = sa.select(tracks_table).where(tracks_table.c.job_id == job_id).order_by(tracks_table.c.lang)
    return [Track.from_row(r) for r in conn.execute(q).mappings()]


def of_jobs(conn: Connection, job_ids: Sequence[str]) -> dict[str, list[Track]]:
    out: dict[str, list[Track]] = {job_id: [] for job_id in job_ids}
    if not job_ids:
        return out
    q = sa.select(tracks_table).where(tracks_table.c.job_id.in_(list(job_ids))).order_by(tracks_table.c.lang)
    for r in conn.execute(q).mappings():
        out[r["job_id"]].append(Track.from_row(r))
    return out


def advance_in(conn: Connection, store: Store, track: Track, hops: Sequence[Hop], *,
               changes: Mapping[str, Any] | None = None, delay: float | None = None, keep_lease: bool = False,
               operator: bool = False) -> Track:
    """`TrackStore.advance` inside a transaction the caller holds (an operator's kill writes
    the slot and its tracks together)."""
    if not hops:
        raise IllegalTransition("a track write needs at least one transition", job_id=track.job_id)
    at = track.state
    rows = []
    for n, hop in enumerate(hops, start=1):
        reason = declared(hop.reason, operator=operator, job_id=track.job_id)
        if not states.track_allowed(at, hop.to, operator=operator):
            raise IllegalTransition(f"track {track.lang}: {at} -> {hop.to} is not an allowed transition",
                                    job_id=track.job_id)
        rows.append(store.journal_row(track.job_id, at, hop.to, track.version + n, reason, hop.detail, track.lang))
        at = hop.to
    values: dict[str, Any] = dict(changes or {})
    bad = set(values) - _WRITABLE
    if bad:
        raise IllegalTransition(f"cannot set {sorted(bad)} through a track transition", job_id=track.job_id)
    t = tracks_table.c
    values.update(state=at.value, version=t.version + len(hops), updated_at=clock.now(conn))
    if at != track.state:
        values["state_entered_at"] = clock.now(conn)
    if delay is not None:
        values["next_attempt_at"] = clock.now(conn, delay)
    if keep_lease:
        values.update(lease_owner=store.worker, lease_expiry=clock.now(conn, store.lease_seconds))
    else:
        values.update(lease_owner=None, lease_expiry=None)
    res = conn.execute(tracks_table.update().where(t.id == track.id, t.version == track.version).values(values))
    if res.rowcount != 1:
        raise LeaseLost(f"track {track.job_id}/{track.lang} changed since version {track.version}",
                        job_id=track.job_id)
    store.journal(conn, rows, clock.clock_offset(conn))
    return dataclasses.replace(track, state=at, version=track.version + len(hops),
                               lease_owner=store.worker if keep_lease else None, **dict(changes or {}))


def fork(conn: Connection, store: Store, job: Job, parts: Sequence[Part], source_sha256: str | None,
         detail: Mapping[str, Any] | None = None, replacing: Sequence[str] = ()) -> list[str]:
    """Inside the slot's validation transaction: one track per language at RETRIEVED_NOT_VALIDATED
    holding its part. A missing track is created; an unpublished one takes the new part; a track
    holding a saved edition keeps it (a new generation never replaces a live edition), unless its
    language is in `replacing`: the paid generation of an operator's `correct --regenerate`,
    whose published track takes the new part to save it as the edition's correction. Returns the
    languages forked."""
    existing = {t.lang: t for t in of_job(conn, job.id)}
    forked: list[str] = []
    now = clock.now(conn)
    for part in parts:
        changes = {"payload": part.text, "payload_sha256": part.sha256, "source_sha256": source_sha256,
                   "composed": None, "composed_sha256": None, "quarantine_reason": None, "last_error": None,
                   "retry_count": 0}
        hop = Hop(State.RETRIEVED_NOT_VALIDATED, Reason.FORKED,
                  {"payload_sha256": part.sha256, "source_sha256": source_sha256, **(detail or {})})
        track = existing.get(part.lang)
        if track is None:
            conn.execute(tracks_table.insert().values(
                id=str(uuid.uuid4()), job_id=job.id, product=job.product, edition_date=job.edition_date,
                lang=part.lang, state=State.RETRIEVED_NOT_VALIDATED.value, version=1, next_attempt_at=now,
                created_at=now, updated_at=now, state_entered_at=now, **changes))
            store.journal(conn, [store.journal_row(job.id, None, hop.to, 1, hop.reason, hop.detail, part.lang)],
                          clock.clock_offset(conn))
        elif track.state in states.TRACK_SAVED and not (
                part.lang in replacing and states.track_allowed(track.state, hop.to)):
            continue
        else:
            advance_in(conn, store, track, [hop], changes=changes, delay=0)
        forked.append(part.lang)
    return forked


def kill_unpublished(conn: Connection, store: Store, job_id: str, detail: Mapping[str, Any]) -> list[str]:
    """Inside an operator's kill: the slot's unpublished tracks end with it (DELETED)."""
    killed = []
    found = of_job(conn, job_id)
    saved = sorted(t.lang for t in found if t.state in states.TRACK_SAVED)
    if saved:  # saved since the kill was decided: the whole kill rolls back
        raise OperatorRefused(f"job {job_id}: the {', '.join(saved)} edition was saved meanwhile; nothing killed")
    for track in found:
        if track.state in states.TRACK_UNPUBLISHED:
            advance_in(conn, store, track, [Hop(State.DELETED, Reason.OPERATOR_KILL, detail)], operator=True)
            killed.append(track.lang)
    return killed


# -- rows from before the fork existed (PRODUCT.md section 15, "Existing rows") -----------------

def convert(conn: Connection, store: Store, job: Job) -> list[str]:
    """Give a slot past the fork that has no tracks (a row from before tracks, or restored from an
    older backup) its tracks, from what the row holds: its payload split per language, its
    composed artifacts, its saved editions. Nothing is validated, paid or published again.
    Returns the languages converted (none if the slot is not past the fork or has tracks)."""
    state = job.effective_state
    if state not in states.TRACK_OF_UNFORKED_SLOT or of_job(conn, job.id):
        return []
    to = states.TRACK_OF_UNFORKED_SLOT[state]
    parts = _split(job.payload)
    composed = json.loads(job.composed) if job.composed else {}
    ed = tables.editions.c
    saved = {str(lang): sha for lang, sha in conn.execute(
        sa.select(ed.lang, ed.sha256).where(ed.job_id == job.id)).all()}
    if to in states.TRACK_SAVED:
        langs = sorted(saved)
    elif to == State.COMPOSED_NOT_SAVED:
        langs = sorted(composed)
    else:
        langs = sorted(parts)
    now = clock.now(conn)
    rows = []
    for lang in langs:
        part = parts.get(lang)
        art = compose.artifact_from_document(composed[lang]) if lang in composed else None
        conn.execute(tracks_table.insert().values(
            id=str(uuid.uuid4()), job_id=job.id, product=job.product, edition_date=job.edition_date,
            lang=lang, state=to.value, version=1, next_attempt_at=now, created_at=now, updated_at=now,
            state_entered_at=now, payload=part.text if part else None, payload_sha256=part.sha256 if part else None,
            source_sha256=job.payload_sha256, composed=art.body.decode("utf-8") if art else None,
            composed_sha256=art.sha256 if art else saved.get(lang)))
        detail = {"converted_from": job.state.value, "payload_sha256": part.sha256 if part else None}
        rows.append(store.journal_row(job.id, None, to, 1, Reason.FORKED, detail, lang))
    store.journal(conn, rows, clock.clock_offset(conn))
    return langs


def _split(payload: str | None) -> dict[str, Part]:
    """A slot's payload as its languages' parts (the languages it holds as objects)."""
    try:
        data = json.loads(payload) if payload else {}
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {p.lang: p for p in parts_of(validate.Shared(True, (), {k: v for k, v in data.items()
                                                                   if isinstance(v, dict)}))}


def unconverted(conn: Connection, limit: int = 100_000) -> list[str]:
    """The ids of slots past the fork without tracks (suspended ones by the state they left)."""
    j, t = tables.jobs.c, tracks_table.c
    has_tracks = sa.select(t.id).where(t.job_id == j.id).exists()
    past = [s.value for s in states.TRACK_OF_UNFORKED_SLOT]
    q = (sa.select(j.id).where(~has_tracks, sa.or_(j.state.in_(past), sa.and_(
        j.state == State.MANUALLY_SUSPENDED.value, j.suspended_from.in_(past)))).limit(limit))
    return list(conn.execute(q).scalars())


def convert_all(engine: Engine, ids: Sequence[str]) -> int:
    """`db migrate`'s data step, idempotent: each of these slots (`unconverted`) gets its tracks,
    one slot per transaction (a slot another migrator converted at the same moment is skipped)."""
    store = Store(engine, new_worker_id("migrate"))
    converted = 0
    for job_id in ids:  # one row in memory at a time: payloads may be large
        job = store.find(job_id)
        if job is None:
            continue
        try:
            with db.transaction(engine) as conn:
                converted += bool(convert(conn, store, job))
        except (sa.exc.IntegrityError, Contention):  # Galera: the other node's insert won certification
            log.info("tracks_converted_elsewhere", job_id=job.id)
    return converted

