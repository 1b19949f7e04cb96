"""What `status` reports for the cutover from a legacy system and for calendar truth: the days
with no slot (the dispatch SLI's gaps), the decisions shadow mode journaled and where they
differ from what the legacy system did, and the immediate abort (`pause --everything`) while
responses finish unretrieved.

The legacy system's decisions are read from `[reconcile] legacy_decisions_file`: JSON lines,
one decision each, `{"product": P, "edition_date": "YYYY-MM-DD", "action": A}` with A one of
`create`, `publish`, `delete`, `cancel` (other keys, such as `at` or `response_id`, are
ignored). Compared with shadow mode's decisions of the reporting window, for the edition days
of the window and every day shadow mode decided about in it. The reads only: the report's values and
the comparison are `cutover_values`'; the CLI formats.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path

from iipub.core.timefmt import as_date, naive_utc, seconds_between
from iipub.machine import scheduling
from iipub.model.states import SHADOW_REASONS
from iipub.money.breaker import GateState
from iipub.observe.cutover_values import Abort, Cutover, Decision, differences, parse_legacy, window_days
from iipub.settings.config import Settings
from iipub.store import status_queries
from iipub.store.handles import Connection

# How long the provider keeps a finished background response (about ten minutes).
RETENTION_SECONDS = 600.0


# -- collection ------------------------------------------------------------------------------------


def collect(conn: Connection, settings: Settings, now: dt.datetime, g: GateState | None) -> Cutover:
    days = window_days(now, settings.status.window_hours)
    names = sorted(settings.products)
    present = {(p, as_date(d)) for p, d in status_queries.slots_between(conn, days[0], days[-1])}
    firsts = {p: (as_date(d) if d is not None else None) for p, d in status_queries.first_slots(conn, names)}
    # Today's slot is missing only once its window opened and a tick could have made it.
    opened = {p: settings.products[p].opens_on(now.date()) <= now for p in names}
    missing = [(p, d) for p, d in scheduling.missing_days(present, firsts, days) if d < now.date() or opened[p]]
    cutoff = now - dt.timedelta(hours=settings.status.window_hours)
    shadow: set[Decision] = set()
    counts: dict[str, int] = {}
    for reason, product, day in status_queries.decisions_since(conn, [r.value for r in SHADOW_REASONS], cutoff):
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
    adopted = {(p, as_date(d)) for p, d in status_queries.adopted_slots(conn, compared)}
    return Cutover(tuple(days), tuple(missing), counts, tuple(differences(shadow, legacy, adopted)), str(path), read,
                   problem, cut.abort)


def _legacy(path: Path, days: Sequence[dt.date]) -> tuple[set[Decision], int, str | None]:
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            legacy, read, bad = parse_legacy(f, days)  # whole, line by line: the newest decisions are last
    except FileNotFoundError:
        return set(), 0, f"legacy decisions file {path} not found"
    except OSError as exc:
        return set(), 0, f"cannot read the legacy decisions file {path}: {exc.strerror or exc}"
    return legacy, read, (f"{bad} unreadable lines in the legacy decisions file {path}" if bad else None)


def _abort(conn: Connection, now: dt.datetime, g: GateState | None) -> Abort | None:
    if g is None or not g.paused_everything:
        return None
    # At worst a response finished right after the last time iipub looked at it.
    seen = [naive_utc(t) for t in status_queries.awaited_responses_seen(conn)]
    first = min((RETENTION_SECONDS - seconds_between(now, t) for t in seen), default=None)
    return Abort(g.paused_by, g.paused_reason, g.paused_at, len(seen), first)
