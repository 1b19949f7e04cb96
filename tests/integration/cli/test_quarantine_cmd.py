"""`iipub quarantine list|show|release`: the operator's queue, one parked job's remedies, and a
release that names everything missing at once before touching anything."""

from __future__ import annotations

import json

import sqlalchemy as sa

from tests.support.cli import one_line_error, run_cli
from tests.support.rows import job_rows


def test_an_empty_queue_says_so(cli_env: dict[str, str], engine: sa.Engine) -> None:
    assert run_cli("quarantine", "list", env=cli_env, check=True).stdout.strip() == "no quarantined jobs"
    assert json.loads(run_cli("quarantine", "list", "--json", env=cli_env, check=True).stdout) == []


def test_show_of_a_job_that_is_not_parked_needs_no_remedy(cli_env: dict[str, str], engine: sa.Engine,
                                                          slot: str) -> None:
    out = run_cli("quarantine", "show", slot, env=cli_env, check=True).stdout
    assert "not parked: NO_JOB (no remedy needed)" in out
    doc = json.loads(run_cli("quarantine", "show", slot, "--json", env=cli_env, check=True).stdout)
    assert (doc["id"], doc["output"], doc["remedies"]) == (slot, None, None)


def test_a_release_missing_its_job_remedy_and_reason_names_all_three(cli_env: dict[str, str], engine: sa.Engine,
                                                                     slot: str) -> None:
    one_line_error(run_cli("quarantine", "release", env=cli_env), 2,
                   "missing a job ID (or --all --quarantine-reason R); a remedy: one of --verified-lost, "
                   "--link RESP_ID, --resume-polling; --reason TEXT")
    one_line_error(run_cli("quarantine", "release", slot, "--verified-lost", "--resume-polling", "--reason", "x",
                           env=cli_env), 2, "exactly one of")
    assert job_rows(engine)[0]["version"] == 1
