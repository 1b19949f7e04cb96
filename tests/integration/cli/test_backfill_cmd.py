"""`iipub backfill`: the missing slots of past dates at backfill priority, idempotent; a dry run
writes nothing; a bad date is one error line."""

from __future__ import annotations

import sqlalchemy as sa

from iipub.store import tables
from tests.support.cli import one_line_error, run_cli
from tests.support.rows import job_rows, row_count


def test_a_dry_run_says_what_it_would_create_and_writes_nothing(cli_env: dict[str, str], engine: sa.Engine) -> None:
    out = run_cli("backfill", "--product", "daily-brief", "--from", "2026-11-28", "--to", "2026-11-30", "--dry-run",
                  env=cli_env, check=True).stdout.splitlines()
    assert out == ["daily-brief 2026-11-28: would create", "daily-brief 2026-11-29: would create",
                   "daily-brief 2026-11-30: would create", "dry run: would create 3, already present 0"]
    assert row_count(engine, tables.jobs) == 0


def test_missing_days_are_created_at_backfill_priority_and_present_ones_left(cli_env: dict[str, str],
                                                                            engine: sa.Engine, slot: str) -> None:
    out = run_cli("backfill", "--product", "daily-brief", "--from", "2026-11-30", "--to", "2026-12-01",
                  env=cli_env, check=True).stdout.splitlines()
    assert out == ["daily-brief 2026-11-30: created", "daily-brief 2026-12-01: already present",
                   "created 1, already present 1"]
    rows = {str(r["edition_date"])[:10]: r for r in job_rows(engine)}
    assert bool(rows["2026-11-30"]["is_backfill"]) and not bool(rows["2026-12-01"]["is_backfill"])


def test_a_date_not_in_yyyy_mm_dd_is_one_error_line(cli_env: dict[str, str], engine: sa.Engine) -> None:
    one_line_error(run_cli("backfill", "--product", "daily-brief", "--from", "30/11/2026", "--to", "2026-12-01",
                           env=cli_env), 2, "--from")
    assert row_count(engine, tables.jobs) == 0
