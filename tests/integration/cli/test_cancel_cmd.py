"""`iipub cancel ID` calls the provider, so it needs the API key before it reads any job: without
one it is a configuration error (exit 78) and nothing is touched."""

from __future__ import annotations

import sqlalchemy as sa

from tests.support.cli import one_line_error, run_cli
from tests.support.rows import job_rows


def test_cancel_without_an_api_key_touches_nothing(cli_env: dict[str, str], engine: sa.Engine, slot: str) -> None:
    one_line_error(run_cli("cancel", slot, "--reason", "stop", "--by", "ops", env=cli_env), 78, "OPENAI_API_KEY")
    assert (job_rows(engine)[0]["state"], job_rows(engine)[0]["version"]) == ("NO_JOB", 1)
