"""The only writer of `product_holds` rows (`money.holds` decides what they mean): one row per
product whose creates are held, with why (`cause`) and the request fingerprint it was placed
under. A lift is journaled in `gate_events` in the same transaction."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from iipub.core.timefmt import naive_utc
from iipub.model.holds import ProductHold
from iipub.store import clock, db, gate_rows, tables

_t = tables.product_holds


def place(conn: Connection, product: str, request_fingerprint: str, *, cause: str, param: str | None,
          code: str | None, message: str, job_id: str, worker: str, cap: int | None = None,
          limit: int | None = None, requested: int | None = None) -> None:
    """Hold `product`'s creates (in the transaction that refunds the refused create)."""
    values: dict[str, Any] = {
        "request_fingerprint": request_fingerprint, "cause": cause, "param": param[:128] if param else None,
        "code": code or None, "message": message[:2000], "job_id": job_id, "worker": worker[:128],
        "held_at": clock.now(conn), "cap_tokens": cap, "limit_tokens": limit, "requested_tokens": requested}
    if conn.execute(_t.update().where(_t.c.product == product).values(**values)).rowcount:
        return
    with contextlib.suppress(sa.exc.IntegrityError), conn.begin_nested():
        conn.execute(_t.insert().values(product=product, **values))


def read(engine: Engine, product: str) -> ProductHold | None:
    with engine.connect() as conn:
        row = conn.execute(sa.select(_t).where(_t.c.product == product)).mappings().first()
    return None if row is None else _hold(row)


def lift(engine: Engine, hold: ProductHold, worker: str, why: str) -> bool:
    """Lift `hold` if it is still the one recorded (journaled `product_hold_lifted`); False when
    another process lifted or replaced it first."""
    with db.transaction(engine) as conn:
        gone = conn.execute(_t.delete().where(_t.c.product == hold.product,
                                              _t.c.request_fingerprint == hold.request_fingerprint)).rowcount
        if gone:
            detail = {"product": hold.product, "cause": hold.cause, "param": hold.param,
                      "held_since": str(hold.held_at), "why": why}
            gate_rows.record_event(conn, "product_hold_lifted", worker[:128], json.dumps(detail))
    return bool(gone)


def all_holds(conn: Connection) -> list[ProductHold]:
    """Every hold as recorded (`status`)."""
    return [_hold(r) for r in conn.execute(sa.select(_t).order_by(_t.c.product)).mappings()]


def _hold(row: sa.RowMapping) -> ProductHold:
    return ProductHold(product=row["product"], request_fingerprint=row["request_fingerprint"], param=row["param"],
                       code=row["code"], message=row["message"], job_id=row["job_id"],
                       held_at=naive_utc(row["held_at"]), cause=row["cause"], cap=row["cap_tokens"],
                       limit=row["limit_tokens"], requested=row["requested_tokens"])
