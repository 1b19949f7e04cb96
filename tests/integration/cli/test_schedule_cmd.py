"""`iipub schedule`: the slots of a date created once (idempotent), a date no backfill could
reach refused with nothing written. In process, on a real database."""

from __future__ import annotations

import sqlalchemy as sa

from iipub.store import tables
from tests.support.cli import one_line_error, run_cli
from tests.support.rows import job_rows, row_count


def test_a_dates_slots_are_created_once(cli_env: dict[str, str], engine: sa.Engine) -> None:
    first = run_cli("schedule", "--date", "2026-12-01", "--product", "daily-brief", env=cli_env, check=True)
    assert first.stdout.splitlines() == ["daily-brief 2026-12-01: created", "created 1, already present 0"]
    again = run_cli("schedule", "--date", "2026-12-01", "--product", "daily-brief", env=cli_env, check=True)
    assert again.stdout.splitlines() == ["daily-brief 2026-12-01: already present", "created 0, already present 1"]
    (row,) = job_rows(engine)
    assert (row["product"], str(row["edition_date"])[:10], row["state"], row["version"]) == (
        "daily-brief", "2026-12-01", "NO_JOB", 1)


def test_every_configured_product_without_product(cli_env: dict[str, str], engine: sa.Engine) -> None:
    out = run_cli("schedule", "--date", "2026-12-01", env=cli_env, check=True).stdout.splitlines()
    assert out[-1].startswith("created ") and len(out) - 1 == row_count(engine, tables.jobs) >= 2


def test_a_date_a_decade_away_is_refused_and_nothing_is_written(cli_env: dict[str, str], engine: sa.Engine) -> None:
    one_line_error(run_cli("schedule", "--date", "2016-12-01", env=cli_env), 2, "more than 366 days in the past")
    one_line_error(run_cli("schedule", "--product", "no-such-product", env=cli_env), 2, "no-such-product")
    assert row_count(engine, tables.jobs) == 0
