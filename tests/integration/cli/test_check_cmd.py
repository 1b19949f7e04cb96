"""`iipub check`: the invariants of the database; a clean one says so (exit 0), as text or JSON."""

from __future__ import annotations

import json

import sqlalchemy as sa

from tests.support.cli import run_cli


def test_a_clean_database_holds_every_invariant(cli_env: dict[str, str], engine: sa.Engine, slot: str) -> None:
    assert run_cli("check", env=cli_env, check=True).stdout.strip() == "all invariants hold"
    doc = json.loads(run_cli("check", "--json", env=cli_env, check=True).stdout)
    assert (doc["ok"], doc["violations"]) == (True, [])
