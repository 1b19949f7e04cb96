"""`iipub orphans list|show|adopt|discard`: none kept on a new database; an unknown orphan is one
error line (exit 4); adopt and discard need a reason."""

from __future__ import annotations

import json

import sqlalchemy as sa

from iipub.store import tables
from tests.support.cli import one_line_error, run_cli
from tests.support.rows import row_count


def test_no_orphans_is_said_and_an_unknown_one_is_not_found(cli_env: dict[str, str], engine: sa.Engine,
                                                            slot: str) -> None:
    assert run_cli("orphans", "list", env=cli_env, check=True).stdout.strip() == "no orphans"
    assert json.loads(run_cli("orphans", "list", "--json", env=cli_env, check=True).stdout) == {"orphans": []}
    one_line_error(run_cli("orphans", "show", "resp_x", env=cli_env), 4, "no orphan 'resp_x'")
    one_line_error(run_cli("orphans", "adopt", "resp_x", slot, "--reason", "r", "--by", "ops", env=cli_env), 4,
                   "resp_x")
    assert run_cli("orphans", "discard", "resp_x", "--by", "ops", env=cli_env).returncode == 2  # no --reason
    assert row_count(engine, tables.orphans) == 0
