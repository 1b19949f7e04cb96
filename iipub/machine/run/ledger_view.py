"""The spend ledger as one run reads it: this installation's lines, opened at the first use
(opening reads the installation id) and re-read before each comparison (only the lines appended
since the last read), so a job leased before the comparison is never compared with a copy of the
ledger older than its row (another worker's refund or create)."""

from __future__ import annotations

import threading

import structlog

from iipub.money import ledger
from iipub.settings.config import Settings
from iipub.store.handles import Engine

log = structlog.get_logger("iipub.reconcile")


class SpendLedgerView:
    def __init__(self, settings: Settings, engine: Engine) -> None:
        self._settings = settings
        self._engine = engine
        self._book: ledger.SpendLedger | bool | None = False  # False: not opened yet
        self._view: ledger.LedgerView | None = None
        self._noted = (0, 0)  # unreadable and foreign old lines already logged (each once per run)
        self._lock = threading.Lock()

    @property
    def book(self) -> ledger.SpendLedger | None:
        """The spend ledger as this installation writes and reads it, or None when it is off."""
        if self._book is False:
            from iipub.money import restore  # loaded at the first use, not with this module

            self._book = restore.ledger_of(self._settings, self._engine)
        assert not isinstance(self._book, bool)
        return self._book

    def refresh(self) -> ledger.Fold | None:
        """This installation's lines as they are now (None: no ledger)."""
        book = self.book
        if book is None:
            return None
        with self._lock:
            return self._viewed(book).refresh()

    def spend(self, slot: str) -> ledger.SlotSpend | None:
        """What this installation's lines record for `slot`, read afresh."""
        book = self.book
        if book is None:
            return None
        with self._lock:
            fold = self._viewed(book).refresh()
            if fold.bad > self._noted[0]:
                log.warning("ledger_unreadable_lines", path=str(book.path), lines=fold.bad)
            if fold.foreign_legacy > self._noted[1]:
                log.info("ledger_foreign_lines", path=str(book.path), lines=fold.foreign_legacy,
                         why="lines without an installation id whose job and response this database does not "
                             "know: another installation's, not this one's evidence")
            self._noted = (fold.bad, fold.foreign_legacy)
            return fold.slots.get(slot)

    def knows(self, response_id: str) -> bool:
        """Whether this installation's lines recorded `response_id` as the answer to one of its
        creates (a restored database may have forgotten the job that made it)."""
        book = self.book
        if book is None:
            return False
        try:
            with self._lock:
                return self._viewed(book).knows(response_id)
        except ledger.LedgerError:
            return False

    def _viewed(self, book: ledger.SpendLedger) -> ledger.LedgerView:
        if self._view is None:
            self._view = ledger.LedgerView(book)
        return self._view
