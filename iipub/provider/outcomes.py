"""What the provider said, as values in iipub's own words: the closed sets of outcomes a provider
returns and the per-state decisions consume. Pure: no HTTP import.

A response is live (waiting or running), finished or gone (`Stage`); a refused create is
refused for quota, capacity, rate, a parameter, access to the model or a request too large
(`RefusalKind`); a scope (`interface.Provider.scope`) is opaque. Each provider translates its own
words into these (`provider/openai/codes.py` for OpenAI's); nothing above `provider` compares a
provider's own word.
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass, field

from iipub.settings.config import Product


class Stage(enum.StrEnum):
    """Where a response stands, in iipub's words (the adapter translates its provider's)."""

    WAITING = "waiting"  # live: the provider holds it and has not started it
    RUNNING = "running"  # live: being generated
    FINISHED = "finished"  # its output exists, whole or cut short: take custody
    GONE = "gone"  # it ended with nothing to adopt (it failed, or was cancelled)
    UNKNOWN = "unknown"  # the provider said something iipub does not know: read again, never a loss


LIVE = frozenset({Stage.WAITING, Stage.RUNNING})


class FailureCause(enum.StrEnum):
    """Why a response that failed failed, as far as paying again is concerned."""

    PROVIDER_FAULT = "provider_fault"  # the provider's own trouble: paying again may succeed
    REFUSAL = "refusal"  # the prompt or policy: paying again gives the same answer


class RefusalKind(enum.StrEnum):
    """Why the provider refused a create, in iipub's words: in every case nothing ran and nothing
    was charged (`Refused`)."""

    QUOTA = "quota"  # the account cannot pay (quota or billing): not "slow down"
    CAPACITY = "capacity"  # an economy-tier create: no capacity now (not the account's rate limit)
    RATE = "rate"  # the account's rate limit: slow down
    PARAMETER = "parameter"  # the model refuses a parameter of the request (`Refused.param`)
    ACCESS = "access"  # the account has no access to the model (`Refused.model`)
    TOO_LARGE = "too_large"  # the request exceeds a tokens-per-minute limit (`limit`, `requested`)
    UNSENT = "unsent"  # nothing reached the provider (no connection, no client, no ledger line)


# Refusals that say the account is limited: the creates of every process cool down.
# (A request too large is the request's own: it holds its product, it cools nothing down.)
ACCOUNT_LIMITS = frozenset({RefusalKind.QUOTA, RefusalKind.RATE})


@dataclass(frozen=True)
class CreateRequest:
    job_id: str
    product: Product
    edition_date: dt.date
    attempt: int
    fingerprint: str
    installation: str = ""  # this database's installation id (`iipub.store.installation`)
    tier: str = "default"  # the tier the create asks for: "flex" (cheaper, slower) or "default"


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    output_tokens: int
    total_tokens: int


@dataclass(frozen=True)
class Accepted:
    """The provider took the job: it will be charged."""

    response_id: str
    status: str  # the provider's own word for where it stands (opaque: journaled, never compared)
    tier: str | None = None  # the tier the response reports it runs at


@dataclass(frozen=True)
class Observed:
    """A readable response: where it stands (`stage`) and, once finished, its output. `status`,
    `cut_reason`, `error` and `error_code` are what the provider said, kept for the journal and
    never compared: the adapter has said what they mean in `stage`, `at_cap` and `failure`."""

    response_id: str
    status: str
    output_text: str | None
    usage: Usage | None
    metadata: dict[str, str] = field(default_factory=dict)
    cut_reason: str | None = None  # why a finished output is cut short, in the provider's words
    error: str | None = None
    error_code: str | None = None
    completed_at: float | None = None  # the provider's own completion time (Unix seconds), if it says
    created_at: float | None = None  # ... and its creation time, on the same (the provider's) clock
    tier: str | None = None
    refusal: str | None = None  # the text of the final answer's refusal parts, if the model refused
    stage: Stage = field(kw_only=True)
    at_cap: bool = field(default=False, kw_only=True)  # finished, cut at the request's output cap
    filtered: bool = field(default=False, kw_only=True)  # finished, cut by the provider's content filter
    failure: FailureCause | None = field(default=None, kw_only=True)  # gone: why it failed (None: cancelled)

    @property
    def finished(self) -> bool:
        return self.stage is Stage.FINISHED

    @property
    def live(self) -> bool:
        return self.stage in LIVE

    @property
    def gone(self) -> bool:
        return self.stage is Stage.GONE


@dataclass(frozen=True)
class Deleted:
    response_id: str


@dataclass(frozen=True)
class Refused:
    """The provider definitively did not process the create; nothing was charged. `kind` says
    why in iipub's words; `code` is the provider's own (opaque: journaled, never compared)."""

    retry_after: float | None
    why: str
    code: str | None = None
    kind: RefusalKind = field(kw_only=True)
    unreachable: bool = False  # no connection could be made: the provider was not reached
    param: str | None = None  # PARAMETER: the refused parameter (`temperature`, `reasoning.effort`, …)
    model: str | None = None  # ACCESS: the model the account cannot use
    limit: int | None = None  # TOO_LARGE: the tokens-per-minute limit, when the provider said it
    requested: int | None = None  # TOO_LARGE: the tokens the request asked for, when it said it
    status: int | None = None  # the HTTP status of the answer, when there was one

    @property
    def capacity(self) -> bool:
        return self.kind is RefusalKind.CAPACITY


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
    """The provider does not know the response (expired, deleted, or a spurious answer)."""

    why: str


@dataclass(frozen=True)
class Transient:
    """A read or cleanup call failed in a way that is safe to repeat later."""

    retry_after: float | None
    why: str
    unreachable: bool = False  # no connection could be made: the provider was not reached


@dataclass(frozen=True)
class SavedResponse:
    """A response saved from the provider (a file an operator recovered): its output text and what
    it says of itself. `source` names what held the text; `status` is the provider's own word."""

    text: str
    source: str
    response_id: str | None = None
    status: str | None = None
    usage: Usage | None = None
    metadata: dict[str, str] = field(default_factory=dict)


