"""The steps of a reconcile tick and their decisions against a real database, with the
in-memory provider (`iipub.provider.fake.FakeProvider`) instead of HTTP: it answers what the
adapter answers (tests/integration/test_fake_provider.py holds it to that), and it records every
call, so each test asserts on the calls made as well as on the rows. Numbered after the seed's
acceptance plan (section 20) where an item maps, like tests/integration/machine/test_sweep.py, which
keeps what HTTP is the subject of: the whole run over the simulator, the create committed before
the POST on the wire, unknown create outcomes and connection failures as the adapter meets them."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from iipub.core.errors import MissingApiKey
from iipub.machine import sweep
from iipub.model.jobs import Job
from iipub.model.states import Reason, State
from iipub.money import breaker
from iipub.provider.fake import Call, FakeProvider
from iipub.provider.outcomes import Ambiguous, Deleted, Missing, RefusalKind, Refused, Rejected, Transient
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import clock, gate_rows, tables
from iipub.store.job_store import Store
from tests.support.offline import offline_settings
from tests.support.rows import job_events, job_rows, row_count

DAY = dt.date(2026, 11, 28)
RATE_LIMITED = "HTTP 429: Rate limit reached for requests. Please try again in 2s. (request req_1)"


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


def tick(settings: Settings, engine: sa.Engine, fake: FakeProvider) -> sweep.SweepReport:
    """One in-process reconcile tick on the fake provider."""
    return sweep.run(settings, engine, provider=fake)


def ticks_until(settings: Settings, engine: sa.Engine, fake: FakeProvider, states: set[str],
                limit: int = 12) -> None:
    """Tick, finishing every running response after each tick, until every job is in `states`."""
    for _ in range(limit):
        if {r["state"] for r in job_rows(engine)} <= states:
            return
        tick(settings, engine, fake)
        fake.finish()
    assert {r["state"] for r in job_rows(engine)} <= states, [
        (r["product"], r["state"], r["last_error"]) for r in job_rows(engine)]


def drive_to(settings: Settings, engine: sa.Engine, fake: FakeProvider, state: str) -> dict[str, Any]:
    ticks_until(settings, engine, fake, {state})
    return one(engine)


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    # These tests work on DAY's slots only: the ticks schedule nothing of their own.
    return offline_settings(db_url, tmp_path / "public", reconcile={"auto_schedule": False})


@pytest.fixture
def s1(settings: Settings) -> Settings:
    """One product only."""
    return only(settings)


@pytest.fixture
def fake() -> FakeProvider:
    return FakeProvider()


# -- polls and custody ----------------------------------------------------------------------


def test_05_polls_count_poll_budget_only(s1: Settings, engine: sa.Engine, fake: FakeProvider) -> None:
    schedule(s1, engine)
    tick(s1, engine, fake)
    for _ in range(3):
        tick(s1, engine, fake)  # the response stays queued
    row = one(engine)
    assert row["state"] == "QUEUED"
    assert row["generation_attempts"] == 1 and row["poll_count"] == 3
    assert fake.count("create") == fake.accepted == 1 and fake.count("retrieve") == 3


def test_06_07_completion_is_taken_into_custody_in_the_same_tick(s1: Settings, engine: sa.Engine,
                                                                fake: FakeProvider) -> None:
    schedule(s1, engine)
    tick(s1, engine, fake)
    fake.finish()
    report = tick(s1, engine, fake)
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
    s1: Settings, engine: sa.Engine, fake: FakeProvider, fault: str, reason: str
) -> None:
    schedule(s1, engine)
    tick(s1, engine, fake)
    fake.finish(faults=[fault])  # the edition the provider finished, bent by the fault
    row = drive_to(s1, engine, fake, "VALIDATION_FAILED_RETAINED")
    assert row["payload"] is not None and row["payload_sha256"]  # kept: never pay twice for known-bad output
    assert reason in (row["last_error"] or "")
    failed = [e for e in job_events(engine, row["id"]) if e["to_state"] == "VALIDATION_FAILED_RETAINED"]
    assert any(r.startswith(reason) for r in json.loads(failed[0]["detail"])["reasons"])
    for _ in range(2):
        tick(s1, engine, fake)
    assert fake.count("create") == fake.accepted == 1
    assert row_count(engine, tables.editions) == 0 and row_count(engine, tables.outbox) == 0


def test_09_46_valid_output_with_exactly_the_configured_items_passes(s1: Settings, engine: sa.Engine,
                                                                    fake: FakeProvider) -> None:
    assert s1.products["daily-brief"].items == 14
    schedule(s1, engine)
    row = drive_to(s1, engine, fake, "SAVED_NOT_PUBLIC")
    payload = json.loads(row["payload"])
    assert len(payload["en"]["items"]) == len(payload["es"]["items"]) == 14


def test_46_wrong_item_count_fails_validation(s1: Settings, engine: sa.Engine, fake: FakeProvider) -> None:
    # The output schema asks for 14; a product now configured for 12 rejects a 14-item payload.
    schedule(s1, engine)
    tick(s1, engine, fake)
    fake.finish()
    narrower = only(s1, items=12)
    with engine.begin() as conn:  # keep the fingerprint check out of the way: same job, new item rule
        conn.execute(tables.jobs.update().values(config_fingerprint=narrower.products["daily-brief"].fingerprint()))
    row = drive_to(narrower, engine, fake, "VALIDATION_FAILED_RETAINED")
    assert "schema" in row["last_error"] and "12" in row["last_error"]


# -- creates the provider refused or rejected ------------------------------------------------------


def test_rejected_create_quarantines_with_status(s1: Settings, engine: sa.Engine, fake: FakeProvider) -> None:
    schedule(s1, engine)
    fake.script_create(Rejected(401, "HTTP 401: Incorrect API key provided. (request req_1)"))
    tick(s1, engine, fake)
    row = one(engine)
    assert row["quarantine_reason"] == "create_rejected" and "401" in row["last_error"]


def test_22_43_rate_limit_refunds_and_respects_reset_headers(s1: Settings, engine: sa.Engine,
                                                            fake: FakeProvider) -> None:
    schedule(s1, engine)
    # x-ratelimit-reset-requests: 2s
    fake.script_create(Refused(2.0, RATE_LIMITED, "rate_limit_exceeded", kind=RefusalKind.RATE))
    report = tick(s1, engine, fake)
    row = one(engine)
    assert row["state"] == "CREATE_ELIGIBLE" and row["generation_attempts"] == 0  # refunded
    refused = [e for e in job_events(engine, row["id"]) if e["reason"] == "create_refused"]
    assert len(refused) == 1 and json.loads(refused[0]["detail"])["delay"] == pytest.approx(2.0)
    assert report.transitions["CREATE_IN_FLIGHT"] == 1
    tick(s1, engine, fake)  # not due yet: the reset header said 2s
    assert fake.count("create") == 1
    clock.advance_clock(engine, 2.5)
    tick(s1, engine, fake)
    assert fake.count("create") == 2 and one(engine)["state"] == "ACCEPTED"
    assert one(engine)["generation_attempts"] == 1


def test_rate_limit_cools_the_provider_down_for_the_tick(settings: Settings, engine: sa.Engine,
                                                        fake: FakeProvider) -> None:
    schedule(settings, engine, DAY, DAY - dt.timedelta(days=1), DAY - dt.timedelta(days=2))
    fake.script_create(Refused(2.0, RATE_LIMITED, "rate_limit_exceeded", kind=RefusalKind.RATE))
    tick(replace(settings, reconcile=replace(settings.reconcile, concurrency=1)), engine, fake)
    # One 429, then no more provider calls in that tick (no stampede).
    assert fake.count("create") == 1 and fake.accepted == 0 and len(fake.calls) == 1
    rows = job_rows(engine)
    # Nothing was paid: the refused attempt is refunded, the others were never dispatched.
    assert {r["state"] for r in rows} == {"CREATE_ELIGIBLE"} and {r["generation_attempts"] for r in rows} == {0}
    reasons = [[e["reason"] for e in job_events(engine, r["id"])] for r in rows]
    assert sorted(r.count("create_refused") for r in reasons) == [0] * (len(rows) - 1) + [1]
    with engine.connect() as conn:
        g = conn.execute(sa.select(tables.create_gate)).mappings().one()
        assert g["cooldown_until"] is not None and g["cooldown_until"] > clock.read_now(conn)


# -- polls that fail --------------------------------------------------------------------------------


def test_23_server_errors_on_polls_count_polls_only(s1: Settings, engine: sa.Engine, fake: FakeProvider) -> None:
    schedule(s1, engine)
    tick(s1, engine, fake)
    server_error = Transient(None, "HTTP 500: The server had an error while processing your request.")
    fake.script_retrieve(server_error, server_error)
    for _ in range(2):
        clock.advance_clock(engine, 120)
        tick(s1, engine, fake)
    row = one(engine)
    assert row["state"] == "ACCEPTED" and row["poll_count"] == 2 and row["generation_attempts"] == 1
    assert row["retry_count"] == 2 and "500" in row["last_error"]
    fake.finish()
    clock.advance_clock(engine, 120)
    ticks_until(s1, engine, fake, {"SAVED_NOT_PUBLIC"})
    assert fake.count("create") == fake.accepted == 1


def test_24_poll_budget_exhausted_quarantines_keeping_the_response(s1: Settings, engine: sa.Engine,
                                                                   fake: FakeProvider) -> None:
    s = with_budgets(s1, max_poll_attempts=3)
    schedule(s, engine)
    tick(s, engine, fake)
    response_id = one(engine)["response_id"]
    fake.script_retrieve(*[Transient(None, "transport failure: ReadTimeout: timed out")] * 10)  # every poll times out
    for _ in range(5):
        clock.advance_clock(engine, 600)
        tick(s, engine, fake)
    row = one(engine)
    assert row["state"] == "QUARANTINED" and row["quarantine_reason"] == "poll_budget_exhausted"
    assert row["response_id"] == response_id and row["poll_count"] == 3 and row["generation_attempts"] == 1
    # Three polls; past the budget, the custody watch still reads the parked response (at its own
    # cadence, one read per tick here): the poll budget bounds observation, never custody.
    polls = [e for e in job_events(engine, row["id"]) if e["reason"] in ("poll", "poll_failed")]
    assert len(polls) == 3 and fake.count("retrieve") > 3
    assert {c.response_id for c in fake.calls_of("retrieve")} == {response_id}


def test_26_31_expiry_then_recreate_with_budget_carried_over(s1: Settings, engine: sa.Engine,
                                                            fake: FakeProvider) -> None:
    schedule(s1, engine)
    tick(s1, engine, fake)
    first = one(engine)["response_id"]
    fake.finish()
    fake.forget(first)  # completed, then gone (a zero-data-retention project, cron down too long)
    for _ in range(3):  # the 404 is read loss_confirm_reads times before it is believed
        tick(s1, engine, fake)
    row = one(engine)
    trail = [e["to_state"] for e in job_events(engine, row["id"])]
    reasons = [e["reason"] for e in job_events(engine, row["id"])]
    assert "PROVIDER_EXPIRED_OR_MISSING" in trail
    assert reasons.count("loss_suspected") == 2 and reasons.count("loss_confirmed") == 1
    assert row["generation_attempts"] == 2 and row["response_id"] != first  # re-created on the same row
    assert fake.count("create") == fake.accepted == 2
    lost = [e for e in job_events(engine, row["id"]) if e["reason"] == "recreate_after_loss"]
    assert json.loads(lost[0]["detail"])["lost_response_id"] == first


def test_25_generation_budget_halts_creates(s1: Settings, engine: sa.Engine, fake: FakeProvider) -> None:
    schedule(s1, engine)
    fake.script_retrieve(*[Missing("HTTP 404: Response not found.")] * 100)
    for _ in range(16):  # three creates, each lost only after three reads
        tick(s1, engine, fake)
        clock.advance_clock(engine, 120)
    row = one(engine)
    assert row["state"] == "QUARANTINED" and row["quarantine_reason"] == "generation_budget_exhausted"
    assert row["generation_attempts"] == 3 and fake.count("create") == fake.accepted == 3


def test_a_failed_response_is_a_loss_once_confirmed(s1: Settings, engine: sa.Engine, fake: FakeProvider) -> None:
    schedule(s1, engine)
    tick(s1, engine, fake)
    fake.finish(ending="failed")  # a provider fault
    for _ in range(3):
        tick(s1, engine, fake)
    row = one(engine)
    assert "PROVIDER_EXPIRED_OR_MISSING" in [e["to_state"] for e in job_events(engine, row["id"])]
    assert row["generation_attempts"] == 2


def test_a_response_cut_at_the_output_cap_is_retrieved_then_parked(s1: Settings, engine: sa.Engine,
                                                                   fake: FakeProvider) -> None:
    """`incomplete` for max_output_tokens: custody first, then parked with how to raise the cap
    (it was: validation decides, VALIDATION_FAILED_RETAINED; PRODUCT.md section 18)."""
    schedule(s1, engine)
    tick(s1, engine, fake)
    fake.finish(ending="cut_at_cap")
    row = drive_to(s1, engine, fake, "QUARANTINED")
    assert row["quarantine_reason"] == "output_cap_reached"
    assert row["payload"] is not None and fake.count("create") == fake.accepted == 1


def test_30_config_drift_under_an_accepted_job_takes_custody_then_quarantines(
    s1: Settings, engine: sa.Engine, fake: FakeProvider
) -> None:
    schedule(s1, engine)
    tick(s1, engine, fake)
    changed = only(s1, prompt="A different prompt, deployed while the job ran.")
    fake.finish()
    tick(changed, engine, fake)
    row = one(engine)
    # The output was stored (it would expire otherwise), then nothing was validated under rules
    # it was not made for.
    assert row["state"] == "QUARANTINED" and row["quarantine_reason"] == "config_drift"
    assert row["response_id"] and row["payload"] and fake.count("retrieve") == 1
    trail = [e["reason"] for e in job_events(engine, row["id"])]
    assert trail[-2:] == ["retrieved", "config_drift"] and "validated" not in trail
    assert fake.count("create") == fake.accepted == 1


# -- crashes, leases and overlap ---------------------------------------------------------------------


def test_16_49_dead_worker_mid_retrieval_is_taken_over_after_its_lease(s1: Settings, engine: sa.Engine,
                                                                      fake: FakeProvider) -> None:
    schedule(s1, engine)
    tick(s1, engine, fake)
    fake.finish()
    row = one(engine)
    dead = Store(engine, "dead-worker", 10)
    assert dead.acquire_lease(row["id"], row["version"]) is not None  # then it "dies"
    report = tick(s1, engine, fake)
    assert report.leased == 0 and one(engine)["state"] == "ACCEPTED"
    clock.advance_clock(engine, 11)
    tick(s1, engine, fake)
    assert one(engine)["state"] == "SAVED_NOT_PUBLIC"


def test_crashed_during_create_is_quarantined(s1: Settings, engine: sa.Engine, fake: FakeProvider) -> None:
    schedule(s1, engine)
    store = Store(engine, "doomed", 10)
    row = one(engine)
    job = store.acquire_lease(row["id"], row["version"])
    assert job is not None
    job = store.transition(job, State.CREATE_ELIGIBLE, reason=Reason.WINDOW_OPEN, keep_lease=True)
    store.transition(job, State.CREATE_IN_FLIGHT, reason=Reason.DISPATCH, changes={"generation_attempts": 1},
                     keep_lease=True)
    tick(s1, engine, fake)  # lease still live: nobody touches it
    assert one(engine)["state"] == "CREATE_IN_FLIGHT"
    clock.advance_clock(engine, 11)
    tick(s1, engine, fake)
    row = one(engine)
    assert row["state"] == "QUARANTINED" and row["quarantine_reason"] == "crashed_during_create"
    assert fake.count("create") == 0


def test_42_backfill_yields_to_today(settings: Settings, engine: sa.Engine, fake: FakeProvider) -> None:
    s = replace(settings, reconcile=replace(settings.reconcile, max_in_flight=1, concurrency=1))
    s = only(s)
    schedule(s, engine, DAY - dt.timedelta(days=3), DAY - dt.timedelta(days=2), backfill=True)
    schedule(s, engine, DAY)
    tick(s, engine, fake)
    dispatched = [r for r in job_rows(engine) if r["generation_attempts"] == 1]
    assert [r["edition_date"] for r in dispatched] == [DAY]
    assert [req.edition_date for req in fake.creates] == [DAY]


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


def test_27_database_error_during_save_rolls_back_everything(s1: Settings, engine: sa.Engine,
                                                            fake: FakeProvider) -> None:
    schedule(s1, engine)
    tick(s1, engine, fake)
    fake.finish()
    fired = _fail_once(engine, "INSERT INTO outbox")
    report = tick(s1, engine, fake)
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
    tick(s1, engine, fake)
    assert one(engine)["state"] == "SAVED_NOT_PUBLIC"
    assert row_count(engine, tables.editions) == 2 and row_count(engine, tables.outbox) == 2


def test_38_failure_while_storing_the_payload_rolls_back(s1: Settings, engine: sa.Engine,
                                                        fake: FakeProvider) -> None:
    schedule(s1, engine)
    tick(s1, engine, fake)
    fake.finish()
    fired = _fail_once(engine, "UPDATE jobs", "payload_sha256")
    tick(s1, engine, fake)
    row = one(engine)
    assert fired and row["state"] == "COMPLETED_NOT_RETRIEVED" and row["payload"] is None
    tick(s1, engine, fake)
    row = one(engine)
    assert row["state"] == "SAVED_NOT_PUBLIC" and row["payload"]
    assert fake.count("create") == fake.accepted == 1


def test_edition_conflict_is_reported_not_half_written(s1: Settings, engine: sa.Engine, fake: FakeProvider) -> None:
    schedule(s1, engine)
    with engine.begin() as conn:
        conn.execute(tables.editions.insert().values(
            job_id="someone-else", product="daily-brief", edition_date=DAY, lang="es", title="x", content="{}",
            sha256="0" * 64, created_at=dt.datetime(2026, 1, 1)))
    for _ in range(4):
        tick(s1, engine, fake)
        fake.finish()
    # The Spanish save rolled back whole and parked its track; English saved on its own.
    with engine.connect() as conn:
        found = {t.lang: (t.state, t.quarantine_reason) for t in conn.execute(sa.select(tables.tracks)).all()}
    assert found == {"en": ("SAVED_NOT_PUBLIC", None), "es": ("QUARANTINED", "edition_conflict")}
    assert one(engine)["state"] == "READY_TO_COMPOSE"
    assert row_count(engine, tables.editions) == 2 and row_count(engine, tables.outbox) == 1


def _published(s: Settings, engine: sa.Engine, fake: FakeProvider) -> dict[str, Any]:
    schedule(s, engine)
    ticks_until(s, engine, fake, {"SAVED_NOT_PUBLIC"})
    relay.run(s, engine)
    assert one(engine)["state"] == "PUBLISHED"
    return one(engine)


def test_40_delete_of_an_already_deleted_response_resolves(s1: Settings, engine: sa.Engine,
                                                          fake: FakeProvider) -> None:
    row = _published(s1, engine, fake)
    fake.script_delete(Missing(f"HTTP 404: Response with id '{row['response_id']}' not found."))
    tick(s1, engine, fake)
    assert one(engine)["state"] == "DELETED"
    assert [(c.response_id, c.has_custody) for c in fake.calls_of("delete")] == [(row["response_id"], True)]


def test_missing_api_key_takes_no_lease(s1: Settings, engine: sa.Engine, fake: FakeProvider) -> None:
    schedule(s1, engine)
    before = one(engine)
    with pytest.raises(MissingApiKey):
        tick(replace(s1, api_key=None), engine, fake)
    assert one(engine) == before and fake.calls == []


def test_job_dataclass_round_trips(engine: sa.Engine, s1: Settings) -> None:
    schedule(s1, engine)
    job = Store(engine, "x").get(one(engine)["id"])
    assert isinstance(job, Job) and job.public()["edition_date"] == DAY.isoformat()


@pytest.mark.parametrize("code", [1213, 1205])
def test_a_claim_rolled_back_by_deadlock_or_lock_wait_is_retried_job_by_job(
    settings: Settings, engine: sa.Engine, fake: FakeProvider, code: int
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
        report = tick(settings, engine, fake)
    finally:
        event.remove(engine, "before_cursor_execute", before)
    # The rolled-back chunk claim wrote nothing; claimed again one by one, both jobs went ahead.
    # (plus one more lease for a create that waited for the health probe)
    assert fired == [code] and report.contention == 1 and report.errors == 0
    assert report.leased - report.held_back == 2
    assert sorted(r["state"] for r in job_rows(engine)) == ["ACCEPTED", "ACCEPTED"]
    assert all(r["lease_owner"] is None for r in job_rows(engine))
    # One paid create per slot, none lost or doubled.
    assert fake.count("create") == fake.accepted == 2
    assert sorted(req.job_id for req in fake.creates) == sorted(r["id"] for r in job_rows(engine))
    tick(settings, engine, fake)
    assert {r["state"] for r in job_rows(engine)} <= {"ACCEPTED", "QUEUED", "IN_PROGRESS", "SAVED_NOT_PUBLIC"}


def test_a_cooled_down_sweep_leaves_provider_work_for_the_next_tick_without_re_querying(
    settings: Settings, engine: sa.Engine, fake: FakeProvider
) -> None:
    schedule(settings, engine, DAY, DAY - dt.timedelta(days=1), DAY - dt.timedelta(days=2))
    tick(settings, engine, fake)
    assert {r["state"] for r in job_rows(engine)} <= {"ACCEPTED", "QUEUED", "IN_PROGRESS"}
    clock.advance_clock(engine, 3600)  # every poll is due
    fake.script_retrieve(Transient(2.0, RATE_LIMITED))
    one_at_a_time = replace(settings, reconcile=replace(settings.reconcile, concurrency=1, batch_size=1))
    candidate_queries: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("SELECT jobs.id, jobs.version, jobs.state"):
            candidate_queries.append(statement)

    retrieves = fake.count("retrieve")
    event.listen(engine, "before_cursor_execute", before)
    try:
        report = tick(one_at_a_time, engine, fake)
    finally:
        event.remove(engine, "before_cursor_execute", before)
    # One 429 cools the provider down for the tick; the jobs still due are left for the next
    # tick instead of being asked for again until the deadline (30 s).
    assert fake.count("retrieve") == retrieves + 1
    assert not report.stopped_at_deadline and report.seconds < 10
    assert len(candidate_queries) <= len(job_rows(engine)) + 1
    with engine.connect() as conn:  # the cool-down is shared with every other process
        cooled_until, now = gate_rows.read_cool_down(conn), clock.read_now(conn)
    assert cooled_until is not None and cooled_until > now
    left = job_rows(engine)  # left as they were: unleased, still polling, still due
    assert all(r["lease_owner"] is None and r["state"] in {"ACCEPTED", "QUEUED", "IN_PROGRESS"} for r in left)
    # Once the cool-down has passed, the next tick polls every one of them.
    clock.advance_clock(engine, breaker.READ_COOLDOWN_CAP_SECONDS + 1)
    tick(one_at_a_time, engine, fake)
    assert fake.count("retrieve") == retrieves + 1 + len(left)
    assert all(r["version"] > before_row["version"]
               for r, before_row in zip(job_rows(engine), left, strict=True))


# -- the money and custody rules, call by call --------------------------------------------------------


def _spend_states(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(tables.spend.c.state).order_by(tables.spend.c.id)).scalars())


def test_an_ambiguous_create_is_quarantined_and_never_sent_again(s1: Settings, engine: sa.Engine,
                                                                 fake: FakeProvider) -> None:
    """The create may have been processed (and charged): no second create, whatever time passes;
    the spend row says the outcome is unknown, and the attempt stays charged."""
    schedule(s1, engine)
    fake.script_create(Ambiguous("transport failure after the request may have been sent: ReadTimeout: timed out"))
    tick(s1, engine, fake)
    row = one(engine)
    assert row["state"] == "QUARANTINED" and row["quarantine_reason"] == "create_outcome_unknown"
    assert row["generation_attempts"] == 1 and row["response_id"] is None
    for _ in range(3):
        clock.advance_clock(engine, 3600)
        tick(s1, engine, fake)
    assert fake.count("create") == 1 and fake.accepted == 0
    assert [c.op for c in fake.calls] == ["create"]  # nothing else was asked about it either
    assert one(engine)["state"] == "QUARANTINED" and _spend_states(engine) == ["unknown"]


def test_a_rejected_create_is_never_sent_again(s1: Settings, engine: sa.Engine, fake: FakeProvider) -> None:
    schedule(s1, engine)
    fake.script_create(Rejected(400, "HTTP 400: Invalid 'input': too long. (request req_1)"))
    tick(s1, engine, fake)
    for _ in range(3):
        clock.advance_clock(engine, 3600)
        tick(s1, engine, fake)
    assert fake.count("create") == 1
    assert one(engine)["quarantine_reason"] == "create_rejected" and _spend_states(engine) == ["rejected"]


def test_the_dispatch_and_its_spend_row_are_committed_before_the_create_reaches_the_provider(
    s1: Settings, engine: sa.Engine
) -> None:
    """What the provider sees arrive is already on the books: the job in CREATE_IN_FLIGHT with
    the attempt charged, and the attempt's spend row, read from another connection at the call."""
    schedule(s1, engine)
    seen: list[tuple[str, int, list[str], int]] = []

    def at_the_provider(call: Call) -> None:
        if call.op == "create":
            row = one(engine)
            assert call.request is not None
            seen.append((row["state"], row["generation_attempts"], _spend_states(engine), call.request.attempt))

    fake = FakeProvider(on_call=at_the_provider)
    tick(s1, engine, fake)
    assert seen == [("CREATE_IN_FLIGHT", 1, ["in_flight"], 1)]
    assert one(engine)["state"] == "ACCEPTED" and _spend_states(engine) == ["accepted"]


