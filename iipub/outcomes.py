"""What the provider said, as values: the closed sets of outcomes the adapter returns and the
per-state decisions consume. Pure: no HTTP import.

The Responses API's documented statuses are grouped here once; everything else that compares
a provider status uses these groups.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from .config import Product

# Documented statuses of a Responses API response.
LIVE_STATUSES = frozenset({"queued", "in_progress"})
FINISHED_STATUSES = frozenset({"completed", "incomplete"})  # output exists: take custody
DEAD_STATUSES = frozenset({"failed", "cancelled"})  # nothing to adopt
KNOWN_STATUSES = LIVE_STATUSES | FINISHED_STATUSES | DEAD_STATUSES


@dataclass(frozen=True)
class CreateRequest:
    job_id: str
    product: Product
    edition_date: dt.date
    attempt: int
    fingerprint: str


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    output_tokens: int
    total_tokens: int


@dataclass(frozen=True)
class Accepted:
    """The provider took the job (2xx with a `resp_` id): it will be charged."""

    response_id: str
    status: str


@dataclass(frozen=True)
class Observed:
    """A readable response: its status and, once finished, its output."""

    response_id: str
    status: str
    output_text: str | None
    usage: Usage | None
    metadata: dict[str, str] = field(default_factory=dict)
    incomplete_reason: str | None = None
    error: str | None = None
    error_code: str | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_STATUSES


@dataclass(frozen=True)
class Deleted:
    response_id: str


@dataclass(frozen=True)
class Refused:
    """The provider definitively did not process the create; nothing was charged."""

    retry_after: float | None
    why: str
    code: str | None = None  # the provider's error code, e.g. `insufficient_quota`


@dataclass(frozen=True)
class Ambiguous:
    """The create may or may not have been processed (and charged). Never retry blindly."""

    why: str


@dataclass(frozen=True)
class Rejected:
    """A 4xx the provider will keep giving: a bug or a configuration problem."""

    status: int
    why: str


@dataclass(frozen=True)
class Missing:
    """The provider answered 404 for the response (expired, deleted, or a spurious answer)."""

    why: str


@dataclass(frozen=True)
class Transient:
    """A read or cleanup call failed in a way that is safe to repeat later."""

    retry_after: float | None
    why: str


CreateOutcome = Accepted | Refused | Ambiguous | Rejected
ReadOutcome = Observed | Missing | Transient | Rejected
DeleteOutcome = Deleted | Missing | Transient | Rejected


def failure_text(outcome: Transient | Rejected) -> str:
    """One line for a failed read or cleanup call."""
    return outcome.why if isinstance(outcome, Transient) else f"HTTP {outcome.status}: {outcome.why}"
