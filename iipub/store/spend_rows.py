"""The only writer of the `spend` table (one row per paid create), its operator overrides
(`spend_overrides`) and the once-a-day notes of a reached ceiling (`spend_notes`), and the
queries that read them. A row is written in the dispatch's own transaction (before the POST),
given the create's outcome after it, and the provider's reported usage in the custody
transaction itself (`job_store.Store.transition` calls `record_usage`). The row states are
`model.spend_states`; what the rows mean in money (ceilings, prices, the report) is
`money.payments`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, RowMapping

from iipub.core.timefmt import naive_utc
from iipub.model.jobs import Job
from iipub.model.spend_states import ACCEPTED, IN_FLIGHT, NOT_CHARGED, REFUSED, REJECTED, SETTLED, UNKNOWN
from iipub.provider.outcomes import Accepted, Ambiguous, CreateOutcome, Refused
from iipub.settings.config import Product
from iipub.store import clock, tables

spend_table, overrides_table, notes_table = tables.spend, tables.spend_overrides, tables.spend_notes
_s = spend_table.c
# What a row counts for: the reported total, else its estimate; nothing if provably not charged.
COUNTED = sa.case((_s.state.in_(NOT_CHARGED), 0), (_s.total_tokens.is_not(None), _s.total_tokens),
                  else_=_s.estimated_tokens)
TIER: sa.ColumnElement[str] = sa.func.coalesce(_s.tier_reported, _s.tier_asked)


def record_usage(conn: Connection, job: Job, changes: Mapping[str, Any], detail: Mapping[str, Any]) -> None:
    """Custody stored the output and added its usage to the job: the create that paid for it
    (the row of the job's response, else of its current attempt) takes the reported usage."""
    tokens = {k: int(changes[k]) - int(getattr(job, k)) for k in ("input_tokens", "output_tokens", "total_tokens")
              if k in changes}
    if tokens.get("total_tokens", 0) <= 0:
        return
    response_id = changes.get("response_id", job.response_id)
    row = None
    if response_id:
        row = conn.execute(sa.select(_s.id).where(_s.job_id == job.id, _s.response_id == response_id)
                           .order_by(_s.id.desc()).limit(1)).scalar()
    if row is None:
        row = conn.execute(sa.select(_s.id).where(_s.job_id == job.id, _s.attempt == job.generation_attempts,
                                                  _s.state.not_in(NOT_CHARGED))
                           .order_by(_s.id.desc()).limit(1)).scalar()
    if row is None:  # a create paid before the spend table existed
        return
    values: dict[str, Any] = {**tokens, "state": SETTLED, "updated_at": clock.now(conn)}
    tier = detail.get("service_tier")
    if isinstance(tier, str) and tier:
        values["tier_reported"] = tier[:16]
    conn.execute(spend_table.update().where(_s.id == row).values(**values))


def record_dispatch(conn: Connection, job: Job, attempt: int, product: Product, tier: str,
                    ledger_id: str | None = None) -> int:
    """In the dispatch's transaction: the create is paid from now on (until proven refused);
    `ledger_id`: the spend ledger its intent line goes to (`money.ledger_book`)."""
    res = conn.execute(spend_table.insert().values(
        job_id=job.id, attempt=attempt, product=job.product, edition_date=job.edition_date, model=product.model,
        tier_asked=tier, state=IN_FLIGHT, estimated_tokens=product.estimated_tokens, paid_at=clock.now(conn),
        updated_at=clock.now(conn), ledger_id=ledger_id))
    return int(res.inserted_primary_key[0])  # type: ignore[index]


def record_outcome(conn: Connection, spend_id: int, outcome: CreateOutcome) -> None:
    """In the transition that leaves CREATE_IN_FLIGHT: what the create's outcome says was paid."""
    values: dict[str, Any] = {"updated_at": clock.now(conn)}
    if isinstance(outcome, Accepted):
        values.update(state=ACCEPTED, response_id=outcome.response_id, tier_reported=outcome.tier)
    elif isinstance(outcome, Refused):
        values["state"] = REFUSED
    elif isinstance(outcome, Ambiguous):
        values["state"] = UNKNOWN
    else:
        values["state"] = REJECTED
    conn.execute(spend_table.update().where(_s.id == spend_id).values(**values))


def accepted_at_tier(engine: Engine, tier: str) -> set[str]:
    """Jobs whose accepted response runs at `tier`."""
    with engine.connect() as conn:
        return set(conn.execute(sa.select(_s.job_id).where(_s.state == ACCEPTED, TIER == tier)).scalars())  # noqa: SIM300


def counted_since(conn: Connection, since: dt.datetime) -> dict[str, int]:
    """Tokens counted by product for the rows paid since `since`."""
    rows = conn.execute(sa.select(_s.product, sa.func.sum(COUNTED)).where(_s.paid_at >= since)
                        .group_by(_s.product)).all()
    return {product: int(n or 0) for product, n in rows}


def overrides_in_force(conn: Connection, now: dt.datetime) -> list[RowMapping]:
    o = overrides_table.c
    return list(conn.execute(sa.select(overrides_table).where(o.until_at > now).order_by(o.id)).mappings())


def grant(conn: Connection, scope: str, tokens: int, until: dt.datetime, reason: str, by: str) -> None:
    conn.execute(overrides_table.insert().values(scope=scope, extra_tokens=tokens, reason=reason, granted_by=by,
                                                 granted_at=clock.now(conn), until_at=until))


def note_reached(conn: Connection, scope: str, now: dt.datetime) -> bool:
    """True the first time today this ceiling is found reached (by any process)."""
    try:
        with conn.begin_nested():
            conn.execute(notes_table.insert().values(day=naive_utc(now).date(), scope=scope,
                                                     noted_at=clock.now(conn)))
    except sa.exc.IntegrityError:
        return False
    return True


def paid_since(conn: Connection, oldest: dt.datetime) -> list[RowMapping]:
    """The rows paid since `oldest`, as `status` prices them (the tier reported, else asked)."""
    cols = [_s.product, _s.model, TIER.label("tier"), _s.state, _s.input_tokens, _s.output_tokens, _s.total_tokens,
            _s.estimated_tokens, _s.paid_at]
    return list(conn.execute(sa.select(*cols).where(_s.paid_at >= oldest)).mappings())


# Dispatches whose intent line was written: every state but a provable refusal (a create not sent
# because its intent could not be written is one) and one still in flight (its line may be on its way).
_WROTE_INTENT = (ACCEPTED, UNKNOWN, SETTLED, REJECTED)


def dispatches_to(conn: Connection, ledger_id: str, untagged_after: int | None = None) -> int:
    """The paid creates whose intent line was written to ledger `ledger_id` (tagged with it), and
    with `untagged_after` the untagged ones (from before migration 0016) after that spend id."""
    s = spend_table.c
    mine = s.ledger_id == ledger_id
    if untagged_after is not None:
        mine = sa.or_(mine, sa.and_(s.ledger_id.is_(None), s.id > untagged_after))
    return int(conn.execute(sa.select(sa.func.count()).select_from(spend_table)
                            .where(mine, s.state.in_(_WROTE_INTENT))).scalar_one())


def max_id(conn: Connection) -> int:
    return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(tables.spend.c.id), 0))).scalar_one())
