"""How long the provider asks to be left alone, from its answer's headers: `retry-after-ms`,
`retry-after` and `x-ratelimit-reset-*` (Go durations as OpenAI sends them). Pure: no clock reads
unless the caller omits `now`. Header values are untrusted input: anything malformed is ignored,
never raised.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping

from iipub.core.backoff import MAX_DELAY_SECONDS, decimal, parse_retry_after

_HINT_HEADERS = (
    "retry-after-ms",
    "retry-after",
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-tokens",
)

# Go's time.Duration text form as OpenAI sends it: "1s", "6m0s", "20ms", "1m30.5s", "1h2m3s".
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")


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
            value = decimal(raw)
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
        ms = decimal(raw_ms)
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


def _lowercase(headers: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        for key, value in headers.items():
            if isinstance(key, str) and isinstance(value, str):
                out.setdefault(key.lower(), value)
    except Exception:  # a broken mapping is just "no hints"
        return {}
    return out


