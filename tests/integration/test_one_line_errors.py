"""Expected errors are one line with their documented exit code: a database file that is not a
database, operator text that is too long, and `status --check` under monitoring-plugin rules."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import sqlalchemy as sa

from iipub.model.states import Reason, State
from iipub.provider.factory import settings_from_dict
from iipub.provider.openai.simulator import Simulator
from iipub.store.job_store import Store
from tests.support.cli import clean_env, one_line_error, run_cli
from tests.support.rows import job_rows


def test_a_sqlite_file_that_is_not_a_database_is_one_line(tmp_path: Path) -> None:
    bogus = tmp_path / "iipub.sqlite3"
    bogus.write_text("these are my notes, not a database\n")
    env = {**clean_env(), "IIPUB_DATABASE_URL": f"sqlite:///{bogus}", "OPENAI_API_KEY": "sk-test"}
    for args in (("jobs", "list"), ("reconcile",), ("relay",), ("db", "status")):
        result = run_cli(*args, env=env, cwd=tmp_path)
        one_line_error(result, 69, "not a database")
    check = run_cli("status", "--check", env=env, cwd=tmp_path)
    assert check.returncode == 3 and check.stdout.startswith("IIPUB UNKNOWN - database unusable")
    assert bogus.read_text() == "these are my notes, not a database\n"  # untouched


def test_status_check_usage_errors_are_unknown(tmp_path: Path, cli_env: dict[str, str]) -> None:
    result = run_cli("status", "--check", "--no-such-option", env=cli_env, cwd=tmp_path)
    assert result.returncode == 3 and result.stdout.startswith("IIPUB UNKNOWN - usage:")
    assert "Traceback" not in result.stderr


def test_an_oversized_reason_is_refused_before_anything_is_leased(tmp_path: Path, cli_env: dict[str, str],
                                                                  engine: sa.Engine) -> None:
    Store(engine, "test").schedule(settings_from_dict({}).products["daily-brief"], dt.date(2026, 11, 30))
    (job,) = job_rows(engine)
    before = job_rows(engine)
    for args in (("suspend", job["id"], "--reason", "x" * 70_000), ("kill", job["id"], "--reason", "y" * 70_000),
                 ("suspend", job["id"], "--reason", "   ")):
        result = run_cli(*args, "--by", "ops", env=cli_env, cwd=tmp_path)
        one_line_error(result, 2, "--reason")
    assert job_rows(engine) == before  # no lease left behind, no version bumped


def test_a_provider_client_that_cannot_be_built_fails_the_run_before_any_lease(
        tmp_path: Path, cli_env: dict[str, str], engine: sa.Engine, sim: Simulator) -> None:
    """The SDK client is built at the first provider call; a broken HTTP set-up (here a proxy
    scheme httpx refuses) still fails `iipub reconcile` in one line before a job due for the
    provider is leased, as when the client was built up front: no version bumped, no create."""
    store = Store(engine, "test")
    p = settings_from_dict({}).products["daily-brief"]
    day = dt.date(2026, 11, 30)
    store.schedule(p, day)
    (job,) = job_rows(engine)
    store.transition(store.get(job["id"]), State.CREATE_ELIGIBLE, reason=Reason.WINDOW_OPEN,
                     changes={"config_fingerprint": p.fingerprint()})
    before = job_rows(engine)
    env = {**cli_env, "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": sim.url, "ALL_PROXY": "ftp://proxy.invalid:21"}
    result = run_cli("reconcile", env=env, cwd=tmp_path)
    one_line_error(result, 78, "cannot set up the provider's HTTP client")
    assert [row for row in job_rows(engine) if row["id"] == job["id"]] == before  # (today's slots were scheduled)
    assert sim.stats()["requests"].get("create", 0) == 0
