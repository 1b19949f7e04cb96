"""The reconcile tick against a real database and the simulator over real HTTP, named
after the seed's acceptance plan (section 20) where an item maps."""

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
from sqlalchemy import event

from iipub.core.errors import InvariantViolation
from iipub.machine import sweep as reconcile
from iipub.model.jobs import Job
from iipub.model.states import Reason, State
from iipub.money import gate
from iipub.provider.adapter import Provider
from iipub.provider.simulator import Simulator, SimulatorOptions
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


def with_budgets(settings: Settings, **changes: Any) -> Settings:
    return replace(settings, budgets=replace(settings.budgets, **changes))


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


def drive_to(settings: Settings, engine: sa.Engine, sim: Simulator, state: str) -> dict[str, Any]:
    ticks_until(settings, engine, sim, {state})
    return one(engine)


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
    provider = Provider(s1.provider, "sk-test", http_client=client)
    try:
        tick(s1, engine, provider=provider)
    finally:
        provider.close()
        client.close()
    assert seen == [("CREATE_IN_FLIGHT", 1)]
    assert one(engine)["state"] == "ACCEPTED"


def test_05_polls_count_poll_budget_only(s1: Settings, engine: sa.Engine) -> None:
    with Simulator(SimulatorOptions(queued_seconds=600, in_progress_seconds=600)) as slow:
        s = replace(s1, provider=replace(s1.provider, base_url=slow.url))
        schedule(s, engine)
        tick(s, engine)
        for _ in range(3):
            tick(s, engine)  # the response stays queued for ten simulated minutes
        row = one(engine)
        assert row["state"] == "QUEUED"
        assert row["generation_attempts"] == 1 and row["poll_count"] == 3
        assert slow.stats()["creates_total"] == 1 and slow.stats()["requests"]["retrieve"] == 3


def test_06_07_completion_is_taken_into_custody_in_the_same_tick(s1: Settings, engine: sa.Engine,
                                                                sim: Simulator) -> None:
    schedule(s1, engine)
    tick(s1, engine)
    sim.advance(5)
    report = tick(s1, engine)
    assert report.transitions["COMPLETED_NOT_RETRIEVED"] == 1 and report.transitions["RETRIEVED_NOT_VALIDATED"] == 1
    row = one(engine)
    assert row["payload"] and json.loads(row["payload"])["en"]["items"]
    trail = [(e["from_state"], e["to_state"]) for e in job_events(engine, row["id"])]
    assert ("COMPLETED_NOT_RETRIEVED", "RETRIEVED_NOT_VALIDATED") in trail


# -- validation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("schema_break", "schema"),  # 28
        ("malformed_output", "not_json"),  # 36
        ("hallucinated_urls", "bad_url"),  # 44
        ("same_text", "same_text"),  # 45
        ("script_injection", "bad_url"),
        ("oversized_output", "too_large"),
    ],
)
def test_08_28_36_44_45_bad_output_is_retained_not_paid_again(
    s1: Settings, engine: sa.Engine, sim: Simulator, fault: str, reason: str
) -> None:
    schedule(s1, engine)
    sim.add_faults([{"op": "create", "fault": fault}])
    row = drive_to(s1, engine, sim, "VALIDATION_FAILED_RETAINED")
    assert row["payload"] is not None and row["payload_sha256"]  # kept: never pay twice for known-bad output
    assert reason in (row["last_error"] or "")
    failed = [e for e in job_events(engine, row["id"]) if e["to_state"] == "VALIDATION_FAILED_RETAINED"]
    assert any(r.startswith(reason) for r in json.loads(failed[0]["detail"])["reasons"])
    for _ in range(2):
        tick(s1, engine)
    assert sim.stats()["creates_total"] == 1
    assert row_count(engine, tables.editions) == 0 and row_count(engine, tables.outbox) == 0


def test_09_46_valid_output_with_exactly_the_configured_items_passes(s1: Settings, engine: sa.Engine,
                                                                    sim: Simulator) -> None:
    assert s1.products["daily-brief"].items == 14
    schedule(s1, engine)
    row = drive_to(s1, engine, sim, "SAVED_NOT_PUBLIC")
    payload = json.loads(row["payload"])
    assert len(payload["en"]["items"]) == len(payload["es"]["items"]) == 14


