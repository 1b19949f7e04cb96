"""`iipub suspend ID` parks a job where reconcile leaves it, remembering its state; `iipub resume
ID` puts it back, journaled with who and why. In process, on a real database."""

from __future__ import annotations

import json

import sqlalchemy as sa

from tests.support.cli import one_line_error, run_cli
from tests.support.rows import job_events, job_rows


def test_a_suspended_job_resumes_in_the_state_it_was_in(cli_env: dict[str, str], engine: sa.Engine, slot: str) -> None:
    out = run_cli("suspend", slot[:8], "--reason", "incident", "--by", "ops", env=cli_env, check=True).stdout
    assert out.strip() == f"job {slot}: NO_JOB -> MANUALLY_SUSPENDED (version 3)"
    assert (job_rows(engine)[0]["state"], job_rows(engine)[0]["suspended_from"]) == ("MANUALLY_SUSPENDED", "NO_JOB")
    out = run_cli("resume", slot, "--by", "ops", env=cli_env, check=True).stdout
    assert out.strip() == f"job {slot}: MANUALLY_SUSPENDED -> NO_JOB (version 5)"
    reasons = [(e["reason"], json.loads(e["detail"]).get("why")) for e in job_events(engine, slot)]
    assert reasons[-2:] == [("operator_suspend", "incident"), ("operator_resume", None)]


def test_suspend_needs_a_reason_and_a_known_job(cli_env: dict[str, str], engine: sa.Engine, slot: str) -> None:
    assert run_cli("suspend", slot, "--by", "ops", env=cli_env).returncode == 2
    one_line_error(run_cli("suspend", "ffffffff", "--reason", "x", "--by", "ops", env=cli_env), 4, "ffffffff")
    one_line_error(run_cli("resume", slot, "--by", "ops", env=cli_env), 3, "")  # not suspended
    assert job_rows(engine)[0]["version"] == 1
