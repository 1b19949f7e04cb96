"""Time-ordered identifiers, pure: UUIDv7 (RFC 9562), whose first 48 bits are the Unix time in
milliseconds, so ids made later sort later (an outbox event's id, which is also its
Idempotency-Key). The time is the caller's: iipub passes the database clock's."""

from __future__ import annotations

import datetime as dt
import os
import threading
import uuid

__all__ = ["uuid7", "uuid7_time"]


_lock = threading.Lock()
_last = 0  # the last id made in this process, as an integer


def uuid7(at: dt.datetime) -> str:
    """A UUIDv7 for the instant `at` (naive means UTC): 48 bits of milliseconds, the version,
    12 bits of counter, the variant and 62 random bits. Within a process, ids made in the same
    millisecond (one save's events) still sort in the order they were made: the later one's
    counter is the earlier one's plus one (RFC 9562's fixed-length counter, seeded at random below
    its top bit), and its random part is drawn afresh, so two ids differ within their first 18
    characters and an operator's prefix tells them apart."""
    global _last
    when = at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)
    millis = int(when.timestamp() * 1000) & ((1 << 48) - 1)
    rand = int.from_bytes(os.urandom(10), "big")
    value = millis << 80 | 0x7 << 76 | (rand >> 69 & 0x7FF) << 64 | 0b10 << 62 | rand & ((1 << 62) - 1)
    with _lock:
        if value >> 80 == _last >> 80 and value <= _last:
            value = _next(_last)
        _last = value
    return str(uuid.UUID(int=value))


def _next(value: int) -> int:
    """The id after `value` in the same millisecond: its counter plus one and a fresh random part;
    past 4,096 ids in one millisecond, its 74 bits after the time (around the version and variant
    fields) plus one."""
    rand_a, rand_b = value >> 64 & 0xFFF, value & ((1 << 62) - 1)
    if rand_a < 0xFFF:
        fresh = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
        return (value >> 80) << 80 | 0x7 << 76 | (rand_a + 1) << 64 | 0b10 << 62 | fresh
    counter = (rand_a << 62 | rand_b) + 1
    if counter >> 74:  # all 74 bits used in one millisecond: not in this world; start over at a random point
        counter = int.from_bytes(os.urandom(9), "big") >> 1
    return (value >> 80) << 80 | 0x7 << 76 | (counter >> 62 & 0xFFF) << 64 | 0b10 << 62 | counter & ((1 << 62) - 1)


def uuid7_time(text: str) -> dt.datetime | None:
    """The instant a UUIDv7 was made for (None for any other UUID or text)."""
    try:
        u = uuid.UUID(text)
    except ValueError:
        return None
    if u.version != 7:
        return None
    return dt.datetime.fromtimestamp((u.int >> 80) / 1000, dt.UTC)
