"""`iipub reconcile` as real processes: killed mid-create, paused past its lease, overlapping.
Only the process under test is a child; the ticks around it run in process (`run_cli`)."""

from __future__ import annotations

import datetime as dt
import json
import signal
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.provider.factory import settings_from_dict
from iipub.provider.openai.simulator import Simulator
from iipub.store import clock
from iipub.store.job_store import Store
from tests.support.cli import child_iipub, run_cli, start_iipub
from tests.support.loopback import wait_for
from tests.support.rows import job_events, job_rows
from tests.support.settings import sim_env

# A product whose slot opens at midnight, so the tick's own scheduling of today is harmless.
ONE_PRODUCT = (
    '[[products]]\nname = "daily-brief"\nlanguages = ["en", "es"]\nopens_at = "00:00"\n'
    'prompt = "Write the brief."\nitems = 3\n'
)
DAY = dt.date(2026, 11, 28)


def _setup(engine: sa.Engine, days: list[dt.date]) -> None:
    product = settings_from_dict({"products": [{"name": "daily-brief", "prompt": "Write the brief.", "items": 3,
                                                "opens_at": "00:00"}]}).products["daily-brief"]
    store = Store(engine, "test")
    for d in days:
        store.schedule(product, d)


@pytest.mark.slow
def test_sigkill_after_committing_create_in_flight_quarantines_without_a_second_post(
    engine: sa.Engine, sim: Simulator, cli_env: dict[str, str], tmp_path: Path
) -> None:
    env = sim_env(cli_env, sim, tmp_path, ONE_PRODUCT)
    cfg = Path(env["IIPUB_CONFIG"])  # a lease long enough that a slow machine cannot expire it early
    cfg.write_text(cfg.read_text().replace("lease_seconds = 10", "lease_seconds = 60"))
    sim.add_faults([{"op": "create", "fault": "slow"}])  # the POST hangs: the worker is mid-create
    with child_iipub("reconcile", env=env, cwd=tmp_path) as proc:
        wait_for(lambda: any(j["state"] == "CREATE_IN_FLIGHT" for j in job_rows(engine)))
        wait_for(lambda: sim.stats()["requests"]["create"] == 1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    job = next(j for j in job_rows(engine) if j["state"] == "CREATE_IN_FLIGHT")
    # A tick while the dead worker's lease is still live leaves the job alone.
    run_cli("reconcile", env=env, cwd=tmp_path, check=True)
    assert next(j for j in job_rows(engine) if j["id"] == job["id"])["state"] == "CREATE_IN_FLIGHT"
    clock.advance_clock(engine, 61)
    run_cli("reconcile", env=env, cwd=tmp_path, check=True)
    after = next(j for j in job_rows(engine) if j["id"] == job["id"])
    assert after["state"] == "QUARANTINED" and after["quarantine_reason"] == "crashed_during_create"
    assert sim.stats()["requests"]["create"] == 1  # no second POST, ever
    run_cli("reconcile", env=env, cwd=tmp_path, check=True)
    assert sim.stats()["requests"]["create"] == 1


@pytest.mark.slow
def test_worker_paused_past_its_lease_has_its_late_write_rejected(
    engine: sa.Engine, sim: Simulator, cli_env: dict[str, str], tmp_path: Path
) -> None:
    env = sim_env(cli_env, sim, tmp_path, ONE_PRODUCT)
    cfg = Path(env["IIPUB_CONFIG"])  # just DAY's and today's slots, not the days between (catch-up)
    cfg.write_text(cfg.read_text().replace("[reconcile]\n", "[reconcile]\ncatch_up_days = 0\n"))
    _setup(engine, [DAY])
    run_cli("reconcile", env=env, cwd=tmp_path, check=True)  # creates today's and DAY's jobs
    job = next(j for j in job_rows(engine) if j["edition_date"] == DAY)
    assert job["state"] == "ACCEPTED"
    sim.advance(5)  # the response is complete
    sim.add_faults([{"op": "retrieve", "fault": "slow", "times": 2}])
    paused = start_iipub("reconcile", env=env, cwd=tmp_path)
    try:
        wait_for(lambda: sim.stats()["requests"]["retrieve"] >= 1)
        paused.send_signal(signal.SIGSTOP)  # holding a lease, mid-poll
        leased = next(j for j in job_rows(engine) if j["lease_owner"])
        sim.clear_faults()
        clock.advance_clock(engine, 11)  # its lease expires by the database clock
        run_cli("reconcile", env=env, cwd=tmp_path, check=True)  # a new tick takes over and finishes
        taken_over = next(j for j in job_rows(engine) if j["id"] == leased["id"])
        assert taken_over["state"] == "SAVED_NOT_PUBLIC"
        paused.send_signal(signal.SIGCONT)
        out, err = paused.communicate(timeout=30)
    finally:
        if paused.poll() is None:
            paused.send_signal(signal.SIGCONT)
            paused.kill()
            paused.communicate()
    assert paused.returncode == 0
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["lease_lost"] >= 1
    assert "lease_lost" in err
    final = next(j for j in job_rows(engine) if j["id"] == leased["id"])
    assert final["state"] == "SAVED_NOT_PUBLIC" and final["version"] == taken_over["version"]
    history = job_events(engine, leased["id"])
    versions = [e["version"] for e in history]
    assert versions == sorted(set(versions))
    assert [e["to_state"] for e in history].count("SAVED_NOT_PUBLIC") == 1
    assert sim.stats()["creates_total"] == 2  # one per slot, never more


@pytest.mark.slow
def test_two_overlapping_ticks_over_100_due_jobs(engine: sa.Engine, sim: Simulator, cli_env: dict[str, str],
                                                  tmp_path: Path) -> None:
    env = sim_env(cli_env, sim, tmp_path, ONE_PRODUCT)
    cfg = Path(env["IIPUB_CONFIG"])
    # Generous timeouts: a slow answer on a loaded machine would be a legitimate retry, not the
    # duplicate this test looks for. Admission control (100 in flight per process by default)
    # would hold the 101st create back if one process started late and took every slot.
    cfg.write_text(cfg.read_text()
                   .replace("poll_interval_seconds = 0", "max_in_flight = 1000\npoll_interval_seconds = 300\n"
                            "catch_up_days = 0")
                   .replace("tick_seconds = 20", "tick_seconds = 120")
                   .replace("lease_seconds = 10", "lease_seconds = 60")
                   .replace("timeout_seconds = 2", "timeout_seconds = 20"))
    _setup(engine, [DAY - dt.timedelta(days=i) for i in range(100)])
    all_summaries: list[list[dict[str, Any]]] = []
    for _phase in ("create", "poll"):
        procs = [start_iipub("reconcile", env=env, cwd=tmp_path) for _ in range(2)]
        outs = [p.communicate(timeout=180) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
        summaries = [json.loads(o[0].strip().splitlines()[-1]) for o in outs]
        assert sum(s["errors"] for s in summaries) == 0
        all_summaries.append(summaries)
        sim.advance(5)
        clock.advance_clock(engine, 301)
    stats = sim.stats()
    assert stats["creates_total"] == 101  # 100 backfilled days + today's slot, once each
    assert set(stats["creates_by_job"].values()) == {1}
    assert set(stats["retrieves_by_response"].values()) == {1}  # no duplicate GET
    assert {j["state"] for j in job_rows(engine)} == {"SAVED_NOT_PUBLIC"}, [
        (j["state"], j["last_error"]) for j in job_rows(engine) if j["state"] != "SAVED_NOT_PUBLIC"]
    for j in job_rows(engine)[:10]:
        versions = [e["version"] for e in job_events(engine, j["id"])]
        assert versions == sorted(set(versions))
