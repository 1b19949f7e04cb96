"""Taking a public edition back, pure: which editions `iipub withdraw` and `iipub correct` may
touch (refusals in one line, nothing written), the revision each change takes, and the events
that announce it (README, "The events a consumer receives"). `correcting` does the I/O.

A revision only grows: the next one is past both the database's and the spend ledger's (a
database restored from before a change has forgotten it; the live site and the CMS have not,
and would discard a revision they already hold as stale)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from iipub.core.errors import OperatorRefused, UsageError
from iipub.core.timefmt import iso_z
from iipub.edition import compose, validate
from iipub.edition.compose import Artifact
from iipub.model.jobs import Job
from iipub.model.states import EditionStatus, EventType
from iipub.money.spend import SlotSpend
from iipub.settings.config import Product

E = TypeVar("E", bound="PublicEdition")
MAX_NOTE_CHARS = 1000  # the public note: a sentence or two on the page and in the feed

__all__ = [
    "MAX_NOTE_CHARS",
    "EditionRevision",
    "PublicEdition",
    "check_note",
    "corrected_artifacts",
    "corrected_payload",
    "next_revision",
    "targets",
    "withdrawn_payload",
]


class PublicEdition(Protocol):
    """What these rules read of a saved edition (`store.edition_changes.SavedEdition`)."""

    @property
    def lang(self) -> str: ...
    @property
    def sha256(self) -> str: ...
    @property
    def revision(self) -> int: ...
    @property
    def status(self) -> EditionStatus: ...
    @property
    def public(self) -> bool: ...


@dataclass(frozen=True)
class EditionRevision:
    """One edition's change as the command decided it."""

    lang: str
    revision: int
    event_id: str
    payload: Mapping[str, Any]
    artifact: Artifact | None  # a correction's new artifact; None for a withdrawal


def check_note(note: str | None) -> str | None:
    """The public note, bounded and trimmed (None when empty)."""
    if note is None or not note.strip():
        return None
    if len(note) > MAX_NOTE_CHARS:
        raise UsageError(f"--public-note is {len(note)} characters; at most {MAX_NOTE_CHARS}")
    return note.strip()


def targets(job: Job, editions: Sequence[E], lang: str | None, languages: Sequence[str], verb: str) -> list[E]:
    """The editions `verb` (withdraw | correct) acts on: the slot's every edition, or `lang`'s.
    Refuses a language the slot does not have (`UsageError`) and an edition not public yet:
    not saved, or saved and not delivered by any sink (`OperatorRefused`): before publication,
    `iipub suspend` or `kill` are the tools."""
    known = sorted(set(languages) | {e.lang for e in editions})
    if lang is not None and lang not in known:
        raise UsageError(f"job {job.id} ({job.product} {job.edition_date}) has no language {lang!r} "
                         f"(its languages: {', '.join(known) or 'none'})")
    chosen = [e for e in editions if lang is None or e.lang == lang]
    if not chosen:
        where = f"its {lang} edition" if lang else "it"
        raise OperatorRefused(f"job {job.id} is {job.state}: {where} is not saved, nothing is public to {verb}")
    hidden = [e.lang for e in chosen if not e.public]
    if hidden:
        raise OperatorRefused(f"job {job.id}: the {', '.join(hidden)} edition is not public yet (no sink has "
                              f"delivered it); nothing to {verb} — `iipub suspend {job.id}` holds it back")
    return chosen


def next_revision(edition: PublicEdition, spend: SlotSpend | None) -> int:
    """Past the database's revision and the ledger's for this language (a restore forgot it)."""
    ledger = spend.revisions.get(edition.lang, (0, "", ""))[0] if spend is not None else 0
    return max(int(edition.revision), ledger) + 1


def _base(job: Job, edition: PublicEdition, revision: int, event_id: str, published: dt.datetime, now: dt.datetime,
          event_type: EventType, note: str | None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "type": event_type.value, "event_id": event_id, "job_id": job.id, "product": job.product,
        "edition_date": job.edition_date.isoformat(), "lang": edition.lang, "revision": revision,
        "published_at": iso_z(published, "seconds"), "changed_at": iso_z(now, "seconds"),
    }
    if note is not None:
        doc["public_note"] = note
    return doc


def withdrawn_payload(job: Job, edition: PublicEdition, revision: int, event_id: str, published: dt.datetime,
                      now: dt.datetime, note: str | None) -> dict[str, Any]:
    """`edition.withdrawn`: no artifact; `sha256` names the edition taken back."""
    return {**_base(job, edition, revision, event_id, published, now, EventType.WITHDRAWN, note),
            "sha256": edition.sha256}


def corrected_payload(job: Job, edition: PublicEdition, revision: int, event_id: str, published: dt.datetime,
                      now: dt.datetime, note: str | None, artifact: Artifact) -> dict[str, Any]:
    """`edition.corrected`: the new artifact, its sha256 and the sha256 it supersedes."""
    return {**_base(job, edition, revision, event_id, published, now, EventType.CORRECTED, note),
            "sha256": artifact.sha256, "supersedes": edition.sha256, "artifact": artifact.document()}


def corrected_artifacts(job: Job, product: Product | None, text: str, langs: Sequence[str]) -> dict[str, Artifact]:
    """The operator's corrected output (the edition's JSON document, keyed by language, as a
    model writes it and `jobs import-payload` takes it), checked and composed for `langs` exactly
    as a track checks and composes its part. Refuses anything that fails, naming why."""
    if product is None:
        raise OperatorRefused(f"job {job.id}: product {job.product!r} is not configured; its schema and rules are "
                              "needed to check a correction")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise OperatorRefused(f"the correction is not JSON ({exc}); nothing written") from None
    if not isinstance(doc, dict):
        raise OperatorRefused("the correction must be a JSON object keyed by language; nothing written")
    out: dict[str, Artifact] = {}
    for lang in langs:
        if lang not in doc:
            raise OperatorRefused(f"the correction has no {lang!r} part; nothing written")
        result = validate.language(doc[lang], product, lang)
        if not result.ok or result.edition is None:
            raise OperatorRefused(f"the {lang} correction fails validation: {'; '.join(result.reasons)[:500]}; "
                                  "nothing written")
        out[lang] = compose.compose_language(result.edition, product, lang, job.edition_date)
    return out
