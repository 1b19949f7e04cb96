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

if TYPE_CHECKING:
    from .store import Job

O = db.outbox
D = db.outbox_deliveries
EVENT_TYPE = "edition.published"


def save_editions(conn: Connection, job: Job, artifacts: Mapping[str, Artifact]) -> list[str]:
    """Inside the save transaction: one `editions` row per language and one outbox event
    each. A unique-key clash raises and the caller's whole transaction rolls back."""
    saved_at = db.read_now(conn)
    stamp = saved_at.replace(tzinfo=None).isoformat(timespec="seconds") + "Z"
    event_ids = []
    for lang, art in sorted(artifacts.items()):
        res = conn.execute(db.editions.insert().values(
            job_id=job.id, product=job.product, edition_date=job.edition_date, lang=lang,
            title=art.title[:400], content=art.body.decode(), sha256=art.sha256, created_at=saved_at,
        ))
        edition_id = res.inserted_primary_key[0]
        event_id = str(uuid.uuid4())
        payload = {
            "event_id": event_id, "job_id": job.id, "product": job.product,
            "edition_date": job.edition_date.isoformat(), "lang": lang, "sha256": art.sha256,
            "artifact": art.document(), "published_at": stamp,
        }
        conn.execute(O.insert().values(
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
                .where(db.jobs.c.id == O.c.job_id, db.jobs.c.state == "MANUALLY_SUSPENDED")
                .exists()
            )
            q = (
                sa.select(O.c.id, O.c.version)
                .where(O.c.published_at.is_(None), O.c.next_attempt_at <= now,
                       sa.or_(O.c.lease_expiry.is_(None), O.c.lease_expiry < now), ~suspended)
                .order_by(O.c.next_attempt_at, O.c.id)
                .limit(limit)
            )
            return [(r.id, r.version) for r in conn.execute(q)]

    def claim(self, row_id: int, seen_version: int) -> OutboxEvent | None:
        """Fenced claim by primary key; None if another relay got there first."""
        with self.engine.begin() as conn:
            now = db.now(conn)
            res = conn.execute(
                O.update()
                .where(O.c.id == row_id, O.c.version == seen_version, O.c.published_at.is_(None),
                       sa.or_(O.c.lease_expiry.is_(None), O.c.lease_expiry < now))
                .values(lease_owner=self.worker, lease_expiry=db.now(conn, self.lease_seconds),
                        version=O.c.version + 1)
            )
            if res.rowcount != 1:
                return None
            r = conn.execute(sa.select(O).where(O.c.id == row_id)).one()
        return OutboxEvent(r.id, r.event_id, r.job_id, r.version, r.attempts, json.loads(r.payload),
                           r.first_failed_at)

    def settled_sinks(self, event_id: str) -> dict[str, str]:
        """sink -> 'delivered' | 'parked' for sinks that need no further attempt."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(D.c.sink, D.c.delivered_at, D.c.parked_at).where(D.c.event_id == event_id))
            return {r.sink: "delivered" if r.delivered_at else "parked"
                    for r in rows if r.delivered_at or r.parked_at}

    def record(self, event_id: str, sink: str, *, delivered: bool = False, parked: bool = False,
               error: str | None = None) -> None:
        """Upsert the per-sink delivery record."""
        with self.engine.begin() as conn:
            now = db.now(conn)
            values: dict[str, Any] = {"attempts": D.c.attempts + 1, "last_error": error, "updated_at": now}
            if delivered:
                values["delivered_at"] = now
            if parked:
                values["parked_at"] = now
            res = conn.execute(D.update().where(D.c.event_id == event_id, D.c.sink == sink).values(**values))
            if res.rowcount == 0:
                conn.execute(D.insert().values(
                    event_id=event_id, sink=sink, attempts=1, last_error=error, updated_at=now,
                    delivered_at=now if delivered else None, parked_at=now if parked else None,
                ))

    def mark_published(self, ev: OutboxEvent) -> bool:
        with self.engine.begin() as conn:
            res = conn.execute(
                O.update().where(O.c.id == ev.id, O.c.version == ev.version)
                .values(published_at=db.now(conn), lease_owner=None, lease_expiry=None,
                        version=O.c.version + 1, last_error=None)
            )
            return res.rowcount == 1

    def retry_later(self, ev: OutboxEvent, delay: float, error: str) -> bool:
        with self.engine.begin() as conn:
            now = db.now(conn)
            res = conn.execute(
                O.update().where(O.c.id == ev.id, O.c.version == ev.version)
                .values(attempts=O.c.attempts + 1, next_attempt_at=db.now(conn, delay),
                        first_failed_at=sa.func.coalesce(O.c.first_failed_at, now),
                        last_error=error[:2000], lease_owner=None, lease_expiry=None,
                        version=O.c.version + 1)
            )
            return res.rowcount == 1

    def unpublished_for_job(self, job_id: str) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(
                sa.select(sa.func.count()).where(O.c.job_id == job_id, O.c.published_at.is_(None))
            ).scalar_one())

    def requeue_parked(self, event_id: str, sink: str | None = None) -> int:
        """Operator: clear parked deliveries of an event so the relay tries them again."""
        with self.engine.begin() as conn:
            q = D.update().where(D.c.event_id == event_id, D.c.parked_at.is_not(None))
            if sink:
                q = q.where(D.c.sink == sink)
            n = conn.execute(q.values(parked_at=None, updated_at=db.now(conn))).rowcount
            conn.execute(O.update().where(O.c.event_id == event_id, O.c.published_at.is_(None))
                         .values(next_attempt_at=db.now(conn), version=O.c.version + 1))
            return int(n)

    def prune(self, older_than_seconds: float, batch: int = 500) -> int:
        """Delete published events (and their delivery records) older than the cut-off,
        in primary-key batches so no long lock is held."""
        total = 0
        while True:
            with self.engine.begin() as conn:
                cutoff = db.now(conn, -older_than_seconds)
                rows = conn.execute(
                    sa.select(O.c.id, O.c.event_id)
                    .where(O.c.published_at.is_not(None), O.c.published_at < cutoff)
                    .order_by(O.c.id).limit(batch)
                ).all()
                if not rows:
                    return total
                conn.execute(D.delete().where(D.c.event_id.in_([r.event_id for r in rows])))
                conn.execute(O.delete().where(O.c.id.in_([r.id for r in rows])))
                total += len(rows)


def parked_or_failing(engine: Engine, failing_after_seconds: float) -> list[dict[str, Any]]:
    """Events an operator should look at: a parked sink, or failing for too long."""
    with engine.connect() as conn:
        cutoff = db.now(conn, -failing_after_seconds)
        parked = conn.execute(
            sa.select(D.c.event_id, D.c.sink, D.c.last_error, D.c.parked_at).where(D.c.parked_at.is_not(None))
        ).all()
        failing = conn.execute(
            sa.select(O.c.event_id, O.c.job_id, O.c.attempts, O.c.last_error, O.c.first_failed_at)
            .where(O.c.published_at.is_(None), O.c.first_failed_at.is_not(None), O.c.first_failed_at < cutoff)
        ).all()
    out: list[dict[str, Any]] = [
        {"event_id": r.event_id, "sink": r.sink, "kind": "parked", "error": r.last_error, "since": _iso(r.parked_at)}
        for r in parked
    ]
    out += [
        {"event_id": r.event_id, "job_id": r.job_id, "kind": "failing", "attempts": r.attempts,
         "error": r.last_error, "since": _iso(r.first_failed_at)}
        for r in failing
    ]
    return out


def _iso(value: dt.datetime | str | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def events_of(conn: Connection, job_ids: Sequence[str]) -> list[Any]:
    return list(conn.execute(sa.select(O).where(O.c.job_id.in_(list(job_ids)))))
