"""The spend ledger as one run reads it: this installation's lines, opened at the first use
(opening reads the installation id) and read afresh for each question, so a job leased before
the comparison is never compared with a copy of the ledger older than its row (another worker's
refund or create). Each question reads only what it needs: the count of intent lines from where
the last reader stopped (`ledger_position`), a slot's own lines, the lines naming a response; a
ledger of years is not parsed whole by every run that creates."""

from __future__ import annotations

import threading

import structlog

from iipub.money import ledger, ledger_position
from iipub.money.ledger_position import Counted
from iipub.settings.config import Settings
from iipub.store.handles import Engine

log = structlog.get_logger("iipub.reconcile")


class SpendLedgerView:
    def __init__(self, settings: Settings, engine: Engine) -> None:
        self._settings = settings
        self._engine = engine
        self._book: ledger.SpendLedger | bool | None = False  # False: not opened yet
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

    def refresh(self) -> Counted | None:
        """This installation's intent lines counted as they are now (None: no ledger), from where
        the last reader stopped (`ledger_position`); lines that cannot be read, or old lines that
        are another installation's, are logged once per run."""
        book = self.book
        if book is None:
            return None
        with self._lock:
            counted = ledger_position.count(book)
            if counted.bad > self._noted[0]:
                log.warning("ledger_unreadable_lines", path=str(book.path), lines=counted.bad)
            if counted.foreign_legacy > self._noted[1]:
                log.info("ledger_foreign_lines", path=str(book.path), lines=counted.foreign_legacy,
                         why="lines without an installation id whose job and response this database does not "
                             "know: another installation's, not this one's evidence")
            self._noted = (counted.bad, counted.foreign_legacy)
            return counted

    def spend(self, slot: str) -> ledger.SlotSpend | None:
        """What this installation's lines record for `slot`, read afresh: the lines naming the
        slot, as the file is now (a job read under its lease is never compared with a copy of the
        ledger older than its row: another worker's refund or create)."""
        book = self.book
        if book is None:
            return None
        return book.spend_of(slot)

    def knows(self, response_id: str) -> bool:
        """Whether this installation's lines recorded `response_id` as the answer to one of its
        creates (a restored database may have forgotten the job that made it)."""
        book = self.book
        if book is None:
            return False
        try:
            return book.names_response(response_id)
        except ledger.LedgerError:
            return False