def test_a_refused_create_is_refunded_and_its_retry_is_the_same_attempt(s1: Settings, engine: sa.Engine,
                                                                        fake: FakeProvider) -> None:
    """Refused means provably not processed: the retry is sent as the same attempt (the metadata
    the provider keeps says attempt 1 both times), and only the accepted one is charged."""
    schedule(s1, engine)
    fake.script_create(Refused(None, "connection not established: ConnectError: refused", kind=RefusalKind.UNSENT,
                               unreachable=True))
    tick(s1, engine, fake)
    clock.advance_clock(engine, 600)
    tick(s1, engine, fake)
    row = one(engine)
    assert row["state"] == "ACCEPTED" and row["generation_attempts"] == 1
    assert [req.attempt for req in fake.creates] == [1, 1] and fake.accepted == 1
    assert _spend_states(engine) == ["refused", "accepted"]


def test_custody_precedes_the_delete(s1: Settings, engine: sa.Engine) -> None:
    """The provider's copy is deleted once, after the payload and every language's part are stored
    (read from another connection as the delete arrives), and never before."""
    at_delete: list[tuple[str, bool, list[bool]]] = []

    def at_the_provider(call: Call) -> None:
        if call.op == "delete":
            row = one(engine)
            with engine.connect() as conn:
                parts = [p is not None for p in conn.execute(sa.select(tables.tracks.c.payload)).scalars()]
            at_delete.append((row["state"], row["payload_sha256"] is not None, parts))

    fake = FakeProvider(on_call=at_the_provider)
    row = _published(s1, engine, fake)
    assert fake.count("delete") == 0  # nothing deleted on the way to publication
    for _ in range(3):
        tick(s1, engine, fake)
    assert one(engine)["state"] == "DELETED"
    assert at_delete == [("CLEANUP_PENDING", True, [True, True])]
    (delete,) = fake.calls_of("delete")
    assert (delete.response_id, delete.has_custody, delete.kill_requested) == (row["response_id"], True, False)
    assert fake.held_ids == []  # the provider's copy is gone, and only after custody
    ops = [c.op for c in fake.calls]
    assert ops.index("delete") > max(i for i, op in enumerate(ops) if op == "retrieve")


def test_a_failed_delete_is_retried_with_custody_and_never_touches_publication(
    s1: Settings, engine: sa.Engine, fake: FakeProvider, tmp_path: Path
) -> None:
    row = _published(s1, engine, fake)
    files = sorted(p for p in (tmp_path / "public").rglob("*") if p.is_file())
    before = {p: p.read_bytes() for p in files}
    down = Transient(None, "transport failure: ConnectError: refused", unreachable=True)
    fake.script_delete(down, down, down)
    for _ in range(3):
        tick(s1, engine, fake)
        clock.advance_clock(engine, 3600)
    after = one(engine)
    assert after["state"] == "CLEANUP_PENDING" and after["retry_count"] == 3
    assert {p: p.read_bytes() for p in files} == before and row_count(engine, tables.editions) == 2
    tick(s1, engine, fake)
    assert one(engine)["state"] == "DELETED"
    deletes = fake.calls_of("delete")
    assert [(c.response_id, c.has_custody) for c in deletes] == [(row["response_id"], True)] * 4
    assert isinstance(deletes[-1].outcome, Deleted) and fake.held_ids == []
