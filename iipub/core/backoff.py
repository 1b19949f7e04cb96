"""How long to wait before asking the provider again.

The provider's own hints come first (`retry-after-ms`, `retry-after`, `x-ratelimit-reset-*`);
when it gives none, exponential backoff with jitter. Pure functions: no clock reads unless the
caller omits `now`, no sleeping. Header values are untrusted input: anything malformed is
ignored, never raised.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import math
import random
import re
from collections.abc import Mapping

# A hint beyond this is a bug or an attack on our scheduling, not advice.
MAX_DELAY_SECONDS = 86_400.0
JITTER = 0.2

_HINT_HEADERS = (
    "retry-after-ms",
    "retry-after",
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-tokens",
)

# Go's time.Duration text form as OpenAI sends it: "1s", "6m0s", "20ms", "1m30.5s", "1h2m3s".
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?|\.[0-9]+")


def delay_from_headers(headers: Mapping[str, str], now: dt.datetime | None = None) -> float | None:
    """The longest valid delay (seconds) the response headers ask for, or None if none is usable.

    `now` anchors an HTTP-date `retry-after`; it defaults to the current UTC time.
    Lookup is case-insensitive for `httpx.Headers` and plain dicts alike.
    """
    lowered = _lowercase(headers)
    found: list[float] = []
    for name in _HINT_HEADERS:
        raw = lowered.get(name)
        if raw is None:
            continue
        if name == "retry-after-ms":
            value = _decimal(raw)
            value = None if value is None else value / 1000.0
        elif name == "retry-after":
            value = parse_retry_after(raw, now)
        else:
            value = parse_go_duration(raw)
        if value is not None:
            found.append(min(value, MAX_DELAY_SECONDS))
    return max(found) if found else None


# A rate-limit hint is honoured up to this (ten minutes): a longer wait is not the provider's
# advice for this request but a far-off reset of another limit, and it would hold every create.
RATE_HINT_CAP_SECONDS = 600.0
_RESETS = {"requests": "x-ratelimit-reset-requests", "tokens": "x-ratelimit-reset-tokens"}
_REMAINING = {"requests": "x-ratelimit-remaining-requests", "tokens": "x-ratelimit-remaining-tokens"}


def rate_limit_delay(headers: Mapping[str, str], limit: str | None = None,
                     now: dt.datetime | None = None) -> float | None:
    """How long a refused request should wait, from the hint that concerns it, or None.

    `retry-after-ms`, then `retry-after`: the provider's answer for this request. Without
    them, the reset of the limit that refused it: `limit` ("requests" or "tokens", the error's
    type), else the one whose `x-ratelimit-remaining-*` is 0, else the sooner of the two (a
    requests limit resetting in 1 s does not wait out a tokens reset of 6 minutes). Bounded by
    `RATE_HINT_CAP_SECONDS`."""
    lowered = _lowercase(headers)
    value: float | None = None
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        ms = _decimal(raw_ms)
        value = None if ms is None else ms / 1000.0
    if value is None:
        value = parse_retry_after(lowered.get("retry-after"), now)
    if value is None:
        resets = {kind: parse_go_duration(lowered[name]) for kind, name in _RESETS.items() if name in lowered}
        known = {kind: delay for kind, delay in resets.items() if delay is not None}
        exhausted = [kind for kind, name in _REMAINING.items() if lowered.get(name, "").strip() == "0"]
        if limit in known:
            value = known[limit]
        elif len(exhausted) == 1 and exhausted[0] in known:
            value = known[exhausted[0]]
        elif known:
            value = min(known.values())
    return None if value is None else min(max(0.0, value), RATE_HINT_CAP_SECONDS)


def parse_go_duration(text: str) -> float | None:
    """Seconds in a Go duration string (`1m30.5s`), or None if it is not one (or is negative)."""
    s = text.strip()
    s = s.removeprefix("+")
    if s == "0":
        return 0.0
    if not s or s.startswith("-"):
        return None
    total = 0.0
    pos = 0
    while pos < len(s):
        m = _GO_PART.match(s, pos)
        if m is None:
            return None
        total += float(m.group(1)) * _GO_UNITS[m.group(2)]
        pos = m.end()
    return total if math.isfinite(total) else None


def exponential(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """`base * 2**(attempt-1)` seconds, capped at `cap`, then ±20 % jitter.

    Jitter is applied after the cap so that many jobs hitting the cap do not retry in lockstep;
    the result therefore lies in [0.8 * capped, 1.2 * capped] and never exceeds `1.2 * cap`.
    """
    base = max(0.0, float(base))
    cap = max(0.0, float(cap))
    exponent = max(0, attempt - 1)
    # 2**1100 overflows a float; anything past ~2**60 is at the cap anyway.
    raw = cap if exponent > 60 else base * (2.0**exponent)
    capped = min(raw, cap)
    r = rng if rng is not None else random
    value = capped * r.uniform(1.0 - JITTER, 1.0 + JITTER)
    return max(0.0, min(value, cap * (1.0 + JITTER)))


def _lowercase(headers: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        for key, value in headers.items():
            if isinstance(key, str) and isinstance(value, str):
                out.setdefault(key.lower(), value)
    except Exception:  # a broken mapping is just "no hints"
        return {}
    return out


def _decimal(text: str) -> float | None:
    s = text.strip()
    if not _DECIMAL.fullmatch(s):
        return None
    value = float(s)
    return value if math.isfinite(value) else None


def parse_retry_after(text: str | None, now: dt.datetime | float | None = None) -> float | None:
    """Seconds a `retry-after` header asks for (delta-seconds or an HTTP date), capped at
    `MAX_DELAY_SECONDS`; None when absent, malformed, negative or a date already past.

    `now` (an aware datetime, a naive UTC one, or epoch seconds) anchors an HTTP date; it
    defaults to the current UTC time. A date without a zone is GMT, as RFC 9110 requires."""
    if text is None or not text.strip():
        return None
    seconds = _decimal(text)
    if seconds is not None:
        return min(seconds, MAX_DELAY_SECONDS)
    try:
        when = email.utils.parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    if isinstance(now, (int, float)):
        ref = dt.datetime.fromtimestamp(now, dt.UTC)
    else:
        ref = now if now is not None else dt.datetime.now(dt.UTC)
    if ref.tzinfo is None:
        ref = ref.replace(tzinfo=dt.UTC)
    delta = (when - ref).total_seconds()
    # A date in the past is stale advice (or a skewed clock): not a usable hint.
    return min(delta, MAX_DELAY_SECONDS) if delta >= 0 else None
