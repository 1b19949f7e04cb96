"""`iipub republish ID`: an operator allows a job's editions to replace live pages, recorded with
who and why; refused for a job with nothing saved, or unknown. In process, on a real database."""

from __future__ import annotations

import sqlalchemy as sa

from iipub.store import tables
from tests.support.cli import one_line_error, run_cli
from tests.support.rows import job_rows, row_count


def test_republish_is_recorded_for_a_job_past_its_save(cli_env: dict[str, str], engine: sa.Engine, slot: str) -> None:
    run_cli("kill", slot, "--reason", "gone", "--by", "ops", env=cli_env, check=True)
    out = run_cli("republish", slot, "--reason", "restored site", "--by", "ops", env=cli_env, check=True).stdout
    assert out.strip() == f"job {slot}: republish allowed; 0 parked deliveries re-queued"
    with engine.connect() as conn:
        (grant,) = conn.execute(sa.select(tables.republish_grants)).mappings()
    assert grant["job_id"] == slot


def test_republish_of_a_job_with_nothing_saved_or_unknown_writes_nothing(cli_env: dict[str, str], engine: sa.Engine,
                                                                        slot: str) -> None:
    one_line_error(run_cli("republish", slot, "--reason", "x", "--by", "ops", env=cli_env), 3,
                   "it has no saved editions to republish")
    one_line_error(run_cli("republish", "ffffffff", "--reason", "x", "--by", "ops", env=cli_env), 4, "ffffffff")
    assert row_count(engine, tables.republish_grants) == 0
    assert job_rows(engine)[0]["version"] == 1
