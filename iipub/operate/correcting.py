"""`iipub withdraw` and `iipub correct`: an operator takes a public edition back, or replaces it,
by compensating events through the outbox (PRODUCT.md section 26), never by deleting anything.

Each reads the slot's editions, lets `corrections` decide (a refusal writes nothing), then in one
transaction, fenced on the job's version and each edition's revision: the journal entry on the
slot (who, why, the revisions), each edition's new revision and status, its `edition_changes`
row (the content it supersedes kept), the event that announces it, and its older events no sink
has yet superseded. The spend ledger then records each revision (`revised`), so a database
restored from before it never reuses a revision the site and the CMS already hold. Nothing is
paid; nothing is sent to the provider. (The writes are `machine.revisions`', shared with the sweep.)

`correct --regenerate --pay-again` is the paid way: the same checks, then the slot goes back to
a paid create through the operator's fenced path (`Operator.correct_regenerate`), and the sweep
saves the new output as the correction with the same writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iipub.core.errors import OperatorRefused, UsageError
from iipub.core.ids import uuid7
from iipub.machine import revisions
from iipub.model.jobs import Job
from iipub.model.states import EDITIONS_SAVED, EditionStatus, EventType, Reason
from iipub.operate import corrections, remedies
from iipub.operate.corrections import EditionRevision
from iipub.provider import factory
from iipub.settings.config import Settings, max_output_bytes
from iipub.store import edition_changes
from iipub.store.edition_changes import SavedEdition
from iipub.store.handles import Connection, Engine
from iipub.store.job_store import Store

__all__ = ["Regenerating", "Taken", "correct", "regenerate", "withdraw"]


@dataclass(frozen=True)
class Taken:
    """What a withdraw or correct did: the job, the changes written, the languages that were
    already as asked (a second withdrawal: nothing to do), and a ledger problem if its line
    could not be written after the commit."""

    job: Job
    verb: str
    changes: tuple[EditionRevision, ...]
    unchanged: tuple[str, ...]
    ledger_error: str | None = None


def withdraw(settings: Settings, engine: Engine, job_id: str, lang: str | None, reason: str, by: str,
             public_note: str | None = None) -> Taken:
    """Take the slot's public editions (or `lang`'s) off the site: `edition.withdrawn` to every
    sink. An edition already withdrawn is left as it is (reported in `unchanged`)."""
    store, job, chosen, note = _chosen(settings, engine, job_id, lang, reason, by, public_note, "withdraw")
    unchanged = tuple(e.lang for e in chosen if e.status == EditionStatus.WITHDRAWN)
    todo = [e for e in chosen if e.status != EditionStatus.WITHDRAWN]
    if not todo:
        return Taken(job, "withdraw", (), unchanged)
    spend = revisions.slot_spend(settings, engine, job)
    now = revisions.now(engine)
    changes = []
    for e in todo:
        revision, event_id = corrections.next_revision(e, spend), uuid7(now)
        changes.append(EditionRevision(e.lang, revision, event_id, corrections.withdrawn_payload(
            job, e, revision, event_id, e.published_at, now, note), None))
    return _write(settings, engine, store, job, todo, changes, unchanged, "withdraw", reason, by, note)


def correct(settings: Settings, engine: Engine, job_id: str, lang: str | None, path: Path, reason: str, by: str,
            public_note: str | None = None) -> Taken:
    """Replace the slot's public editions (or `lang`'s), live or withdrawn, with the operator's
    corrected output read from `path` (checked and composed as a track's part is):
    `edition.corrected`, naming the sha256 it supersedes, to every sink. An edition whose
    correction is byte-identical to what is public is left as it is."""
    store, job, chosen, note = _chosen(settings, engine, job_id, lang, reason, by, public_note, "correct")
    product = settings.products.get(job.product)
    text = _read(settings, path, max_output_bytes(product), job.id)
    artifacts = corrections.corrected_artifacts(job, product, text, [e.lang for e in chosen])
    unchanged = tuple(e.lang for e in chosen
                      if e.status != EditionStatus.WITHDRAWN and artifacts[e.lang].sha256 == e.sha256)
    todo = [e for e in chosen if e.lang not in unchanged]
    if not todo:
        return Taken(job, "correct", (), unchanged)
    spend = revisions.slot_spend(settings, engine, job)
    now = revisions.now(engine)
    changes = [revisions.corrected(job, e, spend, now, note, artifacts[e.lang]) for e in todo]
    return _write(settings, engine, store, job, todo, changes, unchanged, "correct", reason, by, note)


@dataclass(frozen=True)
class Regenerating:
    """What `correct --regenerate` did: the slot sent to its paid generation, and the editions it
    will replace (language -> the revision public now)."""

    job: Job
    revisions: dict[str, int]
    attempts_max: int


def regenerate(settings: Settings, engine: Engine, job_id: str, lang: str | None, reason: str, by: str,
               public_note: str | None = None, *, pay_again: bool = False) -> Regenerating:
    """`correct --regenerate --pay-again`: the slot's public editions (or `lang`'s), live or
    withdrawn, replaced by a new paid generation. The slot goes back to CREATE_ELIGIBLE through
    the operator's fenced path, within the generation budget and asked of the payment authority
    (the pay-again journaled with the evidence it overrides); the sweep creates, takes custody,
    checks and composes as for any generation, and saves each language's output as its edition's
    correction (`track_steps`, `revisions`). Until then the editions stay as they are."""
    if not pay_again:
        raise UsageError("correct --regenerate pays for a new generation of the slot: say so with --pay-again "
                         "(journaled with --reason and the evidence it overrides), or give --from-file FILE "
                         "(nothing paid)")
    from iipub.operate.executor import Operator

    _, job, chosen, note = _chosen(settings, engine, job_id, lang, reason, by, public_note, "correct", paid=True)
    max_gen = settings.budgets.max_generation_attempts
    with Operator(settings, engine) as op:
        written = op.correct_regenerate(job.id, chosen, reason, by, note)
    return Regenerating(written, {e.lang: e.revision for e in chosen}, max_gen)


def _chosen(settings: Settings, engine: Engine, job_id: str, lang: str | None, reason: str, by: str,
            public_note: str | None, verb: str, *, paid: bool = False,
            ) -> tuple[Store, Job, list[SavedEdition], str | None]:
    """What both commands check first: the operator's words, the slot, and the public editions
    `verb` takes (one language or all), refused in one line before anything is written."""
    remedies.check_input(by, reason)
    note = corrections.check_note(public_note)
    store = Store(engine, _worker(by), settings.reconcile.lease_seconds)
    job = store.lookup(job_id)
    editions = edition_changes.editions_of(engine, job.id)
    chosen = corrections.targets(job, editions, lang, _languages(settings, job), verb)
    # A paid correction refuses a busy slot in its own words (`corrections.regenerate`).
    if not paid and job.state not in EDITIONS_SAVED:
        under_way = revisions.pending(engine, job.id)
        what = (f"a paid correction of its {', '.join(under_way.languages) or 'editions'} (by {under_way.by}) "
                "is under way" if under_way else "the rest of its slot is still under way")
        raise OperatorRefused(f"job {job.id} is {job.state}: {what}; the public editions stay as they are until "
                              f"it is saved, then `iipub {verb}` works again (`iipub jobs show {job.id}` follows it)")
    return store, job, chosen, note


def _write(settings: Settings, engine: Engine, store: Store, job: Job, todo: list[SavedEdition],
           changes: list[EditionRevision], unchanged: tuple[str, ...], verb: str, reason: str, by: str,
           note: str | None) -> Taken:
    withdrawing = verb == "withdraw"
    status = EditionStatus.WITHDRAWN if withdrawing else EditionStatus.CORRECTED
    event_type = EventType.WITHDRAWN if withdrawing else EventType.CORRECTED

    def extra(conn: Connection) -> None:
        revisions.write_in(conn, job, todo, changes, status, reason, by, note)

    detail: dict[str, Any] = {"by": by, "why": reason, "public_note": note, "event": event_type.value,
              "revisions": {c.lang: c.revision for c in changes},
              "supersedes": {e.lang: e.sha256 for e in todo},
              **({"sha256": {c.lang: c.artifact.sha256 for c in changes if c.artifact}} if not withdrawing else {})}
    if len(changes) == 1:
        detail["lang"] = changes[0].lang
        detail["revision"] = changes[0].revision
    reason_ = Reason.OPERATOR_WITHDRAW if withdrawing else Reason.OPERATOR_CORRECT
    written = store.record_edition_action(job, reason_, detail, extra)
    problem = revisions.ledger_revised(settings, engine, job, todo, changes, status.value)
    return Taken(written, verb, tuple(changes), unchanged, problem)


def _languages(settings: Settings, job: Job) -> tuple[str, ...]:
    product = settings.products.get(job.product)
    return product.languages if product is not None else ()


def _read(settings: Settings, path: Path, max_bytes: int, job_id: str) -> str:
    """The corrected output, read bounded like `jobs import-payload`'s file and taken apart the same
    way: a response object that names another job is refused, as `jobs import-payload` refuses it."""
    limit = remedies.import_file_limit(max_bytes)
    try:
        with path.open("rb") as f:
            raw = f.read(limit + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise OperatorRefused(f"{path} is larger than {limit} bytes (4 x max_output_bytes + 1 MiB); nothing written")
    imported = remedies.parse_import(raw, max_bytes, factory.saved_response_reader(settings))
    owner = imported.metadata.get("iipub_job_id")
    if owner and owner != job_id:
        raise OperatorRefused(f"the response in {path} names job {owner}, not job {job_id}; nothing written")
    return imported.text


def _worker(by: str) -> str:
    return f"operator:{by.strip()}"[:128]
