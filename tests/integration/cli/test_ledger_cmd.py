"""`iipub ledger show|acknowledge`: the spend ledger against what the database remembers of it;
an acknowledgement of a problem that is not the one found is refused."""

from __future__ import annotations

import json

import sqlalchemy as sa

from iipub.store import tables
from tests.support.cli import run_cli
from tests.support.rows import row_count


def test_show_names_the_ledger_and_the_installation(cli_env: dict[str, str], engine: sa.Engine) -> None:
    text = dict(line.split(None, 1) for line in run_cli("ledger", "show", env=cli_env, check=True).stdout.splitlines())
    assert text["path"].strip().endswith("iipub/spend-ledger.jsonl") and text["installation"].startswith("inst_")
    assert text["problem"].strip() == "-"
    doc = json.loads(run_cli("ledger", "show", "--json", env=cli_env, check=True).stdout)
    assert doc["installation"] == text["installation"].strip() and doc["problem"] is None


def test_acknowledging_a_problem_that_was_not_found_changes_nothing(cli_env: dict[str, str],
                                                                   engine: sa.Engine) -> None:
    before = row_count(engine, tables.ledger_book)
    res = run_cli("ledger", "acknowledge", "--accept", "missing", "--reason", "restored", "--by", "ops", env=cli_env)
    assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1
    assert row_count(engine, tables.ledger_book) == before
