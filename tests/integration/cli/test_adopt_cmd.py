"""`iipub adopt FILE`: a hand-over file checked row by row; a refused row is named with its line,
exits 3 and adopts nothing; a dry run writes nothing."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from iipub.store import tables
from tests.support.cli import one_line_error, run_cli
from tests.support.rows import row_count


def test_a_file_with_a_bad_row_adopts_nothing(cli_env: dict[str, str], engine: sa.Engine, tmp_path: Path) -> None:
    handed = tmp_path / "in-flight.csv"
    handed.write_text("product,edition_date,response_id\nno-such-product,2026-12-01,resp_abc\n")
    res = run_cli("adopt", str(handed), "--reason", "cutover", "--by", "ops", env=cli_env)
    assert res.returncode == 3 and "1 rows refused" in res.stderr
    assert res.stdout.splitlines() == [("line 2 (no-such-product/2026-12-01): refused: unknown product "
                                       "'no-such-product' (configured: daily-brief, revolution-watch)"),
                                       "adopted 0, already adopted 0, refused 1"]
    assert row_count(engine, tables.jobs) == 0


def test_an_empty_file_is_one_error_line(cli_env: dict[str, str], engine: sa.Engine, tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    one_line_error(run_cli("adopt", str(empty), "--reason", "cutover", "--by", "ops", env=cli_env), 2, "empty")
    assert row_count(engine, tables.jobs) == 0
