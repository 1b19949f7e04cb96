"""The named reads behind `iipub status` (`observe.queries` collects them, `observe.report` does
the arithmetic): job counts, the journal rows behind the SLIs and their error budgets, outbox
health, the language tracks, spend by slot, the cut-over's slots and shadow decisions, and the
database clock. Reads only."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from iipub.core.timefmt import as_date, naive_utc
from iipub.model.states import CUSTODY_PENDING, DONE, POLL_REASONS, TERMINAL, TRACK_STATES, TRACKS_RUN_IN, State
from iipub.store import clock, tables

jobs_table = tables.jobs
events_table = tables.job_events


# -- jobs and the journal ---------------------------------------------------------------------------


def counts_by_state(conn: Connection) -> list[tuple[str, str, int]]:
    """(product, state, jobs)."""
    rows = conn.execute(sa.select(jobs_table.c.product, jobs_table.c.state, sa.func.count())
                        .group_by(jobs_table.c.product, jobs_table.c.state))
    return [(product, state, int(n)) for product, state, n in rows]


def live_jobs(conn: Connection) -> list[dict[str, Any]]:
    """Every job not yet DELETED (the published-and-cleaned rows need no attention)."""
    cols = [jobs_table.c.id, jobs_table.c.product, jobs_table.c.edition_date, jobs_table.c.state,
            jobs_table.c.opens_at, jobs_table.c.created_at, jobs_table.c.state_entered_at, jobs_table.c.next_attempt_at,
            jobs_table.c.lease_expiry, jobs_table.c.quarantine_reason, jobs_table.c.is_backfill,
            jobs_table.c.kill_requested, jobs_table.c.last_error, jobs_table.c.create_scope]
    q = sa.select(*cols).where(jobs_table.c.state.in_(sorted(s.value for s in set(State) - TERMINAL)))  # the due index
    return [dict(r) for r in conn.execute(q).mappings()]


def any_paid(conn: Connection) -> bool:
    """Whether a job was ever charged a generation attempt."""
    paid = conn.execute(sa.select(tables.jobs.c.id).where(tables.jobs.c.generation_attempts > 0).limit(1)).first()
    return paid is not None


def entered_since(conn: Connection, state: State, cutoff: Any) -> int:
    """Journal entries into `state` since `cutoff`."""
    return int(conn.execute(
        sa.select(sa.func.count()).where(
            events_table.c.to_state == state.value, events_table.c.at >= cutoff)
    ).scalar_one())


def journaled_since(conn: Connection, reason: str, cutoff: Any) -> int:
    """Journal entries of `reason` since `cutoff`."""
    return int(conn.execute(
        sa.select(sa.func.count()).where(
            events_table.c.reason == reason, events_table.c.at >= cutoff)
    ).scalar_one())


def last_reason(conn: Connection, job_id: str) -> str | None:
    """The reason of the job's newest journal entry."""
    last: str | None = conn.execute(sa.select(events_table.c.reason).where(events_table.c.job_id == job_id)
                                    .order_by(events_table.c.id.desc()).limit(1)).scalar()
    return last


class FirstDispatch(NamedTuple):
    """A job dispatched in a window: when its slot opened and its first CREATE_IN_FLIGHT ever."""

    opens_at: Any
    created_at: Any
    first_at: Any


def first_dispatches(conn: Connection, cutoff: Any) -> list[FirstDispatch]:
    """(opens_at, created_at, first_at) of each non-backfill job dispatched since `cutoff`,
    `first_at` its first CREATE_IN_FLIGHT ever (older than `cutoff` for a re-dispatch): the
    window's journal by the `at` index, then those jobs' own entries by the job index, never
    every dispatch of the history."""
    cif = State.CREATE_IN_FLIGHT.value
    e, j = events_table.c, jobs_table.c
    # Made distinct here: a DISTINCT leads SQLite to the job index and a scan of the whole journal.
    recent = sorted(set(conn.execute(sa.select(e.job_id).where(e.to_state == cif, e.at >= cutoff)).scalars()))
    if not recent:
        return []
    first = dict(conn.execute(sa.select(e.job_id, sa.func.min(e.at))
                              .where(e.job_id.in_(recent), e.to_state == cif).group_by(e.job_id)).all())
    jobs = conn.execute(sa.select(j.id, j.opens_at, j.created_at)
                        .where(j.id.in_(recent), j.is_backfill == sa.false())).all()
    return [FirstDispatch(r.opens_at, r.created_at, first[r.id]) for r in jobs if r.id in first]


def first_dispatches_since(conn: Connection, since: Any) -> list[FirstDispatch]:
    """(opens_at, created_at, first_at) of each non-backfill job first dispatched since `since`."""
    start = naive_utc(conn.execute(sa.select(since)).scalar_one())
    return [r for r in first_dispatches(conn, since) if naive_utc(r.first_at) >= start]


