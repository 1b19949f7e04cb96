"""What the command modules' tests share: one scheduled slot on a migrated database."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from tests.support.cli import run_cli
from tests.support.rows import job_rows


@pytest.fixture
def slot(cli_env: dict[str, str], engine: sa.Engine) -> str:
    """The id of daily-brief's 2026-12-01 slot, just scheduled (NO_JOB, version 1)."""
    run_cli("schedule", "--date", "2026-12-01", "--product", "daily-brief", env=cli_env, check=True)
    (row,) = job_rows(engine)
    return str(row["id"])
