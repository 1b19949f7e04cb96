"""Heartbeats: one `runs` row per `iipub reconcile` / `iipub relay` run, and the optional
dead-man's-switch ping.

A run's row is written when it starts (`finished_at` NULL) and again when it finishes (`ok`,
its bounded summary or error), by the database clock. A row left unfinished means the process
died (cron's `timeout -k`, the OOM killer, a reboot). `iipub status` reads the last finished
run of each command (`summary`); `--check` is CRITICAL when none finished OK recently.

Recording never makes a run fail: a database error while writing a heartbeat is logged as a
warning and the run goes on. The ping (`[monitoring] ping_url`) is a GET after each successful
run, bounded in time, and its failures are warnings too. The runs prune their own table: one
run in `PRUNE_EVERY` deletes what is older than `KEEP_DAYS` or beyond the newest `KEEP_ROWS`
rows (a few rows at a time, by index).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import structlog

from iipub import __version__
from iipub.core import tls
from iipub.core.errors import SchemaNotReady
from iipub.core.timefmt import naive_utc
from iipub.observe.heartbeat_values import CommandBeat, HeartbeatSummary, RunRow
from iipub.settings.config import MonitoringSettings
from iipub.store import db, run_rows
from iipub.store.handles import Connection, Engine, OperationalError, ProgrammingError, RowMapping

log = structlog.get_logger("iipub.heartbeat")

COMMANDS = ("reconcile", "relay")
SUMMARY_MAX_CHARS = 8_000  # the JSON kept of a run's summary (TEXT holds 64 KiB on MySQL)
ERROR_MAX_CHARS = 2_000
KEEP_DAYS = 7
KEEP_ROWS = 50_000  # a week of both cron lines every minute on a few hosts
PRUNE_EVERY = 20



# -- recording ---------------------------------------------------------------------------------


@dataclass
class Run:
    """One run being recorded. `summary` is set by the caller before the run ends."""

    engine: Engine
    command: str
    worker: str
    id: int | None = None  # None: its start could not be recorded
    summary: Mapping[str, Any] | None = None
    started: float = field(default_factory=time.monotonic)


def start(engine: Engine, command: str, worker: str) -> Run:
    """Record that `command` started (never raises)."""
    run = Run(engine, command, worker)
    try:
        run.id = run_rows.start(engine, command, _host(), os.getpid(), worker)
    except Exception as exc:
        log.warning("heartbeat_not_recorded", command=command, worker=worker, stage="start", error=_describe(exc))
    return run


def finish(run: Run, ok: bool, error: str | None = None) -> None:
    """Record how `run` ended (never raises). A run whose start was not recorded gets its whole
    row now, its start time reckoned back from how long it ran."""
    values: dict[str, Any] = {"ok": ok, "summary": bounded_summary(run.summary),
                              "error": None if error is None else _bounded(error, ERROR_MAX_CHARS)}
    try:
        run.id = run_rows.finish(run.engine, run.id, values, command=run.command, host=_host(), pid=os.getpid(),
                                 worker=run.worker, elapsed=time.monotonic() - run.started)
    except Exception as exc:
        log.warning("heartbeat_not_recorded", command=run.command, worker=run.worker, stage="finish",
                    error=_describe(exc))
        return
    if run.id is not None and run.id % PRUNE_EVERY == 0:
        prune(run.engine, run.id)


def prune(engine: Engine, newest_id: int) -> int:
    """Delete runs older than KEEP_DAYS or beyond the newest KEEP_ROWS (never raises)."""
    try:
        return run_rows.prune(engine, newest_id, KEEP_ROWS, KEEP_DAYS)
    except Exception as exc:
        log.warning("heartbeat_prune_failed", error=_describe(exc))
        return 0


@contextmanager
def recorded(engine: Engine, command: str, worker: str, monitoring: MonitoringSettings) -> Iterator[Run]:
    """Record the run inside the block; after a successful one, ping `monitoring.ping_url`. An
    exception (the run failed) is recorded and propagates; no ping is sent for it."""
    run = start(engine, command, worker)
    try:
        yield run
    except BaseException as exc:
        finish(run, ok=False, error=f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        raise
    finish(run, ok=True)
    ping(monitoring, command)


def bounded_summary(summary: Mapping[str, Any] | None) -> str | None:
    """The summary as JSON of at most SUMMARY_MAX_CHARS: whole, or its scalar entries only
    (`"truncated": true`), or just that mark."""
    if summary is None:
        return None
    text = json.dumps(summary, sort_keys=True, default=str)
    if len(text) <= SUMMARY_MAX_CHARS:
        return text
    scalars = {k: v for k, v in summary.items() if isinstance(v, (str, int, float, bool)) or v is None}
    text = json.dumps({**scalars, "truncated": True}, sort_keys=True, default=str)
    return text if len(text) <= SUMMARY_MAX_CHARS else '{"truncated": true}'


def _bounded(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _host() -> str:
    return (socket.gethostname() or "unknown")[:255]


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {db.describe_error(exc)}"


# -- the dead-man's switch ---------------------------------------------------------------------------


def ping_target(url: str) -> str:
    """What a log line may say of a ping URL: scheme, host and port (its path is often the secret)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"


