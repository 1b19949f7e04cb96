"""`iipub kill ID`: the job will not publish; the next reconcile cleans up its remote data.
In process, on a real database."""

from __future__ import annotations

import json

import sqlalchemy as sa

from tests.support.cli import run_cli
from tests.support.rows import job_events, job_rows


def test_a_killed_job_goes_to_cleanup_and_is_marked(cli_env: dict[str, str], engine: sa.Engine, slot: str) -> None:
    out = run_cli("kill", slot, "--reason", "wrong product", "--by", "ops", env=cli_env, check=True).stdout
    assert out.strip() == f"job {slot}: NO_JOB -> CLEANUP_PENDING (version 3)"
    (row,) = job_rows(engine)
    assert (row["state"], bool(row["kill_requested"])) == ("CLEANUP_PENDING", True)
    (killed,) = [e for e in job_events(engine, slot) if e["reason"] == "operator_kill"]
    assert json.loads(killed["detail"])["why"] == "wrong product" and killed["worker"] == "operator:ops"


def test_kill_without_a_reason_changes_nothing(cli_env: dict[str, str], engine: sa.Engine, slot: str) -> None:
    assert run_cli("kill", slot, "--by", "ops", env=cli_env).returncode == 2
    assert job_rows(engine)[0]["state"] == "NO_JOB"
