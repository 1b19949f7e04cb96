"""Decisions for language tracks, pure: the fork of a slot's payload after its shared checks, a
track's own steps (its language's checks, composition, save), and when a slot may follow its
tracks. No database, no network; `track_steps` does the I/O and applies them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from iipub.edition import compose, validate
from iipub.edition.compose import Artifact
from iipub.edition.parts import Part, parts_of
from iipub.machine import decisions
from iipub.machine.decisions import Decision
from iipub.model import states
from iipub.model.jobs import Job
from iipub.model.states import Reason, State
from iipub.model.track_views import Hop
from iipub.settings.config import Product

_ERROR_MAX = 2000


@dataclass(frozen=True)
class TrackPlan:
    """What one step of a track writes: its hops (one transaction), the columns they set, the
    delay before it is due again, and the artifact to save with the last hop (if any)."""

    hops: tuple[Hop, ...]
    changes: Mapping[str, Any] = field(default_factory=dict)
    delay: float | None = None
    save: Artifact | None = None


def on_shared_validation(job: Job, result: validate.Shared) -> tuple[Decision, list[Part]]:
    """RETRIEVED_NOT_VALIDATED: the shared checks passed (the slot waits for its tracks; the fork
    is written in the same transaction) or failed (every language parked with the payload kept)."""
    if result.ok:
        parts = parts_of(result)
        # Due at once: the slot moves as soon as its tracks let it (the due query waits for them).
        return Decision(State.READY_TO_COMPOSE, Reason.VALIDATED, delay=0,
                        detail={"languages": [p.lang for p in parts], "forked": True}), parts
    return decisions.on_validation(job, validate.Validation(False, result.reasons, None)), []


def quarantined(d: Decision) -> TrackPlan:
    """A slot-level quarantine decision (config drift, a removed product) applied to a track."""
    return TrackPlan((Hop(State.QUARANTINED, d.reason, d.detail),), changes=d.changes)


def step(job: Job, lang: str, state: State, payload: str | None, composed: str | None, product: Product | None,
         *, shadow: bool, correcting: bool = False) -> TrackPlan:
    """A due track, as far as one transaction takes it: validated, composed and saved (or parked
    where its language fails). `correcting`: the output of an operator's `correct --regenerate`,
    saved as its edition's correction (`correction_saved`), not as a new edition."""
    parked = decisions.config_check(job, product)
    if parked is not None or product is None:
        assert parked is not None
        return quarantined(parked)
    hops: list[Hop] = []
    changes: dict[str, Any] = {}
    if state == State.COMPOSED_NOT_SAVED:
        assert composed is not None
        artifact = compose.artifact_from_document(json.loads(composed))
    else:
        part = json.loads(payload or "{}").get(lang)
        result = validate.language(part, product, lang)
        if not result.ok or result.edition is None:
            reasons = list(result.reasons)
            return TrackPlan((Hop(State.VALIDATION_FAILED_RETAINED, Reason.VALIDATION_FAILED, {"reasons": reasons}),),
                             changes={"last_error": "; ".join(reasons)[:_ERROR_MAX]})
        if state == State.RETRIEVED_NOT_VALIDATED:
            hops.append(Hop(State.READY_TO_COMPOSE, Reason.VALIDATED))
        artifact = compose.compose_language(result.edition, product, lang, job.edition_date)
        text = artifact.body.decode("utf-8")
        changes.update(composed=text, composed_sha256=artifact.sha256, last_error=None)
        hops.append(Hop(State.COMPOSED_NOT_SAVED, Reason.COMPOSED, {"artifact_sha256": artifact.sha256}))
    if shadow:  # no edition, no outbox row: nothing a relay could publish
        hops.append(Hop(State.COMPOSED_NOT_SAVED, Reason.SHADOW_WOULD_PUBLISH,
                        {"slot": f"{job.product}/{job.edition_date.isoformat()}", "lang": lang,
                         "composed_sha256": artifact.sha256}))
        return TrackPlan(tuple(hops), changes, delay=decisions.SHADOW_RECHECK_SECONDS)
    hops.append(Hop(State.SAVED_NOT_PUBLIC, Reason.CORRECTION_SAVED if correcting else Reason.SAVED,
                    {"editions": [lang], "composed_sha256": artifact.sha256}))
    return TrackPlan(tuple(hops), changes, save=artifact)


def on_save_conflict(why: str) -> TrackPlan:
    """The save was rolled back whole: an edition of this language exists already."""
    return quarantined(decisions.on_save_conflict(why))


def slot_follows(job: Job, tracks: Mapping[str, tuple[State, str | None]]) -> Decision | None:
    """A forked slot follows its slowest track (`tracks`: each language's state and composed
    artifact): READY_TO_COMPOSE -> COMPOSED_NOT_SAVED once every track is composed, ->
    SAVED_NOT_PUBLIC once every track is saved (or published). The slot carries its tracks'
    artifacts as it always did. None: wait."""
    if not tracks:
        return None
    track_states = [s for s, _ in tracks.values()]
    if all(s in states.TRACK_SAVED for s in track_states):
        to, reason = State.SAVED_NOT_PUBLIC, Reason.SAVED
    elif job.state == State.READY_TO_COMPOSE and all(
            s in states.TRACK_SAVED or s == State.COMPOSED_NOT_SAVED for s in track_states):
        to, reason = State.COMPOSED_NOT_SAVED, Reason.COMPOSED
    else:
        return None
    doc = {lang: json.loads(composed) for lang, (_, composed) in sorted(tracks.items()) if composed}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    sha = hashlib.sha256(text.encode()).hexdigest()
    detail: dict[str, Any] = {"languages": sorted(tracks), "composed_sha256": sha}
    if reason == Reason.SAVED:
        detail["editions"] = sorted(tracks)
    return Decision(to, reason, changes={"composed": text, "composed_sha256": sha}, detail=detail)


def slot_parks(tracks: Mapping[str, tuple[State, str | None, str | None]]) -> Decision | None:
    """Every track parked and none saved (`tracks`: each language's state, quarantine reason and
    last error): the slot parks with them, VALIDATION_FAILED_RETAINED when every language failed
    validation, else QUARANTINED for the first quarantined language's reason. None: not so."""
    if not tracks or any(s not in states.TRACK_PARKED for s, _, _ in tracks.values()):
        return None
    errors = [f"{lang}: {error}" for lang, (_, _, error) in sorted(tracks.items()) if error]
    if all(s == State.VALIDATION_FAILED_RETAINED for s, _, _ in tracks.values()):
        reasons = [r for _, (_, _, error) in sorted(tracks.items()) for r in (error or "").split("; ") if r]
        return Decision(State.VALIDATION_FAILED_RETAINED, Reason.VALIDATION_FAILED,
                        changes={"last_error": "; ".join(reasons)[:_ERROR_MAX]},
                        detail={"reasons": reasons, "languages": sorted(tracks)})
    lang, (_, why, _) = next((lang, t) for lang, t in sorted(tracks.items()) if t[0] == State.QUARANTINED)
    reason = states.reason_of(why) or Reason.STEP_FAILING
    return decisions.quarantine(reason, "; ".join(errors) or f"the {lang} track is quarantined ({why})",
                               languages=sorted(tracks))


def unpublished(track_states: Mapping[str, State]) -> list[str]:
    """The languages whose edition is not saved: what a new paid generation is for."""
    return sorted(lang for lang, s in track_states.items() if s not in states.TRACK_SAVED)
