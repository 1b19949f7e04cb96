"""Language tracks as an operator sees them, as values: a track row without its payload
(`jobs list` / `jobs show`, with its one-line summary and JSON view) and the track figures of
`iipub status` (counts by product, language and state; parked tracks; stranded tracks, by the
rule `jobs.is_stranded` gives jobs; duplicate publications per language). Pure: the reads are
`Store.tracks_of` and `queries`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from iipub.core.timefmt import jsonable, seconds_between
from iipub.model.jobs import is_stranded
from iipub.model.states import DONE, PARKED, TRACK_ACTIVE, TRACKS_NEVER_RUN_IN, Reason, State

# The track columns the operator-facing JSON shows, in this order (no payload, no composed text).
PUBLIC_FIELDS = (
    "lang", "state", "version", "lease_owner", "lease_expiry", "next_attempt_at", "retry_count",
    "payload_sha256", "source_sha256", "composed_sha256", "quarantine_reason", "last_error",
    "suspended_from", "created_at", "updated_at", "state_entered_at",
)
# A track's step that failed with an unexpected error says so in its last_error (like a job's).
STEP_FAILED = "step_failed:"
_PARKED = frozenset(s.value for s in PARKED)
_DONE = frozenset(s.value for s in DONE)
_ACTIVE_TRACK = frozenset(s.value for s in TRACK_ACTIVE)
_NO_TRACK_PASS = frozenset(s.value for s in TRACKS_NEVER_RUN_IN)


@dataclass(frozen=True)
class TrackView:
    """One `tracks` row without its payload and composed text."""

    id: str
    job_id: str
    product: str
    edition_date: dt.date
    lang: str
    state: str
    version: int
    lease_owner: str | None
    lease_expiry: dt.datetime | None
    next_attempt_at: dt.datetime
    retry_count: int
    payload_sha256: str | None
    source_sha256: str | None
    composed_sha256: str | None
    quarantine_reason: str | None
    last_error: str | None
    suspended_from: str | None
    created_at: dt.datetime
    updated_at: dt.datetime
    state_entered_at: dt.datetime

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> TrackView:
        return cls(**{f.name: row[f.name] for f in dataclasses.fields(cls)})

    @property
    def parked(self) -> bool:
        return self.state in _PARKED

    def public(self) -> dict[str, Any]:
        """JSON-ready view: dates `YYYY-MM-DD`, times ISO 8601 UTC."""
        return {name: jsonable(getattr(self, name)) for name in PUBLIC_FIELDS}


def summary(tracks: Sequence[TrackView]) -> str:
    """`en:PUBLISHED es:VALIDATION_FAILED_RETAINED` (languages in order), or "" without tracks."""
    return " ".join(f"{t.lang}:{t.state}" for t in tracks)


# -- status ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrackRef:
    """A track an operator may have to look at."""

    job_id: str
    product: str
    edition_date: dt.date
    lang: str
    state: str
    age_seconds: float
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id, "product": self.product, "edition_date": jsonable(self.edition_date),
            "lang": self.lang, "state": self.state, "age_seconds": round(self.age_seconds, 3), "reason": self.reason,
        }

    def describe(self) -> str:  # for the check line
        return f"{self.product} {self.edition_date} {self.lang} in {self.state}"


@dataclass(frozen=True)
class Figures:
    """What `status` reports of tracks."""

    counts: Mapping[str, Mapping[str, Mapping[str, int]]]  # product -> lang -> state -> tracks
    parked: tuple[TrackRef, ...] = ()  # QUARANTINED / VALIDATION_FAILED_RETAINED tracks, oldest first
    stranded: tuple[TrackRef, ...] = ()  # unpublished, nobody asked to act, past the limit; oldest first
    duplicates_by_lang: Mapping[str, int] = dataclasses.field(default_factory=dict)
    parked_job_ids: frozenset[str] = frozenset()  # jobs waiting on a parked track
    failing_steps: tuple[TrackRef, ...] = ()  # tracks whose last step failed with an unexpected error
    # Tracks with no path forward: due for the track pass, but their slot lets no track run and
    # nothing else will move them (not parked themselves, their slot not suspended or re-forking).
    immovable: tuple[TrackRef, ...] = ()

    @property
    def total(self) -> int:
        return sum(n for langs in self.counts.values() for states in langs.values() for n in states.values())

    @property
    def by_state(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for langs in self.counts.values():
            for states in langs.values():
                total.update(states)
        return {s.value: total[s.value] for s in State if total[s.value]} | {
            k: v for k, v in sorted(total.items()) if k not in State.__members__}

    @property
    def by_lang(self) -> dict[str, dict[str, int]]:
        out: dict[str, Counter[str]] = {}
        for langs in self.counts.values():
            for lang, states in langs.items():
                out.setdefault(lang, Counter()).update(states)
        return {lang: dict(sorted(c.items())) for lang, c in sorted(out.items())}

    def stranded_by_lang(self) -> dict[str, int]:
        return dict(sorted(Counter(t.lang for t in self.stranded).items()))

    def parked_by_reason(self) -> dict[str, int]:
        return dict(sorted(Counter(parked_reason(t) for t in self.parked).items()))

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "by_state": self.by_state,
            "by_lang": self.by_lang,
            "by_product": {p: {lang: dict(sorted(s.items())) for lang, s in sorted(langs.items())}
                           for p, langs in sorted(self.counts.items())},
            "parked": {
                "count": len(self.parked),
                "by_reason": self.parked_by_reason(),
                "oldest": self.parked[0].to_dict() if self.parked else None,
                "tracks": [t.to_dict() for t in self.parked],
            },
            "stranded": {
                "count": len(self.stranded),
                "by_lang": self.stranded_by_lang(),
                "oldest": self.stranded[0].to_dict() if self.stranded else None,
                "tracks": [t.to_dict() for t in self.stranded],
            },
            "duplicate_publications_by_lang": dict(self.duplicates_by_lang),
            "failing_steps": [t.to_dict() for t in self.failing_steps],
            "immovable": [t.to_dict() for t in self.immovable],
        }


def parked_reason(t: TrackRef) -> str:
    """A parked track's reason as `by_reason` counts it: its quarantine reason, or its state
    in lower case (`validation_failed_retained`)."""
    return t.reason if t.state == State.QUARANTINED.value and t.reason else t.state.lower()




def figures(counts: Iterable[Sequence[Any]], unfinished: Iterable[Mapping[Any, Any]], now: dt.datetime,
            stranded_after_seconds: float, duplicates_by_lang: Mapping[str, int],
            held: Collection[str] = ()) -> Figures:
    """The track figures from `(product, lang, state, n)` counts and the tracks not done yet,
    each with its job's liveness columns (`job_state`, `opens_at`, `job_created_at`,
    `kill_requested`). A parked track waits for an operator; a track of a parked job is frozen
    with it (the job is reported); a track in a `held` state (what shadow mode holds back) is
    not late; any other unpublished track past the limit is stranded."""
    by_product: dict[str, dict[str, dict[str, int]]] = {}
    for product, lang, state, n in counts:
        by_product.setdefault(product, {}).setdefault(lang, {})[state] = int(n)
    parked, stranded, failing, immovable = [], [], [], []
    for r in unfinished:
        if r["state"] in _DONE:
            continue
        if r["state"] in _ACTIVE_TRACK and r["job_state"] in _NO_TRACK_PASS and not r["kill_requested"]:
            immovable.append(_track_ref(r, seconds_between(now, r["state_entered_at"]),
                                        f"its slot is {r['job_state']}: the track pass never runs it"))
        if (r["last_error"] or "").startswith(STEP_FAILED):
            failing.append(_track_ref(r, 0.0, r["last_error"]))
        if r["state"] in _PARKED:
            why = r["quarantine_reason"] if r["state"] == State.QUARANTINED.value else r["last_error"]
            parked.append(_track_ref(r, seconds_between(now, r["state_entered_at"]), why))
        elif r["job_state"] not in _PARKED and r["state"] not in held:
            age = is_stranded(r["state"], bool(r["kill_requested"]), r["opens_at"], r["job_created_at"], now,
                              stranded_after_seconds)
            if age is not None:
                stranded.append(_track_ref(r, age, r["last_error"]))
    return Figures(
        counts=by_product,
        parked=tuple(sorted(parked, key=lambda x: -x.age_seconds)),
        stranded=tuple(sorted(stranded, key=lambda x: -x.age_seconds)),
        duplicates_by_lang=dict(sorted(duplicates_by_lang.items())),
        parked_job_ids=frozenset(ref.job_id for ref in parked),
        failing_steps=tuple(failing),
        immovable=tuple(sorted(immovable, key=lambda x: -x.age_seconds)),
    )


def _track_ref(r: Mapping[Any, Any], age: float, reason: str | None) -> TrackRef:
    return TrackRef(r["job_id"], r["product"], r["edition_date"], r["lang"], r["state"], age, reason)


@dataclass(frozen=True)
class Hop:
    """One journaled transition of a track; several hops may share one fenced write."""

    to: State
    reason: Reason
    detail: Mapping[str, Any] = field(default_factory=dict)
