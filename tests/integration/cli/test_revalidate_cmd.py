"""`iipub revalidate ID`: only a job whose output failed validation is validated again; any other
is refused (exit 3) and left as it was."""

from __future__ import annotations

import sqlalchemy as sa

from tests.support.cli import one_line_error, run_cli
from tests.support.rows import job_rows


def test_a_job_that_did_not_fail_validation_is_refused_unchanged(cli_env: dict[str, str], engine: sa.Engine,
                                                                 slot: str) -> None:
    one_line_error(run_cli("revalidate", slot, "--reason", "rules fixed", "--by", "ops", env=cli_env), 3,
                   "only a VALIDATION_FAILED_RETAINED job can revalidate")
    assert (job_rows(engine)[0]["state"], job_rows(engine)[0]["version"]) == ("NO_JOB", 1)
