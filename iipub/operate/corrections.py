"""Taking a public edition back, pure: which editions `iipub withdraw` and `iipub correct` may
touch (refusals in one line, nothing written), a correction read from the operator's file, and
the decision that sends a published slot to a paid generation of its correction (`correct
--regenerate`). The revision each change takes and the events that announce it are
`machine.revision_values`' (the sweep saves a regenerated correction with them too);
`correcting` does the I/O."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TypeVar

from iipub.core.errors import OperatorRefused, UsageError
from iipub.edition import compose, validate
from iipub.edition.compose import Artifact
from iipub.machine.decisions import Decision
from iipub.machine.revision_values import (
    EditionRevision,
    PublicEdition,
    corrected_payload,
    next_revision,
    withdrawn_payload,
)
from iipub.model import states
from iipub.model.jobs import Job
from iipub.model.states import Reason, State
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
    "regenerate",
    "targets",
    "withdrawn_payload",
]


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


def regenerate(job: Job, chosen: Sequence[PublicEdition], max_generation_attempts: int, by: str, reason: str,
               note: str | None) -> Decision:
    """`correct --regenerate`: the published slot goes back to CREATE_ELIGIBLE for one new paid
    generation (within the generation budget; the payment authority is asked by the caller), the
    languages of `chosen` named as the editions it replaces. The editions stay as they are (live
    or withdrawn) until the sweep saves the new output as their correction. Refused while the
    slot is not published (a generation or a publication is under way) or its provider response
    is not deleted yet (the output it holds would be left behind at the provider)."""
    if job.state not in states.REGENERATES_TO_CORRECT:
        raise OperatorRefused(f"job {job.id} is {job.state}: a generation or a publication of its slot is under way; "
                              "`correct --regenerate` applies to a published slot (see `iipub jobs show "
                              f"{job.id}`)")
    if job.state != State.DELETED and job.response_id is not None:
        raise OperatorRefused(f"job {job.id} is {job.state}: its provider response {job.response_id} is not "
                              "deleted yet (the next `iipub reconcile` deletes it); run this again after it")
    if job.generation_attempts >= max_generation_attempts:
        raise OperatorRefused(
            f"job {job.id}: all {max_generation_attempts} paid creates are used "
            f"({job.generation_attempts}/{max_generation_attempts}); raise budgets.max_generation_attempts, or "
            f"`iipub correct {job.id} --from-file FILE` with a corrected output (nothing paid)")
    langs = sorted(e.lang for e in chosen)
    return Decision(
        State.CREATE_ELIGIBLE, Reason.OPERATOR_CORRECT_REGENERATE, delay=0,
        changes={"response_id": None, "poll_count": 0, "retry_count": 0, "payload": None, "payload_sha256": None,
                 "composed": None, "composed_sha256": None, "last_error": None, "quarantine_reason": None,
                 "output_end": None},
        detail={"by": by, "why": reason, "public_note": note, "languages": langs,
                "revisions": {e.lang: int(e.revision) for e in chosen},
                "statuses": {e.lang: e.status.value for e in chosen},
                "supersedes": {e.lang: e.sha256 for e in chosen},
                "replaced_payload_sha256": job.payload_sha256, "replaced_response_id": job.response_id,
                "attempts_used": job.generation_attempts},
    )
