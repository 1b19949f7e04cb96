"""`iipub adopt` and `iipub export --in-flight`: taking over the responses a legacy system (or
another iipub) started, and handing back the ones iipub has in flight, in the one file format
of `handover`.

An adopted row becomes its slot's job in ACCEPTED with the response id, charged with the creates
the legacy system already spent (`generation_attempts`), due now: the next tick polls it like any
of iipub's own. Nothing is paid. The write is an operator transition (`NO_JOB -> ACCEPTED`,
`operator_adopt`) on the slot's row, leased like any worker's; the row is marked
`origin = 'adopted'`, which is what makes iipub the response's owner (it carries no iipub
metadata). The spend ledger gets an `adopted` line for the slot (charged, not paid by iipub).
A slot that already has a job (past NO_JOB, or holding a response) is refused, and so is a
response another job holds; a row already adopted with the same response is reported as such,
so a second run of the same file changes nothing.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import structlog

from iipub.core.errors import DatabaseUnavailable, LeaseLost
from iipub.model.jobs import Job
from iipub.model.states import Reason, State
from iipub.money import ledger, restore
from iipub.operate import handover
from iipub.operate.handover import Refusal, Row
from iipub.settings.config import Settings
from iipub.store import clock, job_queries
from iipub.store.handles import Engine
from iipub.store.job_store import Store

log = structlog.get_logger("iipub.adoption")
ADOPTED = "adopted"  # jobs.origin
_STARTED_REASONS = (Reason.DISPATCH.value, Reason.OPERATOR_ADOPT.value)


@dataclass
class AdoptionReport:
    dry_run: bool
    adopted: list[tuple[Row, str]] = field(default_factory=list)  # (row, job id); would be, on a dry run
    already: list[tuple[Row, str]] = field(default_factory=list)  # adopted by an earlier run
    refused: list[Refusal] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        verb = "would adopt" if self.dry_run else "adopted"
        out = [f"line {r.line} ({r.slot}): {verb} {r.response_id} as job {job_id}, {r.attempts} paid create(s) "
               "charged" for r, job_id in self.adopted]
        out += [f"line {r.line} ({r.slot}): already adopted as job {job_id}; nothing changed"
                for r, job_id in self.already]
        return out

    def summary(self) -> str:
        verb = "would adopt" if self.dry_run else "adopted"
        return (f"{'dry run: ' if self.dry_run else ''}{verb} {len(self.adopted)}, already adopted "
                f"{len(self.already)}, refused {len(self.refused)}")


def adopt(settings: Settings, engine: Engine, raw: bytes, *, reason: str, by: str,
          dry_run: bool = False) -> AdoptionReport:
    """Adopt every good row of a hand-over file (see the module's doc); each row on its own."""
    with engine.connect() as conn:
        today = clock.read_now(conn).date()
    rows, refused = handover.parse(raw, settings.products.keys(), today)
    report = AdoptionReport(dry_run, refused=refused)
    store = Store(engine, f"operator:{by.strip()}"[:128], settings.reconcile.lease_seconds)
    spend_ledger = restore.ledger_of(settings, engine)
    for row in rows:
        job, why = _target(store, row)
        if why is not None:
            report.refused.append(Refusal(row.line, row.slot, why))
        elif job is not None and job.origin == ADOPTED and job.response_id == row.response_id:
            report.already.append((row, job.id))
        elif dry_run:
            report.adopted.append((row, job.id if job is not None else "(new)"))
        else:
            try:
                done = _adopt_row(settings, store, row, job, reason, by, today)
            except LeaseLost as exc:
                report.refused.append(Refusal(row.line, row.slot, f"the slot changed while adopting: {exc}"))
                continue
            except DatabaseUnavailable:
                raise  # every row would fail alike: one error line for the command
            except Exception as exc:  # this row alone: refused in one line, the others go on
                log.error("adopt_row_failed", line=row.line, slot=row.slot, error=f"{type(exc).__name__}: {exc}")
                report.refused.append(Refusal(row.line, row.slot, f"not adopted: {type(exc).__name__}: "
                                                                  f"{str(exc)[:200]}; nothing written for it"))
                continue
            report.adopted.append((row, done.id))
            if spend_ledger is not None:
                try:
                    spend_ledger.adopted(done.id, row.slot, row.attempts, row.response_id, store.worker)
                except ledger.LedgerError as exc:
                    report.warnings.append(f"line {row.line} ({row.slot}): adopted, but {exc}")
    report.refused.sort(key=lambda r: r.line)
    return report


def _target(store: Store, row: Row) -> tuple[Job | None, str | None]:
    """The slot's job to adopt onto (None: none yet), or why the row is refused."""
    slot = _slot_job(store, row)
    holder = store.by_response(row.response_id)
    if slot is not None and slot.origin == ADOPTED and slot.response_id == row.response_id:
        return slot, None
    if holder is not None:
        return None, (f"response {row.response_id} is already held by job {holder.id} ({holder.product} "
                      f"{holder.edition_date}, {holder.state})")
    # A slot iipub never paid for: new, or parked by the payment authority before its first create
    # (the legacy system made it: `payment_refused`).
    untouched = slot is not None and (slot.state == State.NO_JOB or (
        slot.state == State.QUARANTINED and slot.quarantine_reason == Reason.PAYMENT_REFUSED))
    if slot is not None and (not untouched or slot.response_id or slot.generation_attempts):
        return None, f"the slot already has a job: {slot.id} in {slot.state}"
    if slot is not None and slot.lease_owner is not None:
        return None, f"the slot's job {slot.id} is leased by {slot.lease_owner}; retry in a minute"
    return slot, None


def _slot_job(store: Store, row: Row) -> Job | None:
    found = store.list_jobs(product=row.product, day=row.edition_date, limit=1)
    return found[0] if found else None


def _adopt_row(settings: Settings, store: Store, row: Row, job: Job | None, reason: str, by: str,
               today: dt.date) -> Job:
    product = settings.products[row.product]
    if job is None:
        store.schedule(product, row.edition_date, backfill=row.edition_date < today)
        job = _slot_job(store, row)
        assert job is not None
    leased = store.acquire_lease(job.id, job.version, operator=True)
    if leased is None:
        raise LeaseLost(f"job {job.id} changed since version {job.version}", job_id=job.id)
    with store.engine.connect() as conn:
        now = clock.read_now(conn)
    detail: dict[str, Any] = {"by": by, "why": reason, "response_id": row.response_id, "attempts": row.attempts,
                              "line": row.line}
    if row.started_at is not None:
        detail["started_at"] = row.started_at.isoformat()
    if row.state:
        detail["handed_over_in"] = row.state
    try:
        return store.transition(
            leased, State.ACCEPTED, reason=Reason.OPERATOR_ADOPT, operator=True, delay=0.0, detail=detail,
            changes={"response_id": row.response_id, "generation_attempts": row.attempts, "poll_count": 0,
                     "config_fingerprint": product.fingerprint(), "origin": ADOPTED, "adopted_at": now,
                     "last_error": None, "quarantine_reason": None,
                     # where the legacy system created it is not known: its first successful read
                     # records it, and until then a 404 parks it (`scope_unknown`), never a loss
                     "create_scope": None})
    except Exception:
        store.release_if_held(leased.id)
        raise


# -- the hand-back -------------------------------------------------------------------------------


def in_flight(engine: Engine) -> list[Row]:
    """Every job between CREATE_IN_FLIGHT and custody (suspended or quarantined ones included
    while their response may still finish), as hand-over rows, oldest edition first. A create in
    flight has no response id yet: its row says so (empty), and `adopt` refuses it."""
    found, started = job_queries.in_flight(engine, _STARTED_REASONS)
    return [Row(0, j.product, j.edition_date, j.response_id or "", max(1, j.generation_attempts),
                started.get(j.id), j.state.value) for j in found]
