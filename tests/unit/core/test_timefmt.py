"""Times as iipub stores, prints and reads them: naive UTC inside, ISO 8601 with `Z` outside,
`YYYY-MM-DD` and `YYYY-MM-DDTHH:MM[:SS]` from a person, strictly."""

from __future__ import annotations

import datetime as dt
import enum

import pytest

from iipub.core import timefmt


def test_a_driver_value_becomes_naive_utc_whatever_form_it_comes_in() -> None:
    naive = dt.datetime(2026, 12, 1, 5, 0)
    assert timefmt.naive_utc(naive) == naive
    assert timefmt.naive_utc("2026-12-01 05:00:00") == naive  # SQLite hands back text
    aware = dt.datetime(2026, 12, 1, 6, 0, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert timefmt.naive_utc(aware) == naive  # MySQL drivers may hand back aware values


def test_a_time_is_printed_in_iso_8601_with_z() -> None:
    at = dt.datetime(2026, 12, 1, 5, 0, 7, 12)
    assert timefmt.iso_z(at) == "2026-12-01T05:00:07.000012Z"
    assert timefmt.iso_z(at, "seconds") == "2026-12-01T05:00:07Z"
    assert timefmt.iso_z_or_none(None) is None


def test_json_views_show_dates_times_and_enums_as_text() -> None:
    class Colour(enum.Enum):
        RED = "red"

    assert timefmt.jsonable(dt.datetime(2026, 1, 2, 3, 4)) == "2026-01-02T03:04:00.000000Z"
    assert timefmt.jsonable(dt.date(2026, 1, 2)) == "2026-01-02"
    assert timefmt.jsonable(Colour.RED) == "red"
    assert timefmt.jsonable(7) == 7


@pytest.mark.parametrize(("seconds", "shown"), [
    (-5, "0s"), (0, "0s"), (45.4, "45s"), (60, "1m00s"), (725, "12m05s"), (3600, "1h00m"), (10_860, "3h01m"),
    (86_400, "1d00h"), (187_200, "2d04h"),
])
def test_a_duration_is_short_and_human(seconds: float, shown: str) -> None:
    assert timefmt.duration(seconds) == shown


def test_seconds_between_reads_either_form() -> None:
    assert timefmt.seconds_between("2026-12-01 05:01:00", dt.datetime(2026, 12, 1, 5, 0)) == 60.0


@pytest.mark.parametrize("text", ["2026-12-1", "20261201", "2026-13-01", "", "2026-12-01T00:00",
                                  "2026-W49-1", "2026-340", "2026-12-0١"])
def test_a_date_is_only_yyyy_mm_dd(text: str) -> None:
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        timefmt.parse_date(text)


def test_a_date_column_is_a_date_whatever_the_driver_returns() -> None:
    day = dt.date(2026, 12, 1)
    assert timefmt.parse_date("2026-12-01") == day
    assert timefmt.as_date("2026-12-01") == day
    assert timefmt.as_date("2026-12-01 00:00:00") == day
    assert timefmt.as_date(dt.datetime(2026, 12, 1, 23, 59)) == day
    assert timefmt.as_date(day) == day


def test_a_typed_time_is_taken_as_utc_and_an_offset_is_converted() -> None:
    assert timefmt.parse_utc_time("2026-12-01T05:00") == dt.datetime(2026, 12, 1, 5, 0)
    assert timefmt.parse_utc_time("2026-12-01T05:00:30Z") == dt.datetime(2026, 12, 1, 5, 0, 30)
    assert timefmt.parse_utc_time("2026-12-01T06:00+01:00") == dt.datetime(2026, 12, 1, 5, 0)
    for bad in ("2026-12-01", "2026-12-01X05:00", "2026-12-01T25:00", "x" * 41):
        with pytest.raises(ValueError, match="YYYY-MM-DDTHH:MM"):
            timefmt.parse_utc_time(bad)
