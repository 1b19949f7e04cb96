"""What a new deployment meets first, through `iipub.cli.main` in process: the database URL
spellings, click's usage text at a terminal (one JSON line under cron), the `--state` and
`--product` filters, the log options after the subcommand and in the environment, the console
format at a terminal, an error's `kind`, and the log lines an operator greps for."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import sqlalchemy as sa

from iipub.core import errors
from iipub.provider.openai.simulator import Simulator
from iipub.store import db
from tests.support.cli import one_line_error, run_cli, stderr_at_a_terminal
from tests.support.databases import MYSQL_URL
from tests.support.settings import sim_env


def _json_lines(stderr: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stderr.splitlines() if line.strip()]


@pytest.fixture
def at_a_terminal() -> Iterator[None]:
    """The commands' stderr is a terminal, as when a person runs them."""
    with stderr_at_a_terminal():
        yield


# -- item 2: database URLs ------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "driver"), [
    ("mysql://u:p@127.0.0.1/db", "mysql+pymysql"),
    ("mariadb://u:p@127.0.0.1/db", "mariadb+pymysql"),
    ("mysql+mysqldb://u:p@127.0.0.1/db", "mysql+pymysql"),
    ("mysql+pymysql://u:p@127.0.0.1/db", "mysql+pymysql"),
    ("sqlite:///x.sqlite3", "sqlite"),
])
def test_mysql_and_mariadb_urls_mean_pymysql(url: str, driver: str) -> None:
    parsed = db.engine_url(url)
    assert parsed.drivername == driver
    engine = db.make_engine(url)  # no MySQLdb import: the engine is built on PyMySQL
    try:
        assert engine.dialect.driver in ("pymysql", "pysqlite")
    finally:
        engine.dispose()


@pytest.mark.mysql
def test_a_plain_mysql_url_runs_commands(cli_env: dict[str, str], tmp_path: Path) -> None:
    url = sa.engine.make_url(cli_env["IIPUB_DATABASE_URL"]).set(drivername="mysql").render_as_string(
        hide_password=False)
    assert url.startswith("mysql://") and MYSQL_URL
    env = {**cli_env, "IIPUB_DATABASE_URL": url}
    run_cli("db", "migrate", env=env, cwd=tmp_path, check=True)
    listed = run_cli("jobs", "list", "--json", env=env, cwd=tmp_path, check=True)
    assert json.loads(listed.stdout) == []


# -- item 3: usage at a terminal, one JSON line under cron --------------------------------------------


@pytest.mark.parametrize("args", [(), ("jobs",), ("quarantine",)])
def test_a_bare_group_shows_clicks_help_not_a_json_line(args: tuple[str, ...], cli_env: dict[str, str],
                                                         tmp_path: Path) -> None:
    result = run_cli(*args, env=cli_env, cwd=tmp_path)
    assert result.returncode == 2  # as click does
    assert result.stderr.startswith(f"Usage: iipub {' '.join(args)}".rstrip() + " [OPTIONS] COMMAND"), result.stderr
    assert "Commands:" in result.stderr and not result.stderr.lstrip().startswith("{")


def test_a_usage_error_at_a_terminal_is_clicks_usage_text(at_a_terminal: None, cli_env: dict[str, str],
                                                          tmp_path: Path) -> None:
    result = run_cli("jobs", "list", "--limit", "0", env=cli_env, cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0] == "Usage: iipub jobs list [OPTIONS]" and "Try 'iipub jobs list --help' for help." in lines
    assert lines[-1].startswith("Error: Invalid value for '--limit'"), result.stderr


def test_a_usage_error_under_cron_is_one_json_line(cli_env: dict[str, str], tmp_path: Path) -> None:
    result = run_cli("jobs", "list", "--limit", "0", env=cli_env, cwd=tmp_path)
    one_line_error(result, 2, "Invalid value for '--limit'")
    assert json.loads(result.stderr)["kind"] == "UsageError"


