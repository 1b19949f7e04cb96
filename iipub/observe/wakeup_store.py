"""The `wakeups` rows: what a full `reconcile` or `relay` run leaves for the next run's wake-up
check (`idle_check`; the rule is `wakeup`).

Recorded after every full run, in this order, so that nothing written meanwhile can be missed:
the signature of the tables first, then whether anything is due now (the sweep's and the relay's
own queries, not a copy of them), then the earliest future time anything falls due. A run that
did any work, or finds anything due, records "due" (the next run is a full one). Recording never
makes a run fail: a failure is a warning, and the row left behind no longer matches the tables.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import structlog
from sqlalchemy.engine import Connection, Engine

from iipub.model import states
from iipub.observe import wakeup
from iipub.observe.idle_check import file_mark
from iipub.settings.config import Settings
from iipub.store import clock, db, tables

log = structlog.get_logger("iipub.wakeup")

wakeups = tables.wakeups


def record(engine: Engine, command: str, settings: Settings, *, busy: bool,
           due_now: Callable[[], bool], future: Callable[[Connection, Any], Iterable[Any]],
           idle_summary: Mapping[str, Any]) -> None:
    """Leave `command`'s wake-up row (never raises)."""
    try:
        _record(engine, command, settings, busy, due_now, future, idle_summary)
    except Exception as exc:
        log.warning("wakeup_not_recorded", command=command, error=db.describe_error(exc))


def _record(engine: Engine, command: str, settings: Settings, busy: bool, due_now: Callable[[], bool],
            future: Callable[[Connection, Any], Iterable[Any]], idle_summary: Mapping[str, Any]) -> None:
    cap = settings.reconcile.idle_check_max_seconds
    with engine.connect() as conn:
        sql = wakeup.signature_sql(db.dialect_family(conn))
        signature = wakeup.digest(tuple(conn.exec_driver_sql(sql).one()))
    next_at: dt.datetime | None = None
    # One connection at a time: on SQLite each holds the write lock from its first statement.
    if cap > 0 and not busy and not due_now():
        with engine.connect() as conn:
            now = clock.read_now(conn)
            bounds = [now + dt.timedelta(seconds=cap), _next_midnight(now)]
            bounds += [_naive(t) for t in future(conn, clock.now(conn)) if t is not None]
        next_at = min(bounds)
    values: dict[str, Any] = {
        "next_at": next_at, "signature": signature, "identity": wakeup.identity(os.environ, os.getcwd()),
        "files": json.dumps({p: file_mark(p) for p in watched_files(settings)}, sort_keys=True),
        "idle_summary": json.dumps(dict(idle_summary), sort_keys=True, default=str)}
    with db.transaction(engine) as conn:
        values["recorded_at"] = clock.now(conn)
        if conn.execute(wakeups.update().where(wakeups.c.command == command).values(**values)).rowcount == 0:
            conn.execute(wakeups.insert().values(command=command, **values))


def forget(engine: Engine, command: str) -> None:
    """The next run of `command` is a full one (never raises)."""
    try:
        with db.transaction(engine) as conn:
            conn.execute(wakeups.update().where(wakeups.c.command == command).values(next_at=None))
    except Exception as exc:
        log.warning("wakeup_not_forgotten", command=command, error=db.describe_error(exc))


def _next_midnight(now: dt.datetime) -> dt.datetime:
    """A new UTC day schedules its slots and resets the daily spend ceilings."""
    return dt.datetime.combine(now.date() + dt.timedelta(days=1), dt.time())


def _naive(value: Any) -> dt.datetime:
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    assert isinstance(value, dt.datetime)
    return value.replace(tzinfo=None)


def watched_files(settings: Settings) -> list[str]:
    """Files whose change may change what a run does: the configuration and its prompt files, and
    every path the settings name (the ledger and its copies, the legacy decisions file, the static
    site's folders), found by walking the settings so a new one is watched without a change here."""
    found: set[str] = set()
    _walk(settings, found, depth=0)  # the configuration file itself is `settings.config_path`
    if settings.config_path is not None:
        found.update(_prompt_files(Path(settings.config_path)))
    return sorted(found)


def _walk(value: Any, found: set[str], depth: int) -> None:
    if depth > 4:
        return
    if isinstance(value, Path):
        found.add(os.path.abspath(value))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            if f.repr is False:  # secrets
                continue
            _walk(getattr(value, f.name), found, depth + 1)
    elif isinstance(value, Mapping):
        for v in value.values():
            _walk(v, found, depth + 1)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _walk(v, found, depth + 1)


