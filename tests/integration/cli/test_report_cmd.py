"""`iipub report` (cli/report_cmd): an empty database gets a page that says so, `--days` out of range
is a usage error (exit 2), an unwritable `--html` path one line and exit 73; the page's figures on
real rows are tests/integration/observe/test_history.py's."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from iipub.cli import report_cmd
from iipub.observe import history
from tests.support.cli import one_line_error, run_cli


def test_an_empty_database_says_so(engine: sa.Engine, cli_env: dict[str, str], tmp_path: Path) -> None:
    result = run_cli("report", "--html", str(tmp_path / "r.html"), env=cli_env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert 'id="empty"' in page and "No history in these days" in page
    assert "<svg" not in page and "<table" not in page  # no empty axes
    # stdout without --html: the same page
    assert run_cli("report", "--days", "7", env=cli_env, cwd=tmp_path).stdout.startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("days", ["0", "367", "-1", "x"])
def test_days_out_of_range_is_a_usage_error(engine: sa.Engine, cli_env: dict[str, str], tmp_path: Path,
                                            days: str) -> None:
    result = run_cli("report", "--days", days, "--html", str(tmp_path / "r.html"), env=cli_env, cwd=tmp_path)
    one_line_error(result, 2, "--days")
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("where", ["missing/r.html", "file/r.html", "folder"])
def test_an_unwritable_path_is_one_line_and_73(engine: sa.Engine, cli_env: dict[str, str], tmp_path: Path,
                                               where: str) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "folder").mkdir()
    result = run_cli("report", "--html", str(tmp_path / where), env=cli_env, cwd=tmp_path)
    one_line_error(result, 73, "cannot write the report")
    assert (tmp_path / "file").read_text() == "x"


def test_the_range_limit_is_the_command_s() -> None:
    assert report_cmd.MAX_DAYS == history.MAX_DAYS