def dispatched(conn: Connection, job_ids: Collection[str]) -> set[str]:
    """Those of `job_ids` that were ever dispatched (entered CREATE_IN_FLIGHT)."""
    cif = State.CREATE_IN_FLIGHT.value
    return set(conn.execute(
        sa.select(events_table.c.job_id)
        .where(events_table.c.to_state == cif, events_table.c.job_id.in_(list(job_ids))).distinct()
    ).scalars())


def dwell_events(conn: Connection, since: Any) -> list[tuple[str, str | None, str, dt.datetime, str | None]]:
    """The journal entries the dwell SLI and its error budget read: into and out of
    COMPLETED_NOT_RETRIEVED, and out of CREATE_IN_FLIGHT, since `since`, per job in order."""
    cnr, cif = State.COMPLETED_NOT_RETRIEVED.value, State.CREATE_IN_FLIGHT.value
    e = events_table.c
    cols = (e.id, e.job_id, e.from_state, e.to_state, e.at, e.detail)
    # One range of the (state, at) indexes each, so a month's window reads only the entries it
    # keeps; put in order here (an ORDER BY leads SQLite to the job index and the whole journal).
    found: dict[int, Any] = {}
    for where in (e.to_state == cnr, e.from_state == cnr, e.from_state == cif):
        for r in conn.execute(sa.select(*cols).where(where, e.at >= since)):
            found[r.id] = r
    rows = sorted(found.values(), key=lambda r: (r.job_id, r.id))
    return [(r.job_id, r.from_state, r.to_state, naive_utc(r.at), r.detail) for r in rows]


def poll_entries(conn: Connection, since: Any) -> list[Any]:
    """(at, detail) of every provider observation journaled since `since`."""
    return list(conn.execute(
        sa.select(events_table.c.at, events_table.c.detail)
        .where(events_table.c.at >= since, events_table.c.reason.in_(sorted(r.value for r in POLL_REASONS)))
    ).all())


def tokens_by_slot(conn: Connection, since: dt.date) -> list[tuple[str, Any, Any, Any, Any]]:
    """(product, edition date, input, output, total tokens) per slot since `since`, newest first."""
    j = jobs_table.c
    # Summed here, not grouped in SQL: a GROUP BY leads SQLite to the slot key and a scan of every
    # slot ever; the window's rows come by the edition-date index.
    sums: dict[tuple[str, Any], list[int]] = {}
    for p, d, i, o, t in conn.execute(sa.select(j.product, j.edition_date, j.input_tokens, j.output_tokens,
                                                j.total_tokens).where(j.edition_date >= since)):
        acc = sums.setdefault((p, d), [0, 0, 0])
        acc[0] += int(i or 0)
        acc[1] += int(o or 0)
        acc[2] += int(t or 0)
    newest_first = sorted(sums.items(), key=lambda kv: (-as_date(kv[0][1]).toordinal(), kv[0][0]))
    return [(p, d, *acc) for (p, d), acc in newest_first]


# -- tracks, editions and the outbox --------------------------------------------------------------


def ended_tracks_of_moving_slots(conn: Connection) -> list[RowMapping]:
    """Forked slots not killed with a track that ended (DELETED): the slot's columns and the
    track's language, oldest first."""
    t, j = tables.tracks.c, jobs_table.c
    return list(conn.execute(
        sa.select(j.id, j.product, j.edition_date, j.state, j.state_entered_at, t.lang)
        .join(tables.tracks, t.job_id == j.id)
        .where(j.state.in_([st.value for st in TRACKS_RUN_IN]), j.kill_requested == sa.false(),
               t.state == State.DELETED.value)
        .order_by(j.state_entered_at, j.id, t.lang)).mappings().all())


def track_counts(conn: Connection) -> list[Any]:
    """(product, lang, state, tracks)."""
    t = tables.tracks.c
    return list(conn.execute(sa.select(t.product, t.lang, t.state, sa.func.count())
                             .group_by(t.product, t.lang, t.state)).all())


def unfinished_tracks(conn: Connection) -> list[RowMapping]:
    """Every track not done yet, with its job's liveness columns."""
    t, j = tables.tracks.c, jobs_table.c
    unfinished = sorted(s.value for s in TRACK_STATES - DONE)  # listed, so the due index is read
    return list(conn.execute(
        sa.select(t.job_id, t.product, t.edition_date, t.lang, t.state, t.quarantine_reason, t.last_error,
                  t.state_entered_at, j.state.label("job_state"), j.opens_at, j.created_at.label("job_created_at"),
                  j.kill_requested)
        .join(jobs_table, j.id == t.job_id).where(t.state.in_(unfinished))
    ).mappings().all())


