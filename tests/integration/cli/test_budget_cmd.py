"""`iipub budget show|override`: the daily token ceilings as configured, and an operator's raise
refused (nothing written) when there is no ceiling to raise."""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa

from iipub.store import tables
from tests.support.cli import one_line_error, run_cli
from tests.support.rows import row_count


def test_no_ceiling_configured_is_said_and_cannot_be_raised(cli_env: dict[str, str], engine: sa.Engine) -> None:
    assert run_cli("budget", "show", env=cli_env, check=True).stdout.strip() == (
        "no daily token ceiling configured ([budgets] / [[products]] max_tokens_per_day)")
    one_line_error(run_cli("budget", "override", "--tokens", "1000", "--reason", "launch", "--by", "ops",
                           env=cli_env), 3, "is not configured; nothing to raise; nothing written")
    assert row_count(engine, tables.spend_overrides) == 0


def test_a_configured_ceiling_is_shown_and_raised_until_a_time(cli_env: dict[str, str], engine: sa.Engine,
                                                               tmp_path: Path) -> None:
    cfg = tmp_path / "iipub.toml"
    cfg.write_text("[budgets]\nmax_tokens_per_day = 50000\n")
    env = {**cli_env, "IIPUB_CONFIG": str(cfg)}
    assert run_cli("budget", "show", env=env, check=True).stdout.startswith("ok: ")
    out = run_cli("budget", "override", "--tokens", "1000", "--reason", "launch", "--by", "ops", env=env,
                  check=True).stdout
    assert "raised by 1,000 tokens until " in out
    assert row_count(engine, tables.spend_overrides) == 1
    doc = json.loads(run_cli("budget", "show", "--json", env=env, check=True).stdout)
    assert "generated_at" in doc
