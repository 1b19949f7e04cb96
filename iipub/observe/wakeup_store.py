"""What a full `reconcile` or `relay` run leaves for the next run's wake-up check (`idle_check`;
the rule is `wakeup`, the SQL `store.wakeup_sql` and `store.wakeups`).

Recorded after every full run, in this order, so that nothing written meanwhile can be missed: the
marks of the tables first, then whether anything is due now (the sweep's and the relay's own
queries, not a copy of them), then the earliest future time anything falls due. A run that did any
work, finds anything due, or saw a watched file change after it started (it may have loaded the file
before the change) records "due", and computes nothing else: the next run is a full one. Under
`IIPUB_WAKEUP_CHECK=off` nothing is recorded or computed. The row is the place's (`wakeup.place`:
host, working directory, configuration), so several hosts on one database keep their own. Recording
never makes a run fail: a failure is a warning, and the row left behind no longer matches the
tables.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import socket
import sys
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import structlog

from iipub.observe import wakeup
from iipub.observe.idle_check import OFF_SWITCH, file_mark
from iipub.settings.config import Settings
from iipub.store import db, wakeups
from iipub.store.handles import Engine

log = structlog.get_logger("iipub.wakeup")

# Cron starts its runs within a second or so of the minute; a full run's cap is brought forward
# by this much so the cron minute a cap away finds it passed.
_CRON_JITTER = dt.timedelta(seconds=5)


def run_started() -> int:
    """A run's start, on the clock the kernel stamps files' change times from (Linux's coarse
    real-time clock, which lags the fine one by up to a tick: a write after this moment never
    carries an earlier time, fine-grained or coarse); the recorder compares the watched files'
    times with it. Elsewhere the fine clock, less the usual granularity of a file's time."""
    if sys.platform.startswith("linux"):
        return time.clock_gettime_ns(getattr(time, "CLOCK_REALTIME_COARSE", _LINUX_REALTIME_COARSE))
    return time.time_ns() - 20_000_000


_LINUX_REALTIME_COARSE = 5  # <linux/time.h>; Python's time module does not always name it


def disabled() -> bool:
    """`IIPUB_WAKEUP_CHECK=off`: every run is a full one, and none records anything."""
    return os.environ.get(OFF_SWITCH, "").lower() in ("off", "0", "false", "no")


def record(engine: Engine, command: str, settings: Settings, *, busy: bool, started_ns: int,
           due_now: Callable[[], bool], future: Callable[[Engine], Iterable[Any]],
           idle_summary: Mapping[str, Any]) -> None:
    """Leave `command`'s wake-up row for this place (never raises)."""
    if disabled():
        return
    try:
        _record(engine, command, settings, busy, started_ns, due_now, future, idle_summary)
    except Exception as exc:
        log.warning("wakeup_not_recorded", command=command, error=db.describe_error(exc))


