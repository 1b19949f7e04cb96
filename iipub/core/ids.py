"""Time-ordered identifiers, pure: UUIDv7 (RFC 9562), whose first 48 bits are the Unix time in
milliseconds, so ids made later sort later (an outbox event's id, which is also its
Idempotency-Key). The time is the caller's: iipub passes the database clock's."""

from __future__ import annotations

import datetime as dt
import os
import uuid

__all__ = ["uuid7", "uuid7_time"]


def uuid7(at: dt.datetime) -> str:
    """A UUIDv7 for the instant `at` (naive means UTC): 48 bits of milliseconds, the version,
    12 random bits, the variant and 62 random bits."""
    when = at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)
    millis = int(when.timestamp() * 1000) & ((1 << 48) - 1)
    rand = int.from_bytes(os.urandom(10), "big")
    rand_a = rand >> 68 & 0xFFF
    rand_b = rand & ((1 << 62) - 1)
    value = millis << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    return str(uuid.UUID(int=value))


def uuid7_time(text: str) -> dt.datetime | None:
    """The instant a UUIDv7 was made for (None for any other UUID or text)."""
    try:
        u = uuid.UUID(text)
    except ValueError:
        return None
    if u.version != 7:
        return None
    return dt.datetime.fromtimestamp((u.int >> 80) / 1000, dt.UTC)
