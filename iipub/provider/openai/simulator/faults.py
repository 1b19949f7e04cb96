"""Fault rules: which request misbehaves, how, and how often.

A rule names an operation, a fault, and optionally the job it targets, how many times it
fires and with what probability. Per-run rules (constructor / CLI) fire forever by default;
per-request rules (control endpoint) fire once by default. A rule may also be limited to a
window of simulated time (`after_seconds` <= now < `until_seconds`, on the simulator's clock).
Webhook faults use the op `webhook`: they are drawn when a background response's finish is
announced, against its `iipub_job_id` like any other fault.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from iipub.core.errors import ConfigError

OPS = ("create", "retrieve", "cancel", "delete", "model")  # the API operations requests are counted by
WEBHOOK_OP = "webhook"  # not a request the simulator receives: one it sends

# Faults that decide how one HTTP exchange goes.
DROP_AFTER_ACCEPT = "drop_after_accept"
SLOW = "slow"
RATE_LIMIT = "rate_limit"
RATE_LIMIT_LONG = "rate_limit_long"
SERVER_ERROR = "server_error"
UNAUTHORIZED = "unauthorized"
NOT_FOUND = "not_found"
CANCEL_RACE = "cancel_race"
QUOTA_EXHAUSTED = "quota_exhausted"
SERVICE_UNAVAILABLE = "service_unavailable"
# Flex mode: a create asking for service_tier "flex" answers 429 Resource Unavailable.
FLEX_UNAVAILABLE = "flex_unavailable"
# Flex refusals in the other body shapes seen for "429 Resource Unavailable".
FLEX_UNAVAILABLE_BARE = "flex_unavailable_bare"
FLEX_UNAVAILABLE_OVERLOADED = "flex_unavailable_overloaded"
# An account's limits, in the bodies OpenAI sends (quoted in public reports of real answers):
# a project without access to the model (403 model_not_found, create and models endpoint alike),
# a model that does not exist (404 model_not_found), a create larger than the organization's
# tokens-per-minute limit (429 "Request too large", type tokens), a request-rate 429 whose tokens
# reset is far off (the hint that concerns it is the requests one), a tokens-rate 429, and a
# request from a country the API does not serve (403 request_forbidden).
NO_MODEL_ACCESS = "no_model_access"
MODEL_NOT_FOUND = "model_not_found"
REQUEST_TOO_LARGE = "request_too_large"
RATE_LIMIT_REQUESTS = "rate_limit_requests"
RATE_LIMIT_TOKENS = "rate_limit_tokens"
UNSUPPORTED_COUNTRY = "unsupported_country"
ACCOUNT_FAULTS = (NO_MODEL_ACCESS, MODEL_NOT_FOUND, REQUEST_TOO_LARGE, RATE_LIMIT_REQUESTS, RATE_LIMIT_TOKENS,
                  UNSUPPORTED_COUNTRY)
# Read faults: a retrieve answers 200 with the response misreported; the response is unchanged.
REPORT_CANCELLED = "report_cancelled"
REPORT_FAILED = "report_failed"
UNKNOWN_STATUS = "unknown_status"
READ_FAULTS = (REPORT_CANCELLED, REPORT_FAILED, UNKNOWN_STATUS)
EXCHANGE_FAULTS = (
    DROP_AFTER_ACCEPT,
    SLOW,
    RATE_LIMIT,
    RATE_LIMIT_LONG,
    SERVER_ERROR,
    UNAUTHORIZED,
    NOT_FOUND,
    CANCEL_RACE,
    QUOTA_EXHAUSTED,
    SERVICE_UNAVAILABLE,
    FLEX_UNAVAILABLE,
    FLEX_UNAVAILABLE_BARE,
    FLEX_UNAVAILABLE_OVERLOADED,
    *ACCOUNT_FAULTS,
    *READ_FAULTS,
)
# Faults that answer without doing anything.
REFUSING_FAULTS = (RATE_LIMIT, RATE_LIMIT_LONG, SERVER_ERROR, UNAUTHORIZED, NOT_FOUND, QUOTA_EXHAUSTED,
                   SERVICE_UNAVAILABLE, RATE_LIMIT_REQUESTS, RATE_LIMIT_TOKENS, UNSUPPORTED_COUNTRY)
# The status an `unknown_status` read reports: not one the API documents.
UNKNOWN_STATUS_VALUE = "paused"

# Faults bound to a response when it is created: they shape how it ends and what it says.
FAIL = "fail"
INCOMPLETE = "incomplete"
CONTENT_FILTER = "content_filter"  # incomplete, `incomplete_details.reason` content_filter (the SDK's literal)
MALFORMED_OUTPUT = "malformed_output"
SCHEMA_BREAK = "schema_break"
HALLUCINATED_URLS = "hallucinated_urls"
SCRIPT_INJECTION = "script_injection"
SAME_TEXT = "same_text"
CORRUPT_LANGUAGE = "corrupt_language"
OVERSIZED_OUTPUT = "oversized_output"
FAIL_REFUSED = "fail_refused"
FAIL_POLICY = "fail_policy"
FAIL_UNKNOWN_CODE = "fail_unknown_code"
CANCELLED_THEN_COMPLETED = "cancelled_then_completed"
# Output shapes the real API writes (openai/types/responses: ResponseReasoningItem, the `phase` of
# ResponseOutputMessage, ResponseOutputRefusal); each publishes, or parks with the refusal's text.
OUTPUT_REASONING = "output_reasoning"
OUTPUT_PHASES = "output_phases"
OUTPUT_PARTS = "output_parts"
OUTPUT_REFUSAL = "output_refusal"
OUTPUT_SHAPES = (OUTPUT_REASONING, OUTPUT_PHASES, OUTPUT_PARTS, OUTPUT_REFUSAL)
# The `error.code` each failing content fault ends with.
FAIL_CODES: dict[str, str] = {
    FAIL: "server_error",
    FAIL_REFUSED: "invalid_prompt",
    FAIL_POLICY: "bio_policy",
    FAIL_UNKNOWN_CODE: "mystery_error",  # not in the SDK's literal list
}
CONTENT_FAULTS = (
    FAIL,
    INCOMPLETE,
    CONTENT_FILTER,
    MALFORMED_OUTPUT,
    SCHEMA_BREAK,
    HALLUCINATED_URLS,
    SCRIPT_INJECTION,
    SAME_TEXT,
    CORRUPT_LANGUAGE,
    OVERSIZED_OUTPUT,
    FAIL_REFUSED,
    FAIL_POLICY,
    FAIL_UNKNOWN_CODE,
    CANCELLED_THEN_COMPLETED,
    *OUTPUT_SHAPES,
)

# Faults on the webhook the simulator sends when a background response finishes.
WEBHOOK_DROPPED = "webhook_dropped"
WEBHOOK_DUPLICATE = "webhook_duplicate"
WEBHOOK_LATE = "webhook_late"
WEBHOOK_OUT_OF_ORDER = "webhook_out_of_order"
WEBHOOK_BAD_SIGNATURE = "webhook_bad_signature"
WEBHOOK_REPLAYED = "webhook_replayed"
WEBHOOK_FAULTS = (
    WEBHOOK_DROPPED,
    WEBHOOK_DUPLICATE,
    WEBHOOK_LATE,
    WEBHOOK_OUT_OF_ORDER,
    WEBHOOK_BAD_SIGNATURE,
    WEBHOOK_REPLAYED,
)

FAULTS = EXCHANGE_FAULTS + CONTENT_FAULTS + WEBHOOK_FAULTS

# Which operations each fault makes sense for; the first is the default op.
ALLOWED_OPS: dict[str, tuple[str, ...]] = {
    DROP_AFTER_ACCEPT: OPS,
    SLOW: OPS,
    RATE_LIMIT: OPS,
    RATE_LIMIT_LONG: OPS,
    SERVER_ERROR: OPS,
    UNAUTHORIZED: OPS,
    NOT_FOUND: ("retrieve", "cancel", "delete"),
    CANCEL_RACE: ("cancel",),
    QUOTA_EXHAUSTED: ("create",),
    SERVICE_UNAVAILABLE: ("create", "retrieve", "cancel", "delete"),
    FLEX_UNAVAILABLE: ("create",),
    FLEX_UNAVAILABLE_BARE: ("create",),
    FLEX_UNAVAILABLE_OVERLOADED: ("create",),
    NO_MODEL_ACCESS: ("create", "model"),
    MODEL_NOT_FOUND: ("create", "model"),
    REQUEST_TOO_LARGE: ("create",),
    RATE_LIMIT_REQUESTS: OPS,
    RATE_LIMIT_TOKENS: ("create",),
    UNSUPPORTED_COUNTRY: OPS,
    **dict.fromkeys(READ_FAULTS, ("retrieve",)),
    **dict.fromkeys(CONTENT_FAULTS, ("create",)),
    **dict.fromkeys(WEBHOOK_FAULTS, (WEBHOOK_OP,)),
}

DESCRIPTIONS: dict[str, str] = {
    DROP_AFTER_ACCEPT: "do the operation (a create IS created and counted), then close the socket unanswered",
    SLOW: "do the operation, answer only after slow_seconds (real time)",
    RATE_LIMIT: "429 with retry-after: 2 and x-ratelimit-reset-requests: 2s; nothing done",
    RATE_LIMIT_LONG: "429 with retry-after: 600 (ten minutes, the longest hint iipub honours); nothing done",
    SERVER_ERROR: "500; nothing done",
    UNAUTHORIZED: "401; nothing done",
    NOT_FOUND: "404 for a response that still exists",
    CANCEL_RACE: "cancelling an unfinished response completes it instead",
    QUOTA_EXHAUSTED: "429 insufficient_quota (billing), no retry-after; nothing done",
    SERVICE_UNAVAILABLE: "503 'The server is overloaded or not ready yet.'; nothing done",
    FLEX_UNAVAILABLE: "a create asking for service_tier flex answers 429 resource_unavailable (no flex capacity, "
    "not charged); other creates are unaffected",
    NO_MODEL_ACCESS: "403 model_not_found 'Project `proj_…` does not have access to model `M`'; nothing done",
    MODEL_NOT_FOUND: "404 model_not_found 'The model `M` does not exist or you do not have access to it.'",
    REQUEST_TOO_LARGE: ("429 rate_limit_exceeded (type tokens) 'Request too large for M … on tokens per min (TPM): "
                        "Limit 30000, Requested N.'; nothing done, and the same request is refused every time"),
    RATE_LIMIT_REQUESTS: ("429 rate_limit_exceeded (type requests), x-ratelimit-reset-requests: 1s while "
                          "x-ratelimit-reset-tokens: 6m0s, no retry-after; nothing done"),
    RATE_LIMIT_TOKENS: ("429 rate_limit_exceeded (type tokens) 'Rate limit reached … on tokens per min', "
                        "x-ratelimit-reset-tokens: 6m0s while x-ratelimit-reset-requests: 1s; nothing done"),
    UNSUPPORTED_COUNTRY: "403 unsupported_country_region_territory (type request_forbidden); nothing done",
    REPORT_CANCELLED: "200 showing the response 'cancelled' (no output, no usage); it is unchanged",
    REPORT_FAILED: "200 showing the response 'failed' (server_error); it is unchanged",
    UNKNOWN_STATUS: f"200 showing the undocumented status {UNKNOWN_STATUS_VALUE!r}; the response is unchanged",
    FAIL: "the response ends 'failed' with server_error",
    INCOMPLETE: "the response ends 'incomplete' (max_output_tokens) with truncated output",
    CONTENT_FILTER: "the response ends 'incomplete' (content_filter): the provider's content filter cut its output",
    MALFORMED_OUTPUT: "the output text is not JSON",
    SCHEMA_BREAK: "the output JSON lacks a language",
    HALLUCINATED_URLS: "sources point at localhost, private IPs, example.com, javascript:",
    SCRIPT_INJECTION: "headlines carry <script> and a source is javascript:",
    SAME_TEXT: "every language has identical text",
    CORRUPT_LANGUAGE: ("the last language's sources link to hosts that are never public: that language alone "
                       "fails validation (`--corrupt-lang LANG` names the language for a whole run)"),
    OVERSIZED_OUTPUT: "the output text is larger than 1 MB",
    FAIL_REFUSED: "the response ends 'failed' with invalid_prompt (the prompt is refused, every time)",
    FAIL_POLICY: "the response ends 'failed' with bio_policy",
    FAIL_UNKNOWN_CODE: "the response ends 'failed' with an error code the SDK does not list (mystery_error)",
    CANCELLED_THEN_COMPLETED: "the first read after it completes shows 'cancelled'; later reads 'completed'",
    OUTPUT_REASONING: "the output starts with a reasoning item (summary, encrypted content) before the message",
    OUTPUT_PHASES: "a phase 'commentary' message (prose, not JSON) precedes the phase 'final_answer' message",
    OUTPUT_PARTS: "the answer's text comes in three output_text parts of one message",
    OUTPUT_REFUSAL: "the model refuses: the message holds one refusal part and no output_text",
    FLEX_UNAVAILABLE_BARE: "a flex create answers 429 with an error body of message only (no type, no code)",
    FLEX_UNAVAILABLE_OVERLOADED: ("a flex create answers 429 'Resource Unavailable' with type 'server_error' and "
                                  "code null"),
    WEBHOOK_DROPPED: "the response's finish event is never sent",
    WEBHOOK_DUPLICATE: "the event is delivered twice in a row (same webhook-id and body, each freshly signed)",
    WEBHOOK_LATE: "the event is sent only after webhook_late_seconds (real time)",
    WEBHOOK_OUT_OF_ORDER: "the event is held until another response's event has been sent "
    "(webhook_late_seconds at most)",
    WEBHOOK_BAD_SIGNATURE: "the first attempt is signed with a wrong key; the retry is signed correctly",
    WEBHOOK_REPLAYED: "after the genuine delivery the same webhook-id and body arrive again, "
    "correctly signed for a timestamp 600 s old",
}


@dataclass
class FaultRule:
    op: str
    fault: str
    job_id: str | None = None
    times: int | None = None  # None: unlimited
    probability: float = 1.0
    after_seconds: float | None = None  # simulated seconds; fires only while after <= now < until
    until_seconds: float | None = None

    def active_at(self, now: float) -> bool:
        if self.after_seconds is not None and now < self.after_seconds:
            return False
        return self.until_seconds is None or now < self.until_seconds

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rule_from_dict(raw: Mapping[str, Any], *, default_times: int | None) -> FaultRule:
    """Validate one rule; `op` may be omitted and defaults to the fault's natural op."""
    if not isinstance(raw, Mapping):
        raise ConfigError("a fault rule must be a JSON object")
    unknown = set(raw) - {"op", "fault", "job_id", "times", "probability", "after_seconds", "until_seconds"}
    if unknown:
        raise ConfigError(f"unknown fault rule key(s): {', '.join(sorted(unknown))}")
    fault = raw.get("fault")
    if fault not in ALLOWED_OPS:
        raise ConfigError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
    op = raw.get("op") or ALLOWED_OPS[fault][0]
    if op not in ALLOWED_OPS[fault]:
        raise ConfigError(f"fault {fault!r} does not apply to op {op!r} (allowed: {', '.join(ALLOWED_OPS[fault])})")
    job_id = raw.get("job_id")
    if job_id is not None and not isinstance(job_id, str):
        raise ConfigError("fault rule job_id must be a string")
    times = raw.get("times", default_times)
    if times is not None and (isinstance(times, bool) or not isinstance(times, int) or times < 1):
        raise ConfigError("fault rule times must be a positive integer")
    probability = raw.get("probability", 1.0)
    if isinstance(probability, bool) or not isinstance(probability, (int, float)) or not 0 <= probability <= 1:
        raise ConfigError("fault rule probability must be between 0 and 1")
    window: list[float | None] = []
    for key in ("after_seconds", "until_seconds"):
        value = raw.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0
                                  or value == float("inf")):
            raise ConfigError(f"fault rule {key} must be a finite number >= 0")
        window.append(None if value is None else float(value))
    after, until = window
    if after is not None and until is not None and not after < until:
        raise ConfigError("fault rule after_seconds must be less than until_seconds")
    return FaultRule(
        op=op, fault=fault, job_id=job_id, times=times, probability=float(probability),
        after_seconds=after, until_seconds=until,
    )


