"""OpenAI's words and what they mean in iipub's (`outcomes`), pure: the Responses API's statuses,
the reason a response stops short, the error codes of a failed response and of a refused create,
and the scope a request is made under.
"""

from __future__ import annotations

import hashlib
from typing import Any

from iipub.provider.outcomes import FailureCause, Observed, Stage, Usage

# Documented statuses of a Responses API response, and where each leaves it.
STAGES: dict[str, Stage] = {
    "queued": Stage.WAITING,
    "in_progress": Stage.RUNNING,
    "completed": Stage.FINISHED,
    "incomplete": Stage.FINISHED,  # output exists, cut short: take custody
    "failed": Stage.GONE,
    "cancelled": Stage.GONE,
}
LIVE_STATUSES = frozenset(s for s, stage in STAGES.items() if stage in (Stage.WAITING, Stage.RUNNING))
FINISHED_STATUSES = frozenset(s for s, stage in STAGES.items() if stage is Stage.FINISHED)
DEAD_STATUSES = frozenset(s for s, stage in STAGES.items() if stage is Stage.GONE)
KNOWN_STATUSES = frozenset(STAGES)
COMPLETED, CUT_SHORT, FAILED, CANCELLED = "completed", "incomplete", "failed", "cancelled"
# `incomplete_details.reason` of a response stopped at the request's `max_output_tokens`.
AT_OUTPUT_CAP = "max_output_tokens"
# ... and of one the provider's content filter stopped (the SDK's `IncompleteDetails.reason`).
CONTENT_FILTER = "content_filter"


def stage_of(status: str) -> Stage:
    return STAGES.get(status, Stage.UNKNOWN)


def observed(response_id: str, status: str, output_text: str | None = None, usage: Usage | None = None, *,
             incomplete_reason: str | None = None, error_code: str | None = None, **more: Any) -> Observed:
    """A response as the Responses API reported it, in iipub's words: where it stands, whether it
    was cut at its output cap, why it failed; what the API said is kept beside (`Observed`)."""
    return Observed(response_id, status, output_text, usage, cut_reason=incomplete_reason, error_code=error_code,
                    stage=stage_of(status), at_cap=status == CUT_SHORT and incomplete_reason == AT_OUTPUT_CAP,
                    filtered=status == CUT_SHORT and incomplete_reason == CONTENT_FILTER,
                    failure=failure_of(status, error_code), **more)


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


def failure_of(status: str, code: str | None) -> FailureCause | None:
    """Why a response that ended `failed` failed; None for any other status (a cancelled one too)."""
    return failure_cause(code) if status == FAILED else None


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
# A create for a model the project or key cannot use: 403 (`Project … does not have access to
# model …`) or 404 (`The model … does not exist or you do not have access to it.`).
MODEL_ACCESS_CODE = "model_not_found"


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


def answer_messages(items: list[Any]) -> list[dict[str, Any]]:
    """The messages of a response's `output` that hold the answer, in order: reasoning items and
    tool calls are skipped; when messages carry a `phase`, only the `final_answer` ones (a
    `commentary` message is the model's preamble, not the edition)."""
    messages = [item for item in items if isinstance(item, dict) and item.get("type") == "message"
                and item.get("role", "assistant") == "assistant"]
    if any(m.get("phase") is not None for m in messages):
        return [m for m in messages if m.get("phase") == "final_answer"]
    return messages
