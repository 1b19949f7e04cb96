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

__all__ = ["EditionEvent", "Parked", "PublishResult", "Published", "RetryLater", "Sink"]


@dataclass(frozen=True)
class EditionEvent:
    """One outbox event: a composed artifact for one product, date and language."""

    event_id: str
    job_id: str
    product: str
    edition_date: str
    lang: str
    sha256: str
    artifact: dict[str, Any]
    published_at: str

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> EditionEvent:
        """Build from a stored outbox payload; raises ValueError if a field is missing or mistyped."""
        if not isinstance(payload, Mapping):
            raise ValueError("event payload must be an object")
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in payload:
                raise ValueError(f"event payload lacks {f.name!r}")
            value = payload[f.name]
            if f.name == "artifact":
                if not isinstance(value, Mapping):
                    raise ValueError("event payload field 'artifact' must be an object")
                value = dict(value)
            elif not isinstance(value, str):
                raise ValueError(f"event payload field {f.name!r} must be a string")
            values[f.name] = value
        return cls(**values)

    def to_payload(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def body(self) -> bytes:
        """Canonical JSON of the payload: the exact bytes a webhook POSTs and signs."""
        return canonical_json(self.to_payload())


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
