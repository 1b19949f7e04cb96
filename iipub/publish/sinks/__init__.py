"""The sink interface: what the relay hands a sink, and what a sink answers.

A sink is idempotent (publishing the same event twice leaves the same public result) and
never raises for an expected failure: a transient one is `RetryLater`, a permanent one
(the receiver refuses the event as it is) is `Parked` for an operator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol, runtime_checkable

from iipub.edition.compose import canonical_json
from iipub.model.states import EventType

__all__ = ["EditionEvent", "Parked", "PublishResult", "Published", "RetryLater", "Sink"]


@dataclass(frozen=True)
class EditionEvent:
    """One outbox event about one product, date and language (README, "The events a consumer
    receives"): its `type` (`edition.published`, `edition.corrected`, `edition.withdrawn`), the
    edition's `revision` (only grows: a consumer applies an event only if its revision is newer
    than the one it holds), and, but for a withdrawal, the composed artifact. `sha256` is the
    artifact's (a withdrawal's: the edition it takes back); a correction names the sha256 it
    `supersedes`; `public_note` is the operator's public words; `changed_at` when a correction or
    withdrawal was made; `published_at` always the edition's first publication."""

    event_id: str
    job_id: str
    product: str
    edition_date: str
    lang: str
    sha256: str
    artifact: dict[str, Any] | None
    published_at: str
    type: str = EventType.PUBLISHED.value
    revision: int = 1
    supersedes: str | None = None
    changed_at: str | None = None
    public_note: str | None = None

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> EditionEvent:
        """Build from a stored outbox payload; raises ValueError if a field is missing or mistyped.
        A payload from before corrections (no `type`, no `revision`) is an `edition.published` of
        revision 1."""
        if not isinstance(payload, Mapping):
            raise ValueError("event payload must be an object")
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in payload:
                if f.name in _OPTIONAL or (f.name == "artifact" and payload.get("type") == EventType.WITHDRAWN):
                    continue
                raise ValueError(f"event payload lacks {f.name!r}")
            value = payload[f.name]
            if f.name == "artifact":
                if value is None and payload.get("type") == EventType.WITHDRAWN:
                    pass
                elif not isinstance(value, Mapping):
                    raise ValueError("event payload field 'artifact' must be an object")
                else:
                    value = dict(value)
            elif f.name == "revision":
                if type(value) is not int or value < 1:
                    raise ValueError("event payload field 'revision' must be a positive integer")
            elif f.name in _NULLABLE:
                if value is not None and not isinstance(value, str):
                    raise ValueError(f"event payload field {f.name!r} must be a string or null")
            elif not isinstance(value, str):
                raise ValueError(f"event payload field {f.name!r} must be a string")
            values[f.name] = value
        if values.get("type", EventType.PUBLISHED.value) not in {t.value for t in EventType}:
            raise ValueError(f"unknown event type {str(values['type'])[:40]!r}")
        event = cls(**{"artifact": None, **values})
        if event.type != EventType.WITHDRAWN and event.artifact is None:
            raise ValueError(f"an {event.type} event carries its artifact")
        return event

    def to_payload(self) -> dict[str, Any]:
        """The event as a consumer receives it: every field, `artifact` left out of a withdrawal,
        the optional ones only when set."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and (f.name in _NULLABLE or f.name == "artifact"):
                continue
            out[f.name] = value
        return out

    def body(self) -> bytes:
        """Canonical JSON of the payload: the exact bytes a webhook POSTs and signs."""
        return canonical_json(self.to_payload())


# Fields an event may lack (older payloads) or hold as null.
_OPTIONAL = frozenset({"type", "revision", "supersedes", "changed_at", "public_note"})
_NULLABLE = frozenset({"supersedes", "changed_at", "public_note"})


@dataclass(frozen=True)
class Published:
    """The sink holds the event; the relay may mark it done."""


@dataclass(frozen=True)
class RetryLater:
    """A transient failure; try again after `delay` seconds (the relay's backoff if None)."""

    delay: float | None
    why: str


@dataclass(frozen=True)
class Parked:
    """A permanent refusal: retrying the same event cannot succeed without an operator."""

    why: str


PublishResult = Published | RetryLater | Parked


@runtime_checkable
class Sink(Protocol):
    name: str

    def publish(self, event: EditionEvent) -> PublishResult: ...
