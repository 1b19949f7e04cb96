"""A cool-down shared through the gate: kept here (`cool_down.CoolDown`) and written where every
process reads it, so a 429 met by one process holds that kind of call in all of them. A create's
goes on the `create_gate` row (`CreateGate.share_cool_down`), a read's on the `read_cooldown` row
(`gate.share_read_cool_down`); each run starts from what the other processes shared."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import structlog

from iipub.core.errors import Contention, DatabaseUnavailable
from iipub.machine.run.cool_down import CoolDown
from iipub.machine.run.deadline import Deadline
from iipub.money import gate
from iipub.money.breaker import READ_COOLDOWN_CAP_SECONDS, GateState
from iipub.money.gate import CreateGate
from iipub.store import clock, gate_rows
from iipub.store.job_store import Store

log = structlog.get_logger("iipub.reconcile")


class SharedCoolDown:
    def __init__(self, local: CoolDown, share: Callable[[float], None], worker: str) -> None:
        self._local = local
        self._share = share
        self._worker = worker

    def cooling(self) -> bool:
        return self._local.cooling()

    def cool_down(self, seconds: float) -> None:
        """A 429 with a hint: this process waits at once, then every other process is told."""
        self._local.hold(seconds)
        try:
            self._share(seconds)
        except (Contention, DatabaseUnavailable) as exc:  # the local cool-down still holds
            log.warning("cool_down_not_shared", worker=self._worker, error=str(exc))


def of_reads(store: Store) -> SharedCoolDown:
    """Polls, custody reads and deletes: a read's 429 holds every process's reads for its hint,
    capped at 60 s; creates go on. Starts from the cool-down another process shared."""
    local = CoolDown(cap=READ_COOLDOWN_CAP_SECONDS)
    with store.engine.connect() as conn:
        until, now = gate_rows.read_cool_down(conn), clock.read_now(conn)
    if until is not None:
        local.hold((until - now).total_seconds())
    return SharedCoolDown(local, lambda seconds: gate.share_read_cool_down(store.engine, seconds, store.worker),
                          store.worker)


def of_creates(create_gate: CreateGate, state: GateState, now: dt.datetime, deadline: Deadline) -> SharedCoolDown:
    """Creates: a create's 429 stops this run's creates to its end and every other process's
    until the hint has passed; polls and custody go on (a finished response is kept for only
    about ten minutes). Starts from the gate row as read at the run's start (`state` at `now`)."""
    local = CoolDown(lasts_until=deadline.at)
    if state.cooldown_until is not None and state.cooldown_until > now:
        local.hold((state.cooldown_until - now).total_seconds())
    return SharedCoolDown(local, create_gate.share_cool_down, create_gate.worker)
