"""Editions and the transactional outbox: the rows the save transaction writes, and the
fenced claims, per-sink delivery records and retries the relay works with. All outbox
DML lives here."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from . import db
from .compose import Artifact
from .states import State
from .timefmt import iso_z, iso_z_or_none

if TYPE_CHECKING:
    from .jobs import Job

outbox_table = db.outbox
deliveries_table = db.outbox_deliveries
EVENT_TYPE = "edition.published"


def save_editions(conn: Connection, job: Job, artifacts: Mapping[str, Artifact]) -> list[str]:
    """Inside the save transaction: one `editions` row per language and one outbox event
    each. A unique-key clash raises and the caller's whole transaction rolls back."""
    saved_at = db.read_now(conn)
    stamp = iso_z(saved_at, "seconds")
    event_ids = []
    for lang, art in sorted(artifacts.items()):
        res = conn.execute(db.editions.insert().values(
            job_id=job.id, product=job.product, edition_date=job.edition_date, lang=lang,
            title=art.title[:400], content=art.body.decode(), sha256=art.sha256, created_at=saved_at,
        ))
        assert res.inserted_primary_key is not None  # a single-row insert always reports its key
        edition_id = res.inserted_primary_key[0]
        event_id = str(uuid.uuid4())
        payload = {
            "event_id": event_id, "job_id": job.id, "product": job.product,
            "edition_date": job.edition_date.isoformat(), "lang": lang, "sha256": art.sha256,
            "artifact": art.document(), "published_at": stamp,
        }
        conn.execute(outbox_table.insert().values(
            event_id=event_id, job_id=job.id, edition_id=edition_id, event_type=EVENT_TYPE,
            payload=json.dumps(payload, sort_keys=True, ensure_ascii=False), version=1, attempts=0,
            next_attempt_at=saved_at, created_at=saved_at,
        ))
        event_ids.append(event_id)
    return event_ids


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
            now = db.now(conn)
            # An operator's suspension of a saved job also holds back its publication.
            suspended = (
                sa.select(db.jobs.c.id)
                .where(db.jobs.c.id == outbox_table.c.job_id, db.jobs.c.state == State.MANUALLY_SUSPENDED.value)
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
        """Fenced claim by primary key; None if another relay got there first."""
        with db.transaction(self.engine) as conn:
            now = db.now(conn)
            res = conn.execute(
                outbox_table.update()
                .where(outbox_table.c.id == row_id, outbox_table.c.version == seen_version,
                       outbox_table.c.published_at.is_(None),
                       sa.or_(outbox_table.c.lease_expiry.is_(None), outbox_table.c.lease_expiry < now))
                .values(lease_owner=self.worker, lease_expiry=db.now(conn, self.lease_seconds),
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
            now = db.now(conn)
            values: dict[str, Any] = {"attempts": deliveries_table.c.attempts + 1, "last_error": error,
                                      "updated_at": now}
            if delivered:
                values["delivered_at"] = now
            if parked:
                values["parked_at"] = now
            res = conn.execute(
                deliveries_table.update()
                .where(deliveries_table.c.event_id == event_id, deliveries_table.c.sink == sink)
                .values(**values)
            )
            if res.rowcount == 0:
                conn.execute(deliveries_table.insert().values(
                    event_id=event_id, sink=sink, attempts=1, last_error=error, updated_at=now,
                    delivered_at=now if delivered else None, parked_at=now if parked else None,
                ))

    def mark_published(self, ev: OutboxEvent) -> bool:
        with db.transaction(self.engine) as conn:
            res = conn.execute(
                outbox_table.update().where(outbox_table.c.id == ev.id, outbox_table.c.version == ev.version)
                .values(published_at=db.now(conn), lease_owner=None, lease_expiry=None,
                        version=outbox_table.c.version + 1, last_error=None)
            )
            return res.rowcount == 1

    def retry_later(self, ev: OutboxEvent, delay: float, error: str) -> bool:
        with db.transaction(self.engine) as conn:
            now = db.now(conn)
            res = conn.execute(
                outbox_table.update().where(outbox_table.c.id == ev.id, outbox_table.c.version == ev.version)
                .values(attempts=outbox_table.c.attempts + 1, next_attempt_at=db.now(conn, delay),
                        first_failed_at=sa.func.coalesce(outbox_table.c.first_failed_at, now),
                        last_error=error[:2000], lease_owner=None, lease_expiry=None,
                        version=outbox_table.c.version + 1)
            )
            return res.rowcount == 1

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
            n = conn.execute(q.values(parked_at=None, updated_at=db.now(conn))).rowcount
            conn.execute(outbox_table.update()
                         .where(outbox_table.c.event_id == event_id, outbox_table.c.published_at.is_(None))
                         .values(next_attempt_at=db.now(conn), version=outbox_table.c.version + 1))
            return int(n)

    def prune(self, older_than_seconds: float, batch: int = 500) -> int:
        """Delete published events (and their delivery records) older than the cut-off,
        in primary-key batches so no long lock is held."""
        total = 0
        while True:
            with db.transaction(self.engine) as conn:
                cutoff = db.now(conn, -older_than_seconds)
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


def parked_or_failing(engine: Engine, failing_after_seconds: float) -> list[dict[str, Any]]:
    """Events an operator should look at: a parked sink, or failing for too long."""
    with engine.connect() as conn:
        cutoff = db.now(conn, -failing_after_seconds)
        parked = conn.execute(
            sa.select(deliveries_table.c.event_id, deliveries_table.c.sink, deliveries_table.c.last_error,
                      deliveries_table.c.parked_at)
            .where(deliveries_table.c.parked_at.is_not(None))
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


def events_of(conn: Connection, job_ids: Sequence[str]) -> list[Any]:
    return list(conn.execute(sa.select(outbox_table).where(outbox_table.c.job_id.in_(list(job_ids)))))


def grant_republish(engine: Engine, job_id: str, by: str, reason: str) -> int:
    """An operator lets the job's editions replace live pages; its parked deliveries go again.
    Returns how many parked deliveries were re-queued."""
    grants = db.republish_grants
    with db.transaction(engine) as conn:
        now = db.now(conn)
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
        grants = db.republish_grants
        return conn.execute(sa.select(grants.c.job_id).where(grants.c.job_id == job_id)).first() is not None
