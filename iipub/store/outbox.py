"""Editions and the transactional outbox: the rows the save transaction writes, and the
fenced claims, per-sink delivery records and retries the relay works with. All outbox
DML lives here."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
import structlog
from sqlalchemy.engine import Connection, Engine, RowMapping

from iipub.core.errors import Contention, JobTaken, OperatorRefused, UnknownId, UsageError
from iipub.core.ids import uuid7
from iipub.core.timefmt import iso_z, iso_z_or_none, naive_utc
from iipub.edition.compose import Artifact
from iipub.model.states import EventType, State
from iipub.store import clock, db, tables

log = structlog.get_logger("iipub.outbox")

if TYPE_CHECKING:
    from iipub.model.jobs import Job

outbox_table = tables.outbox
deliveries_table = tables.outbox_deliveries
EVENT_TYPE = EventType.PUBLISHED.value


def save_editions(conn: Connection, job: Job, artifacts: Mapping[str, Artifact]) -> list[str]:
    """Inside the save transaction: one `editions` row per language and one outbox event
    each. A unique-key clash raises and the caller's whole transaction rolls back."""
    saved_at = clock.read_now(conn)
    stamp = iso_z(saved_at, "seconds")
    event_ids = []
    for lang, art in sorted(artifacts.items()):
        res = conn.execute(tables.editions.insert().values(
            job_id=job.id, product=job.product, edition_date=job.edition_date, lang=lang,
            title=art.title[:400], content=art.body.decode(), sha256=art.sha256, created_at=saved_at,
        ))
        assert res.inserted_primary_key is not None  # a single-row insert always reports its key
        edition_id = res.inserted_primary_key[0]
        event_id = uuid7(saved_at)  # time-ordered; the Idempotency-Key of every delivery
        payload = {
            "type": EVENT_TYPE, "event_id": event_id, "job_id": job.id, "product": job.product,
            "edition_date": job.edition_date.isoformat(), "lang": lang, "revision": 1, "sha256": art.sha256,
            "artifact": art.document(), "published_at": stamp,
        }
        conn.execute(outbox_table.insert().values(
            event_id=event_id, job_id=job.id, edition_id=edition_id, event_type=EVENT_TYPE,
            payload=json.dumps(payload, sort_keys=True, ensure_ascii=False), version=1, attempts=0,
            next_attempt_at=saved_at, created_at=saved_at,
        ))
        event_ids.append(event_id)
    return event_ids


def revise_edition(conn: Connection, edition_id: int, seen_revision: int, *, revision: int, status: str,
                   event_type: str, job_id: str, payload: Mapping[str, Any], artifact: Artifact | None) -> None:
    """Inside an operator's correction or withdrawal: the edition row takes its new revision and
    status (a correction: its new title, content and sha256), fenced on the revision read; the
    event announcing it is queued; and the edition's older events not delivered yet are
    superseded (published_at set, `superseded_by` naming the new event), so stale content is
    never sent after it. Raises `Contention` if the edition changed since it was read."""
    now = clock.now(conn)
    values: dict[str, Any] = {"revision": revision, "status": status}
    if artifact is not None:
        values.update(title=artifact.title[:400], content=artifact.body.decode(), sha256=artifact.sha256)
    ed = tables.editions
    res = conn.execute(ed.update().where(ed.c.id == edition_id, ed.c.revision == seen_revision).values(**values))
    if res.rowcount != 1:
        raise Contention(f"edition {edition_id} changed since revision {seen_revision}; nothing written")
    event_id = str(payload["event_id"])
    conn.execute(outbox_table.update()
                 .where(outbox_table.c.edition_id == edition_id, outbox_table.c.published_at.is_(None))
                 .values(published_at=now, superseded_by=event_id, lease_owner=None, lease_expiry=None,
                         last_error=f"superseded by revision {revision} ({event_type})",
                         version=outbox_table.c.version + 1))
    conn.execute(outbox_table.insert().values(
        event_id=event_id, job_id=job_id, edition_id=edition_id, event_type=event_type,
        payload=json.dumps(dict(payload), sort_keys=True, ensure_ascii=False), version=1, attempts=0,
        next_attempt_at=now, created_at=now,
    ))