def test_46_wrong_item_count_fails_validation(s1: Settings, engine: sa.Engine, sim: Simulator) -> None:
    # The output schema asks for 14; a product now configured for 12 rejects a 14-item payload.
    schedule(s1, engine)
    tick(s1, engine)
    sim.advance(5)
    narrower = only(s1, items=12)
    with engine.begin() as conn:  # keep the fingerprint check out of the way: same job, new item rule
        conn.execute(tables.jobs.update().values(config_fingerprint=narrower.products["daily-brief"].fingerprint()))
    row = drive_to(narrower, engine, sim, "VALIDATION_FAILED_RETAINED")
    assert "schema" in row["last_error"] and "12" in row["last_error"]


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


def test_rejected_create_quarantines_with_status(s1: Settings, engine: sa.Engine, sim: Simulator) -> None:
    schedule(s1, engine)
    sim.add_faults([{"op": "create", "fault": "unauthorized"}])
    tick(s1, engine)
    row = one(engine)
    assert row["quarantine_reason"] == "create_rejected" and "401" in row["last_error"]


# -- 22/43: rate limits ------------------------------------------------------------------------


def test_22_43_rate_limit_refunds_and_respects_reset_headers(s1: Settings, engine: sa.Engine, sim: Simulator) -> None:
    schedule(s1, engine)
    sim.add_faults([{"op": "create", "fault": "rate_limit"}])
    report = tick(s1, engine)
    row = one(engine)
    assert row["state"] == "CREATE_ELIGIBLE" and row["generation_attempts"] == 0  # refunded
    refused = [e for e in job_events(engine, row["id"]) if e["reason"] == "create_refused"]
    assert len(refused) == 1 and json.loads(refused[0]["detail"])["delay"] == pytest.approx(2.0)
    assert report.transitions["CREATE_IN_FLIGHT"] == 1
    tick(s1, engine)  # not due yet: x-ratelimit-reset-requests said 2s
    assert sim.stats()["requests"]["create"] == 1
    clock.advance_clock(engine, 2.5)
    tick(s1, engine)
    assert sim.stats()["requests"]["create"] == 2 and one(engine)["state"] == "ACCEPTED"
    assert one(engine)["generation_attempts"] == 1


def test_rate_limit_cools_the_provider_down_for_the_tick(settings: Settings, engine: sa.Engine,
                                                        sim: Simulator) -> None:
    schedule(settings, engine, DAY, DAY - dt.timedelta(days=1), DAY - dt.timedelta(days=2))
    sim.add_faults([{"op": "create", "fault": "rate_limit"}])
    tick(replace(settings, reconcile=replace(settings.reconcile, concurrency=1)), engine)
    # One 429, then no more provider calls in that tick (no stampede).
    assert sim.stats()["requests"]["create"] == 1 and sim.stats()["creates_total"] == 0
    rows = job_rows(engine)
    # Nothing was paid: the refused attempt is refunded, the others were never dispatched.
    assert {r["state"] for r in rows} == {"CREATE_ELIGIBLE"} and {r["generation_attempts"] for r in rows} == {0}
    reasons = [[e["reason"] for e in job_events(engine, r["id"])] for r in rows]
    assert sorted(r.count("create_refused") for r in reasons) == [0] * (len(rows) - 1) + [1]
    with engine.connect() as conn:
        gate = conn.execute(sa.select(tables.create_gate)).mappings().one()
        assert gate["cooldown_until"] is not None and gate["cooldown_until"] > clock.read_now(conn)


def test_connection_refused_on_create_is_refunded(s1: Settings, engine: sa.Engine) -> None:
    schedule(s1, engine)
    with Simulator() as dead:
        url = dead.url
    closed = replace(s1, provider=replace(s1.provider, base_url=url))
    tick(closed, engine)
    row = one(engine)
    assert row["state"] == "CREATE_ELIGIBLE" and row["generation_attempts"] == 0
    # Refunded as a provable refusal (never connected), with a backoff: not an unknown outcome.
    assert [e["to_state"] for e in job_events(engine, row["id"])][-2:] == ["CREATE_IN_FLIGHT", "CREATE_ELIGIBLE"]
    assert job_events(engine, row["id"])[-1]["reason"] == "create_refused" and row["quarantine_reason"] is None
    with engine.connect() as conn:
        assert row["next_attempt_at"] > clock.read_now(conn)


# -- polls -----------------------------------------------------------------------------------------