def test_other_errors_at_a_terminal_read_as_text(at_a_terminal: None, cli_env: dict[str, str],
                                                 tmp_path: Path) -> None:
    result = run_cli("jobs", "list", "--product", "nope", env=cli_env, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == "Error: unknown product 'nope' (configured: daily-brief, revolution-watch)\n"


def test_every_error_kind_is_a_type_of_iipub_errors(cli_env: dict[str, str], tmp_path: Path) -> None:
    kinds = set()
    for args, env in ((("jobs", "list", "--state", "nope"), cli_env),
                      (("jobs", "list"), {**cli_env, "IIPUB_DATABASE_URL": "postgres://u@h/d"}),
                      (("jobs", "list"), {**cli_env, "IIPUB_DATABASE_URL": "mysql://u@127.0.0.1:9/d"}),
                      (("jobs", "list"), cli_env)):  # the SQLite file does not exist
        (line,) = _json_lines(run_cli(*args, env=env, cwd=tmp_path).stderr)
        kinds.add(line["kind"])
    assert kinds == {"UsageError", "ConfigError", "DatabaseUnavailable", "SchemaNotReady"}
    assert all(issubclass(getattr(errors, str(k)), errors.IipubError) for k in kinds)


# -- item 4: filters, exit codes, the SQLite file, log options ----------------------------------------------


def test_state_is_case_insensitive_and_a_refusal_lists_the_states(engine: sa.Engine, cli_env: dict[str, str],
                                                                   tmp_path: Path) -> None:
    run_cli("schedule", env=cli_env, cwd=tmp_path, check=True)
    for spelling in ("no_job", "No_Job", "NO_JOB"):
        listed = run_cli("jobs", "list", "--state", spelling, "--json", env=cli_env, cwd=tmp_path, check=True)
        assert {j["state"] for j in json.loads(listed.stdout)} == {"NO_JOB"} and len(json.loads(listed.stdout)) == 2
    refused = run_cli("jobs", "list", "--state", "deleeted", env=cli_env, cwd=tmp_path)
    one_line_error(refused, 2, "unknown state 'deleeted'")
    assert all(state in refused.stderr for state in ("NO_JOB", "DELETED", "QUARANTINED", "MANUALLY_SUSPENDED"))


def test_states_complete_in_the_shell(cli_env: dict[str, str], tmp_path: Path) -> None:
    env = {**cli_env, "_IIPUB_COMPLETE": "bash_complete", "COMP_WORDS": "iipub jobs list --state QUA",
           "COMP_CWORD": "4"}
    result = run_cli(env=env, cwd=tmp_path)
    assert result.returncode == 0
    assert "plain,QUARANTINED" in result.stdout.splitlines(), result.stdout


def test_an_unknown_product_is_a_usage_error_wherever_a_product_is_taken(engine: sa.Engine, cli_env: dict[str, str],
                                                                          tmp_path: Path) -> None:
    for args in (("jobs", "list", "--product", "nope"), ("schedule", "--product", "nope"),
                 ("backfill", "--product", "nope", "--from", "2026-01-01", "--to", "2026-01-02"),
                 ("budget", "override", "--tokens", "10", "--reason", "x", "--product", "nope")):
        one_line_error(run_cli(*args, env=cli_env, cwd=tmp_path), 2, "unknown product 'nope'")


@pytest.mark.skipif(bool(MYSQL_URL), reason="the SQLite file is the subject")
def test_read_only_commands_do_not_create_a_missing_sqlite_file(cli_env: dict[str, str], tmp_path: Path) -> None:
    target = Path(sa.engine.make_url(cli_env["IIPUB_DATABASE_URL"]).database or "")
    assert not target.exists()
    for args in (("jobs", "list"), ("jobs", "show", "abcd"), ("quarantine", "list"), ("status",), ("check",),
                 ("outbox", "list"), ("orphans", "list"), ("reconcile",), ("db", "status"), ("db", "status", "--json"),
                 ("quarantine", "show", "abcd"), ("budget", "show"), ("export", "--in-flight")):
        result = run_cli(*args, env={**cli_env, "OPENAI_API_KEY": "sk-test"}, cwd=tmp_path)
        one_line_error(result, 69, f"no database at {target}")
    checked = run_cli("status", "--check", env=cli_env, cwd=tmp_path)
    assert checked.returncode == 3 and checked.stdout.startswith("IIPUB UNKNOWN")
    assert not target.exists() and not Path(f"{target}-wal").exists()
    run_cli("db", "migrate", env=cli_env, cwd=tmp_path, check=True)  # the one command that creates it
    assert target.exists()


def _transitions(stderr: str) -> list[dict[str, object]]:
    return [e for e in _json_lines(stderr) if e.get("event") == "transition"]


def test_log_level_after_the_subcommand_and_from_the_environment(engine: sa.Engine, cli_env: dict[str, str],
                                                                 tmp_path: Path) -> None:
    job = "--by=ops"
    run_cli("schedule", env=cli_env, cwd=tmp_path, check=True)
    (first, *_rest) = json.loads(run_cli("jobs", "list", "--json", env=cli_env, cwd=tmp_path, check=True).stdout)
    loud = run_cli("suspend", first["id"], "--reason", "drill", job, env=cli_env, cwd=tmp_path, check=True)
    assert [t["to_state"] for t in _transitions(loud.stderr)] == ["MANUALLY_SUSPENDED"]
    quiet = run_cli("resume", first["id"], "--log-level", "warning", job, env=cli_env, cwd=tmp_path, check=True)
    assert _transitions(quiet.stderr) == [] and quiet.stdout
    run_cli("suspend", first["id"], "--reason", "drill", job, env={**cli_env, "IIPUB_LOG_LEVEL": "warning"},
            cwd=tmp_path, check=True)
    again = run_cli("resume", first["id"], job, env={**cli_env, "IIPUB_LOG_LEVEL": "WARNING"}, cwd=tmp_path,
                    check=True)
    assert _transitions(again.stderr) == []
    # the command line wins over the environment, at either place
    back = run_cli("--log-level", "info", "suspend", first["id"], "--reason", "x", job,
                   env={**cli_env, "IIPUB_LOG_LEVEL": "error"}, cwd=tmp_path, check=True)
    assert len(_transitions(back.stderr)) == 1
    bad = run_cli("jobs", "list", env={**cli_env, "IIPUB_LOG_LEVEL": "loud"}, cwd=tmp_path)
    one_line_error(bad, 78, "IIPUB_LOG_LEVEL='loud'")


def test_console_format_at_a_terminal_json_when_asked(at_a_terminal: None, engine: sa.Engine,
                                                      cli_env: dict[str, str], tmp_path: Path) -> None:
    run_cli("schedule", env=cli_env, cwd=tmp_path, check=True)
    (first, *_rest) = json.loads(run_cli("jobs", "list", "--json", env=cli_env, cwd=tmp_path, check=True).stdout)
    human = run_cli("suspend", first["id"], "--reason", "drill", env=cli_env, cwd=tmp_path, check=True)
    line = click.unstyle(human.stderr.strip())
    assert "transition" in line and "to_state=MANUALLY_SUSPENDED" in line and not line.startswith("{")
    machine = run_cli("resume", first["id"], "--log-format", "json", env=cli_env, cwd=tmp_path, check=True)
    assert [t["to_state"] for t in _transitions(machine.stderr)] != [] and "timestamp" in _transitions(
        machine.stderr)[0]
    from_env = run_cli("suspend", first["id"], "--reason", "x", env={**cli_env, "IIPUB_LOG_FORMAT": "json"},
                       cwd=tmp_path, check=True)
    assert len(_transitions(from_env.stderr)) == 1


def test_env_file_option_and_variable(engine: sa.Engine, cli_env: dict[str, str], tmp_path: Path) -> None:
    env_file = tmp_path / "env"
    env_file.write_text(f"export IIPUB_DATABASE_URL={cli_env['IIPUB_DATABASE_URL']}\n", encoding="utf-8")
    bare = {k: v for k, v in cli_env.items() if k != "IIPUB_DATABASE_URL"}
    for args, env in ((("--env-file", str(env_file), "jobs", "list", "--json"), bare),
                      (("jobs", "list", "--json"), {**bare, "IIPUB_ENV_FILE": str(env_file)})):
        assert json.loads(run_cli(*args, env=env, cwd=tmp_path, check=True).stdout) == []
    one_line_error(run_cli("--env-file", str(tmp_path / "nope"), "jobs", "list", env=bare, cwd=tmp_path), 78,
                   "environment file not found")


# -- item 5: the log lines an operator greps for -----------------------------------------------------------------


@pytest.mark.slow
def test_quarantine_is_a_warning_and_provider_trouble_names_the_job(engine: sa.Engine, cli_env: dict[str, str],
                                                                     sim: Simulator, tmp_path: Path) -> None:
    env = sim_env(cli_env, sim, tmp_path,
                  '[[products]]\nname = "daily-brief"\nprompt = "Write it."\nlanguages = ["en"]\n'
                  'opens_at = "00:00"\nitems = 3\n')
    sim.add_faults([{"op": "retrieve", "fault": "server_error", "times": 1}])
    lines: list[dict[str, object]] = []
    for _ in range(3):  # the first read of the accepted response fails once
        lines += _json_lines(run_cli("reconcile", env=env, cwd=tmp_path).stderr)
        if any(e.get("event") == "provider_trouble" for e in lines):
            break
    (job,) = json.loads(run_cli("jobs", "list", "--json", env=env, cwd=tmp_path, check=True).stdout)
    trouble = [e for e in lines if e.get("event") == "provider_trouble"]
    assert trouble, lines
    assert all(e["job_id"] == job["id"] and e["product"] == "daily-brief" and e["edition_date"] == job["edition_date"]
               for e in trouble), trouble
    # an unknown create outcome: the slot is quarantined, and that one transition is a warning
    # yesterday's slot: the catch-up of missed days adds none beside it (none is older)
    yesterday = (dt.date.fromisoformat(job["edition_date"]) - dt.timedelta(days=1)).isoformat()
    run_cli("schedule", "--date", yesterday, env=env, cwd=tmp_path, check=True)
    sim.add_faults([{"op": "create", "fault": "drop_after_accept", "times": 1}])
    lines = _json_lines(run_cli("reconcile", env=env, cwd=tmp_path).stderr)
    moves = [e for e in lines if e.get("event") == "transition"]
    quarantined = [e for e in moves if e["to_state"] == "QUARANTINED"]
    assert len(quarantined) == 1 and quarantined[0]["level"] == "warning", moves
    assert quarantined[0]["reason"] == "create_outcome_unknown" and quarantined[0]["edition_date"] == yesterday
    assert all(e["level"] == "info" for e in moves if e["to_state"] != "QUARANTINED")
