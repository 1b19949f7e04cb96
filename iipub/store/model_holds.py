"""The only writer of `model_holds` rows (`money.holds` decides what they mean): one row per
model whose creates are held (the project may not use it, or it does not exist), under the scope
the refusal came from, with when the provider was last asked about it. A lift is journaled in
`gate_events` in the same transaction."""

from __future__ import annotations

import contextlib
import json

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from iipub.core.timefmt import naive_utc
from iipub.model.holds import ModelHold
from iipub.store import clock, db, gate_rows, tables

_t = tables.model_holds


def place(conn: Connection, model: str, scope: str, *, cause: str, message: str, job_id: str,
          worker: str) -> bool:
    """Hold `model`'s creates (in the transaction that refunds the refused create); True when
    this placed it, False when it was held already (then it is left as it was: held once)."""
    key = model.lower()[:128]
    now = clock.now(conn)
    if conn.execute(sa.select(_t.c.model).where(_t.c.model == key)).first() is not None:
        return False
    with contextlib.suppress(sa.exc.IntegrityError), conn.begin_nested():
        conn.execute(_t.insert().values(model=key, scope=scope[:255], cause=cause, message=message[:2000],
                                        job_id=job_id, worker=worker[:128], held_at=now, checked_at=now))
        return True
    return False


def read(engine: Engine, model: str) -> ModelHold | None:
    with engine.connect() as conn:
        row = conn.execute(sa.select(_t).where(_t.c.model == model.lower())).mappings().first()
    return None if row is None else _hold(row)


def claim_check(engine: Engine, hold: ModelHold, every_seconds: float) -> bool:
    """Whether this process asks the provider about the held model now: at most one process per
    `every_seconds` wins (the row's `checked_at` moves, fenced on its old value)."""
    with db.transaction(engine) as conn:
        now = clock.now(conn)
        due = clock.now(conn, -every_seconds)
        return bool(conn.execute(_t.update().where(_t.c.model == hold.model, _t.c.checked_at <= due)
                                 .values(checked_at=now)).rowcount)


def lift(engine: Engine, hold: ModelHold, worker: str, why: str) -> bool:
    """Lift `hold` if it is still the one recorded (journaled `model_hold_lifted`)."""
    with db.transaction(engine) as conn:
        gone = conn.execute(_t.delete().where(_t.c.model == hold.model, _t.c.scope == hold.scope)).rowcount
        if gone:
            detail = {"model": hold.model, "cause": hold.cause, "held_since": str(hold.held_at), "why": why}
            gate_rows.record_event(conn, "model_hold_lifted", worker[:128], json.dumps(detail))
    return bool(gone)


def all_holds(conn: Connection) -> list[ModelHold]:
    """Every model hold as recorded (`status`)."""
    return [_hold(r) for r in conn.execute(sa.select(_t).order_by(_t.c.model)).mappings()]


def _hold(row: sa.RowMapping) -> ModelHold:
    return ModelHold(model=row["model"], scope=row["scope"], cause=row["cause"], message=row["message"],
                     job_id=row["job_id"], held_at=naive_utc(row["held_at"]),
                     checked_at=naive_utc(row["checked_at"]))
