"""What `status` reports for the cutover from a legacy system and for calendar truth: the days
with no slot (the dispatch SLI's gaps), the decisions shadow mode journaled and where they
differ from what the legacy system did, and the immediate abort (`pause --everything`) while
responses finish unretrieved.

The legacy system's decisions are read from `[reconcile] legacy_decisions_file`: JSON lines,
one decision each, `{"product": P, "edition_date": "YYYY-MM-DD", "action": A}` with A one of
`create`, `publish`, `delete`, `cancel` (other keys, such as `at` or `response_id`, are
ignored). Compared with shadow mode's decisions of the reporting window, for the edition days
of the window and every day shadow mode decided about in it. Queries and arithmetic only; the CLI formats.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from iipub.core.severity import Severity
from iipub.core.timefmt import as_date, duration, naive_utc, parse_date, seconds_between
from iipub.machine import scheduling
from iipub.model.states import CUSTODY_PENDING, SHADOW_REASONS, State
from iipub.money.breaker import GateState
from iipub.settings.config import Settings
from iipub.store import tables

ACTIONS = frozenset(SHADOW_REASONS.values())
# How long the provider keeps a finished background response (about ten minutes).
RETENTION_SECONDS = 600.0
LEGACY_MAX_BYTES = 64 * 1024 * 1024
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


# -- pure parts -----------------------------------------------------------------------------------


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


# -- collection ------------------------------------------------------------------------------------


def collect(conn: Connection, settings: Settings, now: dt.datetime, g: GateState | None) -> Cutover:
    days = window_days(now, settings.status.window_hours)
    names = sorted(settings.products)
    jobs, events = tables.jobs, tables.job_events
    present = {(p, as_date(d)) for p, d in conn.execute(
        sa.select(jobs.c.product, jobs.c.edition_date).where(jobs.c.edition_date.between(days[0], days[-1])))}
    firsts = {p: (as_date(d) if d is not None else None) for p, d in conn.execute(
        sa.select(jobs.c.product, sa.func.min(jobs.c.edition_date)).where(jobs.c.product.in_(names))
        .group_by(jobs.c.product))}
    # Today's slot is missing only once its window opened and a tick could have made it.
    opened = {p: settings.products[p].opens_on(now.date()) <= now for p in names}
    missing = [(p, d) for p, d in scheduling.missing_days(present, firsts, days) if d < now.date() or opened[p]]
    cutoff = now - dt.timedelta(hours=settings.status.window_hours)
    shadow: set[Decision] = set()
    counts: dict[str, int] = {}
    q = (sa.select(events.c.reason, jobs.c.product, jobs.c.edition_date)
         .join(jobs, jobs.c.id == events.c.job_id)
         .where(events.c.reason.in_([r.value for r in SHADOW_REASONS]), events.c.at >= cutoff))
    for reason, product, day in conn.execute(q):
        shadow.add((product, as_date(day), SHADOW_REASONS[reason]))
    # One decision per slot and action (a slot's language tracks each journal the publication).
    for _, _, action in shadow:
        counts[action] = counts.get(action, 0) + 1
    cut = Cutover(tuple(days), tuple(missing), counts, abort=_abort(conn, now, g))
    path = settings.reconcile.legacy_decisions_file
    if path is None:
        return cut
    # Compared: the window's edition days and every day shadow mode decided about in the window.
    compared = sorted(set(days) | {d for _, d, _ in shadow})
    legacy, read, problem = _legacy(path, compared)
    adopted = {(p, as_date(d)) for p, d in conn.execute(
        sa.select(jobs.c.product, jobs.c.edition_date).where(jobs.c.origin == "adopted",
                                                             jobs.c.edition_date.in_(compared)))}
    return Cutover(tuple(days), tuple(missing), counts, tuple(differences(shadow, legacy, adopted)), str(path), read,
                   problem, cut.abort)


def _legacy(path: Path, days: Sequence[dt.date]) -> tuple[set[Decision], int, str | None]:
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            legacy, read, bad = parse_legacy(f.read(LEGACY_MAX_BYTES).splitlines(), days)
    except FileNotFoundError:
        return set(), 0, f"legacy decisions file {path} not found"
    except OSError as exc:
        return set(), 0, f"cannot read the legacy decisions file {path}: {exc.strerror or exc}"
    return legacy, read, (f"{bad} unreadable lines in the legacy decisions file {path}" if bad else None)


def _abort(conn: Connection, now: dt.datetime, g: GateState | None) -> Abort | None:
    if g is None or not g.paused_everything:
        return None
    jobs = tables.jobs
    pending = [s.value for s in CUSTODY_PENDING]
    q = sa.select(jobs.c.updated_at).where(jobs.c.response_id.is_not(None), sa.or_(
        jobs.c.state.in_(pending),
        sa.and_(jobs.c.state == State.MANUALLY_SUSPENDED.value, jobs.c.suspended_from.in_(pending))))
    # At worst a response finished right after the last time iipub looked at it.
    seen = [naive_utc(t) for t in conn.execute(q).scalars()]
    first = min((RETENTION_SECONDS - seconds_between(now, t) for t in seen), default=None)
    return Abort(g.paused_by, g.paused_reason, g.paused_at, len(seen), first)
