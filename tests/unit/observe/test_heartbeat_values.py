"""The heartbeat check as `status` shows it: a command that has not finished OK within its limit
is CRITICAL, a failed last run or a run that never finished is a WARNING, a new install with
nothing recorded asks whether cron is installed, and the provider's unreachability warns after
its count of runs. Values only."""

from __future__ import annotations

import datetime as dt

from iipub.core.severity import Severity
from iipub.observe.heartbeat_values import CommandBeat, HeartbeatSummary, RunRow

NOW = dt.datetime(2026, 12, 1, 12, 0)


def run(minutes_ago: float, *, ok: bool = True, error: str | None = None, command: str = "reconcile") -> RunRow:
    finished = NOW - dt.timedelta(minutes=minutes_ago)
    return RunRow(1, command, "web1", 42, "w", finished - dt.timedelta(seconds=3), finished, ok,
                  '{"leased": 2}' if ok else None, error)


def summary(*beats: CommandBeat, after: float = 600, **kw: object) -> HeartbeatSummary:
    return HeartbeatSummary(NOW, after, 24, True, True, beats, **kw)  # type: ignore[arg-type]


def test_a_command_that_finished_ok_recently_has_no_problem() -> None:
    last = run(1)
    s = summary(CommandBeat("reconcile", last, last, ok=5))
    assert s.problems() == []
    assert s.age_seconds(s.commands[0]) == 60.0
    assert s.to_dict()["reconcile"]["last"]["summary"] == {"leased": 2}
    assert s.to_dict()["reconcile"]["last"]["seconds"] == 3.0


def test_no_ok_run_within_the_limit_is_critical_and_says_the_last_failure() -> None:
    ok, failed = run(30), run(2, ok=False, error="database unavailable")
    (problem,) = summary(CommandBeat("relay", failed, ok)).problems()
    assert problem[0] == Severity.CRITICAL
    assert problem[1].startswith("no relay run finished OK in 10m00s (last OK 30m00s ago on web1")
    assert "last run failed 2m00s ago on web1: database unavailable" in problem[1]


def test_a_failed_last_run_within_the_limit_is_a_warning() -> None:
    ok, failed = run(5), run(1, ok=False, error="boom")
    assert summary(CommandBeat("reconcile", failed, ok)).problems() == [
        (Severity.WARNING, "reconcile: last run failed 1m00s ago on web1: boom")]


def test_runs_that_never_finished_are_counted_as_a_warning() -> None:
    last = run(1)
    ((severity, text),) = summary(CommandBeat("reconcile", last, last, unfinished=2)).problems()
    assert severity == Severity.WARNING and text.startswith("2 reconcile runs did not finish in 24h")


def test_nothing_recorded_on_a_new_install_asks_for_cron_and_the_check_can_be_off() -> None:
    empty = HeartbeatSummary(NOW, 600, 24, False, False, (CommandBeat("reconcile", None, None),))
    assert empty.problems() == [
        (Severity.WARNING, "no reconcile or relay run recorded yet: is cron installed (crontab.example)?")]
    assert summary(CommandBeat("reconcile", None, None), after=0).problems() == []


def test_an_unreachable_provider_warns_after_its_count_of_runs() -> None:
    last = run(1)
    beat = CommandBeat("reconcile", last, last)
    assert summary(beat, unreachable_ticks=2, unreachable_after=3).problems() == []
    ((severity, text),) = summary(beat, unreachable_ticks=3, unreachable_after=3).problems()
    assert severity == Severity.WARNING and text.startswith("provider unreachable: the last 3 reconcile runs")
    assert summary(beat, unreachable_ticks=9, unreachable_after=0).problems() == []  # 0: off