def parse_fault_spec(spec: str) -> FaultRule:
    """`NAME[@OP][:PROBABILITY][*TIMES][~START..END]`, as given to `iipub simulator --fault`.

    Parts come in that order. Without `*TIMES` the rule fires every time; `~START..END` limits
    it to simulated seconds START <= now < END since the simulator started (either end may be
    left out: `~30..`, `~..60`)."""
    text = spec.strip()
    raw: dict[str, Any] = {}
    if "~" in text:
        text, _, window = text.rpartition("~")
        start, sep, end = window.partition("..")
        if not sep:
            raise ConfigError(f"--fault {spec!r}: the window must be ~START..END (simulated seconds)")
        for key, part in (("after_seconds", start), ("until_seconds", end)):
            if part.strip():
                raw[key] = _number(spec, part, "window bound")
    if "*" in text:
        text, _, times_text = text.rpartition("*")
        try:
            raw["times"] = int(times_text)
        except ValueError:
            raise ConfigError(f"--fault {spec!r}: times must be a positive integer") from None
    probability: float = 1.0
    if ":" in text:
        text, _, prob_text = text.rpartition(":")
        probability = _number(spec, prob_text, "probability")
    name, _, op = text.partition("@")
    raw |= {"fault": name, "probability": probability}
    if op:
        raw["op"] = op
    return rule_from_dict(raw, default_times=None)


