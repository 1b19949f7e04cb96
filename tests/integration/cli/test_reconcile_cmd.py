"""`iipub reconcile`: the configuration (the API key included) is checked before any lease; an
idle sweep against the simulator prints its one-line summary and records its heartbeat."""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa

from iipub.provider.openai.simulator import Simulator
from iipub.store import tables
from tests.support.cli import one_line_error, run_cli
from tests.support.rows import job_rows, row_count
from tests.support.settings import sim_env


def test_without_an_api_key_nothing_is_leased(cli_env: dict[str, str], engine: sa.Engine, slot: str) -> None:
    one_line_error(run_cli("reconcile", env=cli_env), 78, "OPENAI_API_KEY")
    (row,) = job_rows(engine)
    assert (row["version"], row["lease_owner"]) == (1, None)
    assert row_count(engine, tables.runs) == 0


def test_an_idle_sweep_prints_its_summary_and_records_its_run(cli_env: dict[str, str], engine: sa.Engine,
                                                              sim: Simulator, tmp_path: Path) -> None:
    env = sim_env(cli_env, sim, tmp_path, auto_schedule=False)
    summary = json.loads(run_cli("reconcile", env=env, check=True).stdout.strip().splitlines()[-1])
    assert (summary["leased"], summary["worker"].split(":")[0]) == (0, "reconcile")
    with engine.connect() as conn:
        (run,) = conn.execute(sa.select(tables.runs)).mappings()
    assert (run["command"], bool(run["ok"])) == ("reconcile", True)
    assert sim.stats()["creates_total"] == 0
