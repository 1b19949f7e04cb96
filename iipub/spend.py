"""What the spend ledger says was spent, per slot: its lines folded into values (pure).

`ledger` reads and appends the file; this module only interprets what it holds, so the
decisions (`handlers`) can use it without the file's I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from .jobs import Job


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
    adopted: int = 0  # of `charged`, the creates a legacy system paid for (`iipub adopt`)


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
        elif kind == "adopted":
            spend.charged += attempt
            spend.adopted += attempt
            spend.last_attempt = max(spend.last_attempt, attempt)
            spend.response_id = str(rec.get("response_id") or "") or spend.response_id
            spend.response_attempt = attempt
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
