"""The create gate: the one `create_gate` row every reconcile process reads before a paid
create, and `gate_events`, the journal of its changes (both written by `store.gate_rows`). The
rules are in `breaker`; this module reads, asks them, and writes fenced on the row's version (a
lost race re-reads and decides again), so two processes never both take the one probe.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import structlog

from iipub.core.errors import Contention, OperatorRefused
from iipub.core.timefmt import naive_utc
from iipub.money import breaker, payments
from iipub.money import budgets as money
from iipub.money.breaker import READ_COOLDOWN_CAP_SECONDS, GateState, GateVerdict
from iipub.money.payment_values import Override
from iipub.provider.outcomes import CreateOutcome
from iipub.settings.config import Budgets, Product, ProviderSettings
from iipub.store import clock, db, gate_rows, spend_rows
from iipub.store.handles import Connection, Engine

log = structlog.get_logger("iipub.gate")
_TRIES = 5
_R = TypeVar("_R")
_FIELDS = [f.name for f in dataclasses.fields(GateState)]
_TIMES = {"opened_at", "probe_after", "probe_expiry", "last_ok_at", "cooldown_until", "paused_at", "window_start"}


def read(conn: Connection) -> GateState:
    row = gate_rows.read(conn, _FIELDS)
    values: dict[str, Any] = {k: (naive_utc(v) if k in _TIMES and v is not None else v) for k, v in row.items()}
    values["paused"] = bool(values["paused"])
    values["paused_everything"] = bool(values["paused_everything"])
    return GateState(**values)


def share_read_cool_down(engine: Engine, seconds: float, worker: str) -> None:
    """Every process's reads wait `seconds` (capped at READ_COOLDOWN_CAP_SECONDS); creates do not."""
    gate_rows.share_read_cool_down(engine, min(max(0.0, seconds), READ_COOLDOWN_CAP_SECONDS), worker)


