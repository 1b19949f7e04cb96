"""Holds that fit the cause: what a refused create holds, and until when. The rows are written
by `store.product_holds` and `store.model_holds`; every reconcile process reads them before a
create, so one refusal costs one refused create, not one per slot or per process.

- A parameter the model refuses (400 naming it) or a request larger than the organization's
  tokens-per-minute limit (429 "Request too large"): that product's creates are held until its
  request fingerprint (`request_fingerprint`: the generation, the output cap, the tier asked and
  the configured tokens-per-minute limit) changes, i.e. until its configuration was fixed.
- No access to a model (403) or no such model (404): the creates of every product on that model
  are held, once, under the scope the refusal came from. The provider's models endpoint (free)
  is asked again now and then (`MODEL_RECHECK_SECONDS`, one process at a time); once it answers
  for the model, or the scope changed (another project or key), the hold is lifted.

Nothing here opens the account-wide breaker: the other products and models go on.
"""

from __future__ import annotations

import hashlib
import json

import structlog

from iipub.model.holds import NO_ACCESS, NO_SUCH_MODEL, PARAMETER, TOO_LARGE, ModelHold, ProductHold
from iipub.provider.outcomes import RefusalKind, Refused
from iipub.settings.config import Product
from iipub.store import model_holds, product_holds
from iipub.store.handles import Connection, Engine

log = structlog.get_logger("iipub.gate")

# How often a held model is asked about again (free of charge, one process at a time).
MODEL_RECHECK_SECONDS = 900.0


def request_fingerprint(product: Product, tokens_per_minute: int | None = None) -> str:
    """What a product hold is about: the generation's fingerprint and the money keys sent with it
    (the output cap, the tier asked), and the tokens-per-minute limit configured for the account
    (raising it, after moving to a higher tier, lifts a hold for a request too large). A change of
    any of them lifts the hold."""
    doc: dict[str, object] = {"generation": product.fingerprint(), "max_output_tokens": product.output_token_cap(),
                              "service_tier": product.service_tier}
    if tokens_per_minute is not None:
        doc["tokens_per_minute"] = tokens_per_minute
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def place(conn: Connection, product: Product, outcome: Refused, job_id: str, worker: str,
          tokens_per_minute: int | None = None) -> None:
    """In the transaction that refunds a refused create: hold what the refusal is about (nothing
    for a refusal that holds nothing: rate, capacity, quota, unsent)."""
    if outcome.kind is RefusalKind.PARAMETER and outcome.param is not None:
        product_holds.place(conn, product.name, request_fingerprint(product, tokens_per_minute), cause=PARAMETER,
                            param=outcome.param, code=outcome.code, message=outcome.why, job_id=job_id, worker=worker)
    elif outcome.kind is RefusalKind.TOO_LARGE:
        product_holds.place(conn, product.name, request_fingerprint(product, tokens_per_minute), cause=TOO_LARGE,
                            param="max_output_tokens", code=outcome.code, message=outcome.why, job_id=job_id,
                            worker=worker, cap=product.output_token_cap(), limit=outcome.limit,
                            requested=outcome.requested)


def place_model(conn: Connection, model: str, scope: str, outcome: Refused, job_id: str, worker: str) -> bool:
    """In the transaction that refunds a create refused for the model: hold the model's creates,
    once (True when this placed the hold)."""
    cause = NO_SUCH_MODEL if outcome.status == 404 else NO_ACCESS
    return model_holds.place(conn, model, scope, cause=cause, message=outcome.why, job_id=job_id, worker=worker)


def holding(engine: Engine, product: Product, worker: str, tokens_per_minute: int | None = None) -> ProductHold | None:
    """The hold on `product`'s creates, or None. A hold placed under another request fingerprint
    (the configuration changed since) is lifted here, journaled in `gate_events`."""
    hold = product_holds.read(engine, product.name)
    if hold is None:
        return None
    if hold.request_fingerprint == request_fingerprint(product, tokens_per_minute):
        return hold
    if product_holds.lift(engine, hold, worker, "the product's request changed"):
        log.warning("create_gate", change="product_hold_lifted", worker=worker, product=product.name,
                    cause=hold.cause, param=hold.param, held_since=str(hold.held_at))
    return None


def model_holding(engine: Engine, model: str, scope: str, worker: str) -> ModelHold | None:
    """The hold on `model`'s creates under `scope`, or None. A hold placed under another scope
    (another project or key: access is a project's) is lifted here."""
    hold = model_holds.read(engine, model)
    if hold is None:
        return None
    if hold.scope == scope:
        return hold
    lift_model(engine, hold, worker, "the scope changed (another project or key)")
    return None


def check_due(engine: Engine, hold: ModelHold) -> bool:
    """Whether this process asks the provider about the held model now (one process at a time)."""
    return model_holds.claim_check(engine, hold, MODEL_RECHECK_SECONDS)


def lift_model(engine: Engine, hold: ModelHold, worker: str, why: str) -> None:
    if model_holds.lift(engine, hold, worker, why):
        log.warning("create_gate", change="model_hold_lifted", worker=worker, model=hold.model, cause=hold.cause,
                    held_since=str(hold.held_at), why=why)


def all_holds(conn: Connection) -> list[ProductHold]:
    """Every product hold as recorded (`status`)."""
    return product_holds.all_holds(conn)


def all_model_holds(conn: Connection) -> list[ModelHold]:
    """Every model hold as recorded (`status`)."""
    return model_holds.all_holds(conn)