@dataclass(frozen=True)
class OutboxEvent:
    id: int
    event_id: str
    job_id: str
    version: int
    attempts: int
    payload: dict[str, Any]
    first_failed_at: dt.datetime | None


class Outbox:
    def __init__(self, engine: Engine, worker: str, lease_seconds: float) -> None:
        self.engine = engine
        self.worker = worker
        self.lease_seconds = lease_seconds

    def due(self, limit: int) -> list[tuple[int, int]]:
        """(id, version) of unpublished, due, unleased events, oldest first."""
        with self.engine.connect() as conn:
            now = clock.now(conn)
            # An operator's suspension of a saved job also holds back its publication.
            suspended = (
                sa.select(tables.jobs.c.id)
                .where(tables.jobs.c.id == outbox_table.c.job_id, tables.jobs.c.state == State.MANUALLY_SUSPENDED.value)
                .exists()
            )
            q = (
                sa.select(outbox_table.c.id, outbox_table.c.version)
                .where(outbox_table.c.published_at.is_(None), outbox_table.c.next_attempt_at <= now,
                       sa.or_(outbox_table.c.lease_expiry.is_(None), outbox_table.c.lease_expiry < now), ~suspended)
                .order_by(outbox_table.c.next_attempt_at, outbox_table.c.id)
                .limit(limit)
            )
            return [(r.id, r.version) for r in conn.execute(q)]

    def claim(self, row_id: int, seen_version: int) -> OutboxEvent | None:
        """Fenced claim by primary key; None if another relay got there first (also when the two
        collided and the database rolled this claim back: a deadlock, a Galera certification
        failure)."""
        try:
            return self._claim(row_id, seen_version)
        except Contention as exc:
            log.info("outbox_claim_contended", row_id=row_id, worker=self.worker, error=str(exc))
            return None

    def _claim(self, row_id: int, seen_version: int) -> OutboxEvent | None:
        with db.transaction(self.engine) as conn:
            now = clock.now(conn)
            res = conn.execute(
                outbox_table.update()
                .where(outbox_table.c.id == row_id, outbox_table.c.version == seen_version,
                       outbox_table.c.published_at.is_(None),
                       sa.or_(outbox_table.c.lease_expiry.is_(None), outbox_table.c.lease_expiry < now))
                .values(lease_owner=self.worker, lease_expiry=clock.now(conn, self.lease_seconds),
                        version=outbox_table.c.version + 1)
            )
            if res.rowcount != 1:
                return None
            r = conn.execute(sa.select(outbox_table).where(outbox_table.c.id == row_id)).one()
        return OutboxEvent(r.id, r.event_id, r.job_id, r.version, r.attempts, json.loads(r.payload),
                           r.first_failed_at)

    def settled_sinks(self, event_id: str) -> dict[str, str]:
        """sink -> 'delivered' | 'parked' for sinks that need no further attempt."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(deliveries_table.c.sink, deliveries_table.c.delivered_at, deliveries_table.c.parked_at)
                .where(deliveries_table.c.event_id == event_id)
            )
            return {r.sink: "delivered" if r.delivered_at else "parked"
                    for r in rows if r.delivered_at or r.parked_at}

    def record(self, event_id: str, sink: str, *, delivered: bool = False, parked: bool = False,
               error: str | None = None) -> None:
        """Upsert the per-sink delivery record."""
        with db.transaction(self.engine) as conn:
            now = clock.now(conn)
            values: dict[str, Any] = {"attempts": deliveries_table.c.attempts + 1, "last_error": error,
                                      "updated_at": now}
            if delivered:
                values["delivered_at"] = now
            if parked:
                values["parked_at"] = now
            update = (deliveries_table.update()
                      .where(deliveries_table.c.event_id == event_id, deliveries_table.c.sink == sink)
                      .values(**values))
            if conn.execute(update).rowcount == 0:
                try:
                    with conn.begin_nested():
                        conn.execute(deliveries_table.insert().values(
                            event_id=event_id, sink=sink, attempts=1, last_error=error, updated_at=now,
                            delivered_at=now if delivered else None, parked_at=now if parked else None,
                        ))
                except sa.exc.IntegrityError:
                    # Another relay wrote the row between our UPDATE and INSERT (a lagging cluster
                    # node sees it late): the update applies to it now.
                    conn.execute(update)

    def mark_published(self, ev: OutboxEvent) -> bool:
        with db.transaction(self.engine) as conn:
            return self._give_back(conn, ev, published_at=clock.now(conn), last_error=None)

    def retry_later(self, ev: OutboxEvent, delay: float, error: str) -> bool:
        with db.transaction(self.engine) as conn:
            return self._give_back(conn, ev, attempts=outbox_table.c.attempts + 1, next_attempt_at=clock.now(conn,
                delay),
                                   first_failed_at=sa.func.coalesce(outbox_table.c.first_failed_at, clock.now(conn)),
                                   last_error=error[:2000])

    def release(self, ev: OutboxEvent) -> bool:
        """Give the claim back untouched (a sink was not reached in this run): due again as it
        was, no attempt counted, no error recorded."""
        with db.transaction(self.engine) as conn:
            return self._give_back(conn, ev)

    @staticmethod
    def _give_back(conn: Connection, ev: OutboxEvent, **values: Any) -> bool:
        """End this relay's claim on `ev` with `values` written, fenced on the version it claimed;
        False if someone else wrote the event since."""
        return conn.execute(
            outbox_table.update().where(outbox_table.c.id == ev.id, outbox_table.c.version == ev.version)
            .values(**values, lease_owner=None, lease_expiry=None, version=outbox_table.c.version + 1)
        ).rowcount == 1

    def unpublished_for_job(self, job_id: str) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(
                sa.select(sa.func.count()).where(outbox_table.c.job_id == job_id, outbox_table.c.published_at.is_(None))
            ).scalar_one())

    def requeue_parked(self, event_id: str, sink: str | None = None) -> int:
        """Operator: clear parked deliveries of an event so the relay tries them again."""
        with db.transaction(self.engine) as conn:
            q = deliveries_table.update().where(deliveries_table.c.event_id == event_id,
                                                deliveries_table.c.parked_at.is_not(None))
            if sink:
                q = q.where(deliveries_table.c.sink == sink)
            n = conn.execute(q.values(parked_at=None, updated_at=clock.now(conn))).rowcount
            conn.execute(outbox_table.update()
                         .where(outbox_table.c.event_id == event_id, outbox_table.c.published_at.is_(None))
                         .values(next_attempt_at=clock.now(conn), version=outbox_table.c.version + 1))
            return int(n)

    def prune(self, older_than_seconds: float, batch: int = 500) -> int:
        """Delete published events (and their delivery records) older than the cut-off,
        in primary-key batches so no long lock is held."""
        total = 0
        while True:
            with db.transaction(self.engine) as conn:
                cutoff = clock.now(conn, -older_than_seconds)
                rows = conn.execute(
                    sa.select(outbox_table.c.id, outbox_table.c.event_id)
                    .where(outbox_table.c.published_at.is_not(None), outbox_table.c.published_at < cutoff)
                    .order_by(outbox_table.c.id).limit(batch)
                ).all()
                if not rows:
                    return total
                conn.execute(
                    deliveries_table.delete().where(deliveries_table.c.event_id.in_([r.event_id for r in rows]))
                )
                conn.execute(outbox_table.delete().where(outbox_table.c.id.in_([r.id for r in rows])))
                total += len(rows)


# Before every time iipub writes: `column > _EPOCH` is `column IS NOT NULL` as an index range.
_EPOCH = naive_utc(dt.datetime(1970, 1, 1, tzinfo=dt.UTC))


def parked_or_failing(engine: Engine, failing_after_seconds: float) -> list[dict[str, Any]]:
    """Events an operator should look at: a parked sink, or failing for too long."""
    with engine.connect() as conn:
        cutoff = clock.now(conn, -failing_after_seconds)
        parked = conn.execute(
            sa.select(deliveries_table.c.event_id, deliveries_table.c.sink, deliveries_table.c.last_error,
                      deliveries_table.c.parked_at)
            .where(deliveries_table.c.parked_at > _EPOCH)  # a range of the parked index (SQLite scans for IS NOT NULL)
        ).all()
        failing = conn.execute(
            sa.select(outbox_table.c.event_id, outbox_table.c.job_id, outbox_table.c.attempts,
                      outbox_table.c.last_error, outbox_table.c.first_failed_at)
            .where(outbox_table.c.published_at.is_(None), outbox_table.c.first_failed_at.is_not(None),
                   outbox_table.c.first_failed_at < cutoff)
        ).all()
    out: list[dict[str, Any]] = [
        {"event_id": r.event_id, "sink": r.sink, "kind": "parked", "error": r.last_error,
         "since": iso_z_or_none(r.parked_at)}
        for r in parked
    ]
    out += [
        {"event_id": r.event_id, "job_id": r.job_id, "kind": "failing", "attempts": r.attempts,
         "error": r.last_error, "since": iso_z_or_none(r.first_failed_at)}
        for r in failing
    ]
    return out


# -- the operator's view: `iipub outbox list|requeue` ----------------------------------------------

LIST_STATES = ("unpublished", "parked", "failing", "all")
def event_status(published_at: Any, first_failed_at: Any, sinks: Sequence[Mapping[str, Any]],
                 superseded_by: str | None = None) -> str:
    """superseded (a later revision of its edition replaced it before every sink had it) |
    published | parked (a sink refused it: only an operator moves it) | failing (a delivery
    failed and is retried with backoff) | pending (not yet delivered, nothing failed)."""
    if superseded_by is not None:
        return "superseded"
    if published_at is not None:
        return "published"
    if any(d["parked_at"] is not None for d in sinks):
        return "parked"
    if first_failed_at is not None:
        return "failing"
    return "pending"


def list_events(engine: Engine, state: str = "unpublished", limit: int = 1000) -> list[dict[str, Any]]:
    """Outbox events with their per-sink delivery records, oldest first. `state` is one of
    LIST_STATES: `unpublished` (every event not yet published: pending, failing and parked),
    `parked`, `failing` or `all` (published ones too)."""
    if state not in LIST_STATES:
        raise UsageError(f"unknown outbox state {state!r} (one of: {', '.join(LIST_STATES)})")
    ed = tables.editions
    q = (
        sa.select(outbox_table.c.id, outbox_table.c.event_id, outbox_table.c.job_id, outbox_table.c.attempts,
                  outbox_table.c.next_attempt_at, outbox_table.c.first_failed_at, outbox_table.c.published_at,
                  outbox_table.c.last_error, outbox_table.c.lease_owner, outbox_table.c.lease_expiry,
                  outbox_table.c.created_at, outbox_table.c.event_type, outbox_table.c.superseded_by,
                  ed.c.product, ed.c.edition_date, ed.c.lang)
        .select_from(outbox_table.outerjoin(ed, ed.c.id == outbox_table.c.edition_id))
        .order_by(outbox_table.c.id)
    )
    parked = (sa.select(deliveries_table.c.id)
              .where(deliveries_table.c.event_id == outbox_table.c.event_id, deliveries_table.c.parked_at.is_not(None))
              .exists())
    if state != "all":
        q = q.where(outbox_table.c.published_at.is_(None))
    if state == "parked":
        q = q.where(parked)
    elif state == "failing":
        q = q.where(outbox_table.c.first_failed_at.is_not(None), ~parked)
    with engine.connect() as conn:
        rows = conn.execute(q.limit(limit)).all()
        sinks: dict[str, list[dict[str, Any]]] = {}
        ids = [r.event_id for r in rows]
        for start in range(0, len(ids), 500):
            for d in conn.execute(
                sa.select(deliveries_table).where(deliveries_table.c.event_id.in_(ids[start:start + 500]))
                .order_by(deliveries_table.c.sink)
            ).mappings():
                sinks.setdefault(d["event_id"], []).append(dict(d))
    out = []
    for r in rows:
        mine = sinks.get(r.event_id, [])
        out.append({
            "event_id": r.event_id, "job_id": r.job_id, "product": r.product,
            "edition_date": r.edition_date.isoformat() if r.edition_date is not None else None, "lang": r.lang,
            "type": r.event_type, "superseded_by": r.superseded_by,
            "status": event_status(r.published_at, r.first_failed_at, mine, r.superseded_by), "attempts": r.attempts,
            "next_attempt_at": iso_z_or_none(r.next_attempt_at), "first_failed_at": iso_z_or_none(r.first_failed_at),
            "published_at": iso_z_or_none(r.published_at), "last_error": r.last_error,
            "lease_owner": r.lease_owner, "lease_expiry": iso_z_or_none(r.lease_expiry),
            "created_at": iso_z_or_none(r.created_at),
            "sinks": [{"sink": d["sink"], "state": _sink_state(d), "attempts": d["attempts"],
                       "delivered_at": iso_z_or_none(d["delivered_at"]), "parked_at": iso_z_or_none(d["parked_at"]),
                       "last_error": d["last_error"]} for d in mine],
        })
    return out


def _sink_state(d: Mapping[str, Any]) -> str:
    if d["delivered_at"] is not None:
        return "delivered"
    return "parked" if d["parked_at"] is not None else "failing"


@dataclass(frozen=True)
class Requeued:
    event_id: str
    cleared: tuple[str, ...]  # the sinks whose parked delivery was cleared
    pending: tuple[str, ...]  # the sinks the next relay will try


def requeue(engine: Engine, event_id: str, sink: str | None = None, configured: Sequence[str] = ()) -> Requeued:
    """Operator: make an unpublished event due now and clear its parked deliveries (only `sink`'s
    if given), so the next relay tries every sink that has not delivered it. Refuses an unknown
    event (`UnknownId`), a published one or a sink that already delivered it (`OperatorRefused`),
    a sink that is neither configured nor recorded for the event (`UsageError`), and an event a
    relay is delivering right now (`JobTaken`). Fenced on the event's version: a relay claim in
    between makes it refuse rather than race."""
    with db.transaction(engine) as conn:
        now_at = clock.read_now(conn)
        row = _find_event(conn, event_id)
        eid = row.event_id
        if row.published_at is not None:
            raise OperatorRefused(f"outbox event {eid} was published at {iso_z(row.published_at, 'seconds')}; "
                                  "nothing to re-queue")
        if row.lease_owner and row.lease_expiry is not None and naive_utc(row.lease_expiry) >= now_at:
            raise JobTaken(f"outbox event {eid} is being delivered by {row.lease_owner} until "
                           f"{iso_z(row.lease_expiry, 'seconds')}; retry in a minute")
        records = {d.sink: d for d in conn.execute(sa.select(deliveries_table)
                                                   .where(deliveries_table.c.event_id == eid))}
        known = sorted(set(configured) | set(records))
        if sink is not None:
            if sink not in known:
                raise UsageError(f"--sink {sink!r}: not a sink of outbox event {eid} (one of: {', '.join(known)})")
            if sink in records and records[sink].delivered_at is not None:
                raise OperatorRefused(f"outbox event {eid} is already delivered to {sink}; nothing to re-queue")
        chosen = [sink] if sink is not None else known
        cleared = tuple(s for s in chosen if s in records and records[s].parked_at is not None)
        pending = tuple(s for s in known if s not in records or records[s].delivered_at is None)
        if cleared:
            conn.execute(deliveries_table.update()
                         .where(deliveries_table.c.event_id == eid, deliveries_table.c.sink.in_(cleared))
                         .values(parked_at=None, updated_at=clock.now(conn)))
        res = conn.execute(outbox_table.update()
                           .where(outbox_table.c.id == row.id, outbox_table.c.version == row.version)
                           .values(next_attempt_at=clock.now(conn), version=outbox_table.c.version + 1))
        if res.rowcount != 1:
            raise JobTaken(f"outbox event {eid} changed under us (a relay claimed it); retry in a minute")
    return Requeued(eid, cleared, pending)


def _find_event(conn: Connection, event_id: str) -> Any:
    """The outbox row of `event_id`, or of the one event whose id starts with it (UnknownId otherwise)."""
    row = db.by_id_or_prefix(conn, outbox_table, outbox_table.c.event_id, event_id, "outbox event")
    if row is None:
        raise UnknownId(f"no outbox event with id {event_id!r}")
    return row


def events_of(conn: Connection, job_ids: Sequence[str]) -> list[Any]:
    return list(conn.execute(sa.select(outbox_table).where(outbox_table.c.job_id.in_(list(job_ids)))))


def grant_republish(engine: Engine, job_id: str, by: str, reason: str) -> int:
    """An operator lets the job's editions replace live pages; its parked deliveries go again.
    Returns how many parked deliveries were re-queued."""
    grants = tables.republish_grants
    with db.transaction(engine) as conn:
        now = clock.now(conn)
        if conn.execute(sa.select(grants.c.job_id).where(grants.c.job_id == job_id)).first() is None:
            conn.execute(grants.insert().values(job_id=job_id, granted_by=by, reason=reason, granted_at=now))
        else:
            conn.execute(grants.update().where(grants.c.job_id == job_id)
                         .values(granted_by=by, reason=reason, granted_at=now))
        events = [r.event_id for r in conn.execute(
            sa.select(outbox_table.c.event_id).where(outbox_table.c.job_id == job_id))]
        n = conn.execute(deliveries_table.update()
                         .where(deliveries_table.c.event_id.in_(events), deliveries_table.c.parked_at.is_not(None))
                         .values(parked_at=None, updated_at=now)).rowcount if events else 0
        if events:
            conn.execute(outbox_table.update()
                         .where(outbox_table.c.job_id == job_id, outbox_table.c.published_at.is_(None))
                         .values(next_attempt_at=now, version=outbox_table.c.version + 1))
        return int(n)


def republish_granted(engine: Engine, job_id: str) -> bool:
    with engine.connect() as conn:
        grants = tables.republish_grants
        return conn.execute(sa.select(grants.c.job_id).where(grants.c.job_id == job_id)).first() is not None


# -- what the relay reads after a pass ------------------------------------------------------------


def delivered_slots(engine: Engine) -> list[tuple[str, int]]:
    """(id, version) of the SAVED_NOT_PUBLIC slots with no unpublished track, or (a slot from
    before tracks) every event delivered."""
    jobs_table, outbox_table, t = tables.jobs, tables.outbox, tables.tracks.c
    with engine.connect() as conn:
        pending = sa.select(outbox_table.c.id).where(
            outbox_table.c.job_id == jobs_table.c.id, outbox_table.c.published_at.is_(None)
        ).exists()
        has_events = sa.select(outbox_table.c.id).where(outbox_table.c.job_id == jobs_table.c.id).exists()
        has_tracks = sa.select(t.id).where(t.job_id == jobs_table.c.id).exists()
        unpublished = sa.select(t.id).where(t.job_id == jobs_table.c.id, t.state != State.PUBLISHED.value).exists()
        rows = conn.execute(
            sa.select(jobs_table.c.id, jobs_table.c.version)
            .where(jobs_table.c.state == State.SAVED_NOT_PUBLIC.value,
                   sa.or_(sa.and_(has_tracks, ~unpublished), sa.and_(~has_tracks, has_events, ~pending)))
        ).all()
    return [(job_id, version) for job_id, version in rows]


def delivered_tracks(engine: Engine) -> list[RowMapping]:
    """The SAVED_NOT_PUBLIC tracks whose language's events are all delivered, whole rows."""
    t, o, e = tables.tracks.c, tables.outbox.c, tables.editions.c
    of_track = sa.select(o.id).select_from(tables.outbox.join(tables.editions, e.id == o.edition_id)).where(
        o.job_id == t.job_id, e.lang == t.lang)
    with engine.connect() as conn:
        return list(conn.execute(sa.select(tables.tracks).where(
            t.state == State.SAVED_NOT_PUBLIC.value, of_track.exists(),
            ~of_track.where(o.published_at.is_(None)).exists())).mappings().all())


def edition_hashes(engine: Engine, job_id: str) -> list[tuple[str, str]]:
    """(language, sha256) of each edition the job saved."""
    ed = tables.editions
    with engine.connect() as conn:
        rows = conn.execute(sa.select(ed.c.lang, ed.c.sha256).where(ed.c.job_id == job_id)).all()
    return [(lang, sha) for lang, sha in rows]
