from __future__ import annotations

import datetime as dt
import random
from typing import Any

import httpx
import pytest

from iipub.core import backoff
from iipub.provider.openai import retry_hints

NOW = dt.datetime(2025, 3, 1, 12, 0, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        # What OpenAI actually sends.
        ({"x-ratelimit-reset-requests": "1s"}, 1.0),
        ({"x-ratelimit-reset-requests": "20ms"}, 0.02),
        ({"x-ratelimit-reset-tokens": "6m0s"}, 360.0),
        ({"x-ratelimit-reset-tokens": "1m30.5s"}, 90.5),
        ({"x-ratelimit-reset-requests": "1h2m3s"}, 3723.0),
        ({"x-ratelimit-reset-requests": "500us"}, 0.0005),
        ({"x-ratelimit-reset-requests": "0"}, 0.0),
        ({"x-ratelimit-reset-requests": "0s"}, 0.0),
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after": "Sat, 01 Mar 2025 12:00:30 GMT"}, 30.0),
        # The largest hint wins.
        ({"retry-after": "2", "x-ratelimit-reset-requests": "2s", "x-ratelimit-reset-tokens": "6m0s"}, 360.0),
        ({"retry-after-ms": "4500", "retry-after": "2"}, 4.5),
        # Case-insensitive.
        ({"Retry-After": "3"}, 3.0),
        ({"X-RateLimit-Reset-Requests": "7s"}, 7.0),
        # Absurd values are clamped to a day.
        ({"retry-after": "99999999"}, backoff.MAX_DELAY_SECONDS),
        ({"x-ratelimit-reset-tokens": "10000h"}, backoff.MAX_DELAY_SECONDS),
        # Malformed, negative or stale: ignored, and valid neighbours still count.
        ({"retry-after": "soon", "x-ratelimit-reset-requests": "1s"}, 1.0),
        ({"retry-after": "-5"}, None),
        ({"retry-after-ms": "-100"}, None),
        ({"retry-after-ms": "nan"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "1e3"}, None),
        ({"retry-after": ""}, None),
        ({"retry-after": "Sat, 01 Mar 2025 11:00:00 GMT"}, None),  # in the past
        ({"retry-after": "Sat, 99 Foo 2025 99:99:99 GMT"}, None),
        ({"x-ratelimit-reset-requests": "-1s"}, None),
        ({"x-ratelimit-reset-requests": "1"}, None),  # no unit: could be an epoch
        ({"x-ratelimit-reset-requests": "1x"}, None),
        ({"x-ratelimit-reset-requests": "1s garbage"}, None),
        ({"x-ratelimit-reset-requests": "s"}, None),
        ({"x-ratelimit-reset-requests": "1.2.3s"}, None),
        ({"x-ratelimit-reset-tokens": "\u0661s"}, None),  # Arabic-Indic digit
        ({"x-ratelimit-reset-requests": "2, 3"}, None),
        ({}, None),
        ({"content-type": "application/json"}, None),
    ],
)
def test_delay_from_headers(headers: dict[str, str], expected: float | None) -> None:
    got = retry_hints.delay_from_headers(headers, now=NOW)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


def test_httpx_headers_are_case_insensitive() -> None:
    headers = httpx.Headers({"Retry-After": "2", "X-Ratelimit-Reset-Requests": "2s"})
    assert retry_hints.delay_from_headers(headers, now=NOW) == 2.0


def test_http_date_with_naive_now_is_treated_as_utc() -> None:
    naive = NOW.replace(tzinfo=None)
    assert retry_hints.delay_from_headers({"retry-after": "Sat, 01 Mar 2025 12:01:00 GMT"}, now=naive) == 60.0


def test_non_string_values_never_crash() -> None:
    # Deliberately not the Mapping[str, str] delay_from_headers is typed for.
    weird: dict[Any, Any] = {"retry-after": None, "retry-after-ms": 5, 3: "1s", "x-ratelimit-reset-tokens": "3s"}
    assert retry_hints.delay_from_headers(weird, now=NOW) == 3.0


@pytest.mark.parametrize("text", ["1s", "6m0s", "20ms", "1m30.5s", "1h2m3s", ".5s", "5.s", "300ns", "2µs"])
def test_go_durations_parse(text: str) -> None:
    assert retry_hints.parse_go_duration(text) is not None


def test_exponential_doubles_before_jitter() -> None:
    class NoJitter(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return 1.0

    rng = NoJitter()
    assert [backoff.exponential(n, 2.0, 600.0, rng) for n in range(1, 6)] == [2.0, 4.0, 8.0, 16.0, 32.0]
    assert backoff.exponential(10, 2.0, 600.0, rng) == 600.0
    assert backoff.exponential(0, 2.0, 600.0, rng) == 2.0  # attempt < 1 acts as the first
    assert backoff.exponential(10_000, 2.0, 600.0, rng) == 600.0  # no float overflow


def test_exponential_jitter_bounds() -> None:
    rng = random.Random(7)
    for attempt in range(1, 40):
        capped = min(2.0 * 2 ** (attempt - 1), 600.0)
        for _ in range(50):
            value = backoff.exponential(attempt, 2.0, 600.0, rng)
            assert 0.8 * capped - 1e-9 <= value <= 1.2 * capped + 1e-9
            assert 0 <= value <= 600.0 * 1.2 + 1e-9


def test_exponential_jitter_actually_spreads() -> None:
    rng = random.Random(1)
    values = {round(backoff.exponential(3, 2.0, 600.0, rng), 6) for _ in range(100)}
    assert len(values) > 50
    assert min(values) < 7.5 and max(values) > 8.5


def test_exponential_degenerate_inputs() -> None:
    assert backoff.exponential(3, -1.0, 10.0) == 0.0
    assert backoff.exponential(3, 2.0, 0.0) == 0.0
    assert backoff.exponential(3, 2.0, -5.0) == 0.0


@pytest.mark.parametrize(("headers", "limit", "expected"), [
    # the request's own hint first: retry-after-ms, then retry-after
    ({"retry-after-ms": "1500", "retry-after": "9", "x-ratelimit-reset-tokens": "6m0s"}, "tokens", 1.5),
    ({"retry-after": "3", "x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s"}, None, 3.0),
    # then the limit that refused it: its type ...
    ({"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s"}, "requests", 1.0),
    ({"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "2m0s"}, "tokens", 120.0),
    # ... else the exhausted one ...
    ({"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "40s", "x-ratelimit-remaining-tokens": "0",
      "x-ratelimit-remaining-requests": "12"}, None, 40.0),
    # ... else the sooner reset, never the far-off one
    ({"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s"}, None, 1.0),
    # bounded: a six-hour reset waits ten minutes at most
    ({"x-ratelimit-reset-tokens": "6h0m0s"}, "tokens", 600.0),
    ({"retry-after": "86400"}, None, 600.0),
    ({"x-ratelimit-reset-tokens": "soon"}, "tokens", None),
    ({}, "requests", None),
])
def test_the_hint_that_concerns_the_refused_request(headers: dict[str, str], limit: str | None,
                                                    expected: float | None) -> None:
    assert retry_hints.rate_limit_delay(headers, limit, now=NOW) == expected
