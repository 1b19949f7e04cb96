"""What every command shares: untrusted text cut for one table cell, tables with aligned columns,
an operator command's one line, the user acting, and the one-line JSON summary of a cron run
(left out when stdout is the very file stderr is, as under cron's `>>log 2>&1`)."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import pytest

from iipub.cli import common
from iipub.model.jobs import Job, slot_row
from iipub.model.states import State


def test_clip_makes_untrusted_text_one_short_line() -> None:
    assert common.clip("a\n\tb\x1b[31m  c", 80) == "a b c"  # control sequences gone, white space one space
    assert common.clip("x" * 500, 60) == "x" * 59 + "…"
    assert common.clip(None, 10) == ""


def test_a_table_aligns_its_columns_under_the_headers() -> None:
    lines = common.table([("a", 1), ("long value", 22)], ["NAME", "N"]).splitlines()
    assert lines[0].split() == ["NAME", "N"] and len(lines) == 3
    assert lines[1].rindex("1") == lines[2].rindex("22") == lines[0].rindex("N")


def test_an_operator_commands_line_says_the_move() -> None:
    job = Job.from_row(slot_row(job_id="job-1", product="p", day=dt.date(2026, 12, 1), priority=0,
                                opens_at=dt.datetime(2026, 12, 1), now=dt.datetime(2026, 12, 1)))
    assert common.moved(State.QUEUED, job) == "job job-1: QUEUED -> NO_JOB (version 1)"


def test_the_acting_user_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("USER", "ops")
    assert common.acting_user() == "ops"


def test_a_runs_summary_is_one_json_line_unless_stdout_is_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    common.print_summary({"b": 1, "a": 2})
    assert capsys.readouterr().out == json.dumps({"a": 2, "b": 1}) + "\n"
    with (tmp_path / "cron.log").open("w") as log:
        monkeypatch.setattr(sys, "stdout", log)
        monkeypatch.setattr(sys, "stderr", log)
        common.print_summary({"a": 1})
    assert (tmp_path / "cron.log").read_text() == ""