def parse_outage_spec(spec: str) -> FaultRule:
    """`START:END`, as given to `iipub simulator --outage`: every create answers 503
    (`service_unavailable`) while START <= simulated seconds since start < END."""
    start, sep, end = spec.strip().partition(":")
    if not sep or not start.strip() or not end.strip():
        raise ConfigError(f"--outage {spec!r}: expected START:END in simulated seconds")
    raw = {
        "fault": SERVICE_UNAVAILABLE,
        "op": "create",
        "after_seconds": _number(spec, start, "outage bound", flag="--outage"),
        "until_seconds": _number(spec, end, "outage bound", flag="--outage"),
    }
    return rule_from_dict(raw, default_times=None)


def _number(spec: str, text: str, what: str, *, flag: str = "--fault") -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{flag} {spec!r}: {what} {text.strip()!r} is not a number") from None


class FaultBook:
    """The active rules. Thread-safe; the random source is seeded for reproducible runs.
    `now` is the clock rule windows are read against (simulated seconds)."""

    def __init__(
        self, rules: Iterable[FaultRule] = (), seed: int | None = None, now: Callable[[], float] | None = None
    ) -> None:
        self._now = now or (lambda: 0.0)
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = [FaultRule(**r.to_dict()) for r in rules]
        self._rng = random.Random(seed)

    def add(self, rules: Iterable[FaultRule]) -> None:
        with self._lock:
            self._rules.extend(rules)

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def replace(self, rules: Iterable[FaultRule]) -> None:
        with self._lock:
            self._rules = [FaultRule(**r.to_dict()) for r in rules]

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.to_dict() for r in self._rules]

    def take(self, op: str, job_id: str | None, names: Iterable[str], *, limit: int | None = None) -> list[str]:
        """Fire up to `limit` matching rules whose fault is in `names`, in rule order;
        return the faults that fired. A rule that fires uses up one of its `times`."""
        wanted = set(names)
        fired: list[str] = []
        with self._lock:
            now: float | None = None
            for rule in list(self._rules):
                if limit is not None and len(fired) >= limit:
                    break
                if rule.op != op or rule.fault not in wanted:
                    continue
                if rule.job_id is not None and rule.job_id != job_id:
                    continue
                if rule.after_seconds is not None or rule.until_seconds is not None:
                    now = self._now() if now is None else now
                    if not rule.active_at(now):
                        continue
                if rule.probability < 1.0 and self._rng.random() >= rule.probability:
                    continue
                fired.append(rule.fault)
                if rule.times is not None:
                    rule.times -= 1
                    if rule.times <= 0:
                        self._rules.remove(rule)
        return fired

    def take_first(self, op: str, job_id: str | None, names: Iterable[str]) -> str | None:
        fired = self.take(op, job_id, names, limit=1)
        return fired[0] if fired else None