class CreateGate:
    def __init__(self, engine: Engine, worker: str, settings: ProviderSettings, lease_seconds: float,
                 budgets: Budgets | None = None, products: Mapping[str, Product] | None = None) -> None:
        self.engine = engine
        self.worker = worker
        self.settings = settings
        self.lease_seconds = lease_seconds
        self.budgets = budgets or Budgets()
        self.products = dict(products or {})
        self.has_ceilings = money.has_ceilings(self.budgets, self.products)

    def state(self) -> tuple[GateState, dt.datetime]:
        with self.engine.connect() as conn:
            return read(conn), clock.read_now(conn)

    def admit(self, job_id: str, product: str | None = None) -> GateVerdict:
        """Ask before charging `job_id`'s generation attempt (of `product`: its daily spend
        ceilings apply); an allowed probe is recorded as that job's (threads of one process share
        a worker id, so the job names the claimant)."""
        held = self.ceiling_holding(product) if product is not None and self.has_ceilings else None
        if held is not None:
            return GateVerdict(False, f"spend ceiling reached: {held.describe()}", ceiling=held.scope)
        claimant = _claimant(self.worker, job_id)
        return self._decide(lambda g, now: _verdict_changes(dataclasses.replace(
            breaker.admit(g, now, claimant, self.settings, self.lease_seconds), at=now)))

    def record(self, job_id: str, outcome: CreateOutcome, *, probe: bool) -> None:
        """What a create's outcome tells every other process."""
        claimant = _claimant(self.worker, job_id)

        def decide(g: GateState, now: dt.datetime) -> tuple[None, breaker.Change | None]:
            return None, breaker.on_outcome(g, now, claimant, outcome, self.settings, probe=probe)

        self._decide(decide)

    def ceiling_holding(self, product: str) -> money.Ceiling | None:
        """The reached daily ceiling that holds a create of `product` back, or None. The first
        time a ceiling is found reached on a day it is journaled (`gate_events`) and logged, once
        across every process."""
        with db.transaction(self.engine) as conn:
            now = clock.read_now(conn)
            found, _ = payments.ceilings_now(conn, self.budgets, self.products, now)
            held = money.holding(found, product)
            if held is not None and spend_rows.note_reached(conn, held.scope, now):
                detail = {"ceiling": held.name, "limit": held.limit, "override_tokens": held.extra,
                          "counted_today": held.spent, "day": now.date().isoformat()}
                gate_rows.record_event(conn, "ceiling_reached", self.worker, json.dumps(detail, sort_keys=True))
                log.warning("spend_ceiling_reached", worker=self.worker, **detail)
            return held

    def override(self, scope: str, tokens: int, until: dt.datetime | None, by: str, reason: str) -> Override:
        """An operator raises a daily ceiling by `tokens` until `until` (default: the next UTC
        midnight), journaled with who and why."""
        with db.transaction(self.engine) as conn:
            now = clock.read_now(conn)
            found, _ = payments.ceilings_now(conn, self.budgets, self.products, now)
            refusal = money.override_refusal(found, scope, tokens, sorted(self.products))
            if refusal is not None:  # it would print "raised" and change nothing
                raise OperatorRefused(f"budget override: {refusal}; nothing written")
            end = until or payments.day_start(now) + dt.timedelta(days=1)
            if end <= now:
                raise OperatorRefused(f"--until {end.isoformat()}Z is already past (database clock "
                                      f"{now.isoformat(timespec='seconds')}Z)")
            granted = payments.grant(conn, scope, tokens, end, reason, by)
            detail = {"by": by, "why": reason, **granted.to_dict()}
            gate_rows.record_event(conn, "budget_override", self.worker,
                                   json.dumps(detail, sort_keys=True, default=str))
        log.warning("create_gate", change="budget_override", worker=self.worker, **detail)
        return granted

    def share_cool_down(self, seconds: float) -> None:
        self._decide(lambda g, now: (None, _change(breaker.cool_down(g, now, seconds))))

    def pause(self, by: str, reason: str, *, everything: bool = False) -> GateState:
        """Stop new paid creates; with `everything`, the immediate abort: every automated command
        only records its heartbeat. A creates-only pause may be widened to everything."""
        def decide(g: GateState, now: dt.datetime) -> tuple[None, breaker.Change]:
            if g.paused and (g.paused_everything or not everything):
                what = "everything is" if g.paused_everything else "creates are"
                raise OperatorRefused(f"{what} already paused (by {g.paused_by} since {g.paused_at}): "
                                      f"{g.paused_reason}")
            return None, breaker.Change({"paused": True, "paused_everything": everything, "paused_reason": reason,
                                         "paused_by": by, "paused_at": now},
                                        "pause_everything" if everything else "pause", {"by": by, "why": reason})

        self._decide(decide)
        return self.state()[0]

    def unpause(self, by: str, reason: str | None) -> GateState:
        def decide(g: GateState, now: dt.datetime) -> tuple[None, breaker.Change]:
            if not g.paused:
                raise OperatorRefused("creates are not paused; nothing to unpause")
            return None, breaker.Change({"paused": False, "paused_everything": False, "paused_reason": None,
                                         "paused_by": None, "paused_at": None}, "unpause",
                                        {"by": by, "why": reason, "paused_by": g.paused_by,
                                         "paused_reason": g.paused_reason, "everything": g.paused_everything})

        self._decide(decide)
        return self.state()[0]

    def _decide(self, decide: Callable[[GateState, dt.datetime], tuple[_R, breaker.Change | None]]) -> _R:
        for _ in range(_TRIES):
            with db.transaction(self.engine) as conn:
                g, now = read(conn), clock.read_now(conn)
                result, change = decide(g, now)
                if change is None or (not change.changes and change.event is None):
                    return result
                if not gate_rows.write(conn, g.version, change.changes):
                    continue  # another process changed the gate first: decide again on what it wrote
                if change.event is not None:
                    gate_rows.record_event(conn, change.event, self.worker,
                                           json.dumps(change.detail or {}, sort_keys=True, default=str))
                    log.warning("create_gate", change=change.event, worker=self.worker, **(change.detail or {}))
                return result
        raise Contention("the create gate kept changing under us")


def paused_everything(engine: Engine) -> GateState | None:
    """The gate row when `pause --everything` is in force, else None: the one read an automated
    command makes before doing anything else."""
    with engine.connect() as conn:
        g = read(conn)
    return g if g.paused_everything else None


def _claimant(worker: str, job_id: str) -> str:
    return f"{worker[:90]}/{job_id}"[:128]


def _verdict_changes(v: GateVerdict) -> tuple[GateVerdict, breaker.Change | None]:
    return v, (breaker.Change(v.changes) if v.allowed and v.changes else None)


def _change(changes: Mapping[str, Any] | None) -> breaker.Change | None:
    return breaker.Change(dict(changes)) if changes else None