def test_23_server_errors_on_polls_count_polls_only(s1: Settings, engine: sa.Engine, sim: Simulator) -> None:
    schedule(s1, engine)
    tick(s1, engine)
    sim.add_faults([{"op": "retrieve", "fault": "server_error", "times": 2}])
    for _ in range(2):
        clock.advance_clock(engine, 120)
        tick(s1, engine)
    row = one(engine)
    assert row["state"] == "ACCEPTED" and row["poll_count"] == 2 and row["generation_attempts"] == 1
    assert row["retry_count"] == 2 and "500" in row["last_error"]
    sim.advance(5)
    clock.advance_clock(engine, 120)
    ticks_until(s1, engine, sim, {"SAVED_NOT_PUBLIC"})
    assert sim.stats()["creates_total"] == 1


def test_24_poll_budget_exhausted_quarantines_keeping_the_response(s1: Settings, engine: sa.Engine,
                                                                   sim: Simulator) -> None:
    s = with_budgets(s1, max_poll_attempts=3)
    schedule(s, engine)
    tick(s, engine)
    response_id = one(engine)["response_id"]
    sim.add_faults([{"op": "retrieve", "fault": "slow", "times": 10}])
    # Every poll hangs (8 s) past the client timeout; 0.5 s instead of 4 s keeps the test short.
    s = replace(s, provider=replace(s.provider, timeout_seconds=0.5))
    for _ in range(5):
        clock.advance_clock(engine, 600)
        tick(s, engine)
    row = one(engine)
    assert row["state"] == "QUARANTINED" and row["quarantine_reason"] == "poll_budget_exhausted"
    assert row["response_id"] == response_id and row["poll_count"] == 3 and row["generation_attempts"] == 1
    # Three polls; past the budget, the custody watch still reads the parked response (at its own
    # cadence, one read per tick here): the poll budget bounds observation, never custody.
    polls = [e for e in job_events(engine, row["id"]) if e["reason"] in ("poll", "poll_failed")]
    assert len(polls) == 3 and sim.stats()["requests"]["retrieve"] > 3


def test_26_31_expiry_then_recreate_with_budget_carried_over(s1: Settings, engine: sa.Engine,
                                                            sim: Simulator) -> None:
    sim.backend.zdr = True  # a zero-data-retention project: gone ~10 minutes after it finished, store or not
    schedule(s1, engine)
    tick(s1, engine)
    first = one(engine)["response_id"]
    sim.advance(5 + 700)  # completed, then cron down longer than the 10-minute retention
    for _ in range(3):  # the 404 is read loss_confirm_reads times before it is believed
        tick(s1, engine)
    row = one(engine)
    trail = [e["to_state"] for e in job_events(engine, row["id"])]
    reasons = [e["reason"] for e in job_events(engine, row["id"])]
    assert "PROVIDER_EXPIRED_OR_MISSING" in trail
    assert reasons.count("loss_suspected") == 2 and reasons.count("loss_confirmed") == 1
    assert row["generation_attempts"] == 2 and row["response_id"] != first  # re-created on the same row
    assert sim.stats()["creates_total"] == 2
    lost = [e for e in job_events(engine, row["id"]) if e["reason"] == "recreate_after_loss"]
    assert json.loads(lost[0]["detail"])["lost_response_id"] == first


def test_25_generation_budget_halts_creates(s1: Settings, engine: sa.Engine, sim: Simulator) -> None:
    schedule(s1, engine)
    sim.add_faults([{"op": "retrieve", "fault": "not_found", "times": 100}])
    for _ in range(16):  # three creates, each lost only after three reads
        tick(s1, engine)
        clock.advance_clock(engine, 120)
    row = one(engine)
    assert row["state"] == "QUARANTINED" and row["quarantine_reason"] == "generation_budget_exhausted"
    assert row["generation_attempts"] == 3 and sim.stats()["creates_total"] == 3


def test_a_failed_response_is_a_loss_once_confirmed(s1: Settings, engine: sa.Engine, sim: Simulator) -> None:
    schedule(s1, engine)
    sim.add_faults([{"op": "create", "fault": "fail"}])  # ends failed with server_error: a provider fault
    tick(s1, engine)
    sim.advance(5)
    for _ in range(3):
        tick(s1, engine)
    row = one(engine)
    assert "PROVIDER_EXPIRED_OR_MISSING" in [e["to_state"] for e in job_events(engine, row["id"])]
    assert row["generation_attempts"] == 2


