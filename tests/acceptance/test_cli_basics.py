"""The `iipub` command line: migrate, schedule, inspect, errors. In process (`iipub.cli.main`),
except one smoke test of the installed console script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from iipub.cli import COMMANDS
from iipub.store import db, tables
from tests.support.cli import one_line_error, run_cli, run_iipub

JOB_KEYS = {
    "id", "product", "edition_date", "state", "version", "generation_attempts", "poll_count",
    "response_id", "quarantine_reason", "lease_owner", "lease_expiry", "next_attempt_at",
    "config_fingerprint",
}
EVENT_KEYS = {"from_state", "to_state", "version", "reason", "worker", "at"}


def test_migrate_schedule_list_show(cli_env: dict[str, str], tmp_path: Path) -> None:
    first = run_cli("db", "migrate", env=cli_env, cwd=tmp_path, check=True)
    assert "applied 0001_init" in first.stdout
    again = run_cli("db", "migrate", env=cli_env, cwd=tmp_path, check=True)
    assert "nothing to apply" in again.stdout
    status = json.loads(run_cli("db", "status", "--json", env=cli_env, cwd=tmp_path, check=True).stdout)
    assert all(s["applied_at"] for s in status)

    out = run_cli("schedule", "--date", "2026-11-29", env=cli_env, cwd=tmp_path, check=True).stdout
    assert "created 2, already present 0" in out
    out = run_cli("schedule", "--date", "2026-11-29", env=cli_env, cwd=tmp_path, check=True).stdout
    assert "created 0, already present 2" in out

    jobs = json.loads(run_cli("jobs", "list", "--json", env=cli_env, cwd=tmp_path, check=True).stdout)
    assert len(jobs) == 2 and all(set(j) >= JOB_KEYS and "events" not in j for j in jobs)
    assert {j["state"] for j in jobs} == {"NO_JOB"}

    shown = json.loads(run_cli("jobs", "show", jobs[0]["id"], "--json", env=cli_env, cwd=tmp_path,
                                 check=True).stdout)
    assert set(shown) >= JOB_KEYS and shown["id"] == jobs[0]["id"]
    assert shown["edition_date"] == "2026-11-29"
    assert len(shown["events"]) == 1 and set(shown["events"][0]) >= EVENT_KEYS
    assert shown["events"][0]["to_state"] == "NO_JOB"

    human = run_cli("jobs", "list", env=cli_env, cwd=tmp_path, check=True).stdout
    assert human.splitlines()[0].split()[:4] == ["ID", "PRODUCT", "DATE", "STATE"]

    shown_human = run_cli("jobs", "show", jobs[0]["id"], env=cli_env, cwd=tmp_path, check=True).stdout
    header, event_row = shown_human.splitlines()[-2:]
    assert header.split() == ["AT", "LANG", "VER", "FROM", "TO", "REASON", "WORKER", "DETAIL"]
    assert "NO_JOB" in event_row and "scheduled" in event_row and event_row.endswith('{"backfill": false}')


def test_expected_errors_are_one_line_and_nonzero(cli_env: dict[str, str], tmp_path: Path) -> None:
    run_cli("db", "migrate", env=cli_env, cwd=tmp_path, check=True)
    cases = [
        (("jobs", "show", "00000000-0000-0000-0000-000000000000"), "no job with id"),
        (("schedule", "--date", "2026-02-30"), "not a date"),
        (("schedule", "--product", "nope"), "unknown product"),
        (("jobs", "list", "--state", "BOGUS"), "unknown state"),
    ]
    for args, needle in cases:
        proc = run_cli(*args, env=cli_env, cwd=tmp_path)
        assert proc.returncode != 0, args
        assert needle in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_an_unknown_command_is_one_usage_line_and_every_listed_command_loads(cli_env: dict[str, str]) -> None:
    one_line_error(run_cli("frobnicate", env=cli_env), 2, "No such command 'frobnicate'")
    one_line_error(run_cli("stauts", env=cli_env), 2, "Did you mean 'status'?")
    listed = run_cli("--help", env=cli_env, check=True).stdout
    for name in COMMANDS:  # each subcommand's module loads on demand: every name must resolve
        assert name in listed
        assert run_cli(name, "--help", env=cli_env).returncode == 0, name


def test_unreachable_database_and_missing_schema(cli_env: dict[str, str], tmp_path: Path) -> None:
    env = {**cli_env, "IIPUB_DATABASE_URL": "mysql+pymysql://root@127.0.0.1:9/none"}
    proc = run_cli("jobs", "list", env=env, cwd=tmp_path)
    assert proc.returncode == 69 and "database unreachable" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    env = {**cli_env, "IIPUB_DATABASE_URL": f"sqlite:///{tmp_path / 'empty.sqlite3'}"}
    proc = run_cli("jobs", "list", env=env, cwd=tmp_path)
    assert proc.returncode == 69 and "iipub db migrate" in proc.stderr


def test_corrupt_config_file_is_one_clear_error(cli_env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[budgets\n")
    proc = run_cli("schedule", env={**cli_env, "IIPUB_CONFIG": str(bad)}, cwd=tmp_path)
    assert proc.returncode == 78 and "not valid TOML" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_installed_console_script_smoke(cli_env: dict[str, str], tmp_path: Path) -> None:
    """The one start of the installed `iipub` script in this file: its entry point runs a
    command end to end against the test's database."""
    proc = run_iipub("db", "migrate", env=cli_env, cwd=tmp_path, check=True)
    assert "applied 0001_init" in proc.stdout
    engine = db.make_engine(cli_env["IIPUB_DATABASE_URL"])
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(tables.jobs)).scalar_one() == 0
    finally:
        engine.dispose()
