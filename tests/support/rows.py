"""Reads of the stored rows that assertions compare, and heartbeats recorded as the cron
commands record them."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa

from iipub.store import tables

UNKNOWN_ID = "00000000-0000-0000-0000-000000000000"


# -- stored rows --------------------------------------------------------------------------------------------


def record_heartbeats(engine: sa.Engine, *commands: str, ok: bool = True) -> None:
    """Record a finished run of each of `commands` (default: reconcile and relay), as the cron
    commands do: for in-process ticks checked by `iipub status` with its heartbeat check on."""
    from iipub.observe import heartbeat

    for command in commands or heartbeat.COMMANDS:
        heartbeat.finish(heartbeat.start(engine, command, f"{command}:test"), ok=ok,
                         error=None if ok else "RuntimeError: test")


def utc_today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def job_rows(engine: sa.Engine) -> list[dict[str, Any]]:
    """Every job row, oldest edition first (then by product)."""
    with engine.connect() as conn:
        q = sa.select(tables.jobs).order_by(tables.jobs.c.edition_date, tables.jobs.c.product)
        return [dict(r) for r in conn.execute(q).mappings()]


def job_events(engine: sa.Engine, job_id: str, lang: str | None = None) -> list[dict[str, Any]]:
    """One slot's own journal (`lang` None) or one of its language tracks', oldest first."""
    ev = tables.job_events.c
    with engine.connect() as conn:
        q = (sa.select(tables.job_events).where(ev.job_id == job_id,
                                                ev.lang.is_(None) if lang is None else ev.lang == lang)
             .order_by(ev.id))
        return [dict(r) for r in conn.execute(q).mappings()]


def row_count(engine: sa.Engine, table: sa.Table) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


def job_versions(engine: sa.Engine) -> dict[str, int]:
    return {r["id"]: r["version"] for r in job_rows(engine)}


def stored(engine: sa.Engine) -> dict[str, Any]:
    """Everything a command could damage: every job row and the size of every other table."""
    with engine.connect() as conn:
        jobs = {r["id"]: dict(r) for r in conn.execute(sa.select(tables.jobs)).mappings()}
        counts = {t.name: conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()
                  for t in (tables.job_events, tables.editions, tables.outbox, tables.outbox_deliveries)}
    return {"jobs": jobs, "counts": counts}
