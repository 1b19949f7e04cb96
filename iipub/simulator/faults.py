"""Fault rules: which request misbehaves, how, and how often.

A rule names an operation, a fault, and optionally the job it targets, how many times it
fires and with what probability. Per-run rules (constructor / CLI) fire forever by default;
per-request rules (control endpoint) fire once by default.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import ConfigError

OPS = ("create", "retrieve", "cancel", "delete")

# Faults that decide how one HTTP exchange goes.
DROP_AFTER_ACCEPT = "drop_after_accept"
SLOW = "slow"
RATE_LIMIT = "rate_limit"
SERVER_ERROR = "server_error"
UNAUTHORIZED = "unauthorized"
NOT_FOUND = "not_found"
CANCEL_RACE = "cancel_race"
EXCHANGE_FAULTS = (DROP_AFTER_ACCEPT, SLOW, RATE_LIMIT, SERVER_ERROR, UNAUTHORIZED, NOT_FOUND, CANCEL_RACE)
# Faults that answer without doing anything.
REFUSING_FAULTS = (RATE_LIMIT, SERVER_ERROR, UNAUTHORIZED, NOT_FOUND)

# Faults bound to a response when it is created: they shape how it ends and what it says.
FAIL = "fail"
INCOMPLETE = "incomplete"
MALFORMED_OUTPUT = "malformed_output"
SCHEMA_BREAK = "schema_break"
HALLUCINATED_URLS = "hallucinated_urls"
SCRIPT_INJECTION = "script_injection"
SAME_TEXT = "same_text"
OVERSIZED_OUTPUT = "oversized_output"
CONTENT_FAULTS = (
    FAIL,
    INCOMPLETE,
    MALFORMED_OUTPUT,
    SCHEMA_BREAK,
    HALLUCINATED_URLS,
    SCRIPT_INJECTION,
    SAME_TEXT,
    OVERSIZED_OUTPUT,
)

FAULTS = EXCHANGE_FAULTS + CONTENT_FAULTS

# Which operations each fault makes sense for; the first is the default op.
ALLOWED_OPS: dict[str, tuple[str, ...]] = {
    DROP_AFTER_ACCEPT: OPS,
    SLOW: OPS,
    RATE_LIMIT: OPS,
    SERVER_ERROR: OPS,
    UNAUTHORIZED: OPS,
    NOT_FOUND: ("retrieve", "cancel", "delete"),
    CANCEL_RACE: ("cancel",),
    **{name: ("create",) for name in CONTENT_FAULTS},
}

DESCRIPTIONS: dict[str, str] = {
    DROP_AFTER_ACCEPT: "do the operation (a create IS created and counted), then close the socket unanswered",
    SLOW: "do the operation, answer only after slow_seconds (real time)",
    RATE_LIMIT: "429 with retry-after: 2 and x-ratelimit-reset-requests: 2s; nothing done",
    SERVER_ERROR: "500; nothing done",
    UNAUTHORIZED: "401; nothing done",
    NOT_FOUND: "404 for a response that still exists",
    CANCEL_RACE: "cancelling an unfinished response completes it instead",
    FAIL: "the response ends 'failed' with an error",
    INCOMPLETE: "the response ends 'incomplete' (max_output_tokens) with truncated output",
    MALFORMED_OUTPUT: "the output text is not JSON",
    SCHEMA_BREAK: "the output JSON lacks a language",
    HALLUCINATED_URLS: "sources point at localhost, private IPs, example.com, javascript:",
    SCRIPT_INJECTION: "headlines carry <script> and a source is javascript:",
    SAME_TEXT: "every language has identical text",
    OVERSIZED_OUTPUT: "the output text is larger than 1 MB",
}


@dataclass
class FaultRule:
    op: str
    fault: str
    job_id: str | None = None
    times: int | None = None  # None: unlimited
    probability: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rule_from_dict(raw: Mapping[str, Any], *, default_times: int | None) -> FaultRule:
    """Validate one rule; `op` may be omitted and defaults to the fault's natural op."""
    if not isinstance(raw, Mapping):
        raise ConfigError("a fault rule must be a JSON object")
    unknown = set(raw) - {"op", "fault", "job_id", "times", "probability"}
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
    return FaultRule(op=op, fault=fault, job_id=job_id, times=times, probability=float(probability))


def parse_fault_spec(spec: str) -> FaultRule:
    """`NAME[@OP][:PROBABILITY]`, as given to `iipub simulator --fault` (fires every time)."""
    text = spec.strip()
    probability: float = 1.0
    if ":" in text:
        text, _, prob_text = text.rpartition(":")
        try:
            probability = float(prob_text)
        except ValueError:
            raise ConfigError(f"--fault {spec!r}: probability must be a number") from None
    name, _, op = text.partition("@")
    raw: dict[str, Any] = {"fault": name, "probability": probability}
    if op:
        raw["op"] = op
    return rule_from_dict(raw, default_times=None)


class FaultBook:
    """The active rules. Thread-safe; the random source is seeded for reproducible runs."""

    def __init__(self, rules: Iterable[FaultRule] = (), seed: int | None = None) -> None:
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
            for rule in list(self._rules):
                if limit is not None and len(fired) >= limit:
                    break
                if rule.op != op or rule.fault not in wanted:
                    continue
                if rule.job_id is not None and rule.job_id != job_id:
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