def ping(monitoring: MonitoringSettings, command: str) -> bool:
    """GET `ping_url` (with `{command}` filled in) once; True when it answered 2xx. Bounded by
    twice `ping_timeout_seconds` whatever the server does; never raises."""
    if not monitoring.ping_url:
        return False
    url = monitoring.ping_url.replace("{command}", command)
    timeout = monitoring.ping_timeout_seconds
    outcome: list[int | str] = []
    worker = threading.Thread(target=_get, args=(url, timeout, outcome), name="iipub-ping", daemon=True)
    worker.start()
    worker.join(2 * timeout)
    got: int | str = outcome[0] if outcome else f"no answer within {2 * timeout:g}s"
    if isinstance(got, int) and 200 <= got < 300:
        log.debug("ping_sent", command=command, target=ping_target(url), status=got)
        return True
    log.warning("ping_failed", command=command, target=ping_target(url),
                error=f"HTTP {got}" if isinstance(got, int) else got)
    return False


def _get(url: str, timeout: float, outcome: list[int | str]) -> None:
    import httpx  # only a run that pings needs it here

    try:
        with httpx.Client(timeout=timeout, follow_redirects=False, verify=tls.client_context(),
                          headers={"User-Agent": f"iipub/{__version__}"}) as client, client.stream("GET", url) as resp:
            outcome.append(resp.status_code)  # the body is never read
    except Exception as exc:
        outcome.append(" ".join(f"{type(exc).__name__}: {exc}".split())[:300])


# -- what `status` shows -------------------------------------------------------------------------------


def summary(conn: Connection, now: dt.datetime, *, after_seconds: float, ping_configured: bool,
            window_hours: float, stale_after_seconds: float, any_jobs: bool,
            unreachable_after: int = 0) -> HeartbeatSummary:
    """The heartbeats as of `now` (the database clock), judged against `after_seconds` (the
    effective limit, `Settings.heartbeat_limit`). A run unfinished for longer than
    `stale_after_seconds` counts as dead. A database without the `runs` table (migration 0005
    not applied) is SchemaNotReady."""
    try:
        beats, recorded = _beats(conn, window_hours, stale_after_seconds)
    except (OperationalError, ProgrammingError) as exc:
        if "runs" in str(exc.orig).lower() and db.is_missing_table(exc):
            raise SchemaNotReady("the runs table is missing (migration 0005): run `iipub db migrate`") from None
        raise
    streak = unreachable_streak(conn, max(unreachable_after, 1) * 10) if unreachable_after else 0
    return HeartbeatSummary(now, after_seconds, window_hours, recorded, any_jobs, beats,
                            ping_configured=ping_configured, unreachable_ticks=streak,
                            unreachable_after=unreachable_after)


def unreachable_streak(conn: Connection, look_back: int) -> int:
    """How many of the newest finished reconcile runs in a row could not reach the provider:
    every provider call of the run failed to connect (`provider_unreachable` in its summary).
    Runs that called no provider (nothing was due) neither count nor break the streak."""
    rows = run_rows.reconcile_summaries(conn, look_back)
    streak = 0
    for text in rows:
        try:
            doc = json.loads(text) if text else {}
        except ValueError:
            doc = {}
        if not isinstance(doc, dict) or not doc.get("provider_calls"):
            continue
        if not doc.get("provider_unreachable"):
            break
        streak += 1
    return streak


def _beats(conn: Connection, window_hours: float, stale_after_seconds: float) -> tuple[tuple[CommandBeat, ...], bool]:
    """Each command's runs in the window and its last (OK) run; whether any run was ever recorded."""
    counts: dict[str, dict[str, int]] = {c: {"ok": 0, "failed": 0, "unfinished": 0, "running": 0} for c in COMMANDS}
    for command, ok, is_open, is_old, n in run_rows.counts(conn, window_hours, stale_after_seconds):
        if command not in counts:
            continue
        key = ("unfinished" if is_old else "running") if is_open else ("ok" if ok else "failed")
        counts[command][key] += int(n)
    beats = []
    for command in COMMANDS:
        last = _row(run_rows.last_finished(conn, command))
        last_ok = last if last is not None and last.ok else _row(run_rows.last_finished(conn, command, ok=True))
        beats.append(CommandBeat(command, last, last_ok, **counts[command]))
    recorded = run_rows.any_recorded(conn)
    return tuple(beats), recorded


def _row(m: RowMapping | None) -> RunRow | None:
    if m is None:
        return None
    return RunRow(
        id=int(m["id"]), command=m["command"], host=m["host"], pid=int(m["pid"]), worker=m["worker"],
        started_at=naive_utc(m["started_at"]),
        finished_at=None if m["finished_at"] is None else naive_utc(m["finished_at"]),
        ok=None if m["ok"] is None else bool(m["ok"]), summary=m["summary"], error=m["error"],
    )
