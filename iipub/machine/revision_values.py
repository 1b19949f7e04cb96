"""A public edition's next revision and the events that announce it, pure (README, "The events
a consumer receives"). Both ways an edition changes after publication use them: an operator's
`withdraw` or `correct --from-file` (`operate.correcting`), and the sweep saving the paid
generation of a `correct --regenerate` (`machine.revisions`).

A revision only grows: the next one is past both the database's and the spend ledger's (a
database restored from before a change has forgotten it; the live site and the CMS have not,
and would discard a revision they already hold as stale)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from iipub.core.timefmt import iso_z
from iipub.edition.compose import Artifact
from iipub.model.jobs import Job
from iipub.model.states import EditionStatus, EventType
from iipub.money.spend import SlotSpend

__all__ = [
    "EditionRevision",
    "PublicEdition",
    "corrected_payload",
    "next_revision",
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
    """One edition's change as it was decided."""

    lang: str
    revision: int
    event_id: str
    payload: Mapping[str, Any]
    artifact: Artifact | None  # a correction's new artifact; None for a withdrawal


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
