"""`iipub pause --everything` (the immediate abort) and shadow mode's hold on remote deletes."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from iipub.machine import sweep
from iipub.provider.openai.simulator import Simulator
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import clock, tables
from iipub.store.job_store import Store
from tests.support.cli import run_cli
from tests.support.rows import job_events, job_rows, row_count, utc_today
from tests.support.settings import sim_env


def test_pause_everything_stops_every_automated_command_and_check_counts_down_the_retention(
    cli_env: dict[str, str], engine: sa.Engine, sim: Simulator, tmp_path: Path
) -> None:
    env = sim_env(cli_env, sim, tmp_path)
    day = utc_today() - dt.timedelta(days=1)
    run_cli("schedule", "--date", day.isoformat(), "--product", "daily-brief", env=env, cwd=tmp_path, check=True)
    run_cli("reconcile", env=env, cwd=tmp_path, check=True)  # created: the response is running
    running = {r["id"]: r for r in job_rows(engine) if r["edition_date"] == day}
    assert {r["state"] for r in running.values()} <= {"ACCEPTED", "QUEUED", "IN_PROGRESS"}
    polling = sum(r["state"] in ("ACCEPTED", "QUEUED", "IN_PROGRESS") for r in job_rows(engine))  # today's too

    paused = run_cli("pause", "--everything", "--reason", "rollback", env=env, cwd=tmp_path, check=True)
    assert "everything paused" in paused.stdout
    sim.advance(30)  # the response finishes meanwhile
    versions = {r["id"]: r["version"] for r in job_rows(engine)}
    runs_before = row_count(engine, tables.runs)
    requests_before = sum(sim.stats()["requests"].values())
    out = run_cli("reconcile", env=env, cwd=tmp_path, check=True)
    assert json.loads(out.stdout)["paused_everything"] is True
    held = run_cli("relay", env=env, cwd=tmp_path, check=True)
    assert json.loads(held.stdout)["held"] == "paused_everything"
    assert {r["id"]: r["version"] for r in job_rows(engine)} == versions
    assert sum(sim.stats()["requests"].values()) == requests_before  # not even a poll
    assert row_count(engine, tables.runs) == runs_before + 2  # but both heartbeats
    check = run_cli("status", "--check", env=env, cwd=tmp_path)
    assert check.returncode == 2, check.stdout
    assert "everything paused" in check.stdout and f"{polling} responses finishing unretrieved" in check.stdout
    assert "may run out in" in check.stdout
    doc = json.loads(run_cli("status", "--json", env=env, cwd=tmp_path).stdout)
    assert doc["cutover"]["paused_everything"]["unretrieved"] == polling
    assert 0 < doc["cutover"]["paused_everything"]["first_expiry_seconds"] <= 600
    assert doc["create_gate"]["paused_everything"] is True
    # A plain pause cannot hide the abort, and a second abort is refused.
    assert run_cli("pause", "--reason", "again", env=env, cwd=tmp_path).returncode == 3

    run_cli("unpause", env=env, cwd=tmp_path, check=True)
    run_cli("reconcile", env=env, cwd=tmp_path, check=True)
    job_id = next(iter(running))
    assert Store(engine, "test").get(job_id).state.value in ("SAVED_NOT_PUBLIC", "COMPOSED_NOT_SAVED")


@pytest.mark.no_auto_schedule
def test_shadow_mode_keeps_the_remote_response_of_a_published_job(
    cfg: Settings, engine: sa.Engine, sim: Simulator
) -> None:
    store = Store(engine, "test")
    day = utc_today() - dt.timedelta(days=1)
    store.schedule(cfg.products["daily-brief"], day)
    for _ in range(4):
        sweep.run(cfg, engine)
        relay.run(cfg, engine)
        sim.advance(5)
        if {r["state"] for r in job_rows(engine)} == {"PUBLISHED"}:
            break
    else:
        assert {r["state"] for r in job_rows(engine)} == {"CLEANUP_PENDING"}  # published, delete due
    shadow = dataclasses.replace(cfg, reconcile=dataclasses.replace(cfg.reconcile, mode="shadow"))
    deletes = sim.stats()["deletes"]
    (job,) = job_rows(engine)
    if job["state"] == "CLEANUP_PENDING":
        clock.advance_clock(engine, 3600)
    report = sweep.run(shadow, engine)
    assert report.shadow
    assert sim.stats()["deletes"] == deletes == 0
    (after,) = job_rows(engine)
    assert after["state"] == "CLEANUP_PENDING"
    assert job_events(engine, after["id"])[-1]["reason"] == "shadow_would_delete"
    clock.advance_clock(engine, 301)
    sweep.run(cfg, engine)  # normal mode again: the delete goes out
    assert sim.stats()["deletes"] == 1
    assert job_rows(engine)[0]["state"] == "DELETED"


def test_the_webhook_receiver_settles_nothing_while_everything_is_paused(
    cfg: Settings, engine: sa.Engine
) -> None:
    from iipub.operate.executor import Operator
    from iipub.settings.config import WebhookSettings
    from iipub.webhooks import receiver as webhook
    from tests.integration.webhooks.test_receiver import SECRET, event, signed

    hooked = dataclasses.replace(cfg, provider_webhook_secret=SECRET, webhooks=WebhookSettings(enabled=True))
    Operator(hooked, engine).pause("ops", "rollback", everything=True)
    receiver = webhook.Receiver(hooked, engine=engine)
    try:
        body = event("resp_" + "b" * 48)
        answer = receiver.receive(body, signed(body))
        assert answer.status == 503 and "pause --everything" in answer.message
        assert row_count(engine, tables.webhook_deliveries) == 0  # not even recorded: the provider delivers again
        Operator(hooked, engine).unpause("ops")
        assert receiver.receive(body, signed(body)).status == 200
        assert row_count(engine, tables.webhook_deliveries) == 1
    finally:
        receiver.close()


def test_a_webhook_for_an_unknown_response_deletes_nothing_in_shadow_mode(
    cfg: Settings, engine: sa.Engine, sim: Simulator, cli_env: dict[str, str], tmp_path: Path
) -> None:
    from iipub.settings.config import WebhookSettings
    from iipub.webhooks import receiver as webhook
    from tests.integration.observe.test_cutover import legacy_create
    from tests.integration.webhooks.test_receiver import SECRET, event, signed

    rid = legacy_create(sim, sim_env(cli_env, sim, tmp_path), "daily-brief", utc_today())  # not adopted yet
    sim.advance(30)
    shadow = dataclasses.replace(cfg, provider_webhook_secret=SECRET, webhooks=WebhookSettings(enabled=True),
                                 reconcile=dataclasses.replace(cfg.reconcile, mode="shadow"))
    receiver = webhook.Receiver(shadow, engine=engine)
    try:
        body = event(rid)
        assert receiver.receive(body, signed(body)).status == 200
    finally:
        receiver.close()
    assert sim.stats()["deletes"] == 0  # still there for the legacy system, and for `iipub adopt`