class EventKind(enum.StrEnum):
    """What a verified webhook delivery announces, in iipub's words."""

    RESPONSE_ENDED = "response_ended"  # a response finished or is gone: read it (`response_id`)
    OTHER = "other"  # an event the provider sends that is about something else: recorded, ignored
    UNKNOWN = "unknown"  # an event iipub does not know: counted, nothing done
    TEST = "test"  # `iipub webhook test-delivery`: verified, nothing recorded


@dataclass(frozen=True)
class VerifiedEvent:
    """A webhook delivery whose signature was verified. `type` is the provider's own name for
    the event (opaque: recorded and logged, never compared); `kind` says what it means."""

    webhook_id: str
    event_id: str | None
    type: str
    response_id: str | None
    created_at: int | None
    kind: EventKind


class DeliveryRejected(Exception):
    """A webhook delivery answered 400: not verified, or not understood."""


CreateOutcome = Accepted | Refused | Ambiguous | Rejected
ReadOutcome = Observed | Missing | Transient | Rejected
DeleteOutcome = Deleted | Missing | Transient | Rejected


def failure_text(outcome: Transient | Rejected) -> str:
    """One line for a failed read or cleanup call."""
    return outcome.why if isinstance(outcome, Transient) else f"HTTP {outcome.status}: {outcome.why}"


class Standing(enum.StrEnum):
    """What the provider says of a model for this account, asked free of charge (`look_up`)."""

    AVAILABLE = "available"  # it exists and this project may use it
    NO_ACCESS = "no_access"  # it exists, but this project may not use it
    UNKNOWN = "unknown"  # no such model (retired, misspelled), or none this account can see
    KEY_REFUSED = "key_refused"  # the key itself is refused (revoked, wrong, malformed)
    SCOPE_REFUSED = "scope_refused"  # the organization or project does not go with the key
    ACCOUNT_REFUSED = "account_refused"  # the account, its country or its standing is refused
    UNANSWERED = "unanswered"  # no usable answer (transport, 5xx, a rate limit): ask again later


@dataclass(frozen=True)
class ModelLookup:
    """One model as the provider described it to this account (`Provider.look_up`)."""

    model: str
    standing: Standing
    why: str = ""  # the provider's words, one clipped line
    status: int | None = None  # the HTTP status, when there was an answer
