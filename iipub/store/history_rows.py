"""What `iipub report` reads: the rows of a range of days, each query bounded on an indexed column
so a database with years of history costs what the range costs (`observe.history` collects them,
`observe.history_values` folds them into daily series). Reads only.

Every query names the index it goes through in its docstring; `statements` gives them all for
the test that asks each database for its plan.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from iipub.model.spend_states import NOT_CHARGED
from iipub.model.states import State
from iipub.store import clock, tables

_j, _e, _ed, _r, _s = tables.jobs.c, tables.job_events.c, tables.editions.c, tables.runs.c, tables.spend.c
_RETRIEVED = State.RETRIEVED_NOT_VALIDATED.value
# An idle run's summary (`observe.idle_check`) is written by json.dumps with sort_keys: `"idle": true`.
_IDLE = '%"idle": true%'


def runs(since: dt.datetime, until: dt.datetime) -> sa.Select[Any]:
    """Runs started in [since, until): when, which command, idle or full, how it ended.
    Index: `ix_runs_started` (started_at)."""
    idle = sa.case((_r.summary.like(_IDLE), 1), else_=0)
    return (sa.select(_r.started_at, _r.command, idle.label("idle"), _r.ok, _r.finished_at)
            .where(_r.started_at >= since, _r.started_at < until))


def spend(since: dt.datetime, until: dt.datetime) -> sa.Select[Any]:
    """Paid creates in [since, until) by payment time, each counted as the ceilings count it: the
    reported tokens, else the product's estimate; provable refusals left out.
    Index: `ix_spend_paid` (paid_at)."""
    tokens = sa.case((_s.total_tokens.is_not(None), _s.total_tokens), else_=_s.estimated_tokens)
    return (sa.select(_s.paid_at, _s.product, tokens.label("tokens"), _s.total_tokens.is_(None).label("estimated"))
            .where(_s.paid_at >= since, _s.paid_at < until, _s.state.not_in(NOT_CHARGED)))


def journal(since: dt.datetime, until: dt.datetime) -> sa.Select[Any]:
    """Journal entries written in [since, until), in order (the detail only of retrievals, which
    carries the provider's timestamps the dwell needs). Index: `ix_job_events_at` (at)."""
    detail = sa.case((_e.to_state == _RETRIEVED, _e.detail), else_=sa.null())
    return (sa.select(_e.job_id, _e.from_state, _e.to_state, _e.at, detail.label("detail"), _e.reason, _e.lang)
            .where(_e.at >= since, _e.at < until).order_by(_e.at, _e.id))


def editions(product: str, first: dt.date, last: dt.date) -> sa.Select[Any]:
    """One product's slots dated first..last with each language's saved edition (none: NULLs).
    Index: `uq_jobs_slot` (product, edition_date) and, for the join, `uq_editions_slot_lang`
    (product, edition_date, lang)."""
    joined = tables.jobs.outerjoin(tables.editions, sa.and_(_ed.product == _j.product,
                                                             _ed.edition_date == _j.edition_date))
    return (sa.select(_j.edition_date, _j.state, _j.opens_at, _ed.lang, _ed.created_at.label("saved_at"))
            .select_from(joined).where(_j.product == product, _j.edition_date >= first, _j.edition_date <= last))


def quarantined() -> sa.Select[Any]:
    """The jobs in QUARANTINED now, with their reason and since when.
    Index: `ix_jobs_due` (state, next_attempt_at), on its leading column."""
    return (sa.select(_j.id, _j.product, _j.edition_date, _j.quarantine_reason, _j.state_entered_at)
            .where(_j.state == State.QUARANTINED.value))


def statements(since: dt.datetime, until: dt.datetime, products: Iterable[str]) -> dict[str, sa.Select[Any]]:
    """Every query of a report, by name (for the plans the tests read)."""
    out = {"runs": runs(since, until), "spend": spend(since, until), "journal": journal(since, until),
           "quarantined": quarantined()}
    for product in products:
        out[f"editions {product}"] = editions(product, since.date(), (until - dt.timedelta(seconds=1)).date())
    return out


def read(conn: Connection, statement: sa.Select[Any]) -> list[dict[str, Any]]:
    """The rows of one of the queries above, as plain mappings."""
    return [dict(row) for row in conn.execute(statement).mappings()]


Rows = dict[str, list[dict[str, Any]]]


def read_days(engine: Engine, days: int, products: Iterable[str]) -> tuple[dt.datetime, Rows]:
    """The database clock's now and the rows of every query over the last `days` UTC days, today
    included, in one short read: {query name: rows} (the names of `statements`)."""
    with engine.connect() as conn:
        now = clock.read_now(conn)
        since = dt.datetime.combine(now.date() - dt.timedelta(days=days - 1), dt.time())
        until = dt.datetime.combine(now.date() + dt.timedelta(days=1), dt.time())
        return now, {name: read(conn, q) for name, q in statements(since, until, products).items()}