def _slot_lang_unique(conn: Connection) -> bool:
    """Whether `editions` holds a unique key on (product, edition_date, lang), as every migrated
    schema does (`uq_editions_slot_lang`): read from the catalogue, not the rows."""
    wanted = ["product", "edition_date", "lang"]
    if conn.dialect.name == "sqlite":
        for index in conn.exec_driver_sql("PRAGMA index_list(editions)").all():
            if index[2] and not index[4]:  # unique and not partial
                cols = [r[2] for r in conn.exec_driver_sql(f"PRAGMA index_info('{index[1]}')").all()]
                if cols == wanted:
                    return True
        return False
    keys: dict[str, list[tuple[int, str]]] = {}
    for name, seq, col in conn.exec_driver_sql(
            "SELECT INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s AND NON_UNIQUE = 0", ("editions",)).all():
        keys.setdefault(str(name), []).append((int(seq), str(col).lower()))
    return any([c for _, c in sorted(cols)] == wanted for cols in keys.values())


def duplicate_editions_by_lang(conn: Connection) -> dict[str, int]:
    """Editions published more than once for one slot and language, per language. None while the
    unique key forbids them: counting would read an index of every edition ever."""
    if _slot_lang_unique(conn):
        return {}
    ed = tables.editions.c
    groups = (sa.select(ed.lang, sa.func.count().label("n")).group_by(ed.product, ed.edition_date, ed.lang)
              .having(sa.func.count() > 1).subquery())
    return {lang: int(n) for lang, n in conn.execute(
        sa.select(groups.c.lang, sa.func.sum(groups.c.n - 1)).group_by(groups.c.lang))}


def unpublished_outbox(conn: Connection) -> tuple[int, Any]:
    """(outbox events not published yet, when the oldest of them was created)."""
    unpublished, oldest = conn.execute(
        sa.select(sa.func.count(), sa.func.min(tables.outbox.c.created_at))
        .where(tables.outbox.c.published_at.is_(None))
    ).one()
    return int(unpublished), oldest


# -- the cut-over ------------------------------------------------------------------------------------


def slots_between(conn: Connection, first: dt.date, last: dt.date) -> list[tuple[str, Any]]:
    """(product, edition date) of every slot from `first` to `last`."""
    jobs = tables.jobs
    return [(p, d) for p, d in conn.execute(
        sa.select(jobs.c.product, jobs.c.edition_date).where(jobs.c.edition_date.between(first, last)))]


def first_slots(conn: Connection, products: Sequence[str]) -> list[tuple[str, Any]]:
    """(product, its first edition date) of each of `products` with a slot: one end of the slot
    key per product (a MIN grouped by product reads every slot of each)."""
    if not products:
        return []
    j = tables.jobs.c
    names = list(dict.fromkeys(products))
    firsts = conn.execute(sa.select(*[sa.select(sa.func.min(j.edition_date)).where(j.product == p)
                                      .scalar_subquery() for p in names])).one()
    return [(p, d) for p, d in zip(names, firsts, strict=True) if d is not None]


def decisions_since(conn: Connection, reasons: Sequence[str], cutoff: Any) -> list[tuple[Any, str, Any]]:
    """(reason, product, edition date) of each journal entry of `reasons` since `cutoff`."""
    jobs, events = tables.jobs, tables.job_events
    q = (sa.select(events.c.reason, jobs.c.product, jobs.c.edition_date)
         .join(jobs, jobs.c.id == events.c.job_id)
         .where(events.c.reason.in_(reasons), events.c.at >= cutoff))
    return [(reason, product, day) for reason, product, day in conn.execute(q)]


def adopted_slots(conn: Connection, days: Sequence[dt.date]) -> list[tuple[str, Any]]:
    """(product, edition date) of the adopted slots of `days`."""
    jobs = tables.jobs
    return [(p, d) for p, d in conn.execute(
        sa.select(jobs.c.product, jobs.c.edition_date).where(jobs.c.origin == "adopted",
                                                             jobs.c.edition_date.in_(days)))]


def awaited_responses_seen(conn: Connection) -> list[Any]:
    """When each job waiting for its response's output (suspended ones included) was last
    written: the last time iipub looked at it."""
    jobs = tables.jobs
    pending = [s.value for s in CUSTODY_PENDING]
    q = sa.select(jobs.c.updated_at).where(jobs.c.response_id.is_not(None), sa.or_(
        jobs.c.state.in_(pending),
        sa.and_(jobs.c.state == State.MANUALLY_SUSPENDED.value, jobs.c.suspended_from.in_(pending))))
    return list(conn.execute(q).scalars())


# -- the clock -----------------------------------------------------------------------------------------


def database_clock(conn: Connection) -> Any:
    """The database's clock without the drill offset, as the driver returns it."""
    return conn.execute(sa.select(clock.now(conn, drill_offset=False))).scalar_one()
