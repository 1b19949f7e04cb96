"""The named reads of `iipub check` (`observe.invariants`): every row it judges, payloads left
out (only whether there is one), and the slots the spend ledger is compared with. Reads only."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from iipub.model.states import Reason
from iipub.store import tables

jobs_table, events_table, editions_table = tables.jobs, tables.job_events, tables.editions
outbox_table, deliveries_table = tables.outbox, tables.outbox_deliveries


def jobs(conn: Connection) -> dict[str, dict[str, Any]]:
    """Every job by id, its payload and composition as `has_payload`."""
    return {r["id"]: dict(r) for r in conn.execute(sa.select(
        *[c for c in jobs_table.columns if c.name not in ("payload", "composed")],
        jobs_table.c.payload.is_not(None).label("has_payload"),
    )).mappings()}


def journal(conn: Connection) -> list[Any]:
    """Every journal entry, per job in order."""
    return list(conn.execute(sa.select(events_table).order_by(events_table.c.job_id, events_table.c.id)))


def tracks(conn: Connection) -> dict[tuple[str, str], dict[str, Any]]:
    """Every track by (job id, language), its part and composition as `has_payload`."""
    return {(r["job_id"], r["lang"]): dict(r) for r in conn.execute(sa.select(
        *[c for c in tables.tracks.columns if c.name not in ("payload", "composed")],
        tables.tracks.c.payload.is_not(None).label("has_payload"))).mappings()}


def editions(conn: Connection) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute(sa.select(
        editions_table.c.id, editions_table.c.job_id, editions_table.c.product, editions_table.c.edition_date,
        editions_table.c.lang, editions_table.c.sha256, editions_table.c.status)).mappings()]


def outbox(conn: Connection) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute(sa.select(
        outbox_table.c.id, outbox_table.c.event_id, outbox_table.c.job_id, outbox_table.c.edition_id,
        outbox_table.c.published_at, outbox_table.c.lease_owner, outbox_table.c.lease_expiry,
        outbox_table.c.event_type, outbox_table.c.superseded_by)).mappings()]


def deliveries(conn: Connection) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute(sa.select(deliveries_table)).mappings()]


def orphan_fates(conn: Connection) -> dict[str, str | None]:
    """response id -> what became of each orphan."""
    return {r.response_id: r.fate for r in conn.execute(
        sa.select(tables.orphan_details.c.response_id, tables.orphan_details.c.fate))}


def slot_attempts(engine: Engine) -> list[Any]:
    """(id, product, edition date, generation attempts, state) of every job."""
    with engine.connect() as conn:
        q = sa.select(jobs_table.c.id, jobs_table.c.product, jobs_table.c.edition_date,
                      jobs_table.c.generation_attempts, jobs_table.c.state)
        return list(conn.execute(q))


def creates_recorded(engine: Engine) -> bool:
    """Whether this database ever charged a paid create (a job with attempts, or a dispatch journaled)."""
    with engine.connect() as conn:
        if conn.execute(sa.select(jobs_table.c.id).where(jobs_table.c.generation_attempts > 0).limit(1)).first():
            return True
        return conn.execute(sa.select(events_table.c.id).where(events_table.c.reason == Reason.DISPATCH.value)
                            .limit(1)).first() is not None
