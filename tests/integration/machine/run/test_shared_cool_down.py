"""A rate limit holds only the kind of call it was seen on (PRODUCT.md section 13): a create's
429, however long its hint, holds creates while polls and custody of finished responses go on;
a read's 429 holds reads for at most 60 s and creates go on; `status` says which. And
`schedule --date` refuses dates no backfill could reach or more than a year ahead."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from iipub.machine import sweep
from iipub.model.states import State
from iipub.money import breaker, gate
from iipub.observe import queries
from iipub.provider.openai.simulator import Simulator
from iipub.settings.config import Settings
from iipub.store import clock
from iipub.store.job_store import Store
from tests.support.cli import one_line_error, run_cli
from tests.support.rows import job_rows, utc_today

# Responses finish only when a test advances the simulated clock.
pytestmark = pytest.mark.simulator(queued_seconds=1, in_progress_seconds=900)


def by_day(engine: sa.Engine) -> dict[dt.date, dict[str, object]]:
    return {row["edition_date"]: row for row in job_rows(engine)}


def yesterday_accepted(settings: Settings, engine: sa.Engine) -> Store:
    store = Store(engine, "test")
    store.schedule(settings.products["daily-brief"], utc_today() - dt.timedelta(days=1))
    sweep.run(settings, engine)
    (job,) = job_rows(engine)
    assert job["state"] in (State.ACCEPTED.value, State.QUEUED.value, State.IN_PROGRESS.value)
    return store


@pytest.mark.no_auto_schedule
def test_a_long_create_cool_down_holds_creates_only_and_custody_goes_on(
        cfg: Settings, engine: sa.Engine, sim: Simulator) -> None:
    store = yesterday_accepted(cfg, engine)
    sim.add_faults([{"fault": "rate_limit_long", "op": "create", "times": 1}])
    store.schedule(cfg.products["daily-brief"], utc_today())
    sweep.run(cfg, engine)  # today's create: 429, retry in ten minutes
    with engine.connect() as conn:
        g, now = gate.read(conn), clock.read_now(conn)
    assert g.cooldown_until is not None and (g.cooldown_until - now).total_seconds() > 500
    sim.advance(1000)  # yesterday's response finishes: the provider keeps it ~10 minutes
    sweep.run(cfg, engine)  # another process's tick, inside the create cool-down
    jobs = by_day(engine)
    done = jobs[utc_today() - dt.timedelta(days=1)]
    assert done["payload_sha256"] is not None  # polled and taken into custody
    assert jobs[utc_today()]["state"] == State.CREATE_ELIGIBLE.value  # its create waits
    assert sim.stats()["requests"]["create"] == 2  # one accepted, one refused: none during the cool-down


@pytest.mark.no_auto_schedule
def test_a_read_rate_limit_cools_reads_only_for_at_most_a_minute_and_status_says_so(
        cfg: Settings, engine: sa.Engine, sim: Simulator) -> None:
    store = yesterday_accepted(cfg, engine)
    (job,) = job_rows(engine)
    sim.add_faults([{"fault": "rate_limit_long", "op": "retrieve", "times": 1}])
    sweep.run(cfg, engine)  # the poll: 429, retry in ten minutes
    report = queries.collect(engine, cfg)
    assert report.read_cooldown_until is not None
    wait = (report.read_cooldown_until - report.generated_at).total_seconds()
    assert 0 < wait <= breaker.READ_COOLDOWN_CAP_SECONDS
    assert report.gate is not None and (report.gate.cooldown_until is None
                                        or report.gate.cooldown_until <= report.generated_at)
    assert report.to_dict()["read_cooldown"]["until"] is not None
    retrieves = sim.stats()["calls_by_response"][job["response_id"]]["retrieve"]
    store.schedule(cfg.products["daily-brief"], utc_today())
    sweep.run(cfg, engine)  # creates are not held by a read's cool-down; reads are
    assert by_day(engine)[utc_today()]["state"] == State.ACCEPTED.value
    stats = sim.stats()
    assert stats["requests"]["create"] == 2
    assert stats["calls_by_response"][job["response_id"]]["retrieve"] == retrieves


@pytest.mark.parametrize("offset", [-400, 400])
def test_schedule_refuses_a_date_out_of_range_in_one_line_and_writes_nothing(
        cli_env: dict[str, str], engine: sa.Engine, offset: int) -> None:
    day = utc_today() + dt.timedelta(days=offset)
    result = run_cli("schedule", "--date", day.isoformat(), env=cli_env)
    one_line_error(result, 2, "nothing scheduled")
    assert job_rows(engine) == []
    far = run_cli("schedule", "--date", "0001-01-01", env=cli_env)
    one_line_error(far, 2, "more than 366 days in the past")
    assert job_rows(engine) == []
    ok = run_cli("schedule", "--date", (utc_today() + dt.timedelta(days=366)).isoformat(), env=cli_env)
    assert ok.returncode == 0 and len(job_rows(engine)) == 2
