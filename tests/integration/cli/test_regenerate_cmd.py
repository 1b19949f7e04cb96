"""`iipub regenerate ID`: a new paid generation only for a job whose output failed validation;
any other is refused (exit 3), nothing charged."""

from __future__ import annotations

import sqlalchemy as sa

from tests.support.cli import one_line_error, run_cli
from tests.support.rows import job_rows


def test_a_job_that_did_not_fail_validation_is_refused_and_nothing_is_charged(cli_env: dict[str, str],
                                                                              engine: sa.Engine, slot: str) -> None:
    one_line_error(run_cli("regenerate", slot, "--reason", "prompt fixed", "--by", "ops", env=cli_env), 3,
                   "only a VALIDATION_FAILED_RETAINED job can regenerate")
    (row,) = job_rows(engine)
    assert (row["state"], row["version"], row["generation_attempts"]) == ("NO_JOB", 1, 0)
