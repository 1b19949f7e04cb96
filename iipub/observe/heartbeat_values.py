"""What `iipub status` shows of the heartbeats, as values: a `runs` row, each command's
heartbeat, and the heartbeat check's problems. Pure: `heartbeat` reads the rows and records runs.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from iipub.core.severity import Severity
from iipub.core.timefmt import duration, iso_z, iso_z_or_none, seconds_between
from iipub.core.wording import clip_words, plural


@dataclass(frozen=True)
class RunRow:
    id: int
    command: str
    host: str
    pid: int
    worker: str
    started_at: dt.datetime
    finished_at: dt.datetime | None
    ok: bool | None
    summary: str | None
    error: str | None

    @property
    def seconds(self) -> float | None:
        return None if self.finished_at is None else max(0.0, seconds_between(self.finished_at, self.started_at))

    def to_dict(self) -> dict[str, Any]:
        try:
            summary = json.loads(self.summary) if self.summary else None
        except ValueError:
            summary = self.summary
        return {
            "id": self.id, "command": self.command, "host": self.host, "pid": self.pid, "worker": self.worker,
            "started_at": iso_z(self.started_at), "finished_at": iso_z_or_none(self.finished_at),
            "seconds": None if self.seconds is None else round(self.seconds, 3), "ok": self.ok,
            "summary": summary, "error": self.error,
        }


@dataclass(frozen=True)
class CommandBeat:
    """One command's heartbeat: its last finished run, its last OK one, counts in the window."""

    command: str
    last: RunRow | None
    last_ok: RunRow | None
    ok: int = 0  # finished OK in the window
    failed: int = 0  # finished with an error in the window
    unfinished: int = 0  # started in the window, never finished, older than a run can last (died)
    running: int = 0  # started recently, not finished yet


@dataclass(frozen=True)
class HeartbeatSummary:
    generated_at: dt.datetime
    after_seconds: float  # 0: the check is off
    window_hours: float
    recorded: bool  # any run was ever recorded (of either command)
    any_jobs: bool
    commands: tuple[CommandBeat, ...]
    ping_configured: bool = False
    # Reconcile runs in a row (the newest first, runs that called no provider skipped) in which
    # every provider call failed to connect, and how many make a WARNING (0: off).
    unreachable_ticks: int = 0
    unreachable_after: int = 0

    def age_seconds(self, beat: CommandBeat) -> float | None:
        """Seconds since the command last finished OK (None: never)."""
        last = beat.last_ok
        return None if last is None or last.finished_at is None else max(
            0.0, seconds_between(self.generated_at, last.finished_at))

    def problems(self) -> list[tuple[Severity, str]]:
        found = self._heartbeat_problems()
        if self.unreachable_after and self.unreachable_ticks >= self.unreachable_after:
            found.append((Severity.WARNING,
                          (f"provider unreachable: the last {self.unreachable_ticks} reconcile runs that "
                           f"called it could not connect (creates refused, not sent; "
                           f"[status] unreachable_after_ticks = {self.unreachable_after})")))
        return found

    def _heartbeat_problems(self) -> list[tuple[Severity, str]]:
        after = self.after_seconds
        if after <= 0:
            return []
        if not self.recorded and not self.any_jobs:
            return [(Severity.WARNING, "no reconcile or relay run recorded yet: is cron installed (crontab.example)?")]
        found: list[tuple[Severity, str]] = []
        for beat in self.commands:
            age, last = self.age_seconds(beat), beat.last
            failed_last = ""
            if last is not None and not last.ok and last.finished_at is not None:
                failed_last = (f"last run failed {duration(seconds_between(self.generated_at, last.finished_at))} "
                               f"ago on {last.host}: {clip_words(last.error or '?', 120)}")
            if age is None or age > after:
                seen = (f"last OK {duration(age)} ago on {beat.last_ok.host}" if age is not None and beat.last_ok
                        else "none recorded")
                found.append((Severity.CRITICAL, (f"no {beat.command} run finished OK in {duration(after)} ({seen}"
                                                  f"{'; ' + failed_last if failed_last else ''})")))
            elif failed_last:
                found.append((Severity.WARNING, f"{beat.command}: {failed_last}"))
            if beat.unfinished:
                found.append((Severity.WARNING,
                              (f"{plural(beat.unfinished, beat.command + ' run')} did not finish in "
                               f"{self.window_hours:g}h (killed by timeout, the OOM killer or a reboot?)")))
        return found

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"after_seconds": self.after_seconds, "recorded": self.recorded,
                               "ping_configured": self.ping_configured,
                               "provider_unreachable_ticks": self.unreachable_ticks,
                               "unreachable_after_ticks": self.unreachable_after}
        for beat in self.commands:
            age = self.age_seconds(beat)
            doc[beat.command] = {
                "last": beat.last.to_dict() if beat.last else None,
                "last_ok": beat.last_ok.to_dict() if beat.last_ok else None,
                "age_seconds": None if age is None else round(age, 3),
                "in_window": {"ok": beat.ok, "failed": beat.failed, "unfinished": beat.unfinished},
                "running": beat.running,
            }
        return doc
