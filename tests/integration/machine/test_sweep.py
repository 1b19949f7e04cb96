"""The reconcile tick against a real database and the simulator over real HTTP, named
after the seed's acceptance plan (section 20) where an item maps: the whole run, the create
committed before the POST on the wire, unknown create outcomes and unreachable providers as the
adapter meets them, many jobs and overlapping ticks. What each step decides from a provider's
answer is tested with the in-memory provider in tests/integration/machine/test_steps.py."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from iipub.core.errors import InvariantViolation
from iipub.machine import sweep
from iipub.provider.openai.adapter import OpenAIAdapter
from iipub.provider.openai.simulator import Simulator, SimulatorOptions
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import clock, db, tables
from iipub.store.job_store import Store
from tests.support.rows import job_events, job_rows, row_count
from tests.support.ticks import tick

DAY = dt.date(2026, 11, 28)


# -- helpers ----------------------------------------------------------------------


def one(engine: sa.Engine) -> dict[str, Any]:
    rows = job_rows(engine)
    assert len(rows) == 1, rows
    return rows[0]


def only(settings: Settings, name: str = "daily-brief", **changes: Any) -> Settings:
    """Settings with a single product (so a test talks about one slot)."""
    p = replace(settings.products[name], **changes)
    return replace(settings, products={name: p})


def schedule(settings: Settings, engine: sa.Engine, *days: dt.date, backfill: bool = False) -> None:
    store = Store(engine, "test-scheduler")
    for day in days or (DAY,):
        for p in settings.products.values():
            store.schedule(p, day, backfill=backfill)


def ticks_until(settings: Settings, engine: sa.Engine, sim: Simulator, states: set[str], limit: int = 12) -> None:
    """Tick, moving simulated and database time forward, until every job is in `states`."""
    for _ in range(limit):
        if {r["state"] for r in job_rows(engine)} <= states:
            return
        tick(settings, engine)
        sim.advance(5)
    assert {r["state"] for r in job_rows(engine)} <= states, [
        (r["product"], r["state"], r["last_error"]) for r in job_rows(engine)]


@pytest.fixture
def s1(settings: Settings) -> Settings:
    """One product only: today's auto-scheduled slots do not interfere (they open at 05:00
    UTC of today, so they are kept out by using a product that opens at 23:59)."""
    return only(settings)


# Ticks make no slots of their own ([reconcile] auto_schedule = false): these tests work on
# DAY's slots only.
pytestmark = pytest.mark.no_auto_schedule


# -- 1-10: the ordinary lifecycle -----------------------------------------------------


def test_01_to_10_full_run_both_products_both_languages_one_paid_create_each(
    settings: Settings, engine: sa.Engine, sim: Simulator
) -> None:
    schedule(settings, engine)
    ticks_until(settings, engine, sim, {"SAVED_NOT_PUBLIC"})
    rows = job_rows(engine)
    assert [r["product"] for r in rows] == ["daily-brief", "revolution-watch"]
    stats = sim.stats()
    assert stats["creates_total"] == 2
    assert sorted(stats["creates_by_job"].values()) == [1, 1]
    assert stats["max_retry_count_seen"] == 0
    for r in rows:
        assert r["generation_attempts"] == 1 and r["poll_count"] >= 1
        assert r["payload"] and r["payload_sha256"] and r["composed_sha256"]
        assert r["total_tokens"] > 0
        path = [e["to_state"] for e in job_events(engine, r["id"])]
        for expected in ["NO_JOB", "CREATE_ELIGIBLE", "CREATE_IN_FLIGHT", "ACCEPTED", "COMPLETED_NOT_RETRIEVED",
                         "RETRIEVED_NOT_VALIDATED", "READY_TO_COMPOSE", "SAVED_NOT_PUBLIC"]:
            assert expected in path
        for lang in ("en", "es"):  # each language track: validated, composed and saved in one write
            assert [e["reason"] for e in job_events(engine, r["id"], lang)] == [
                "forked", "validated", "composed", "saved"]
        versions = [e["version"] for e in job_events(engine, r["id"])]
        assert versions == sorted(set(versions))
    # 10 and 17: one edition and one outbox event per language, from one payload.
    with engine.connect() as conn:
        eds = conn.execute(sa.select(tables.editions.c.product, tables.editions.c.lang, tables.editions.c.sha256)).all()
        outbox = conn.execute(sa.select(tables.outbox.c.payload)).scalars().all()
    assert sorted((p, lang) for p, lang, _ in eds) == [
        ("daily-brief", "en"), ("daily-brief", "es"), ("revolution-watch", "en"), ("revolution-watch", "es")]
    assert len(outbox) == 4
    by_sha = {sha for _, _, sha in eds}
    assert {json.loads(p)["sha256"] for p in outbox} == by_sha


def test_03_in_flight_is_committed_before_the_post(s1: Settings, engine: sa.Engine, sim: Simulator) -> None:
    schedule(s1, engine)
    seen: list[tuple[str, int]] = []

    def on_request(request: httpx.Request) -> None:
        if request.method == "POST" and request.url.path.endswith("/responses"):
            row = one(engine)  # another connection: only committed data is visible
            seen.append((row["state"], row["generation_attempts"]))

    client = httpx.Client(event_hooks={"request": [on_request]}, timeout=5)
    provider = OpenAIAdapter(s1.provider, "sk-test", http_client=client)
    try:
        tick(s1, engine, provider=provider)
    finally:
        provider.close()
        client.close()
    assert seen == [("CREATE_IN_FLIGHT", 1)]
    assert one(engine)["state"] == "ACCEPTED"


# -- 21: ambiguous creates are quarantined, never retried ---------------------------------


@pytest.mark.parametrize("fault", ["drop_after_accept", "slow", "server_error"])
def test_21_ambiguous_create_quarantines_and_never_posts_again(
    s1: Settings, engine: sa.Engine, sim: Simulator, fault: str
) -> None:
    schedule(s1, engine)
    sim.add_faults([{"op": "create", "fault": fault}])
    # A slow create hangs (8 s) past the client timeout: 0.5 s instead of 4 s keeps the test short.
    tick(replace(s1, provider=replace(s1.provider, timeout_seconds=0.5)), engine)
    row = one(engine)
    assert row["state"] == "QUARANTINED" and row["quarantine_reason"] == "create_outcome_unknown"
    assert row["generation_attempts"] == 1 and row["response_id"] is None
    for _ in range(3):
        clock.advance_clock(engine, 3600)
        tick(s1, engine)
    assert sim.stats()["creates_total"] == (0 if fault == "server_error" else 1)
    assert sim.stats()["requests"]["create"] == 1
    assert one(engine)["state"] == "QUARANTINED"


# -- a provider that cannot be reached --------------------------------------------------------------


def test_connection_refused_on_create_is_refunded(s1: Settings, engine: sa.Engine) -> None:
    schedule(s1, engine)
    with Simulator() as dead:
        url = dead.url
    closed = replace(s1, provider=replace(s1.provider, kind="openai", base_url=url))
    tick(closed, engine)
    row = one(engine)
    assert row["state"] == "CREATE_ELIGIBLE" and row["generation_attempts"] == 0
    # Refunded as a provable refusal (never connected), with a backoff: not an unknown outcome.
    assert [e["to_state"] for e in job_events(engine, row["id"])][-2:] == ["CREATE_IN_FLIGHT", "CREATE_ELIGIBLE"]
    assert job_events(engine, row["id"])[-1]["reason"] == "create_refused" and row["quarantine_reason"] is None
    with engine.connect() as conn:
        assert row["next_attempt_at"] > clock.read_now(conn)


# -- overlapping ticks, many jobs ---------------------------------------------------------------------


@pytest.mark.slow
def test_29_overlapping_ticks_never_repeat_a_get_or_a_create(settings: Settings, db_url: str, engine: sa.Engine,
                                                            sim: Simulator) -> None:
    # Only the 100 slots it made (catch_up_days = 0: no slots of the last days besides them).
    s = replace(settings, reconcile=replace(settings.reconcile, poll_interval_seconds=300, concurrency=4,
                                            tick_seconds=300, catch_up_days=0))
    days = [DAY - dt.timedelta(days=i) for i in range(50)]
    schedule(s, engine, *days)  # 100 slots
    engines = [db.make_engine(db_url, pool_size=8) for _ in range(2)]
    reports: list[sweep.SweepReport] = []

    def run(e: sa.Engine) -> None:
        reports.append(sweep.run(s, e))

    try:
        # Phase 1 creates, phase 2 polls; phase 3 polls what phase 2 left (on MariaDB one job is
        # sometimes not yet due in phase 2: an open finding). No GET or create may repeat in any.
        for _phase in range(3):
            threads = [threading.Thread(target=run, args=(e,)) for e in engines]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            sim.advance(5)
            clock.advance_clock(engine, 400)  # past every poll interval and lease: phase 2 finds all 100 due
    finally:
        for e in engines:
            e.dispose()
    stats = sim.stats()
    assert stats["creates_total"] == 100 and set(stats["creates_by_job"].values()) == {1}
    assert len(stats["retrieves_by_response"]) == 100 and set(stats["retrieves_by_response"].values()) == {1}
    # Each job leased once per phase, plus once more for each create that waited for the health probe.
    assert sum(r.leased for r in reports) - sum(r.held_back for r in reports) >= 200
    assert {r["state"] for r in job_rows(engine)} == {"SAVED_NOT_PUBLIC"}


@pytest.mark.slow
def test_41_50_hundred_jobs_two_products_no_contention(settings: Settings, engine: sa.Engine, sim: Simulator) -> None:
    schedule(settings, engine, *[DAY - dt.timedelta(days=i) for i in range(50)])
    reports = []
    for _ in range(4):
        reports.append(tick(settings, engine))
        sim.advance(5)
    assert {r["state"] for r in job_rows(engine)} == {"SAVED_NOT_PUBLIC"}
    assert sum(r.contention + r.errors + r.lease_lost for r in reports) == 0
    assert sim.stats()["creates_total"] == 100
    assert row_count(engine, tables.editions) == 200


# -- cleanup --------------------------------------------------------------------------------------


def _published(s: Settings, engine: sa.Engine, sim: Simulator) -> dict[str, Any]:
    schedule(s, engine)
    ticks_until(s, engine, sim, {"SAVED_NOT_PUBLIC"})
    relay.run(s, engine)
    assert one(engine)["state"] == "PUBLISHED"
    return one(engine)


def test_39_cleanup_network_failure_retries_without_touching_publication(
    s1: Settings, engine: sa.Engine, sim: Simulator, tmp_path: Path
) -> None:
    row = _published(s1, engine, sim)
    with Simulator() as dead:
        url = dead.url
    down = replace(s1, provider=replace(s1.provider, base_url=url))
    files = sorted(p for p in (tmp_path / "public").rglob("*") if p.is_file())
    before = {p: p.read_bytes() for p in files}
    for _ in range(3):
        tick(down, engine)
        clock.advance_clock(engine, 3600)
    after = one(engine)
    assert after["state"] == "CLEANUP_PENDING" and after["retry_count"] == 3
    assert {p: p.read_bytes() for p in files} == before and row_count(engine, tables.editions) == 2
    tick(s1, engine)
    assert one(engine)["state"] == "DELETED" and sim.stats()["deleted_ids"] == [row["response_id"]]


def test_35_delete_before_custody_is_an_invariant_error_and_sends_nothing(s1: Settings, sim: Simulator) -> None:
    with OpenAIAdapter(s1.provider, "sk-test") as provider, pytest.raises(InvariantViolation):
        provider.delete("resp_abc", has_custody=False)
    assert sim.stats()["requests"]["delete"] == 0


@pytest.mark.slow
def test_tick_deadline_stops_taking_new_work(settings: Settings, engine: sa.Engine, sim: Simulator) -> None:
    s = replace(settings, reconcile=replace(settings.reconcile, tick_seconds=1, concurrency=1),
                provider=replace(settings.provider, timeout_seconds=2))
    schedule(s, engine, *[DAY - dt.timedelta(days=i) for i in range(30)])
    sim.add_faults([{"op": "create", "fault": "slow", "times": 100}])
    # slow creates take ~2 s each (client timeout): the tick must stop after the first.
    report = tick(s, engine)
    assert report.stopped_at_deadline or report.leased < 60
    assert report.leased <= 2
    assert all(r["lease_owner"] is None for r in job_rows(engine))


@pytest.mark.slow
def test_the_sweep_waits_for_its_workers_without_spinning(settings: Settings, engine: sa.Engine) -> None:
    # While workers wait on a slow provider, the thread that feeds them must block, not spin:
    # a spinning feeder burns a core and starves the workers of the GIL.
    slow = SimulatorOptions(queued_seconds=0.0, in_progress_seconds=3600.0, latency_seconds=0.3)
    with Simulator(slow) as provider_sim:
        s = replace(settings, provider=replace(settings.provider, kind="openai", base_url=provider_sim.url))
        schedule(s, engine, DAY, DAY - dt.timedelta(days=1), DAY - dt.timedelta(days=2))
        tick(s, engine)
        assert {r["state"] for r in job_rows(engine)} <= {"ACCEPTED", "IN_PROGRESS"}
        clock.advance_clock(engine, 60)
        one_at_a_time = replace(s, reconcile=replace(s.reconcile, concurrency=1))
        cpu0, wall0 = time.process_time(), time.perf_counter()
        report = tick(one_at_a_time, engine)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    polls = sum(report.transitions.values())
    assert polls == len(job_rows(engine)) >= 4 and wall >= polls * 0.3
    assert cpu < 0.5 * wall, f"{cpu:.2f} s of CPU in {wall:.2f} s: the sweep is spinning"
