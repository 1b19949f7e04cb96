"""`iipub pause` / `unpause` and `iipub quarantine release --all` from the command line (in
process), against a real database and the simulator over HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from iipub.provider.openai.simulator import Simulator
from iipub.store import tables
from tests.support.cli import one_line_error, run_cli
from tests.support.rows import job_rows
from tests.support.settings import MIDNIGHT_PRODUCT_TOML, sim_env


@pytest.fixture
def env(cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine) -> dict[str, str]:
    return {**sim_env(cli_env, sim, tmp_path, MIDNIGHT_PRODUCT_TOML), "USER": "ops"}


def test_pause_and_unpause_are_journaled_and_shown_by_status(env: dict[str, str], tmp_path: Path,
                                                            engine: sa.Engine, sim: Simulator) -> None:
    paused = run_cli("pause", "--reason", "provider incident", env=env, cwd=tmp_path)
    assert paused.returncode == 0 and "creates paused by ops: provider incident" in paused.stdout
    one_line_error(run_cli("pause", "--reason", "again", env=env, cwd=tmp_path), 3, "already paused")
    check = run_cli("status", "--check", env=env, cwd=tmp_path)
    assert check.returncode == 1 and "creates paused by ops" in check.stdout
    doc = json.loads(run_cli("status", "--json", env=env, cwd=tmp_path).stdout)
    assert doc["create_gate"]["paused"] is True and doc["create_gate"]["paused_by"] == "ops"
    run_cli("reconcile", env=env, cwd=tmp_path, check=True)  # today's slots exist, nothing is created
    assert sim.stats()["creates_total"] == 0 and job_rows(engine)
    assert run_cli("unpause", env=env, cwd=tmp_path).returncode == 0
    one_line_error(run_cli("unpause", env=env, cwd=tmp_path), 3, "not paused")
    with engine.connect() as conn:
        kinds = list(conn.execute(sa.select(tables.gate_events.c.kind).order_by(tables.gate_events.c.id)).scalars())
    assert kinds == ["pause", "unpause"]


def test_release_all_lists_each_job_and_refuses_what_one_release_would(
    env: dict[str, str], tmp_path: Path, engine: sa.Engine, sim: Simulator
) -> None:
    sim.add_faults([{"op": "create", "fault": "service_unavailable", "times": 50}])
    run_cli("reconcile", env=env, cwd=tmp_path, check=True)
    quarantined = [r for r in job_rows(engine) if r["state"] == "QUARANTINED"]
    assert len(quarantined) == 1 and quarantined[0]["quarantine_reason"] == "create_outcome_unknown"
    args = ("quarantine", "release", "--all", "--quarantine-reason", "create_outcome_unknown",
            "--verified-lost", "--reason", "outage; nothing in the dashboard")
    dry = run_cli(*args, "--dry-run", "--json", env=env, cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    (entry,) = json.loads(dry.stdout)
    assert entry["id"] == quarantined[0]["id"] and entry["outcome"] == "would release"
    assert entry["state"] == "CREATE_ELIGIBLE"
    assert [r["state"] for r in job_rows(engine) if r["id"] == entry["id"]] == ["QUARANTINED"]
    done = run_cli(*args, env=env, cwd=tmp_path)
    assert done.returncode == 0 and "released" in done.stdout and entry["id"] in done.stdout
    assert [r["state"] for r in job_rows(engine) if r["id"] == entry["id"]] == ["CREATE_ELIGIBLE"]
    none_left = run_cli(*args, env=env, cwd=tmp_path)
    assert none_left.returncode == 0 and "no job quarantined as create_outcome_unknown" in none_left.stdout


@pytest.mark.parametrize(("extra", "needle"), [
    (("--all", "--verified-lost"), "missing --quarantine-reason R (with --all)"),
    (("--all", "--quarantine-reason", "nonsense", "--verified-lost"), "unknown quarantine reason"),
    (("--all", "--quarantine-reason", "config_drift", "--link", "resp_x"), "--link names one response"),
    (("--all", "--quarantine-reason", "config_drift", "--verified-lost", "--since", "yesterday"), "--since"),
    (("--verified-lost", "--dry-run"), "missing a job ID"),
    (("0000", "--verified-lost", "--dry-run"), "go with --all"),
])
def test_release_all_usage_errors_are_one_line(env: dict[str, str], tmp_path: Path, engine: sa.Engine,
                                                extra: tuple[str, ...], needle: str) -> None:
    result = run_cli("quarantine", "release", *extra, "--reason", "x", env=env, cwd=tmp_path)
    one_line_error(result, 2, needle)
