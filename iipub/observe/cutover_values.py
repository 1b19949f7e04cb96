"""The cutover report as values, and its pure rules: the days with no slot, shadow mode's
decisions against the legacy system's (its file's lines parsed, the differences found), the
immediate abort while responses finish unretrieved, and the problems `status --check` sees in
them. Pure: `cutover` reads the rows and the legacy decisions file.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from iipub.core.severity import Severity
from iipub.core.timefmt import duration, parse_date
from iipub.model.states import SHADOW_REASONS

ACTIONS = frozenset(SHADOW_REASONS.values())
Decision = tuple[str, dt.date, str]  # (product, edition date, action)


@dataclass(frozen=True)
class Difference:
    product: str
    edition_date: dt.date
    action: str
    shadow: bool  # iipub would have done it
    legacy: bool  # the legacy system did it

    def text(self) -> str:
        who = "iipub would, the legacy system did not" if self.shadow else "the legacy system did, iipub would not"
        return f"{self.product} {self.edition_date} {self.action}: {who}"

    def to_dict(self) -> dict[str, Any]:
        return {"product": self.product, "edition_date": self.edition_date.isoformat(), "action": self.action,
                "shadow": self.shadow, "legacy": self.legacy}


@dataclass(frozen=True)
class Abort:
    """`pause --everything` in force, and what is finishing unretrieved meanwhile."""

    by: str | None
    reason: str | None
    since: dt.datetime | None
    unretrieved: int  # responses that may finish (or have finished) with nobody taking custody
    first_expiry_seconds: float | None  # at worst, until the first one's retention runs out

    def text(self) -> str:
        head = f"everything paused by {self.by or '?'}: {self.reason or ''}".rstrip(": ")
        if not self.unretrieved:
            return head
        left = self.first_expiry_seconds or 0.0
        when = f"in {duration(left)}" if left > 0 else "now (it may already have)"
        return (f"{head}; {self.unretrieved} responses finishing unretrieved, the first retention may run out "
                f"{when}")


@dataclass(frozen=True)
class Cutover:
    days: tuple[dt.date, ...]  # the reporting window's days
    missing: tuple[tuple[str, dt.date], ...] = ()
    shadow_counts: Mapping[str, int] = field(default_factory=dict)  # action -> decisions in the window
    differences: tuple[Difference, ...] = ()
    legacy_file: str | None = None
    legacy_decisions: int = 0
    legacy_problem: str | None = None  # the file could not be read, or had unreadable lines
    abort: Abort | None = None

    def problems(self) -> list[tuple[Severity, str]]:
        found: list[tuple[Severity, str]] = []
        if self.abort is not None:
            found.append((Severity.CRITICAL if self.abort.unretrieved else Severity.WARNING, self.abort.text()))
        if self.missing:
            shown = ", ".join(f"{p} {d}" for p, d in self.missing[:5])
            more = f" and {len(self.missing) - 5} more" if len(self.missing) > 5 else ""
            found.append((Severity.WARNING,
                          (f"{len(self.missing)} edition days without a slot ({shown}{more}): no tick "
                           "scheduled them; `iipub backfill` creates them")))
        if self.differences:
            found.append((Severity.WARNING,
                          (f"{len(self.differences)} shadow decisions differ from the legacy system's "
                           f"(e.g. {self.differences[0].text()})")))
        if self.legacy_problem:
            found.append((Severity.WARNING, self.legacy_problem))
        return found

    def to_dict(self) -> dict[str, Any]:
        return {
            "days": [d.isoformat() for d in self.days],
            "missing_slots": [{"product": p, "edition_date": d.isoformat()} for p, d in self.missing],
            "shadow_decisions": dict(sorted(self.shadow_counts.items())),
            "legacy_decisions_file": self.legacy_file,
            "legacy_decisions": self.legacy_decisions,
            "legacy_problem": self.legacy_problem,
            "differences": [d.to_dict() for d in self.differences],
            "paused_everything": None if self.abort is None else {
                "by": self.abort.by, "reason": self.abort.reason,
                "since": self.abort.since.isoformat() + "Z" if self.abort.since else None,
                "unretrieved": self.abort.unretrieved,
                "first_expiry_seconds": None if self.abort.first_expiry_seconds is None
                else round(self.abort.first_expiry_seconds, 3)},
        }


# -- the rules -----------------------------------------------------------------------------------


def parse_legacy(lines: Iterable[str], days: Sequence[dt.date]) -> tuple[set[Decision], int, int]:
    """The legacy decisions for `days`, how many lines were read, and how many were unreadable."""
    wanted = set(days)
    found: set[Decision] = set()
    read = bad = 0
    for line in lines:
        if not line.strip():
            continue
        read += 1
        try:
            rec = json.loads(line)
            product, day, action = str(rec["product"]), parse_date(rec["edition_date"]), str(rec["action"])
        except (ValueError, KeyError, TypeError):
            bad += 1
            continue
        if action not in ACTIONS:
            bad += 1
        elif day in wanted:
            found.add((product, day, action))
    return found, read, bad


def differences(shadow: set[Decision], legacy: set[Decision], adopted: set[tuple[str, dt.date]]) -> list[Difference]:
    """Where shadow mode and the legacy system disagree. A legacy create of a slot iipub adopted
    is the very create iipub took over, not a difference."""
    legacy = {d for d in legacy if not (d[2] == "create" and (d[0], d[1]) in adopted)}
    return sorted((Difference(p, day, a, (p, day, a) in shadow, (p, day, a) in legacy)
                   for p, day, a in shadow ^ legacy), key=lambda d: (d.edition_date, d.product, d.action))


def window_days(now: dt.datetime, window_hours: float) -> list[dt.date]:
    first = (now - dt.timedelta(hours=window_hours)).date()
    return [first + dt.timedelta(days=n) for n in range((now.date() - first).days + 1)]
