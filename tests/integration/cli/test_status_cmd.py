"""`iipub status [--json] [--check]`: the same report as text, JSON and a monitoring-plugin line;
`--check` exits with the most severe problem's code. A database no cron run has touched is
CRITICAL (no heartbeat); once both commands beat, it is OK."""

from __future__ import annotations

import json

import sqlalchemy as sa

from tests.support.cli import run_cli
from tests.support.rows import record_heartbeats


def test_no_heartbeat_is_critical_in_every_form(cli_env: dict[str, str], engine: sa.Engine, slot: str) -> None:
    doc = json.loads(run_cli("status", "--json", env=cli_env, check=True).stdout)
    assert doc["check"]["status"] == "CRITICAL" and doc["check"]["code"] == 2
    assert {p["text"] for p in doc["check"]["problems"]} >= {
        "no reconcile run finished OK in 5m00s (none recorded)", "no relay run finished OK in 5m00s (none recorded)"}
    check = run_cli("status", "--check", env=cli_env)
    assert check.returncode == 2 and check.stdout.startswith("IIPUB CRITICAL - no reconcile run finished OK")
    assert run_cli("status", env=cli_env, check=True).stdout  # the text report, exit 0 whatever it says


def test_heartbeats_of_both_commands_clear_the_critical(cli_env: dict[str, str], engine: sa.Engine) -> None:
    record_heartbeats(engine)
    doc = json.loads(run_cli("status", "--json", env=cli_env, check=True).stdout)
    assert all(p["severity"] != "CRITICAL" for p in doc["check"]["problems"])
    assert doc["installation_id"].startswith("inst_")
