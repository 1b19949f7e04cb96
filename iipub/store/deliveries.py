"""The webhook tables: verified deliveries (one row per `webhook-id`), completions a poll found
before any webhook (misses), and orphans (paid responses no job owns). Reads and small fenced
writes only; what a delivery means for a job is decided in `decisions` and done in `settle`."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from iipub.core.timefmt import naive_utc
from iipub.model.deliveries import (
    AWAITING_CREATE,
    FOREIGN,
    OUTCOMES,
    RECEIVED,
    UNCONFIRMED,
    Delivery,
    Health,
    WebhookSummary,
)
from iipub.provider.outcomes import Observed
from iipub.settings.config import WebhookSettings
from iipub.store import clock, db, tables

deliveries_table, misses_table, orphans_table = tables.webhook_deliveries, tables.webhook_misses, tables.orphans
details_table = tables.orphan_details

_STALE = dt.timedelta(seconds=120)  # a `received` row older than this lost its processor
_DETAIL_MAX = 2000


class Deliveries:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # -- deliveries ---------------------------------------------------------------------

    def record(self, webhook_id: str, event_type: str, event_id: str | None, response_id: str | None,
               event_created_at: dt.datetime | None) -> bool:
        """Record a verified delivery as `received`. False when this `webhook-id` was seen
        before (a duplicate or a replay inside the window: nothing to do), unless that earlier
        delivery's processor died mid-way, in which case this one takes it over."""
        with db.transaction(self.engine) as conn:
            now = clock.now(conn)
            existing = conn.execute(
                sa.select(deliveries_table.c.outcome, deliveries_table.c.received_at)
                .where(deliveries_table.c.webhook_id == webhook_id)
            ).first()
            if existing is None:
                try:
                    with conn.begin_nested():
                        conn.execute(deliveries_table.insert().values(
                            webhook_id=webhook_id, event_type=event_type, event_id=event_id, response_id=response_id,
                            outcome=RECEIVED, event_created_at=event_created_at, received_at=now))
                except sa.exc.IntegrityError:
                    return False  # a concurrent copy of the same delivery won
                return True
            if existing.outcome != RECEIVED or naive_utc(existing.received_at) > clock.read_now(conn) - _STALE:
                return False
            taken = conn.execute(
                deliveries_table.update()
                .where(deliveries_table.c.webhook_id == webhook_id, deliveries_table.c.outcome == RECEIVED,
                       deliveries_table.c.received_at == existing.received_at)
                .values(received_at=now))
            return taken.rowcount == 1

    def settle(self, webhook_id: str, outcome: str, *, job_id: str | None = None,
               detail: Mapping[str, Any] | None = None) -> None:
        assert outcome in OUTCOMES
        text = json.dumps(dict(detail), sort_keys=True, default=str)[:_DETAIL_MAX] if detail else None
        with db.transaction(self.engine) as conn:
            conn.execute(deliveries_table.update().where(deliveries_table.c.webhook_id == webhook_id)
                         .values(outcome=outcome, job_id=job_id, detail=text, settled_at=clock.now(conn)))

    def forget(self, webhook_id: str) -> None:
        """Processing failed before anything was decided: drop the row so a redelivery retries."""
        with db.transaction(self.engine) as conn:
            conn.execute(deliveries_table.delete().where(deliveries_table.c.webhook_id == webhook_id,
                                                         deliveries_table.c.outcome == RECEIVED))

    def awaiting_create(self, limit: int = 100) -> list[Delivery]:
        """Deliveries a tick looks at again: awaiting their job's create, or unconfirmed."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(deliveries_table)
                                .where(deliveries_table.c.outcome.in_([AWAITING_CREATE, UNCONFIRMED]))
                                .order_by(deliveries_table.c.received_at).limit(limit)).mappings().all()
        return [_delivery(r) for r in rows]

    def announced(self, response_id: str) -> bool:
        with self.engine.connect() as conn:
            return conn.execute(sa.select(deliveries_table.c.webhook_id)
                                .where(deliveries_table.c.response_id == response_id).limit(1)).first() is not None

    def recent(self, limit: int = 20) -> list[Delivery]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(deliveries_table).order_by(deliveries_table.c.received_at.desc())
                                .limit(limit)).mappings().all()
        return [_delivery(r) for r in rows]

    def counts_since(self, since: dt.datetime) -> dict[str, int]:
        with self.engine.connect() as conn:
            # Counted here: a GROUP BY leads SQLite to the outcome index and every delivery kept.
            outcomes = conn.execute(sa.select(deliveries_table.c.outcome)
                                    .where(deliveries_table.c.received_at >= since)).scalars()
            return {str(outcome): n for outcome, n in sorted(Counter(outcomes).items())}

    # -- retention ------------------------------------------------------------------------

    def prune(self, keep_days: float, batch: int = 500) -> dict[str, int]:
        """Delete, in primary-key batches so no long lock is held: deliveries and misses older
        than `keep_days`, and the rows (output included) of orphans an operator resolved (adopted
        or discarded) more than `keep_days` ago; what became of them stays in `orphan_details`,
        which `iipub check` reads. Kept whatever their age: a delivery whose settling is still
        pending (awaiting its job's create, or an unconfirmed loss read again by the ticks) and an
        orphan nobody resolved (paid output, kept until resolved)."""
        pending = deliveries_table.c.outcome.not_in([AWAITING_CREATE, UNCONFIRMED])
        resolved = details_table.c.fate.is_not(None)
        return {
            "webhook_deliveries": self._prune(deliveries_table.c.webhook_id, deliveries_table.c.received_at,
                                              keep_days, batch, pending),
            "webhook_misses": self._prune(misses_table.c.response_id, misses_table.c.noticed_at, keep_days, batch),
            "orphans": self._prune(orphans_table.c.response_id, details_table.c.fate_at, keep_days, batch, resolved,
                                   join=orphans_table.join(
                                       details_table, details_table.c.response_id == orphans_table.c.response_id)),
        }

    def _prune(self, key: sa.Column[Any], when: sa.Column[Any], keep_days: float, batch: int,
               *also: sa.ColumnElement[bool], join: sa.FromClause | None = None) -> int:
        table = key.table
        total = 0
        while True:
            with db.transaction(self.engine) as conn:
                cutoff = clock.now(conn, -keep_days * 86400)
                query = sa.select(key).where(when < cutoff, *also).order_by(when).limit(batch)
                keys = list(conn.execute(query if join is None else query.select_from(join)).scalars())
                if keys:
                    conn.execute(table.delete().where(key.in_(keys)))
            total += len(keys)
            if len(keys) < batch:
                return total

    # -- misses and health ----------------------------------------------------------------

    def note_miss(self, response_id: str, job_id: str) -> bool:
        """A poll found `response_id` finished with no webhook for it: remember it (the webhook
        may still come, late; then it clears the miss). True if recorded."""
        with db.transaction(self.engine) as conn:
            if conn.execute(sa.select(deliveries_table.c.webhook_id)
                            .where(deliveries_table.c.response_id == response_id).limit(1)).first():
                return False
            try:
                with conn.begin_nested():
                    conn.execute(misses_table.insert().values(response_id=response_id, job_id=job_id,
                                                              noticed_at=clock.now(conn)))
            except sa.exc.IntegrityError:
                return False
            return True

    def clear_miss(self, response_id: str) -> None:
        with db.transaction(self.engine) as conn:
            conn.execute(misses_table.delete().where(misses_table.c.response_id == response_id))

    def health(self, healthy_for_seconds: float) -> Health:
        with self.engine.connect() as conn:
            last = conn.execute(sa.select(sa.func.max(deliveries_table.c.received_at))
                                .where(deliveries_table.c.event_type.like("response.%"))).scalar()
            miss = conn.execute(sa.select(sa.func.max(misses_table.c.noticed_at))).scalar()
            now = clock.read_now(conn)
        return Health(_time(last), _time(miss), now, healthy_for_seconds)

    def misses_since(self, since: dt.datetime) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(misses_table)
                                    .where(misses_table.c.noticed_at >= since)).scalar_one())

    # -- orphans --------------------------------------------------------------------------

    def record_orphan(self, observed: Observed | None, response_id: str, why: str, status: str,
                      max_output_bytes: int) -> bool:
        """Keep what is known of a paid response of this installation no job holds, its output
        included (bounded), and its metadata. True if new; an orphan seen again keeps its first
        record."""
        meta = observed.metadata if observed else {}
        output = observed.output_text if observed else None
        if output is not None and len(output.encode("utf-8")) > max_output_bytes:
            why += f"; output of {len(output.encode('utf-8'))} bytes not kept (over {max_output_bytes})"
            output = None
        usage = observed.usage if observed else None
        values = {
            "response_id": response_id, "named_job_id": _clip(meta.get("iipub_job_id"), 64),
            "slot": _clip(meta.get("iipub_slot"), 128), "attempt": _clip(meta.get("iipub_attempt"), 16),
            "status": status[:32], "why": why[:_DETAIL_MAX], "output": output,
            "output_sha256": hashlib.sha256(output.encode("utf-8")).hexdigest() if output is not None else None,
            "output_tokens": usage.output_tokens if usage else None,
            "total_tokens": usage.total_tokens if usage else None,
        }
        details = {"response_id": response_id, "installation_id": _clip(meta.get("iipub_installation"), 64),
                   "fingerprint": _clip(meta.get("iipub_fingerprint"), 64),
                   "metadata": json.dumps(dict(meta), sort_keys=True)[:_DETAIL_MAX] if meta else None}
        with db.transaction(self.engine) as conn:
            try:
                with conn.begin_nested():
                    conn.execute(orphans_table.insert().values(**values, first_seen_at=clock.now(conn)))
                    conn.execute(details_table.insert().values(**details))
            except sa.exc.IntegrityError:
                return False
            return True

    def orphan(self, response_id: str) -> dict[str, Any] | None:
        """One orphan in full: its row, its output, its metadata and what became of it."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(orphans_table, *[c for c in details_table.c if c.name != "response_id"])
                               .select_from(orphans_table.outerjoin(
                                   details_table, details_table.c.response_id == orphans_table.c.response_id))
                               .where(orphans_table.c.response_id == response_id)).mappings().first()
        if row is None:
            return None
        found = dict(row)
        try:
            found["metadata"] = json.loads(found["metadata"]) if found["metadata"] else {}
        except ValueError:
            found["metadata"] = {}
        return found

    def orphan_fate(self, response_id: str, fate: str, job_id: str | None, reason: str, by: str,
                    conn: sa.Connection | None = None) -> None:
        """Record the operator's decision (adopted into a job, or discarded) on an orphan."""
        assert fate in ("adopted", "discarded")

        def write(c: sa.Connection) -> None:
            values = {"fate": fate, "fate_job_id": job_id, "fate_reason": reason[:_DETAIL_MAX], "fate_by": by[:128],
                      "fate_at": clock.now(c)}
            if not c.execute(details_table.update().where(details_table.c.response_id == response_id)
                             .values(**values)).rowcount:
                c.execute(details_table.insert().values(response_id=response_id, **values))

        if conn is not None:
            write(conn)
            return
        with db.transaction(self.engine) as c:
            write(c)

    def orphan_deleted(self, response_id: str) -> None:
        with db.transaction(self.engine) as conn:
            conn.execute(orphans_table.update().where(orphans_table.c.response_id == response_id)
                         .values(remote_deleted_at=clock.now(conn)))

    def orphans(self, limit: int = 1000) -> list[dict[str, Any]]:
        cols = [c for c in orphans_table.c if c.name != "output"]
        with self.engine.connect() as conn:
            holder = (sa.select(tables.jobs.c.id).where(tables.jobs.c.response_id == orphans_table.c.response_id)
                      .limit(1).scalar_subquery())
            rows = conn.execute(sa.select(*cols, (orphans_table.c.output.is_not(None)).label("output_kept"),
                                          details_table.c.installation_id, details_table.c.fate,
                                          details_table.c.fate_job_id, holder.label("held_by_job"))
                                .select_from(orphans_table.outerjoin(
                                    details_table, details_table.c.response_id == orphans_table.c.response_id))
                                .order_by(orphans_table.c.first_seen_at.desc()).limit(limit)).mappings().all()
        return [dict(r) | {"output_kept": bool(r["output_kept"])} for r in rows]

    def orphan_count(self) -> int:
        """Orphans still waiting for an operator's decision: neither adopted nor discarded, and not
        since taken back by a job (the spend ledger's restore fence adopts the response it recorded)."""
        with self.engine.connect() as conn:
            held = sa.select(tables.jobs.c.response_id).where(tables.jobs.c.response_id == orphans_table.c.response_id)
            return int(conn.execute(
                sa.select(sa.func.count()).select_from(orphans_table.outerjoin(
                    details_table, details_table.c.response_id == orphans_table.c.response_id))
                .where(details_table.c.fate.is_(None), ~held.exists())).scalar_one())

    def foreign_count(self) -> int:
        """Deliveries about other installations' or applications' responses, ever (left alone)."""
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(deliveries_table)
                                    .where(deliveries_table.c.outcome == FOREIGN)).scalar_one())


def _delivery(r: sa.RowMapping) -> Delivery:
    try:
        detail = json.loads(r["detail"]) if r["detail"] else {}
    except ValueError:  # cut at _DETAIL_MAX
        detail = {}
    return Delivery(r["webhook_id"], r["event_type"], r["event_id"], r["response_id"], r["job_id"], r["outcome"],
                    naive_utc(r["received_at"]), detail if isinstance(detail, dict) else {})


def _time(value: Any) -> dt.datetime | None:
    return None if value is None else naive_utc(value)


def _clip(value: str | None, limit: int) -> str | None:
    return None if value is None else value[:limit]


def summary(engine: Engine, settings: WebhookSettings, since: dt.datetime) -> WebhookSummary:
    ds = Deliveries(engine)
    recent = ds.recent(1)
    return WebhookSummary(settings.enabled, ds.health(settings.healthy_for_seconds), recent[0] if recent else None,
                          ds.counts_since(since), ds.misses_since(since), ds.orphan_count(), ds.foreign_count(),
                          settings.poll_interval_seconds)
