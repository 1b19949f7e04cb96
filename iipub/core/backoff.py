"""How long to wait before asking again: exponential backoff with jitter, and the standard HTTP
`Retry-After` header read (a provider's own hints are its adapter's: `provider/openai/retry_hints`).
Pure functions: no clock reads unless the caller omits `now`, no sleeping. Header values are
untrusted input: anything malformed is ignored, never raised.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import math
import random
import re

# A hint beyond this is a bug or an attack on our scheduling, not advice.
MAX_DELAY_SECONDS = 86_400.0
JITTER = 0.2
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?|\.[0-9]+")

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


def decimal(text: str) -> float | None:
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
    seconds = decimal(text)
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
