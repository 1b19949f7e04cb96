"""Times, dates and durations as iipub shows and reads them. Pure.

Every time iipub stores is naive UTC (the database clock); every time it prints is ISO 8601
with a `Z`; every date it reads from a person is `YYYY-MM-DD`.
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any


def naive_utc(value: dt.datetime | str) -> dt.datetime:
    """A naive UTC datetime from a driver value (SQLite may hand back text, MySQL aware values)."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def iso_z(value: dt.datetime | str, timespec: str = "microseconds") -> str:
    """`2026-12-01T05:00:00.000000Z`."""
    return naive_utc(value).isoformat(timespec=timespec) + "Z"


def iso_z_or_none(value: dt.datetime | str | None) -> str | None:
    return None if value is None else iso_z(value)


def jsonable(value: Any) -> Any:
    """A column value as the JSON views show it: dates `YYYY-MM-DD`, times ISO 8601 UTC."""
    if isinstance(value, dt.datetime):
        return iso_z(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    return value


def seconds_between(later: dt.datetime | str, earlier: dt.datetime | str) -> float:
    return (naive_utc(later) - naive_utc(earlier)).total_seconds()


def duration(seconds: float) -> str:
    """Short human duration: 45s, 12m05s, 3h01m, 2d04h."""
    s = round(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def parse_date(text: str) -> dt.date:
    """A `YYYY-MM-DD` date, strictly (no week dates or compact forms). ValueError otherwise."""
    # The shape first: fromisoformat also takes week dates (2026-W49-1) of the same length.
    if (not isinstance(text, str) or len(text) != 10 or text[4] != "-" or text[7] != "-"
            or not (text[:4] + text[5:7] + text[8:]).isdigit() or not text.isascii()):
        raise ValueError(f"{text!r} is not a date in YYYY-MM-DD form")
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a date in YYYY-MM-DD form") from None


def as_date(value: dt.date | dt.datetime | str) -> dt.date:
    """A DATE column's value as a date (SQLite may hand back text)."""
    if isinstance(value, str):
        return dt.date.fromisoformat(value[:10])
    return value.date() if isinstance(value, dt.datetime) else value


def parse_utc_time(text: str) -> dt.datetime:
    """A UTC time a person typed: `YYYY-MM-DDTHH:MM[:SS]`, with `Z` or an offset (converted to
    UTC) or none (taken as UTC); returned naive UTC. ValueError otherwise."""
    if not isinstance(text, str) or not 16 <= len(text) <= 40 or text[10:11] not in ("T", " "):
        raise ValueError(f"{text!r} is not a time in YYYY-MM-DDTHH:MM[:SS][Z] form")
    try:
        return naive_utc(dt.datetime.fromisoformat(text.replace("z", "Z")))
    except ValueError:
        raise ValueError(f"{text!r} is not a time in YYYY-MM-DDTHH:MM[:SS][Z] form") from None
