"""The lines a run writes to the spend ledger. `ChainRecords`: after a committed custody or save,
its link of the chain (every run that moves jobs). `CreateRecords`: a create's own lines and the
check right before it (only a run that creates has one: `creates.Creates`)."""

from __future__ import annotations

import threading

import structlog

from iipub.machine.run.ledger_view import SpendLedgerView
from iipub.model.jobs import Job
from iipub.model.states import Reason
from iipub.money import ledger, ledger_book
from iipub.provider.outcomes import Accepted, Ambiguous, CreateOutcome, Refused, Rejected
from iipub.store.job_store import Store

log = structlog.get_logger("iipub.reconcile")


class ChainRecords:
    def __init__(self, view: SpendLedgerView, worker: str) -> None:
        self._view = view
        self._worker = worker

    def record(self, job: Job, reason: Reason) -> None:
        """After a committed custody or save, its link of the ledger's chain (best effort: a line
        missing here leaves the ledger behind the database, the safe direction)."""
        book = self._view.book
        if book is None or reason not in (Reason.RETRIEVED, Reason.SAVED):
            return
        slot = ledger.slot_of(job.product, job.edition_date.isoformat())
        try:
            if reason == Reason.RETRIEVED:
                book.custody(job.id, slot, job.generation_attempts, job.response_id, job.payload_sha256)
            else:
                book.saved(job.id, slot, job.generation_attempts, ledger.composed_editions(job.composed))
        except ledger.LedgerError as exc:
            log.error("ledger_unwritable", job_id=job.id, worker=self._worker, error=str(exc))


class CreateRecords:
    def __init__(self, view: SpendLedgerView, store: Store) -> None:
        self._view = view
        self._store = store
        self._opening = threading.Lock()
        self.ledger_id: str | None = None  # the ledger this run's intents go to (its creates' spend rows say so)

    def problem(self) -> ledger_book.Problem | None:
        """Right before a create: the spend ledger against what the database remembers of it
        (opened here the first time), read as fresh as `SpendLedgerView.spend`. A problem holds
        the create."""
        book = self._view.book
        if book is None:
            return None
        # Read after the database's position (`ledger_book.problem`).
        found = ledger_book.problem(self._store.engine, book, self._view.refresh)
        if found is None:
            try:
                with self._opening:  # one `open` line per process, not one per thread
                    self.ledger_id = ledger_book.ensure_open(self._store.engine, book).ledger_id
            except ledger.LedgerError as exc:  # the intent line will fail the same way: not sent, refunded
                log.error("ledger_unwritable", worker=self._store.worker, error=str(exc))
        return found

    def intent(self, job_id: str, slot: str, attempt: int, fingerprint: str) -> None:
        """Fsync'd before the POST: a restore can never pay for this attempt twice."""
        book = self._view.book
        if book is None:
            return
        book.intent(job_id, slot, attempt, fingerprint, self._store.worker)

    def outcome(self, job_id: str, slot: str, attempt: int, outcome: CreateOutcome) -> None:
        book = self._view.book
        if book is None:
            return
        kind = {Accepted: "accepted", Refused: "refused", Ambiguous: "ambiguous", Rejected: "rejected"}[type(outcome)]
        rid = outcome.response_id if isinstance(outcome, Accepted) else None
        try:
            book.outcome(job_id, slot, attempt, kind, rid)
        except ledger.LedgerError as exc:  # the intent is on disk: a restore still cannot pay twice
            log.error("ledger_unwritable", job_id=job_id, worker=self._store.worker, error=str(exc))
