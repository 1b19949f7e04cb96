"""The spend ledger: an append-only, fsync'd file outside the database that remembers every
paid create, so a database restored from a backup cannot make iipub pay for a slot again.

One JSON line before each create (`intent`: job, slot, attempt, fingerprint) and one after it
(`outcome`: accepted with its response id, refused, ambiguous or rejected). `iipub adopt` writes
one `adopted` line per response it takes over from a legacy system: the creates that system
already paid for the slot (`attempt`), charged to the slot like iipub's own, but not paid by
iipub. A line is written with one `write` on a file opened for appending (whole lines, never interleaved on a local
file system) and fsync'd before the create goes out. `summarize` folds the lines into what was
spent per slot; `behind` says whether a job's row has forgotten some of it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import IipubError
from .spend import SlotSpend, behind, slot_of, summarize
from .timefmt import iso_z

__all__ = ["LedgerError", "SlotSpend", "SpendLedger", "behind", "slot_of", "summarize"]


class LedgerError(IipubError):
    """The spend ledger cannot be written; no paid create is sent without it."""

    exit_code = 74  # EX_IOERR


class SpendLedger:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def intent(self, job_id: str, slot: str, attempt: int, fingerprint: str, worker: str) -> None:
        """Before a paid create: raises LedgerError if the line cannot be made durable."""
        self._append({"t": "intent", "job_id": job_id, "slot": slot, "attempt": attempt,
                      "fingerprint": fingerprint, "worker": worker})

    def outcome(self, job_id: str, slot: str, attempt: int, outcome: str, response_id: str | None) -> None:
        self._append({"t": "outcome", "job_id": job_id, "slot": slot, "attempt": attempt, "outcome": outcome,
                      "response_id": response_id})

    def adopted(self, job_id: str, slot: str, attempts: int, response_id: str, worker: str) -> None:
        """A response a legacy system paid for (`attempts` creates), taken over by the slot's job."""
        self._append({"t": "adopted", "job_id": job_id, "slot": slot, "attempt": attempts,
                      "response_id": response_id, "worker": worker})

    def read(self) -> tuple[dict[str, SlotSpend], int]:
        try:
            with self.path.open(encoding="utf-8", errors="replace") as f:
                return summarize(f)
        except FileNotFoundError:
            return {}, 0
        except OSError as exc:
            raise LedgerError(f"cannot read the spend ledger {self.path}: {exc.strerror or exc}") from None

    def _append(self, record: Mapping[str, Any]) -> None:
        import datetime as dt

        line = json.dumps({"at": iso_z(dt.datetime.now(dt.UTC)), **record}, sort_keys=True) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
            try:
                os.write(fd, line.encode("utf-8"))
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise LedgerError(f"cannot write the spend ledger {self.path}: {exc.strerror or exc}") from None
