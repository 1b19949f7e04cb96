"""What the spend ledger says was spent and done, per slot: its lines folded into values (pure).

`ledger` reads and appends the file; this module only interprets what it holds, so the
decisions (`decisions`, `remedies`) can use it without the file's I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from iipub.model.jobs import Job

CHAIN = ("custody", "saved", "published")  # the links after the create, in order


@dataclass
class SlotSpend:
    """What the ledger says was spent on, and done with, one slot (`product/YYYY-MM-DD`)."""

    slot: str
    charged: int = 0  # intents minus provable refusals: paid (or possibly paid) creates
    job_ids: list[str] = field(default_factory=list)
    last_attempt: int = 0
    response_id: str | None = None  # the latest accepted response
    response_attempt: int | None = None
    fingerprint: str | None = None
    open_intent: bool = False  # an intent without an outcome: the create's fate is unknown
    adopted: int = 0  # of `charged`, the creates a legacy system paid for (`iipub adopt`)
    response_ids: list[str] = field(default_factory=list)  # every response the slot's creates or custody named
    custody: int = 0  # custody lines
    custody_sha256: str | None = None  # the latest payload's
    custody_response_id: str | None = None
    saved: int = 0
    saved_editions: dict[str, str] = field(default_factory=dict)  # lang -> sha256, the latest save
    published: int = 0
    published_editions: dict[str, str] = field(default_factory=dict)  # lang -> sha256, the latest publication
    intents: dict[str, int] = field(default_factory=dict)  # attempt -> intents minus provable refusals
    custody_ids: list[str] = field(default_factory=list)  # every response whose output was stored
    killed_ids: list[str] = field(default_factory=list)  # responses of jobs an operator killed
    uncertain: set[str] = field(default_factory=set)  # attempts whose create may never have arrived
    # lang -> the latest correction or withdrawal of its edition: (revision, kind, sha256 it made public:
    # the correction's, or for a withdrawal the edition's it took back).
    revisions: dict[str, tuple[int, str, str]] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """How many of each chain link the ledger holds (what a database must know of)."""
        return {"custody": self.custody, "saved": self.saved, "published": self.published}

    def evidence(self) -> dict[str, Any]:
        """The ledger's facts about the slot, for a journal entry and an operator."""
        return {"charged": self.charged, "responses": self.response_ids[-5:], "job_ids": self.job_ids[-3:],
                "custody_sha256": self.custody_sha256, "custody_response_id": self.custody_response_id,
                "saved": self.saved_editions, "published": self.published_editions, **{
                    f"{k}_lines": v for k, v in self.counts().items()}}

    def _note_response(self, rid: str | None) -> None:
        if rid and rid not in self.response_ids:
            self.response_ids.append(rid)


def slot_of(product: str, edition_date: str) -> str:
    return f"{product}/{edition_date}"