def _record(engine: Engine, command: str, settings: Settings, busy: bool, started_ns: int,
            due_now: Callable[[], bool], future: Callable[[Engine], Iterable[Any]],
            idle_summary: Mapping[str, Any]) -> None:
    cap = settings.reconcile.idle_check_max_seconds
    host, cwd = socket.gethostname(), os.getcwd()
    paths, names = _named(settings)
    files = {p: file_mark(p) for p in paths}
    values: dict[str, Any] = {
        "host": host[:255], "next_at": None, "signature": "",
        "identity": wakeup.identity(os.environ, cwd, names), "env_names": json.dumps(names),
        "files": json.dumps(files, sort_keys=True), "idle_summary": json.dumps(dict(idle_summary), sort_keys=True,
                                                                                default=str)}
    where = wakeup.place(os.environ, cwd, host)
    if cap <= 0 or busy or changed_since(files, started_ns):
        wakeups.write(engine, command, where, values)  # "due": nothing else computed
        return
    marks = wakeups.marks(engine)
    # One connection at a time: on SQLite each holds the write lock from its first statement.
    if not due_now():
        now = wakeups.now(engine)
        ran = dt.timedelta(microseconds=max(0, time.time_ns() - started_ns) // 1000)
        bounds = [cap_bound(now - ran, cap), _next_midnight(now)]
        bounds += [_naive(t) for t in future(engine) if t is not None]
        values.update(next_at=min(bounds), signature=wakeup.digest(marks))
    wakeups.write(engine, command, where, values)


def cap_bound(started: dt.datetime, cap: float) -> dt.datetime:
    """The latest `next_at` the cap allows a run that started at `started` (database clock): the
    cron minute a whole number of minutes within the cap after it runs in full. (`started + cap`
    would let that minute's run, a second early by the clock, answer idle: a full run every cap
    plus a minute.) A cap under a minute makes every run a full one."""
    minutes = int(cap // 60)
    return started + dt.timedelta(minutes=minutes) - _CRON_JITTER


def changed_since(files: Mapping[str, wakeup.FileMark], started_ns: int) -> bool:
    """Whether a watched file was written after the run started: the run may have loaded it
    before the write, so the marks taken now must not stand for what it saw."""
    return any(mark is not None and len(mark) >= 4 and max(mark[1], mark[3]) >= started_ns
               for mark in files.values())


def _next_midnight(now: dt.datetime) -> dt.datetime:
    """A new UTC day schedules its slots and resets the daily spend ceilings."""
    return dt.datetime.combine(now.date() + dt.timedelta(days=1), dt.time())


def _naive(value: Any) -> dt.datetime:
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    assert isinstance(value, dt.datetime)
    return value.replace(tzinfo=None)


def env_names(settings: Settings) -> list[str]:
    """The environment variables the settings name (fields called `*_env`: a webhook sink's
    `secret_env`), found by walking the settings so a new one counts without a change here."""
    return _named(settings)[1]


def watched_files(settings: Settings) -> list[str]:
    """Files whose change may change what a run does: the configuration and its prompt files, and
    every path the settings name (the ledger and its copies, the legacy decisions file, the static
    site's folders), found by walking the settings so a new one is watched without a change here."""
    return _named(settings)[0]


def _named(settings: Settings) -> tuple[list[str], list[str]]:
    """(`watched_files`, `env_names`): the settings walked once for both."""
    paths: set[str] = set()
    names: set[str] = set()
    _walk(settings, paths, names, depth=0)  # the configuration file itself is `settings.config_path`
    if settings.config_path is not None:
        paths.update(_prompt_files(Path(settings.config_path)))
    # The certificates the HTTP clients read (a file gone fails the full run's TLS set-up).
    paths.update(os.path.abspath(os.environ[n]) for n in wakeup.CERTIFICATE_VARIABLES if os.environ.get(n))
    return sorted(paths), sorted(names)


def _walk(value: Any, paths: set[str], names: set[str], depth: int) -> None:
    """Every path in `value` (secrets, fields with `repr=False`, left out) and every variable a
    `*_env` field names."""
    if depth > 4:
        return
    if isinstance(value, Path):
        paths.add(os.path.abspath(value))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.name.endswith("_env") and isinstance(item, str):
                if item:
                    names.add(item)
            elif f.repr is not False:
                _walk(item, paths, names, depth + 1)
    elif isinstance(value, Mapping):
        for v in value.values():
            _walk(v, paths, names, depth + 1)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _walk(v, paths, names, depth + 1)


def _prompt_files(config: Path) -> list[str]:
    try:
        raw = config.read_bytes()
        if b"prompt_file" not in raw:  # most configurations: no parse needed
            return []
        data = tomllib.loads(raw.decode())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return []
    products = data.get("products")
    if not isinstance(products, list):
        return []
    return [os.path.abspath(config.parent / p["prompt_file"]) for p in products
            if isinstance(p, dict) and isinstance(p.get("prompt_file"), str)]


# -- what falls due by time alone, per command --------------------------------------------------


def reconcile_future(engine: Engine) -> list[Any]:
    """The earliest future time a job or track falls due, a lease ends, the custody watch reads a
    parked job, or a cool-down of the create gate or of reads ends."""
    return wakeups.reconcile_future(engine)


def relay_future(engine: Engine) -> list[Any]:
    """The earliest future time an unpublished outbox event falls due or its lease ends, a saved
    job's or track's lease ends (a relay killed holding it), or the relay's next sample of the disks."""
    from iipub.observe import disk_samples

    with engine.connect() as conn:
        sample = disk_samples.next_due(conn)
    return [*wakeups.relay_future(engine), sample]


_STANDING = ("shadow", "paused_everything", "held")


def idle_report(report: Any) -> dict[str, Any]:
    """A report's summary as an idle run prints it: every count zero, every flag off but the
    standing ones (shadow mode, `pause --everything`), which only a watched change can turn."""
    standing = {name: getattr(report, name) for name in _STANDING if hasattr(report, name)}
    blank = type(report)(worker="", **standing)  # the idle run names its own worker
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