def _prompt_files(config: Path) -> list[str]:
    try:
        with open(config, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return []
    products = data.get("products")
    if not isinstance(products, list):
        return []
    return [os.path.abspath(config.parent / p["prompt_file"]) for p in products
            if isinstance(p, dict) and isinstance(p.get("prompt_file"), str)]


# -- what falls due by time alone, per command --------------------------------------------------


def reconcile_future(conn: Connection, now: Any) -> list[Any]:
    """The earliest future time a job or track falls due, a lease ends, the custody watch reads a
    parked job, or a cool-down of the create gate or of reads ends."""
    j, t, g, r = tables.jobs.c, tables.tracks.c, tables.create_gate.c, tables.read_cooldown.c
    active = [s.value for s in states.ACTIVE]
    track_active = [s.value for s in states.TRACK_ACTIVE]
    q = sa.select(
        sa.select(sa.func.min(j.next_attempt_at)).where(j.state.in_(active), j.next_attempt_at > now)
        .scalar_subquery(),
        sa.select(sa.func.min(j.lease_expiry)).where(j.lease_expiry > now).scalar_subquery(),
        sa.select(sa.func.min(j.custody_watch_at)).where(j.custody_watch_at > now).scalar_subquery(),
        sa.select(sa.func.min(t.next_attempt_at)).where(t.state.in_(track_active), t.next_attempt_at > now)
        .scalar_subquery(),
        sa.select(sa.func.min(t.lease_expiry)).where(t.lease_expiry > now).scalar_subquery(),
        sa.select(sa.func.min(g.cooldown_until)).where(g.cooldown_until > now).scalar_subquery(),
        sa.select(sa.func.min(g.probe_after)).where(g.probe_after > now).scalar_subquery(),
        sa.select(sa.func.min(g.probe_expiry)).where(g.probe_expiry > now).scalar_subquery(),
        sa.select(sa.func.min(r.until_at)).where(r.until_at > now).scalar_subquery(),
    )
    return list(conn.execute(q).one())


def relay_future(conn: Connection, now: Any) -> list[Any]:
    """The earliest future time an unpublished outbox event falls due or its lease ends, or the
    relay's next sample of the disks."""
    from iipub.observe import disk_samples

    o = tables.outbox.c
    q = sa.select(
        sa.select(sa.func.min(o.next_attempt_at)).where(o.published_at.is_(None), o.next_attempt_at > now)
        .scalar_subquery(),
        sa.select(sa.func.min(o.lease_expiry)).where(o.published_at.is_(None), o.lease_expiry > now)
        .scalar_subquery(),
    )
    return [*conn.execute(q).one(), disk_samples.next_due(conn)]


_STANDING = ("shadow", "paused_everything", "held")


def idle_report(report: Any) -> dict[str, Any]:
    """A report's summary as an idle run prints it: every count zero, every flag off but the
    standing ones (shadow mode, `pause --everything`), which only a watched change can turn."""
    standing = {name: getattr(report, name) for name in _STANDING if hasattr(report, name)}
    blank = type(report)(worker=report.worker, **standing)
    summary = blank.summary() if hasattr(blank, "summary") else dict(blank.__dict__)
    return dict(summary)


def did_work(report: Any) -> bool:
    """Whether a run's report shows anything done, tried or left over (any count, any flag)."""
    for f in dataclasses.fields(report):
        if f.name in ("worker", "seconds", "shadow", "held", "paused_everything"):
            continue
        value = getattr(report, f.name)
        if isinstance(value, Mapping):
            if any(value.values()):
                return True
        elif value:
            return True
    return False


def reconcile_due(engine: Engine, settings: Settings) -> bool:
    """Whether the sweep has anything to do now, by its own queries: a due job or track, a
    suspended job whose response may finish, a webhook delivery waiting to be settled."""
    from iipub.model.jobs import new_worker_id
    from iipub.store.deliveries import Deliveries
    from iipub.store.job_store import Store

    store = Store(engine, new_worker_id("wakeup"), settings.reconcile.lease_seconds)
    if store.due_candidates(1) or store.tracks_due() or store.custody_watch_due(1):
        return True
    return bool(settings.webhooks.enabled and Deliveries(engine).awaiting_create(1))


def relay_due(engine: Engine) -> bool:
    """Whether the relay has an event to deliver now."""
    from iipub.store.outbox import Outbox

    return bool(Outbox(engine, "wakeup", 60.0).due(1))
