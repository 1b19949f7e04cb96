"""The spend ledger: an append-only, fsync'd file outside the database that remembers every
paid create, so a database restored from a backup cannot make iipub pay for a slot again.

One JSON line before each create (`intent`: job, slot, attempt, fingerprint) and one after it
(`outcome`: accepted with its response id, refused, ambiguous or rejected). A line is written
with one `write` on a file opened for appending (whole lines, never interleaved on a local
file system) and fsync'd before the create goes out. `summarize` folds the lines into what was
spent per slot; `behind` says whether a job's row has forgotten some of it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import IipubError
from .jobs import Job
from .timefmt import iso_z


class LedgerError(IipubError):
    """The spend ledger cannot be written; no paid create is sent without it."""

    exit_code = 74  # EX_IOERR


@dataclass
class SlotSpend:
    """What the ledger says was spent on one slot (`product/YYYY-MM-DD`)."""

    slot: str
    charged: int = 0  # intents minus provable refusals: paid (or possibly paid) creates
    job_ids: list[str] = field(default_factory=list)
    last_attempt: int = 0
    response_id: str | None = None  # the latest accepted response
    response_attempt: int | None = None
    fingerprint: str | None = None
    open_intent: bool = False  # an intent without an outcome: the create's fate is unknown


def slot_of(product: str, edition_date: str) -> str:
    return f"{product}/{edition_date}"


def summarize(lines: Iterable[str]) -> tuple[dict[str, SlotSpend], int]:
    """Per-slot spend from the ledger's lines, and how many lines could not be read."""
    slots: dict[str, SlotSpend] = {}
    bad = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            kind, slot = rec["t"], str(rec["slot"])
            attempt = int(rec["attempt"])
        except (ValueError, KeyError, TypeError):
            bad += 1  # a torn last line after a crash, or damage: counted, never fatal
            continue
        spend = slots.setdefault(slot, SlotSpend(slot))
        job_id = str(rec.get("job_id") or "")
        if job_id and job_id not in spend.job_ids:
            spend.job_ids.append(job_id)
        if kind == "intent":
            spend.charged += 1
            spend.last_attempt = max(spend.last_attempt, attempt)
            spend.fingerprint = rec.get("fingerprint") or spend.fingerprint
            spend.open_intent = True
        elif kind == "outcome":
            spend.open_intent = False
            outcome = rec.get("outcome")
            if outcome == "refused":
                spend.charged -= 1
            elif outcome == "accepted" and rec.get("response_id"):
                spend.response_id = str(rec["response_id"])
                spend.response_attempt = attempt
        else:
            bad += 1
    return slots, bad


def behind(job: Job, spend: SlotSpend | None) -> bool:
    """The job's row knows of fewer paid creates for its slot than the ledger: the database
    was restored from before them (or the slot's row was created again)."""
    return spend is not None and spend.charged > job.generation_attempts


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
