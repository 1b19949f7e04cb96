"""Named reads of the slots, their journal, tracks and editions for the money and operator
code: what the restore fence and the payment authority read, the hand-back's in-flight jobs,
the demo's table. Reads only: the rows are written by `job_store`, `track_store` and `outbox`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from iipub.core.timefmt import naive_utc
from iipub.model.jobs import Job
from iipub.model.states import CUSTODY_PENDING, IN_FLIGHT, Reason, State
from iipub.store import tables


def known_ids(engine: Engine) -> tuple[set[str], set[str]]:
    """Every job id, and every response id a job or a paid create names."""
    j, s = tables.jobs.c, tables.spend.c
    with engine.connect() as conn:
        jobs = set(conn.execute(sa.select(j.id)).scalars())
        responses = {str(r) for r in conn.execute(sa.select(j.response_id).where(j.response_id.is_not(None)))
                     .scalars()}
        responses |= {str(r) for r in conn.execute(sa.select(s.response_id)
                                                    .where(s.response_id.is_not(None))).scalars()}
    return jobs, responses


def slot_entries(engine: Engine, job_id: str, reasons: Sequence[str]) -> list[tuple[str, str | None]]:
    """(reason, detail) of the slot's own journal entries (not its tracks') of `reasons`, in order."""
    ev = tables.job_events
    with engine.connect() as conn:
        rows = conn.execute(sa.select(ev.c.reason, ev.c.detail)
                            .where(ev.c.job_id == job_id, ev.c.lang.is_(None),  # the slot's own chain
                                   ev.c.reason.in_(reasons)).order_by(ev.c.id)).all()
    return [(reason, detail) for reason, detail in rows]


def newest_entries(engine: Engine, job_id: str, limit: int) -> list[tuple[str, str | None]]:
    """(reason, detail) of the job's newest `limit` journal entries, newest first."""
    ev = tables.job_events.c
    with engine.connect() as conn:
        rows = conn.execute(sa.select(ev.reason, ev.detail).where(ev.job_id == job_id).order_by(ev.id.desc())
                            .limit(limit)).all()
    return [(reason, detail) for reason, detail in rows]


def forks_and_regenerations(engine: Engine, job_id: str) -> list[tuple[str, str | None, str | None]]:
    """(reason, lang, detail) of the job's `forked` and `operator_regenerate` entries, in order."""
    ev = tables.job_events.c
    with engine.connect() as conn:
        rows = conn.execute(sa.select(ev.reason, ev.lang, ev.detail).where(
            ev.job_id == job_id, ev.reason.in_((Reason.FORKED.value, Reason.OPERATOR_REGENERATE.value)))
            .order_by(ev.id)).all()
    return [(str(r), lang, detail) for r, lang, detail in rows]


def correction_pending(engine: Engine, job_id: str) -> str | None:
    """The detail of the slot's `operator_correct_regenerate` entry whose paid generation is not
    saved yet: None when the slot's newest entry among those, its saves and a kill is not it."""
    ev = tables.job_events.c
    wanted = (Reason.OPERATOR_CORRECT_REGENERATE.value, Reason.SAVED.value, Reason.OPERATOR_KILL.value)
    with engine.connect() as conn:
        row = conn.execute(sa.select(ev.reason, ev.detail).where(ev.job_id == job_id, ev.lang.is_(None),
                                                                 ev.reason.in_(wanted))
                           .order_by(ev.id.desc()).limit(1)).first()
    if row is None or row.reason != Reason.OPERATOR_CORRECT_REGENERATE.value:
        return None
    return str(row.detail or "{}")


def parts_and_editions(engine: Engine, job: Job) -> tuple[list[tuple[str, str, str | None]], set[str]]:
    """The job's tracks (language, state, payload sha256) and the languages of the editions saved
    for its product and date."""
    t, ed = tables.tracks.c, tables.editions.c
    with engine.connect() as conn:
        tracks = conn.execute(sa.select(t.lang, t.state, t.payload_sha256).where(t.job_id == job.id)).all()
        saved = set(conn.execute(sa.select(ed.lang).where(ed.product == job.product,
                                                          ed.edition_date == job.edition_date)).scalars())
    return [(lang, state, sha) for lang, state, sha in tracks], saved


def editions_of_slot(engine: Engine, product: str, edition_date: dt.date) -> int:
    """How many editions are saved for the slot (every language)."""
    e = tables.editions
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(e).where(
            e.c.product == product, e.c.edition_date == edition_date)).scalar_one())


def in_flight(engine: Engine, started_reasons: Sequence[str]) -> tuple[list[Job], dict[str, dt.datetime]]:
    """Every job between CREATE_IN_FLIGHT and custody (suspended or quarantined ones included
    while their response may still finish), oldest edition first, and when each one's current
    response was started (its last entry of `started_reasons`)."""
    jobs = tables.jobs
    pending = [s.value for s in CUSTODY_PENDING]
    q = (sa.select(jobs).where(sa.or_(
        jobs.c.state.in_([s.value for s in IN_FLIGHT]),
        sa.and_(jobs.c.state == State.MANUALLY_SUSPENDED.value, jobs.c.suspended_from.in_(pending)),
        sa.and_(jobs.c.state == State.QUARANTINED.value, jobs.c.response_id.is_not(None), jobs.c.payload.is_(None)),
    )).order_by(jobs.c.edition_date, jobs.c.product))
    with engine.connect() as conn:
        found = [Job.from_row(r) for r in conn.execute(q).mappings()]
        job_ids = [j.id for j in found]
        if not job_ids:
            return found, {}
        ev = tables.job_events
        q = (sa.select(ev.c.job_id, sa.func.max(ev.c.at)).where(ev.c.job_id.in_(job_ids),
                                                                ev.c.reason.in_(started_reasons))
             .group_by(ev.c.job_id))
        return found, {job_id: naive_utc(at) for job_id, at in conn.execute(q)}


def slots_until(engine: Engine, day: dt.date) -> list[Any]:
    """(product, edition date, state) of every slot up to `day`, by product."""
    j = tables.jobs
    q = sa.select(j.c.product, j.c.edition_date, j.c.state).where(j.c.edition_date <= day).order_by(j.c.product)
    with engine.connect() as conn:
        return list(conn.execute(q).all())


def slot_figures_until(engine: Engine, day: dt.date) -> list[Any]:
    """(product, edition date, state, generation attempts, polls, tokens) of every slot up to
    `day`, newest edition first."""
    j = tables.jobs
    q = (
        sa.select(j.c.product, j.c.edition_date, j.c.state, j.c.generation_attempts, j.c.poll_count,
                  j.c.total_tokens)
        .where(j.c.edition_date <= day)
        .order_by(j.c.edition_date.desc(), j.c.product)
    )
    with engine.connect() as conn:
        return list(conn.execute(q).all())
