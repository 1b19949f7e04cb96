"""A public edition revised, written: the one code path of every change to an edition after its
publication. An operator's `withdraw` or `correct --from-file` (`operate.correcting`) and the
sweep saving the paid generation of a `correct --regenerate` (`track_steps`) both write each
edition's new revision, its `edition_changes` row and the event that announces it through
`write_in`, inside the transaction their caller holds, and then the spend ledger's `revised`
line through `ledger_revised` (the database never knows less than the ledger).

`pending` reads the correction a slot's paid generation is for: the operator's journaled words
(who, why, the public note) and the languages whose editions its output replaces."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from iipub.core.errors import OperatorRefused
from iipub.core.ids import uuid7
from iipub.edition.compose import Artifact
from iipub.machine.revision_values import EditionRevision, corrected_payload, next_revision
from iipub.model.jobs import Job
from iipub.model.states import EditionStatus, EventType
from iipub.money import restore
from iipub.money.ledger import LedgerError, slot_of
from iipub.money.spend import SlotSpend
from iipub.settings.config import Settings
from iipub.store import clock, edition_changes, job_queries, outbox
from iipub.store.edition_changes import SavedEdition
from iipub.store.handles import Connection, Engine

log = structlog.get_logger("iipub.corrections")

__all__ = ["Pending", "corrected", "ledger_revised", "now", "pending", "slot_spend", "write_in"]


@dataclass(frozen=True)
class Pending:
    """A `correct --regenerate` whose paid generation is not saved yet, as the operator said it."""

    languages: tuple[str, ...]
    by: str
    why: str
    public_note: str | None


def pending(engine: Engine, job_id: str) -> Pending | None:
    """The slot's correction in progress (`correct --regenerate`), or None."""
    text = job_queries.correction_pending(engine, job_id)
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        doc = {}
    doc = doc if isinstance(doc, dict) else {}
    langs = doc.get("languages")
    note = doc.get("public_note")
    return Pending(tuple(str(x) for x in langs) if isinstance(langs, list) else (), str(doc.get("by") or "-"),
                   str(doc.get("why") or "-"), str(note) if note else None)


def slot_spend(settings: Settings, engine: Engine, job: Job) -> SlotSpend | None:
    """This installation's spend ledger record of the slot, for its revisions (None without a
    ledger). Refuses when a ledger that exists cannot be read: the next revision must be past its own."""
    book = restore.ledger_of(settings, engine)
    if book is None:
        return None
    spend, _, problem = book.load()
    if problem is not None and book.exists():
        raise OperatorRefused(f"the spend ledger cannot be read ({problem}): the next revision must be past its "
                              "own; nothing written")
    return spend.get(slot_of(job.product, job.edition_date.isoformat()))


def now(engine: Engine) -> dt.datetime:
    with engine.connect() as conn:
        return clock.read_now(conn)


def corrected(job: Job, edition: SavedEdition, spend: SlotSpend | None, at: dt.datetime, note: str | None,
              artifact: Artifact) -> EditionRevision:
    """The edition's correction by `artifact`: its next revision and its `edition.corrected` event."""
    revision, event_id = next_revision(edition, spend), uuid7(at)
    return EditionRevision(edition.lang, revision, event_id, corrected_payload(
        job, edition, revision, event_id, edition.published_at, at, note, artifact), artifact)


def write_in(conn: Connection, job: Job, todo: Sequence[SavedEdition], changes: Sequence[EditionRevision],
             status: EditionStatus, reason: str, by: str, note: str | None) -> None:
    """Inside the caller's transaction: each edition's new revision and status (fenced on the
    revision read), its `edition_changes` row (what it supersedes kept) and its event."""
    event_type = EventType.WITHDRAWN if status == EditionStatus.WITHDRAWN else EventType.CORRECTED
    for e, c in zip(todo, changes, strict=True):
        outbox.revise_edition(conn, e.id, e.revision, revision=c.revision, status=status.value,
                              event_type=event_type.value, job_id=job.id, payload=c.payload, artifact=c.artifact)
        edition_changes.record(conn, e, revision=c.revision, kind=status.value, event_id=c.event_id, reason=reason,
                               public_note=note, by=by, sha256=c.artifact.sha256 if c.artifact else None)


def ledger_revised(settings: Settings, engine: Engine, job: Job, todo: Sequence[SavedEdition],
                   changes: Sequence[EditionRevision], kind: str) -> str | None:
    """The `revised` line of each change, after the commit; the problem if it could not be written."""
    book = restore.ledger_of(settings, engine)
    if book is None:
        return None
    try:
        for e, c in zip(todo, changes, strict=True):
            book.revised(job.id, slot_of(job.product, job.edition_date.isoformat()), job.generation_attempts, c.lang,
                         c.revision, kind, c.artifact.sha256 if c.artifact else e.sha256, c.event_id)
    except LedgerError as exc:
        log.error("ledger_unwritable", job_id=job.id, error=str(exc))
        return str(exc)
    return None
