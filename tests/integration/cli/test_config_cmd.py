"""`iipub config show|accept`: the configuration a database runs with, adopted by the first
command that writes, shown with this command's own; `accept` records a deliberate change."""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa

from iipub.store import tables
from tests.support.cli import one_line_error, run_cli
from tests.support.rows import row_count


def test_the_first_writer_adopts_the_configuration_and_show_says_so(cli_env: dict[str, str], engine: sa.Engine,
                                                                    slot: str) -> None:
    text = run_cli("config", "show", env=cli_env, check=True).stdout.splitlines()
    assert text[0].startswith("in force:     configuration built-in defaults (IIPUB_CONFIG unset)")
    assert text[1].endswith("(same)")
    assert "adopted" in text[3] and "schedule" in text[3]
    doc = json.loads(run_cli("config", "show", "--json", env=cli_env, check=True).stdout)
    assert doc["verdict"] == "same" and doc["in_force"] == doc["this_command"]
    assert [(h["kind"], h["command"]) for h in doc["history"]] == [("adopted", "schedule")]


def test_accept_records_a_changed_configuration(cli_env: dict[str, str], engine: sa.Engine, slot: str,
                                                tmp_path: Path) -> None:
    cfg = tmp_path / "iipub.toml"
    cfg.write_text("[reconcile]\ntick_seconds = 40\n")
    env = {**cli_env, "IIPUB_CONFIG": str(cfg)}
    before = row_count(engine, tables.config_identity)
    one_line_error(run_cli("config", "accept", "--by", "ops", env=env), 2, "--reason")
    assert row_count(engine, tables.config_identity) == before
    out = run_cli("config", "accept", "--reason", "longer ticks", "--by", "ops", env=env, check=True).stdout
    assert out.startswith(f"accepted: configuration {cfg}")
    assert row_count(engine, tables.config_identity) == before + 1
    shown = run_cli("config", "show", env=env, check=True).stdout.splitlines()
    assert shown[1].endswith("(same)")