def _editions(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise TypeError("editions must be an object")
    return {str(k): str(v) for k, v in value.items()}


def parse(line: str) -> dict[str, Any] | None:
    """One ledger line as a record, or None when it cannot be read (a torn line after a crash or
    a full disk, or damage: counted by the caller, never fatal)."""
    try:
        rec = json.loads(line)
        if not isinstance(rec, dict) or rec["t"] not in KINDS:
            return None
        if rec["t"] == OPEN:
            return rec if isinstance(rec.get("ledger_id"), str) else None
        rec["slot"], rec["attempt"] = str(rec["slot"]), int(rec["attempt"])
        if rec["t"] in ("saved", "published"):
            rec["editions"] = _editions(rec["editions"])
        if rec["t"] == REVISED:
            rec["lang"], rec["revision"], rec["kind"] = str(rec["lang"]), int(rec["revision"]), str(rec["kind"])
            rec["sha256"] = str(rec["sha256"])
    except (ValueError, KeyError, TypeError):
        return None
    return rec


OPEN = "open"  # an installation began (or, acknowledged, began again) writing to this ledger
REVISED = "revised"  # an operator corrected or withdrew a published edition (`iipub correct`, `iipub withdraw`)
KINDS = ("intent", "outcome", "adopted", "killed", OPEN, REVISED, *CHAIN)
# An old line (written before lines named their installation) is this installation's only when
# its job, or a response it names, is known to this database: (job id, response ids) -> bool.
LegacyOwner = Callable[[str, frozenset[str]], bool]


class Fold:
    """The ledger's lines folded per slot, fed in file order (`feed` may be called again with the
    lines appended since: a view kept fresh by reading only what was added).

    With an `installation`, only that installation's lines count: a file shared by two databases
    holds each one's chain apart. Lines naming another installation are counted (`foreign`);
    old lines that name none are this installation's only when `legacy_is_ours` says so (their
    job or response is known to this database), else counted as `foreign_legacy` and ignored.
    Without an installation every line counts (a whole-file view)."""

    def __init__(self, installation: str | None = None, legacy_is_ours: LegacyOwner | None = None) -> None:
        self.installation = installation
        self.legacy_is_ours = legacy_is_ours
        self.slots: dict[str, SlotSpend] = {}
        self.bad = 0
        self.lines = 0  # this installation's lines folded (its position in the ledger)
        self.foreign = 0
        self.foreign_legacy = 0
        self.response_ids: set[str] = set()  # every response this installation's lines name
        self.intent_lines = 0  # this installation's intent lines
        self.opens: dict[str, int] = {}  # ledger id -> intent lines before its `open` line
        self.unnamed = 0  # lines naming no installation (read under an installation)
        self._legacy_done = False

    def feed(self, lines: Iterable[str]) -> None:
        records: list[dict[str, Any]] = []
        for line in lines:
            if not line.strip():
                continue
            rec = parse(line)
            if rec is None:
                self.bad += 1
            else:
                records.append(rec)
        claimed = self._claim_legacy(records)
        for rec in records:
            owner = rec.get("installation")
            if self.installation is not None and not owner:
                self.unnamed += 1
            if self.installation is None or owner == self.installation:
                pass
            elif owner:
                self.foreign += 1
                continue
            elif str(rec.get("job_id") or "") not in claimed:
                self.foreign_legacy += 1
                continue
            self.lines += 1
            if rec["t"] == OPEN:
                self.opens.setdefault(str(rec["ledger_id"]), self.intent_lines)
                continue
            self._fold(rec)

    def intents_since(self, ledger_id: str) -> int | None:
        """This installation's intent lines after the `open` line of `ledger_id` (None: no such line)."""
        before = self.opens.get(ledger_id)
        return None if before is None else self.intent_lines - before

    def _claim_legacy(self, records: list[dict[str, Any]]) -> set[str]:
        """The job ids whose old lines (no installation) are this installation's: decided once,
        on the first lines read (old lines precede every line that names its installation)."""
        if self.installation is None or self._legacy_done:
            return set()
        self._legacy_done = True
        groups: dict[str, set[str]] = {}
        for rec in records:
            if not rec.get("installation"):
                rids = groups.setdefault(str(rec.get("job_id") or ""), set())
                if rec.get("response_id"):
                    rids.add(str(rec["response_id"]))
        if not groups or self.legacy_is_ours is None:
            return set()
        return {jid for jid, rids in groups.items() if jid and self.legacy_is_ours(jid, frozenset(rids))}

    def _fold(self, rec: dict[str, Any]) -> None:
        kind, slot, attempt = rec["t"], rec["slot"], rec["attempt"]
        spend = self.slots.setdefault(slot, SlotSpend(slot))
        job_id = str(rec.get("job_id") or "")
        if job_id and job_id not in spend.job_ids:
            spend.job_ids.append(job_id)
        rid = str(rec["response_id"]) if rec.get("response_id") else None
        if rid:
            self.response_ids.add(rid)
        if kind == "intent":
            self.intent_lines += 1
            spend.charged += 1
            spend.intents[str(attempt)] = spend.intents.get(str(attempt), 0) + 1
            spend.last_attempt = max(spend.last_attempt, attempt)
            spend.fingerprint = rec.get("fingerprint") or spend.fingerprint
            spend.open_intent = True
            spend.uncertain.add(str(attempt))
        elif kind == "adopted":
            spend.charged += attempt
            spend.adopted += attempt
            spend.last_attempt = max(spend.last_attempt, attempt)
            spend.response_id = str(rec.get("response_id") or "") or spend.response_id
            spend.response_attempt = attempt
        elif kind == "outcome":
            spend.open_intent = False
            outcome = rec.get("outcome")
            if outcome in ("accepted", "refused"):
                spend.uncertain.discard(str(attempt))  # it arrived, or provably did not cost anything
            if outcome == "refused":
                spend.charged -= 1
                spend.intents[str(attempt)] = spend.intents.get(str(attempt), 0) - 1
            elif outcome == "accepted" and rid:
                spend.response_id, spend.response_attempt = rid, attempt
                spend._note_response(rid)
        elif kind == "custody":
            spend.custody += 1
            spend.custody_sha256 = rec.get("payload_sha256")
            spend.custody_response_id = rid
            spend._note_response(rid)
            if rid and rid not in spend.custody_ids:
                spend.custody_ids.append(rid)
        elif kind == "killed":
            if rid and rid not in spend.killed_ids:
                spend.killed_ids.append(rid)
        elif kind == REVISED:
            lang = rec["lang"]
            if rec["revision"] > spend.revisions.get(lang, (0, "", ""))[0]:
                spend.revisions[lang] = (rec["revision"], rec["kind"], rec["sha256"])
        elif kind == "saved":
            spend.saved += 1
            spend.saved_editions = rec["editions"]
        else:
            spend.published += 1
            spend.published_editions = rec["editions"]
            spend._note_response(rid)


def summarize(lines: Iterable[str], installation: str | None = None,
              legacy_is_ours: LegacyOwner | None = None) -> tuple[dict[str, SlotSpend], int]:
    """Per-slot spend from the ledger's lines (of `installation` only, when given), and how many
    lines could not be read."""
    fold = Fold(installation, legacy_is_ours)
    fold.feed(lines)
    return fold.slots, fold.bad


def behind(job: Job, spend: SlotSpend | None) -> bool:
    """The job's row knows of fewer paid creates for its slot than the ledger: the database
    was restored from before them (or the slot's row was created again)."""
    return spend is not None and spend.charged > job.generation_attempts


def composed_editions(composed: str | None) -> dict[str, str]:
    """The sha256 per language of a job's composed artifacts (`jobs.composed`)."""
    try:
        doc = json.loads(composed or "{}")
    except ValueError:
        return {}
    if not isinstance(doc, dict):
        return {}
    from iipub.edition.compose import artifact_from_document  # only when a save is recorded

    out: dict[str, str] = {}
    for lang, art in doc.items():
        try:
            out[str(lang)] = artifact_from_document(art).sha256
        except ValueError:
            continue
    return out


def has_chain(spend: SlotSpend | None) -> bool:
    """The ledger knows of output for the slot (custody, a save or a publication)."""
    return spend is not None and any(spend.counts().values())
