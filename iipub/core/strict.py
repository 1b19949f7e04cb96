"""Strict, bounded, frozen settings sections: a dataclass that checks its own fields.

A section subclasses `Checked` and is a `@dataclass(frozen=True)`; each field's annotation says
what it accepts, with bounds in `Annotated[type, Bounds(...)]`. Construction (and
`dataclasses.replace`) checks every field and raises `InvalidValues` listing each problem:

- strict types: a string is not a number, a bool is not an integer, a list is not a tuple;
- finite numbers only (no inf or nan), an int accepted where a float is asked (stored as float);
- `Bounds`: numeric ge/gt/le, string min/max length and a regular-expression pattern.

It is written here rather than taken from a validation library because it is all the
configuration needs, and a cron run that has nothing to do should not pay for importing one.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

__all__ = ["Bounds", "Checked", "FieldProblem", "InvalidValues"]


@dataclass(frozen=True)
class Bounds:
    """Constraints of one field (`Annotated[int, Bounds(ge=1, le=1024)]`)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None


@dataclass(frozen=True)
class FieldProblem:
    key: str
    message: str  # starts lower-case: "input should be a valid integer"
    value: Any


class InvalidValues(ValueError):
    """One or more fields of a section were refused."""

    def __init__(self, section: str, problems: list[FieldProblem]) -> None:
        self.problems = problems
        super().__init__(f"{section}: " + "; ".join(f"{p.key}: {p.message} (got {p.value!r})" for p in problems))


# A checker returns (problem message, or None) and the value to store.
_Checker = Callable[[Any], tuple[str | None, Any]]


class Checked:
    """Base of a checked section: `__post_init__` checks each field against its annotation."""

    _checkers: ClassVar[dict[type, dict[str, _Checker]]] = {}

    def __post_init__(self) -> None:
        cls = type(self)
        checkers = Checked._checkers.get(cls)
        if checkers is None:  # built once per class, at its first instance
            hints = typing.get_type_hints(cls, include_extras=True)
            checkers = {f.name: _checker(hints[f.name]) for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
            Checked._checkers[cls] = checkers
        problems = []
        for name, check in checkers.items():
            value = getattr(self, name)
            message, stored = check(value)
            if message is not None:
                problems.append(FieldProblem(name, message, value))
            elif stored is not value:
                object.__setattr__(self, name, stored)  # an int given for a float field
        if problems:
            raise InvalidValues(cls.__name__, problems)


def _checker(hint: Any) -> _Checker:
    """A checker for one annotation: a plain type, `X | None`, `tuple[...]`, `Annotated[X, Bounds]`."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        base, *extras = typing.get_args(hint)
        bounds = next((e for e in extras if isinstance(e, Bounds)), Bounds())
        return _bounded(_checker(base), bounds)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(options) != 1:
            raise TypeError(f"unsupported union {hint!r}")
        inner = _checker(options[0])
        return lambda v: (None, v) if v is None else inner(v)
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            item = _checker(args[0])
            return lambda v: _tuple_of(v, lambda items: [item(x) for x in items])
        checks = [_checker(a) for a in args]

        def fixed(items: tuple[Any, ...]) -> list[tuple[str | None, Any]]:
            if len(items) != len(checks):
                return [(f"tuple should have {len(checks)} items", items)]
            return [check(x) for check, x in zip(checks, items, strict=True)]

        return lambda v: _tuple_of(v, fixed)
    simple = _SIMPLE.get(hint)
    if simple is None:
        raise TypeError(f"unsupported field type {hint!r}")
    return simple


def _tuple_of(value: Any, check_items: Callable[[tuple[Any, ...]], list[tuple[str | None, Any]]]
              ) -> tuple[str | None, Any]:
    if not isinstance(value, tuple):
        return "input should be a valid tuple", value
    for message, _ in check_items(value):
        if message is not None:
            return message, value
    return None, value


def _int(v: Any) -> tuple[str | None, Any]:
    return (None, v) if type(v) is int else ("input should be a valid integer", v)


def _float(v: Any) -> tuple[str | None, Any]:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return "input should be a valid number", v
    try:
        number = float(v)
    except OverflowError:  # an integer past any float
        return "input should be a finite number", v
    if not math.isfinite(number):
        return "input should be a finite number", v
    return None, number


def _instance(kind: type, message: str) -> _Checker:
    return lambda v: (None, v) if isinstance(v, kind) else (message, v)


_SIMPLE: dict[Any, _Checker] = {
    int: _int,
    float: _float,
    bool: _instance(bool, "input should be a valid boolean"),
    str: _instance(str, "input should be a valid string"),
    Path: _instance(Path, "input should be a path"),
    dt.time: _instance(dt.time, "input should be a valid time"),
}


def _bounded(base: _Checker, b: Bounds) -> _Checker:
    # A pattern's `$` means the end of the text, as in the regular-expression dialects of JSON
    # Schema and pydantic: Python's `$` would also accept a final newline ("daily-brief\n").
    pattern = None
    if b.pattern is not None:
        pattern = re.compile(b.pattern[:-1] + r"\Z" if b.pattern.endswith("$") and not b.pattern.endswith("\\$")
                             else b.pattern)

    def check(v: Any) -> tuple[str | None, Any]:
        message, stored = base(v)
        if message is not None:
            return message, stored
        if isinstance(stored, str):
            if b.min_length is not None and len(stored) < b.min_length:
                return f"string should have at least {b.min_length} character{'s' * (b.min_length != 1)}", stored
            if b.max_length is not None and len(stored) > b.max_length:
                return f"string should have at most {b.max_length} characters", stored
            if pattern is not None and not pattern.search(stored):
                return f"string should match pattern '{b.pattern}'", stored
        elif isinstance(stored, int | float):
            if b.ge is not None and stored < b.ge:
                return f"input should be greater than or equal to {_number(b.ge)}", stored
            if b.gt is not None and stored <= b.gt:
                return f"input should be greater than {_number(b.gt)}", stored
            if b.le is not None and stored > b.le:
                return f"input should be less than or equal to {_number(b.le)}", stored
        return None, stored

    return check


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)
