"""`iipub relay`: a run with nothing to deliver prints its one-line JSON summary and records its
heartbeat; `--prune` prints what it deleted and records none."""

from __future__ import annotations

import json

import sqlalchemy as sa

from iipub.store import tables
from tests.support.cli import run_cli
from tests.support.rows import row_count


def test_an_idle_relay_prints_its_summary_and_records_its_run(cli_env: dict[str, str], engine: sa.Engine) -> None:
    summary = json.loads(run_cli("relay", env=cli_env, check=True).stdout.strip().splitlines()[-1])
    assert (summary["claimed"], summary["published"], summary["deliveries"]) == (0, 0, {})
    assert summary["worker"].startswith("relay:")
    with engine.connect() as conn:
        (run,) = conn.execute(sa.select(tables.runs)).mappings()
    assert (run["command"], bool(run["ok"])) == ("relay", True)


def test_prune_prints_what_it_deleted_and_is_not_a_heartbeat(cli_env: dict[str, str], engine: sa.Engine) -> None:
    doc = json.loads(run_cli("relay", "--prune", env=cli_env, check=True).stdout)
    assert doc == {"pruned": 0, "webhooks": {"orphans": 0, "webhook_deliveries": 0, "webhook_misses": 0}}
    assert row_count(engine, tables.runs) == 0