def test_a_response_cut_at_the_output_cap_is_retrieved_then_parked(s1: Settings, engine: sa.Engine,
                                                                   sim: Simulator) -> None:
    """`incomplete` for max_output_tokens: custody first, then parked with how to raise the cap
    (it was: validation decides, VALIDATION_FAILED_RETAINED; PRODUCT.md section 18)."""
    schedule(s1, engine)
    sim.add_faults([{"op": "create", "fault": "incomplete"}])
    row = drive_to(s1, engine, sim, "QUARANTINED")
    assert row["quarantine_reason"] == "output_cap_reached"
    assert row["payload"] is not None and sim.stats()["creates_total"] == 1


def test_30_config_drift_under_an_accepted_job_takes_custody_then_quarantines(
    s1: Settings, engine: sa.Engine, sim: Simulator
) -> None:
    schedule(s1, engine)
    tick(s1, engine)
    changed = only(s1, prompt="A different prompt, deployed while the job ran.")
    sim.advance(5)
    tick(changed, engine)
    row = one(engine)
    # The output was stored (it would expire otherwise), then nothing was validated under rules
    # it was not made for.
    assert row["state"] == "QUARANTINED" and row["quarantine_reason"] == "config_drift"
    assert row["response_id"] and row["payload"] and sim.stats()["requests"]["retrieve"] == 1
    trail = [e["reason"] for e in job_events(engine, row["id"])]
    assert trail[-2:] == ["retrieved", "config_drift"] and "validated" not in trail
    assert sim.stats()["creates_total"] == 1


# -- crashes, leases and overlap ---------------------------------------------------------------------


def test_16_49_dead_worker_mid_retrieval_is_taken_over_after_its_lease(s1: Settings, engine: sa.Engine,
                                                                      sim: Simulator) -> None:
    schedule(s1, engine)
    tick(s1, engine)
    sim.advance(5)
    row = one(engine)
    dead = Store(engine, "dead-worker", 10)
    assert dead.acquire_lease(row["id"], row["version"]) is not None  # then it "dies"
    report = tick(s1, engine)
    assert report.leased == 0 and one(engine)["state"] == "ACCEPTED"
    clock.advance_clock(engine, 11)
    tick(s1, engine)
    assert one(engine)["state"] == "SAVED_NOT_PUBLIC"


def test_crashed_during_create_is_quarantined(s1: Settings, engine: sa.Engine, sim: Simulator) -> None:
    schedule(s1, engine)
    store = Store(engine, "doomed", 10)
    row = one(engine)
    job = store.acquire_lease(row["id"], row["version"])
    assert job is not None
    job = store.transition(job, State.CREATE_ELIGIBLE, reason=Reason.WINDOW_OPEN, keep_lease=True)
    store.transition(job, State.CREATE_IN_FLIGHT, reason=Reason.DISPATCH, changes={"generation_attempts": 1},
                     keep_lease=True)
    tick(s1, engine)  # lease still live: nobody touches it
    assert one(engine)["state"] == "CREATE_IN_FLIGHT"
    clock.advance_clock(engine, 11)
    tick(s1, engine)
    row = one(engine)
    assert row["state"] == "QUARANTINED" and row["quarantine_reason"] == "crashed_during_create"
    assert sim.stats()["requests"]["create"] == 0


@pytest.mark.slow
def test_29_overlapping_ticks_never_repeat_a_get_or_a_create(settings: Settings, db_url: str, engine: sa.Engine,
                                                            sim: Simulator) -> None:
    # Only the 100 slots it made (catch_up_days = 0: no slots of the last days besides them).
    s = replace(settings, reconcile=replace(settings.reconcile, poll_interval_seconds=300, concurrency=4,
                                            tick_seconds=300, catch_up_days=0))
    days = [DAY - dt.timedelta(days=i) for i in range(50)]
    schedule(s, engine, *days)  # 100 slots
    engines = [db.make_engine(db_url, pool_size=8) for _ in range(2)]
    reports: list[reconcile.TickReport] = []

    def run(e: sa.Engine) -> None:
        reports.append(reconcile.run(s, e))

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


def test_42_backfill_yields_to_today(settings: Settings, engine: sa.Engine, sim: Simulator) -> None:
    s = replace(settings, reconcile=replace(settings.reconcile, max_in_flight=1, concurrency=1))
    s = only(s)
    schedule(s, engine, DAY - dt.timedelta(days=3), DAY - dt.timedelta(days=2), backfill=True)
    schedule(s, engine, DAY)
    tick(s, engine)
    dispatched = [r for r in job_rows(engine) if r["generation_attempts"] == 1]
    assert [r["edition_date"] for r in dispatched] == [DAY]


# -- save, cleanup --------------------------------------------------------------------------------------


