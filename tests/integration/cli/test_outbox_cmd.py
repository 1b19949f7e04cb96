"""`iipub outbox list|requeue` over a real database: webhook deliveries parked by a local receiver
answering 400 (or failing with 503), listed, refused where they must be, re-queued after the
receiver is fixed and then delivered exactly once per sink by the next relay."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.machine import sweep
from iipub.provider.openai.simulator import Simulator
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import clock, tables
from iipub.store.job_store import Store
from tests.support.cli import one_line_error, run_cli
from tests.support.loopback import Receiver
from tests.support.rows import stored
from tests.support.settings import cms_env, with_cms

DAY = dt.date(2026, 11, 28)
pytestmark = pytest.mark.no_auto_schedule


@pytest.fixture
def s(cfg: Settings, hook: Receiver, webhook_sink_secret: str) -> Settings:
    return with_cms(cfg, hook.url)


@pytest.fixture
def env(cli_env: dict[str, str], sim: Simulator, tmp_path: Path, hook: Receiver) -> dict[str, str]:
    return cms_env(cli_env, sim, tmp_path, hook.url)


def saved(s: Settings, engine: sa.Engine, sim: Simulator) -> None:
    Store(engine, "test").schedule(s.products["daily-brief"], DAY)
    for _ in range(6):
        sweep.run(s, engine)
        sim.advance(5)
        with engine.connect() as conn:
            if set(conn.execute(sa.select(tables.jobs.c.state)).scalars()) == {"SAVED_NOT_PUBLIC"}:
                return
    raise AssertionError("the job did not reach SAVED_NOT_PUBLIC")


def listed(env: dict[str, str], tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    res = run_cli("outbox", "list", "--json", *args, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    doc: list[dict[str, Any]] = json.loads(res.stdout)
    return doc


def job_state(engine: sa.Engine) -> str:
    with engine.connect() as conn:
        return str(conn.execute(sa.select(tables.jobs.c.state)).scalar_one())


@pytest.mark.slow
def test_parked_webhook_events_are_listed_requeued_and_delivered_once(
    s: Settings, engine: sa.Engine, sim: Simulator, hook: Receiver, env: dict[str, str], tmp_path: Path
) -> None:
    saved(s, engine, sim)
    hook.mode = "400"
    assert relay.run(s, engine).parked == 2
    first, second = listed(env, tmp_path, "--state", "parked")
    for e in (first, second):
        assert (e["status"], e["job_id"], e["product"], e["edition_date"]) == ("parked", e["job_id"], "daily-brief",
                                                                                DAY.isoformat())
        sinks = {d["sink"]: d for d in e["sinks"]}
        assert sinks["static"]["state"] == "delivered" and sinks["webhook"]["state"] == "parked"
        assert "HTTP 400" in sinks["webhook"]["last_error"] and sinks["webhook"]["parked_at"]
        assert e["next_attempt_at"] and e["attempts"] == 1 and e["published_at"] is None
    assert {e["lang"] for e in (first, second)} == {"en", "es"}
    assert listed(env, tmp_path, "--state", "failing") == []
    assert [e["event_id"] for e in listed(env, tmp_path)] == [first["event_id"], second["event_id"]]
    text = run_cli("outbox", "list", env=env, cwd=tmp_path).stdout
    assert first["event_id"] in text and "webhook=parked" in text and "HTTP 400" in text

    # Parked: the relay does not try the webhook again by itself, however long it waits.
    clock.advance_clock(engine, 7200)
    relay.run(s, engine)
    assert len(hook.requests) == 2

    hook.mode = "ok"
    # A prefix is enough (UUIDv7: the first 12 digits are the time, so a prefix reaches into the random part).
    res = run_cli("outbox", "requeue", first["event_id"][:23], env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "parked delivery cleared for webhook" in res.stdout and "tries webhook" in res.stdout
    report = json.loads(run_cli("relay", env=env, cwd=tmp_path, check=True).stdout.strip().splitlines()[-1])
    assert report["published"] == 1 and report["deliveries"] == {"webhook": 1}  # static is not asked again
    assert job_state(engine) == "SAVED_NOT_PUBLIC"  # the other event is still parked

    before = stored(engine)
    one_line_error(run_cli("outbox", "requeue", first["event_id"], env=env, cwd=tmp_path), 3, "was published")
    one_line_error(run_cli("outbox", "requeue", "00000000-dead", env=env, cwd=tmp_path), 4, "no outbox event")
    one_line_error(run_cli("outbox", "requeue", second["event_id"], "--sink", "static", env=env, cwd=tmp_path),
                   3, "already delivered to static")
    one_line_error(run_cli("outbox", "requeue", second["event_id"], "--sink", "webhok", env=env, cwd=tmp_path),
                   2, "not a sink of outbox event")
    assert stored(engine) == before  # refusals write nothing

    run_cli("outbox", "requeue", second["event_id"], "--sink", "webhook", env=env, cwd=tmp_path, check=True)
    report = relay.run(s, engine)
    assert report.published == 1 and report.jobs_published == 1 and job_state(engine) == "PUBLISHED"
    assert sorted(hook.keys().values()) == [2, 2]  # each event: refused once, delivered once
    assert listed(env, tmp_path) == []
    assert {e["status"] for e in listed(env, tmp_path, "--state", "all")} == {"published"}
    assert "no outbox events (unpublished)" in run_cli("outbox", "list", env=env, cwd=tmp_path).stdout


def test_a_failing_event_is_requeued_due_now_and_a_claimed_one_is_refused(
    s: Settings, engine: sa.Engine, sim: Simulator, hook: Receiver, env: dict[str, str], tmp_path: Path
) -> None:
    saved(s, engine, sim)
    hook.mode = "503"  # retry-after: 120
    assert relay.run(s, engine).retried == 2
    failing = listed(env, tmp_path, "--state", "failing")
    assert len(failing) == 2 and {e["status"] for e in failing} == {"failing"}
    assert all("503" in e["last_error"] for e in failing)
    assert listed(env, tmp_path, "--state", "parked") == []
    hook.mode = "ok"
    assert relay.run(s, engine).claimed == 0  # backing off

    # A relay holding the claim right now: refused, retry in a minute.
    held = failing[0]["event_id"]
    with engine.begin() as conn:
        conn.execute(tables.outbox.update().where(tables.outbox.c.event_id == held)
                     .values(lease_owner="relay:other", lease_expiry=clock.now(conn, 60)))
    one_line_error(run_cli("outbox", "requeue", held, env=env, cwd=tmp_path), 75, "being delivered by relay:other")
    with engine.begin() as conn:
        conn.execute(tables.outbox.update().values(lease_owner=None, lease_expiry=None))

    for e in failing:
        res = run_cli("outbox", "requeue", e["event_id"], env=env, cwd=tmp_path, check=True)
        assert "nothing was parked" in res.stdout
    report = relay.run(s, engine)  # no clock advanced: due now
    assert report.published == 2 and job_state(engine) == "PUBLISHED"
