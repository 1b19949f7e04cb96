"""What the provider said, as values: the closed sets of outcomes the adapter returns and the
per-state decisions consume. Pure: no HTTP import.

The Responses API's documented statuses are grouped here once; everything else that compares
a provider status uses these groups.
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
from dataclasses import dataclass, field
from typing import Any

from iipub.settings.config import Product

# Documented statuses of a Responses API response.
LIVE_STATUSES = frozenset({"queued", "in_progress"})
FINISHED_STATUSES = frozenset({"completed", "incomplete"})  # output exists: take custody
DEAD_STATUSES = frozenset({"failed", "cancelled"})  # nothing to adopt
KNOWN_STATUSES = LIVE_STATUSES | FINISHED_STATUSES | DEAD_STATUSES




class FailureCause(enum.StrEnum):
    PROVIDER_FAULT = "provider_fault"  # the provider's own trouble: paying again may succeed
    REFUSAL = "refusal"  # the prompt or policy: paying again gives the same answer


# Why a response ended `failed`, by its `error.code`: the codes of the Responses API's
# `ResponseError` (openai-python `types/responses/response_error.py`). iipub sends text only,
# so every input-image problem is a problem of the request itself: a refusal.
FAILURE_CAUSES: dict[str, FailureCause] = {
    "server_error": FailureCause.PROVIDER_FAULT,
    "rate_limit_exceeded": FailureCause.PROVIDER_FAULT,
    "vector_store_timeout": FailureCause.PROVIDER_FAULT,
    "invalid_prompt": FailureCause.REFUSAL,
    "bio_policy": FailureCause.REFUSAL,
    "data_residency_mismatch": FailureCause.REFUSAL,
    "image_content_policy_violation": FailureCause.REFUSAL,
    **dict.fromkeys((
        "invalid_image", "invalid_image_format", "invalid_base64_image", "invalid_image_url", "image_too_large",
        "image_too_small", "image_parse_error", "invalid_image_mode", "image_file_too_large",
        "unsupported_image_media_type", "empty_image_file", "failed_to_download_image", "image_file_not_found",
    ), FailureCause.REFUSAL),
}


def failure_cause(code: str | None) -> FailureCause:
    """An unrecognised (or missing) code is treated as the safer of the two: a refusal, so
    nothing is paid again without a human."""
    return FAILURE_CAUSES.get(code or "", FailureCause.REFUSAL)


# 429 codes that mean the account cannot pay (error `code` or `type`), not "slow down".
QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached", "billing_not_active"})
# A flex create answered 429 "Resource Unavailable": the provider has no flex capacity now. The
# provider's flex documentation names the status and title only; the error's `code` or `type`
# is matched against these (and the title in its message), never a quota code. Not charged; a
# capacity refusal of flex, not a rate limit of the account.
CAPACITY_CODES = frozenset({"resource_unavailable", "resource_unavailable_error", "flex_capacity_unavailable"})
CAPACITY_CODE = "resource_unavailable"
# A 429 whose code or type says the account's rate limit (tokens or requests), not flex capacity.
RATE_LIMIT_CODES = frozenset({"rate_limit_exceeded", "requests", "tokens", "rate_limit_error"})
# 400 invalid_request_error codes that name a refused parameter (with `param`, or quoted in the
# message when `param` is null): the request was refused before anything ran.
PARAM_CODES = frozenset({"unsupported_value", "unsupported_parameter", "invalid_value", "integer_below_min_value",
                         "integer_above_max_value", "invalid_json_schema", "invalid_type", "unknown_parameter",
                         "missing_required_parameter", "decimal_below_min_value", "decimal_above_max_value",
                         "string_above_max_length", "invalid_enum_value"})


def scope_of(organization: str | None, project: str | None, api_key: str | None) -> str:
    """The scope a request is made under, as a job records it: the organization, the project and
    a fingerprint of the key (never the key). A response is visible only in the organization and
    project it was created in; with neither named, the key's own project is the scope."""
    key = hashlib.sha256((api_key or "").encode()).hexdigest()[:16] if api_key else "-"
    return f"org={organization or '-'} project={project or '-'} key={key}"


def same_scope(recorded: str, current: str) -> bool:
    """Whether a read under `current` reaches what was created under `recorded`: the same
    organization and project when the create named a project, else the same key too."""
    def parts(scope: str) -> dict[str, str]:
        return dict(p.split("=", 1) for p in scope.split() if "=" in p)

    a, b = parts(recorded), parts(current)
    if a.get("org") != b.get("org") or a.get("project") != b.get("project"):
        return False
    return a.get("project") not in (None, "-") or a.get("key") == b.get("key")


@dataclass(frozen=True)
class CreateRequest:
    job_id: str
    product: Product
    edition_date: dt.date
    attempt: int
    fingerprint: str
    installation: str = ""  # this database's installation id (`iipub.store.installation`)
    service_tier: str = "default"  # "flex" or "default": the Responses API's `service_tier`


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
    service_tier: str | None = None  # the tier the response reports it runs at


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
    completed_at: float | None = None  # the provider's own completion time (Unix seconds), if it says
    created_at: float | None = None  # ... and its creation time, on the same (the provider's) clock
    service_tier: str | None = None
    refusal: str | None = None  # the text of the final answer's refusal parts, if the model refused

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
    capacity: bool = False  # a flex create refused for capacity: no cool-down, no breaker
    unreachable: bool = False  # no connection could be made: the provider was not reached
    # A 400 invalid_request_error naming the parameter the model refuses (`temperature`,
    # `reasoning.effort`, …): the product's creates are held until its configuration changes.
    param: str | None = None


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
    unreachable: bool = False  # no connection could be made: the provider was not reached


CreateOutcome = Accepted | Refused | Ambiguous | Rejected
ReadOutcome = Observed | Missing | Transient | Rejected
DeleteOutcome = Deleted | Missing | Transient | Rejected


def answer_messages(items: list[Any]) -> list[dict[str, Any]]:
    """The messages of a response's `output` that hold the answer, in order: reasoning items and
    tool calls are skipped; when messages carry a `phase`, only the `final_answer` ones (a
    `commentary` message is the model's preamble, not the edition)."""
    messages = [item for item in items if isinstance(item, dict) and item.get("type") == "message"
                and item.get("role", "assistant") == "assistant"]
    if any(m.get("phase") is not None for m in messages):
        return [m for m in messages if m.get("phase") == "final_answer"]
    return messages


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