def _fail_once(engine: sa.Engine, *needles: str) -> list[int]:
    """Make the first statement containing every needle fail as a lost connection would."""
    fired: list[int] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if all(n in statement for n in needles) and not fired:
            fired.append(1)
            raise sa.exc.OperationalError(statement, {}, Exception("injected: lost connection"))

    event.listen(engine, "before_cursor_execute", before)
    return fired


def test_27_database_error_during_save_rolls_back_everything(s1: Settings, engine: sa.Engine, sim: Simulator) -> None:
    schedule(s1, engine)
    tick(s1, engine)
    sim.advance(5)
    fired = _fail_once(engine, "INSERT INTO outbox")
    report = tick(s1, engine)
    assert fired and report.errors == 1
    row = one(engine)
    # One language's save rolled back whole (its edition too); the other language saved.
    assert row["state"] == "READY_TO_COMPOSE" and row["lease_owner"] is None
    with engine.connect() as conn:
        found = {t.lang: t for t in conn.execute(sa.select(tables.tracks)).all()}
        saved = {lang for (lang,) in conn.execute(sa.select(tables.editions.c.lang)).all()}
    failed = {lang for lang, t in found.items() if t.state == "RETRIEVED_NOT_VALIDATED"}
    assert len(failed) == 1 and found[next(iter(failed))].lease_owner is None
    assert saved == set(found) - failed and row_count(engine, tables.outbox) == 1
    tick(s1, engine)
    assert one(engine)["state"] == "SAVED_NOT_PUBLIC"
    assert row_count(engine, tables.editions) == 2 and row_count(engine, tables.outbox) == 2


def test_38_failure_while_storing_the_payload_rolls_back(s1: Settings, engine: sa.Engine, sim: Simulator) -> None:
    schedule(s1, engine)
    tick(s1, engine)
    sim.advance(5)
    fired = _fail_once(engine, "UPDATE jobs", "payload_sha256")
    tick(s1, engine)
    row = one(engine)
    assert fired and row["state"] == "COMPLETED_NOT_RETRIEVED" and row["payload"] is None
    tick(s1, engine)
    row = one(engine)
    assert row["state"] == "SAVED_NOT_PUBLIC" and row["payload"]
    assert sim.stats()["creates_total"] == 1


def test_edition_conflict_is_reported_not_half_written(s1: Settings, engine: sa.Engine, sim: Simulator) -> None:
    schedule(s1, engine)
    with engine.begin() as conn:
        conn.execute(tables.editions.insert().values(
            job_id="someone-else", product="daily-brief", edition_date=DAY, lang="es", title="x", content="{}",
            sha256="0" * 64, created_at=dt.datetime(2026, 1, 1)))
    for _ in range(4):
        tick(s1, engine)
        sim.advance(5)
    # The Spanish save rolled back whole and parked its track; English saved on its own.
    with engine.connect() as conn:
        found = {t.lang: (t.state, t.quarantine_reason) for t in conn.execute(sa.select(tables.tracks)).all()}
    assert found == {"en": ("SAVED_NOT_PUBLIC", None), "es": ("QUARANTINED", "edition_conflict")}
    assert one(engine)["state"] == "READY_TO_COMPOSE"
    assert row_count(engine, tables.editions) == 2 and row_count(engine, tables.outbox) == 1


def _published(s: Settings, engine: sa.Engine, sim: Simulator) -> dict[str, Any]:
    schedule(s, engine)
    ticks_until(s, engine, sim, {"SAVED_NOT_PUBLIC"})
    relay.run(s, engine)
    assert one(engine)["state"] == "PUBLISHED"
    return one(engine)


def test_40_delete_of_an_already_deleted_response_resolves(s1: Settings, engine: sa.Engine, sim: Simulator) -> None:
    _published(s1, engine, sim)
    sim.add_faults([{"op": "delete", "fault": "not_found"}])
    tick(s1, engine)
    assert one(engine)["state"] == "DELETED"


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
    with Provider(s1.provider, "sk-test") as provider, pytest.raises(InvariantViolation):
        provider.delete("resp_abc", has_custody=False)
    assert sim.stats()["requests"]["delete"] == 0


def test_missing_api_key_takes_no_lease(s1: Settings, engine: sa.Engine) -> None:
    schedule(s1, engine)
    before = one(engine)
    from iipub.core.errors import MissingApiKey

    with pytest.raises(MissingApiKey):
        tick(replace(s1, api_key=None), engine)
    assert one(engine) == before


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


