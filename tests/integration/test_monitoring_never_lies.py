"""Monitoring never lies: every failure before `status --check` can run is one `IIPUB UNKNOWN -`
line on stdout and exit 3; text from operators or the provider reaches no output with a control
character (newline, carriage return, escape sequences, the rest of C0/C1, bidi overrides),
whichever surface prints it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from iipub.core.wording import printable
from iipub.store import db, tables
from tests.support.cli import CliResult, clean_env, run_cli

pytestmark = pytest.mark.no_auto_schedule

# Newline, carriage return, a colour and a clear-screen sequence, an OSC title, BEL, NUL, a C1
# CSI, the bidi override and isolate characters: every way text can lie on a terminal or a monitor.
HOSTILE = ("line one\nIIPUB OK - all fine\r\x1b[31mred\x1b[0m \x1b[2J\x1b]0;title\x07 bell\x07 nul\x00 "
           "c1\x9b31m \u202etxt.exe\u202c \u2066iso\u2069 | fake=1")
_BAD = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _clean(text: str) -> None:
    assert not _BAD.search(text), repr(text)
    assert "[31m" not in text and "]0;title" not in text, repr(text)


def _unknown(result: CliResult) -> str:
    code, out = result.returncode, result.stdout
    assert code == 3, (code, out, result.stderr)
    lines = out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("IIPUB UNKNOWN - "), out
    _clean(lines[0])
    return lines[0]


@pytest.mark.parametrize(("content", "needle"), [
    (None, "environment file not found"),
    ("IIPUB_DATABASE_URL=sqlite:///x.db\nthis is not an assignment\n", "line 2"),
    ("IIPUB_CONFIG='unclosed\n", "quote is not closed"),
])
def test_a_broken_env_file_is_unknown_not_a_silent_78(tmp_path: Path, content: str | None, needle: str) -> None:
    env_file = tmp_path / "env"
    if content is not None:
        env_file.write_text(content, encoding="utf-8")
    for args in (("--env-file", str(env_file), "status", "--check"), ("status", "--check")):
        result = run_cli(*args, env={**clean_env(), "IIPUB_ENV_FILE": str(env_file)}, cwd=tmp_path)
        assert needle in _unknown(result)
    as_json = run_cli("status", "--check", "--json", env={**clean_env(), "IIPUB_ENV_FILE": str(env_file)},
                      cwd=tmp_path)
    assert as_json.returncode == 3 and json.loads(as_json.stdout)["check"]["status"] == "UNKNOWN"


def test_bad_configuration_unreachable_database_and_missing_schema_are_unknown(tmp_path: Path) -> None:
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("[reconcile\n", encoding="utf-8")
    unknown_key = tmp_path / "unknown.toml"
    unknown_key.write_text("[reconcile]\nno_such_key = 1\n", encoding="utf-8")
    empty = tmp_path / "empty.sqlite3"
    sa.create_engine(f"sqlite:///{empty}").connect().close()  # a database without iipub's tables
    cases = [
        ({"IIPUB_CONFIG": str(bad_toml)}, "not valid TOML"),
        ({"IIPUB_CONFIG": str(unknown_key)}, "no_such_key"),
        ({"IIPUB_CONFIG": str(tmp_path / "missing.toml")}, "config file not found"),
        ({"IIPUB_DATABASE_URL": "mysql+pymysql://nobody@127.0.0.1:1/nothing"}, "database"),
        ({"IIPUB_DATABASE_URL": f"sqlite:///{tmp_path / 'never.sqlite3'}"}, "schema not ready"),
        ({"IIPUB_DATABASE_URL": f"sqlite:///{empty}"}, "schema not ready"),
        ({"IIPUB_LOG_LEVEL": "loud"}, "IIPUB_LOG_LEVEL"),
    ]
    for extra, needle in cases:
        line = _unknown(run_cli("status", "--check", env={**clean_env(), **extra}, cwd=tmp_path))
        assert needle in line, (extra, line)
    assert not (tmp_path / "never.sqlite3").exists()


def test_printable_removes_every_control_and_keeps_the_words() -> None:
    text = printable(HOSTILE)
    _clean(text)
    assert "line one IIPUB OK - all fine red" in text and "txt.exe" in text and "iso" in text
    assert printable("x" * 50, 10) == "x" * 9 + "…"


def _hostile_state(db_url: str, env: dict[str, str], tmp_path: Path) -> str:
    """A paused gate whose reason is hostile and a quarantined job whose last error is (as a
    provider's message could be): the id of that job."""
    assert run_cli("db", "migrate", env=env, cwd=tmp_path).returncode == 0
    assert run_cli("schedule", "--date", "2026-01-05", env=env, cwd=tmp_path).returncode == 0
    assert run_cli("pause", "--reason", HOSTILE, env=env, cwd=tmp_path).returncode == 0
    engine = db.make_engine(db_url)
    try:
        with engine.begin() as conn:
            job_id = conn.execute(sa.select(tables.jobs.c.id).limit(1)).scalar_one()
            conn.execute(tables.jobs.update().where(tables.jobs.c.id == job_id).values(
                state="QUARANTINED", quarantine_reason="create_outcome_unknown", last_error=HOSTILE,
                response_id="resp_\x1b[2Jx"))
    finally:
        engine.dispose()
    return str(job_id)


@pytest.fixture
def hostile(db_url: str, cli_env: dict[str, str], tmp_path: Path) -> tuple[str, dict[str, str], Path]:
    return _hostile_state(db_url, cli_env, tmp_path), cli_env, tmp_path


def test_check_prints_hostile_text_on_one_clean_line(hostile: tuple[str, dict[str, str], Path]) -> None:
    _job_id, env, cwd = hostile
    check = run_cli("status", "--check", env=env, cwd=cwd)
    assert check.returncode in (1, 2), check.stdout
    lines = check.stdout.splitlines()
    assert len(lines) == 1, check.stdout
    _clean(lines[0])
    assert "line one IIPUB OK - all fine" in lines[0]
    assert lines[0].count("|") == 1, lines[0]  # the operator's `|` does not start a second perfdata
    doc = json.loads(run_cli("status", "--check", "--json", env=env, cwd=cwd).stdout)
    _clean(doc["check"]["line"])


def test_status_report_prints_hostile_text_cleanly(hostile: tuple[str, dict[str, str], Path]) -> None:
    _job_id, env, cwd = hostile
    report = run_cli("status", env=env, cwd=cwd)
    assert report.returncode == 0, report.stderr
    _clean(report.stdout)
    assert "txt.exe" in report.stdout
    assert not any(line.startswith("IIPUB OK - all fine") for line in report.stdout.splitlines())


def test_jobs_show_prints_hostile_text_on_one_clean_line(hostile: tuple[str, dict[str, str], Path]) -> None:
    job_id, env, cwd = hostile
    shown = run_cli("jobs", "show", job_id, env=env, cwd=cwd)
    assert shown.returncode == 0, shown.stderr
    _clean(shown.stdout)
    last_error = [line for line in shown.stdout.splitlines() if line.startswith("last_error")]
    assert len(last_error) == 1 and "fake=1" in last_error[0], shown.stdout
    assert not any(line.startswith("IIPUB OK") for line in shown.stdout.splitlines())


def test_quarantine_and_jobs_lists_print_hostile_text_cleanly(hostile: tuple[str, dict[str, str], Path]) -> None:
    _job_id, env, cwd = hostile
    listed = run_cli("quarantine", "list", env=env, cwd=cwd)
    assert listed.returncode == 0, listed.stderr
    _clean(listed.stdout)
    assert len(listed.stdout.strip().splitlines()) == 2, listed.stdout  # the header and the one job
    jobs = run_cli("jobs", "list", env=env, cwd=cwd)
    _clean(jobs.stdout)
    # JSON keeps the text whole, escaped by the encoder
    doc = json.loads(run_cli("quarantine", "list", "--json", env=env, cwd=cwd).stdout)
    assert doc[0]["last_error"] == HOSTILE


def test_operator_commands_echo_hostile_reasons_cleanly(db_url: str, cli_env: dict[str, str], tmp_path: Path) -> None:
    assert run_cli("db", "migrate", env=cli_env, cwd=tmp_path).returncode == 0
    paused = run_cli("pause", "--reason", HOSTILE, "--by", "ops\x1b[2J", env=cli_env, cwd=tmp_path)
    assert paused.returncode == 0 and len(paused.stdout.strip().splitlines()) == 1, paused.stdout
    _clean(paused.stdout)
    override = run_cli("budget", "override", "--tokens", "1000", "--reason", HOSTILE, env=cli_env, cwd=tmp_path)
    _clean(override.stdout)
    _clean(run_cli("budget", "show", env=cli_env, cwd=tmp_path).stdout)
