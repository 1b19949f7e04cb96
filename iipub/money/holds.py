"""Per-product create holds: the `product_holds` table, one row per product whose create the
provider refused for a parameter (400 invalid_request_error naming it: nothing billed). Every
reconcile process reads it before a create of that product, so one refused parameter costs one
refused create, not one per slot or per process; the hold lifts by itself once the product's
request fingerprint (`request_fingerprint`) changes, i.e. once its configuration was fixed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json

import sqlalchemy as sa
import structlog
from sqlalchemy.engine import Connection, Engine

from iipub.core.timefmt import naive_utc
from iipub.money.breaker import ProductHold
from iipub.settings.config import Product
from iipub.store import clock, db, tables

log = structlog.get_logger("iipub.gate")
_t = tables.product_holds


def request_fingerprint(product: Product) -> str:
    """What a parameter refusal is about: the generation's fingerprint and the money keys sent
    with it (the output cap, the tier asked). A change of any of them lifts the hold."""
    doc = {"generation": product.fingerprint(), "max_output_tokens": product.output_token_cap(),
           "service_tier": product.service_tier}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def place(conn: Connection, product: Product, param: str, code: str | None, message: str, job_id: str,
          worker: str) -> None:
    """In the transition that refunds the refused create: hold the product's creates."""
    values = {"request_fingerprint": request_fingerprint(product), "param": param[:128], "code": (code or None),
              "message": message[:2000], "job_id": job_id, "worker": worker[:128], "held_at": clock.now(conn)}
    if conn.execute(_t.update().where(_t.c.product == product.name).values(**values)).rowcount:
        return
    with contextlib.suppress(sa.exc.IntegrityError), conn.begin_nested():
        conn.execute(_t.insert().values(product=product.name, **values))


def holding(engine: Engine, product: Product, worker: str) -> ProductHold | None:
    """The hold on `product`'s creates, or None. A hold placed under another request fingerprint
    (the configuration changed since) is lifted here, journaled in `gate_events`."""
    with engine.connect() as conn:
        row = conn.execute(sa.select(_t).where(_t.c.product == product.name)).mappings().first()
    if row is None:
        return None
    hold = _hold(row)
    if hold.request_fingerprint == request_fingerprint(product):
        return hold
    with db.transaction(engine) as conn:
        gone = conn.execute(_t.delete().where(_t.c.product == product.name,
                                              _t.c.request_fingerprint == hold.request_fingerprint)).rowcount
        if gone:
            detail = {"product": product.name, "param": hold.param, "held_since": str(hold.held_at)}
            conn.execute(tables.gate_events.insert().values(kind="product_hold_lifted", worker=worker[:128],
                                                            at=clock.now(conn), detail=json.dumps(detail)))
            log.warning("create_gate", change="product_hold_lifted", worker=worker, **detail)
    return None


def all_holds(conn: Connection) -> list[ProductHold]:
    """Every hold as recorded (`status`)."""
    return [_hold(r) for r in conn.execute(sa.select(_t).order_by(_t.c.product)).mappings()]


def _hold(row: sa.RowMapping) -> ProductHold:
    return ProductHold(product=row["product"], request_fingerprint=row["request_fingerprint"], param=row["param"],
                       code=row["code"], message=row["message"], job_id=row["job_id"],
                       held_at=naive_utc(row["held_at"]))