def test_job_dataclass_round_trips(engine: sa.Engine, s1: Settings) -> None:
    schedule(s1, engine)
    job = Store(engine, "x").get(one(engine)["id"])
    assert isinstance(job, Job) and job.public()["edition_date"] == DAY.isoformat()


@pytest.mark.parametrize("code", [1213, 1205])
def test_a_claim_rolled_back_by_deadlock_or_lock_wait_is_retried_job_by_job(
    settings: Settings, engine: sa.Engine, sim: Simulator, code: int
) -> None:
    import pymysql

    schedule(settings, engine)
    fired: list[int] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("UPDATE jobs SET") and "state=" not in statement and not fired:  # a lease claim
            fired.append(code)
            raise sa.exc.OperationalError(statement, {}, pymysql.err.OperationalError(code, "injected"))

    event.listen(engine, "before_cursor_execute", before)
    try:
        report = tick(settings, engine)
    finally:
        event.remove(engine, "before_cursor_execute", before)
    # The rolled-back chunk claim wrote nothing; claimed again one by one, both jobs went ahead.
    # (plus one more lease for a create that waited for the health probe)
    assert fired == [code] and report.contention == 1 and report.errors == 0
    assert report.leased - report.held_back == 2
    assert sorted(r["state"] for r in job_rows(engine)) == ["ACCEPTED", "ACCEPTED"]
    assert all(r["lease_owner"] is None for r in job_rows(engine))
    assert sim.stats()["creates_total"] == 2  # one paid create per slot, none lost or doubled
    tick(settings, engine)
    assert {r["state"] for r in job_rows(engine)} <= {"ACCEPTED", "QUEUED", "IN_PROGRESS", "SAVED_NOT_PUBLIC"}


def test_a_cooled_down_sweep_leaves_provider_work_for_the_next_tick_without_re_querying(
    settings: Settings, engine: sa.Engine, sim: Simulator
) -> None:
    schedule(settings, engine, DAY, DAY - dt.timedelta(days=1), DAY - dt.timedelta(days=2))
    tick(settings, engine)
    assert {r["state"] for r in job_rows(engine)} <= {"ACCEPTED", "QUEUED", "IN_PROGRESS"}
    clock.advance_clock(engine, 3600)  # every poll (and today's slots' creates) is due
    sim.add_faults([{"op": "retrieve", "fault": "rate_limit"}])
    one_at_a_time = replace(settings, reconcile=replace(settings.reconcile, concurrency=1, batch_size=1))
    candidate_queries: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("SELECT jobs.id, jobs.version, jobs.state"):
            candidate_queries.append(statement)

    retrieves = sim.stats()["requests"].get("retrieve", 0)
    event.listen(engine, "before_cursor_execute", before)
    try:
        report = tick(one_at_a_time, engine)
    finally:
        event.remove(engine, "before_cursor_execute", before)
    # One 429 cools the provider down for the tick; the jobs still due are left for the next
    # tick instead of being asked for again until the deadline (50 s).
    assert sim.stats()["requests"]["retrieve"] == retrieves + 1
    assert not report.stopped_at_deadline and report.seconds < 10
    assert len(candidate_queries) <= len(job_rows(engine)) + 1
    with engine.connect() as conn:  # the cool-down is shared with every other process
        cooled_until, now = gate.read_cool_down(conn), clock.read_now(conn)
    assert cooled_until is not None and cooled_until > now
    left = job_rows(engine)  # left as they were: unleased, still polling, still due
    assert all(r["lease_owner"] is None and r["state"] in {"ACCEPTED", "QUEUED", "IN_PROGRESS"} for r in left)
    # Once the cool-down has passed, the next tick polls every one of them.
    clock.advance_clock(engine, gate.READ_COOLDOWN_CAP_SECONDS + 1)
    tick(one_at_a_time, engine)
    assert sim.stats()["requests"]["retrieve"] == retrieves + 1 + len(left)
    assert all(r["version"] > before_row["version"]
               for r, before_row in zip(job_rows(engine), left, strict=True))


@pytest.mark.slow
def test_the_sweep_waits_for_its_workers_without_spinning(settings: Settings, engine: sa.Engine) -> None:
    # While workers wait on a slow provider, the thread that feeds them must block, not spin:
    # a spinning feeder burns a core and starves the workers of the GIL.
    slow = SimulatorOptions(queued_seconds=0.0, in_progress_seconds=3600.0, latency_seconds=0.3)
    with Simulator(slow) as provider_sim:
        s = replace(settings, provider=replace(settings.provider, base_url=provider_sim.url))
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
