"""`iipub.core.strict`: the configuration's sections check every field when built and when replaced."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import pytest

from iipub.core.strict import Bounds, Checked, InvalidValues


@dataclass(frozen=True)
class Section(Checked):
    count: Annotated[int, Bounds(ge=1, le=10)] = 1
    ratio: Annotated[float, Bounds(gt=0, le=1)] = 0.5
    name: Annotated[str, Bounds(min_length=1, max_length=5, pattern=r"^[a-z]+$")] = "abc"
    flag: bool = False
    where: Path | None = None
    at: dt.time = dt.time(5, 0)
    langs: tuple[str, ...] = ("en",)
    pairs: tuple[tuple[str, str], ...] = ()
    limit: Annotated[float, Bounds(ge=0)] | None = None


def problems(**values: Any) -> list[tuple[str, str]]:
    with pytest.raises(InvalidValues) as caught:
        Section(**values)
    return [(p.key, p.message) for p in caught.value.problems]


def test_defaults_and_good_values_pass_and_an_int_for_a_float_is_stored_as_float() -> None:
    s = Section(count=10, ratio=1, name="ab", flag=True, where=Path("x"), langs=("en", "es"), pairs=(("en", "T"),),
                limit=3)
    assert s.ratio == 1.0 and type(s.ratio) is float and type(s.limit) is float
    assert Section() == Section()  # still a plain frozen dataclass: equal, hashable
    assert hash(Section()) == hash(Section())


@pytest.mark.parametrize(("values", "key", "message"), [
    ({"count": 0}, "count", "input should be greater than or equal to 1"),
    ({"count": 11}, "count", "input should be less than or equal to 10"),
    ({"count": True}, "count", "input should be a valid integer"),
    ({"count": 2.0}, "count", "input should be a valid integer"),
    ({"count": "2"}, "count", "input should be a valid integer"),
    ({"ratio": 0}, "ratio", "input should be greater than 0"),
    ({"ratio": float("nan")}, "ratio", "input should be a finite number"),
    ({"ratio": float("inf")}, "ratio", "input should be a finite number"),
    ({"ratio": "0.5"}, "ratio", "input should be a valid number"),
    ({"limit": 10**400}, "limit", "input should be a finite number"),
    ({"ratio": False}, "ratio", "input should be a valid number"),
    ({"name": ""}, "name", "string should have at least 1 character"),
    ({"name": "abcdef"}, "name", "string should have at most 5 characters"),
    ({"name": "AB"}, "name", "string should match pattern '^[a-z]+$'"),
    ({"name": 3}, "name", "input should be a valid string"),
    ({"name": "abc\n"}, "name", "string should match pattern '^[a-z]+$'"),  # `$` is the end of the text
    ({"flag": 1}, "flag", "input should be a valid boolean"),
    ({"where": "x"}, "where", "input should be a path"),
    ({"at": "05:00"}, "at", "input should be a valid time"),
    ({"langs": ["en"]}, "langs", "input should be a valid tuple"),
    ({"langs": ("en", 3)}, "langs", "input should be a valid string"),
    ({"pairs": (("en",),)}, "pairs", "tuple should have 2 items"),
    ({"limit": -1}, "limit", "input should be greater than or equal to 0"),
])
def test_each_refused_value_names_its_field(values: dict[str, Any], key: str, message: str) -> None:
    assert problems(**values) == [(key, message)]


def test_every_problem_is_reported_and_replace_checks_again() -> None:
    assert [k for k, _ in problems(count=0, ratio=2, name="")] == ["count", "ratio", "name"]
    with pytest.raises(InvalidValues, match="count"):
        dataclasses.replace(Section(), count=99)
    with pytest.raises(dataclasses.FrozenInstanceError):
        Section().count = 2  # type: ignore[misc]
