"""Operator actions against a real database and the simulator over real HTTP. Jobs reach the
state under test by real ticks and simulator faults; assertions are on rows, the journal
and the simulator's counts."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.core.errors import JobTaken, OperatorRefused, UsageError
from iipub.machine import scheduling, sweep
from iipub.model.jobs import Job
from iipub.model.states import Reason, State
from iipub.operate import parked
from iipub.operate.executor import Operator, ReleaseMode
from iipub.provider.openai.simulator import Simulator
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import clock, tables
from iipub.store.job_store import Store
from tests.support.rows import job_events, job_rows, row_count
from tests.support.simulator import MINUTE
from tests.support.ticks import tick

PRODUCT = "daily-brief"
pytestmark = pytest.mark.simulator(**MINUTE)


@pytest.fixture
def cfg(settings: Settings) -> Settings:
    """One product whose slot opens at midnight (today's slot is due whatever the hour), and
    a provider timeout generous enough that a loaded test machine is not an ambiguous create."""
    p = replace(settings.products[PRODUCT], opens_at=dt.time(0, 0))
    return replace(settings, products={PRODUCT: p}, provider=replace(settings.provider, timeout_seconds=10),
                   reconcile=replace(settings.reconcile, lease_seconds=30))


@pytest.fixture
def op(cfg: Settings, engine: sa.Engine) -> Iterator[Operator]:
    with Operator(cfg, engine) as o:
        yield o


# -- helpers ----------------------------------------------------------------------


def row(engine: sa.Engine, job_id: str) -> dict[str, Any]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.select(tables.jobs).where(tables.jobs.c.id == job_id)).mappings().one())


def today(engine: sa.Engine) -> dt.date:
    with engine.connect() as conn:
        return clock.read_now(conn).date()


def only_job(cfg: Settings, engine: sa.Engine) -> str:
    rows = job_rows(engine)
    assert len(rows) == 1, rows
    return str(rows[0]["id"])


def accepted(cfg: Settings, engine: sa.Engine) -> str:
    """Today's job, created and accepted by one tick (the response is queued or in progress)."""
    tick(cfg, engine)
    job_id = only_job(cfg, engine)
    assert row(engine, job_id)["state"] == State.ACCEPTED
    return job_id


def accepted_response(cfg: Settings, engine: sa.Engine) -> tuple[str, str]:
    """`accepted`'s job and the id of its response at the provider."""
    job_id = accepted(cfg, engine)
    return job_id, row(engine, job_id)["response_id"]


def create_unknown(cfg: Settings, engine: sa.Engine, sim: Simulator) -> str:
    """Today's job quarantined as create_outcome_unknown: the provider accepted (and
    billed) the create, but the connection dropped before the answer."""
    sim.add_faults([{"op": "create", "fault": "drop_after_accept"}])
    tick(cfg, engine)
    job_id = only_job(cfg, engine)
    r = row(engine, job_id)
    assert (r["state"], r["quarantine_reason"]) == (State.QUARANTINED, "create_outcome_unknown")
    assert sim.stats()["creates_by_job"] == {job_id: 1}
    return job_id


def unticked_slot(cfg: Settings, engine: sa.Engine) -> str:
    """A second slot, still NO_JOB (yesterday's, never ticked)."""
    store = Store(engine, "test-scheduler")
    day = today(engine) - dt.timedelta(days=1)
    store.schedule(cfg.products[PRODUCT], day)
    return store.list_jobs(day=day)[0].id


def responses_of(sim: Simulator, job_id: str) -> list[str]:
    # What an operator reads off the provider's dashboard (the simulator has no list endpoint).
    return [r.id for r in sim.backend._responses.values() if r.job_id == job_id]


def finish(cfg: Settings, engine: sa.Engine, sim: Simulator, job_id: str, until: State, limit: int = 6) -> None:
    sim.advance(120)
    for _ in range(limit):
        if row(engine, job_id)["state"] == until:
            return
        tick(cfg, engine)
    assert row(engine, job_id)["state"] == until


def last_event(engine: sa.Engine, job_id: str) -> dict[str, Any]:
    e = job_events(engine, job_id)[-1]
    return {**e, "detail": json.loads(e["detail"]) if e["detail"] else {}}


# -- quarantine list and release ----------------------------------------------------------


def test_quarantine_list_shows_reason_age_and_budgets(cfg: Settings, engine: sa.Engine, sim: Simulator,
                                                      op: Operator) -> None:
    job_id = create_unknown(cfg, engine, sim)
    clock.advance_clock(engine, 120)
    (q,) = op.quarantine_list()
    assert q.job.id == job_id and q.job.quarantine_reason == "create_outcome_unknown"
    assert 120 <= q.age_seconds < 180
    doc = q.public()
    assert doc["generation_attempts"] == 1 and doc["poll_count"] == 0 and doc["response_id"] is None
    assert doc["last_error"] and doc["age_seconds"] == pytest.approx(q.age_seconds, abs=0.01)


def test_release_verified_lost_allows_one_new_paid_create(cfg: Settings, engine: sa.Engine, sim: Simulator,
                                                          op: Operator) -> None:
    job_id = create_unknown(cfg, engine, sim)
    job = op.release(job_id, ReleaseMode.VERIFIED_LOST, "no response on the dashboard", "alice")
    assert job.state == State.CREATE_ELIGIBLE
    r = row(engine, job_id)
    assert r["state"] == State.CREATE_ELIGIBLE and r["response_id"] is None
    assert r["poll_count"] == 0 and r["quarantine_reason"] is None and r["lease_owner"] is None
    e = last_event(engine, job_id)
    assert (e["from_state"], e["to_state"], e["reason"], e["worker"]) == (
        "QUARANTINED", "CREATE_ELIGIBLE", "operator_release_verified_lost", "operator:alice")
    assert e["detail"]["by"] == "alice" and e["detail"]["why"] == "no response on the dashboard"
    assert e["detail"]["quarantine_reason"] == "create_outcome_unknown"
    clock.advance_clock(engine, cfg.provider.breaker_cooldown_seconds + 1)  # the unknown outcome opened the breaker
    tick(cfg, engine)
    assert row(engine, job_id)["state"] == State.ACCEPTED
    assert sim.stats()["creates_by_job"] == {job_id: 2}
    assert row(engine, job_id)["generation_attempts"] == 2


def test_release_verified_lost_past_the_budget_is_refused(cfg: Settings, engine: sa.Engine,
                                                          sim: Simulator) -> None:
    cfg = replace(cfg, budgets=replace(cfg.budgets, max_generation_attempts=1))
    job_id = create_unknown(cfg, engine, sim)
    before, journal = row(engine, job_id), job_events(engine, job_id)
    with Operator(cfg, engine) as op, pytest.raises(OperatorRefused, match=r"all 1 paid creates are used \(1/1\)"):
        op.release(job_id, ReleaseMode.VERIFIED_LOST, "lost", "alice")
    assert row(engine, job_id) == before and job_events(engine, job_id) == journal
    assert sim.stats()["creates_total"] == 1


@pytest.mark.parametrize("finished", [False, True], ids=["in_progress", "completed"])
def test_release_link_adopts_the_dropped_response(cfg: Settings, engine: sa.Engine, sim: Simulator,
                                                  op: Operator, finished: bool) -> None:
    job_id = create_unknown(cfg, engine, sim)
    (response_id,) = responses_of(sim, job_id)
    sim.advance(120 if finished else 1)
    job = op.release(job_id, ReleaseMode.LINK, "found it on the dashboard", "bob", link_response_id=response_id)
    r = row(engine, job_id)
    assert r["response_id"] == response_id and r["poll_count"] == 0 and r["quarantine_reason"] is None
    assert r["lease_owner"] is None
    reasons = [e["reason"] for e in job_events(engine, job_id)]
    if finished:
        # Custody in the same command: the payload and its cost are on the row.
        assert job.state == r["state"] == State.RETRIEVED_NOT_VALIDATED
        assert r["payload"] and r["payload_sha256"] and r["total_tokens"] > 0
        assert reasons[-2:] == ["operator_link", "operator_harvest"]
        assert [e["to_state"] for e in job_events(engine, job_id)][-2:] == ["COMPLETED_NOT_RETRIEVED",
                                                                       "RETRIEVED_NOT_VALIDATED"]
    else:
        assert job.state == r["state"] == State.IN_PROGRESS
        assert reasons[-1] == "operator_link"
    assert last_event(engine, job_id)["detail"]["by"] == "bob"
    finish(cfg, engine, sim, job_id, State.SAVED_NOT_PUBLIC)
    stats = sim.stats()
    assert stats["creates_total"] == 1  # adopting never pays twice
    assert row_count(engine, tables.editions) == len(cfg.products[PRODUCT].languages)


def test_release_link_refuses_a_response_of_another_job(cfg: Settings, engine: sa.Engine, sim: Simulator,
                                                        op: Operator) -> None:
    store = Store(engine, "test-scheduler")
    product = cfg.products[PRODUCT]
    day = today(engine)
    store.schedule(product, day)
    store.schedule(product, day - dt.timedelta(days=1))
    lost_id, other_id = (j.id for j in store.list_jobs(day=day) + store.list_jobs(day=day - dt.timedelta(days=1)))
    sim.add_faults([{"op": "create", "fault": "drop_after_accept", "job_id": lost_id}])
    tick(cfg, engine)
    clock.advance_clock(engine, cfg.provider.breaker_cooldown_seconds + 1)  # the lost create opened the breaker
    tick(cfg, engine)
    assert row(engine, lost_id)["state"] == State.QUARANTINED
    other_response = row(engine, other_id)["response_id"]
    assert other_response
    before, journal = row(engine, lost_id), job_events(engine, lost_id)

    with pytest.raises(OperatorRefused, match=f"names job {other_id}, not job {lost_id}"):
        op.release(lost_id, ReleaseMode.LINK, "looks like ours", "carol", link_response_id=other_response)
    with pytest.raises(OperatorRefused, match="not found at the provider"):
        op.release(lost_id, ReleaseMode.LINK, "typo", "carol", link_response_id="resp_doesnotexist")
    with pytest.raises(OperatorRefused, match="not a well-formed response id"):
        op.release(lost_id, ReleaseMode.LINK, "typo", "carol", link_response_id="resp/../x")
    assert row(engine, lost_id) == before and job_events(engine, lost_id) == journal
    assert row(engine, other_id)["state"] in (State.ACCEPTED, State.QUEUED, State.IN_PROGRESS)


def test_release_refusals_leave_the_job_alone(cfg: Settings, engine: sa.Engine, sim: Simulator,
                                              op: Operator) -> None:
    job_id = create_unknown(cfg, engine, sim)
    before = row(engine, job_id)
    with pytest.raises(OperatorRefused, match="no response id to poll"):
        op.release(job_id, ReleaseMode.RESUME_POLLING, "try", "dave")
    with pytest.raises(UsageError):
        op.release(job_id, ReleaseMode.VERIFIED_LOST, "x", "dave", link_response_id="resp_abc")
    assert row(engine, job_id) == before
    op.release(job_id, ReleaseMode.VERIFIED_LOST, "lost", "dave")
    with pytest.raises(OperatorRefused, match="is CREATE_ELIGIBLE, not QUARANTINED"):
        op.release(job_id, ReleaseMode.VERIFIED_LOST, "again", "dave")


def test_32_manual_release_resets_poll_count(cfg: Settings, engine: sa.Engine, sim: Simulator) -> None:
    cfg = replace(cfg, budgets=replace(cfg.budgets, max_poll_attempts=2))
    job_id, response_id = accepted_response(cfg, engine)
    sim.add_faults([{"op": "retrieve", "fault": "server_error", "times": 2}])
    for _ in range(3):  # two failed polls, then the budget check
        clock.advance_clock(engine, 30)  # past the poll backoff
        tick(cfg, engine)
    r = row(engine, job_id)
    assert (r["state"], r["quarantine_reason"], r["poll_count"]) == (State.QUARANTINED, "poll_budget_exhausted", 2)
    assert r["response_id"] == response_id and r["generation_attempts"] == 1

    with Operator(cfg, engine) as op:
        job = op.release(job_id, ReleaseMode.RESUME_POLLING, "provider outage over", "erin")
    r = row(engine, job_id)
    assert job.state == r["state"] == State.ACCEPTED
    assert r["poll_count"] == 0 and r["response_id"] == response_id and r["quarantine_reason"] is None
    e = last_event(engine, job_id)
    assert e["reason"] == "operator_resume_polling" and e["detail"]["polls_before"] == 2
    assert (e["detail"]["by"], e["detail"]["why"]) == ("erin", "provider outage over")

    finish(cfg, engine, sim, job_id, State.SAVED_NOT_PUBLIC)
    r = row(engine, job_id)
    assert r["poll_count"] == 1 and r["generation_attempts"] == 1
    assert sim.stats()["creates_total"] == 1


# -- suspend / resume ---------------------------------------------------------------


def test_33_suspended_job_is_never_leased_but_its_output_is_kept(cfg: Settings, engine: sa.Engine, sim: Simulator,
                                                                  op: Operator) -> None:
    job_id, response_id = accepted_response(cfg, engine)
    job = op.suspend(job_id, "incident 42", "frank")
    assert job.state == State.MANUALLY_SUSPENDED and job.suspended_from == "ACCEPTED"
    frozen = row(engine, job_id)
    tick(cfg, engine)  # still running: looked at, nothing written but the custody watch's next read
    watched = row(engine, job_id)
    assert watched.pop("custody_watch_at") is not None and frozen.pop("custody_watch_at") is None
    assert watched == frozen
    sim.advance(120)  # it finishes while suspended
    for _ in range(3):
        clock.advance_clock(engine, 60)
        tick(cfg, engine)
    r = row(engine, job_id)
    # Never leased and no decision taken, but custody is never frozen: the output is stored once.
    assert r["state"] == State.MANUALLY_SUSPENDED and r["lease_owner"] is None and r["payload"]
    assert r["version"] == frozen["version"] + 1 and r["suspended_from"] == "RETRIEVED_NOT_VALIDATED"
    assert [e["reason"] for e in job_events(engine, job_id)][-2:] == ["operator_suspend", "retrieved"]
    assert sim.stats()["creates_total"] == 1 and response_id

    job = op.resume(job_id, "frank", "incident over")
    r = row(engine, job_id)
    assert job.state == r["state"] == State.RETRIEVED_NOT_VALIDATED and r["suspended_from"] is None
    assert [e["reason"] for e in job_events(engine, job_id)][-3:] == ["operator_suspend", "retrieved",
                                                                      "operator_resume"]
    assert last_event(engine, job_id)["detail"] == {"by": "frank", "why": "incident over",
                                                   "resumed_to": "RETRIEVED_NOT_VALIDATED"}
    finish(cfg, engine, sim, job_id, State.SAVED_NOT_PUBLIC)
    assert sim.stats()["creates_total"] == 1


def test_suspend_and_resume_refusals(cfg: Settings, engine: sa.Engine, op: Operator) -> None:
    store = Store(engine, "reconcile:test")
    store.schedule(cfg.products[PRODUCT], today(engine))
    (job,) = store.list_jobs()
    with pytest.raises(OperatorRefused, match="not suspended"):
        op.resume(job.id, "gina")
    leased = store.acquire_lease(job.id, job.version)
    assert leased is not None
    eligible = store.transition(leased, State.CREATE_ELIGIBLE, reason=Reason.WINDOW_OPEN, keep_lease=True)
    in_flight = store.transition(eligible, State.CREATE_IN_FLIGHT, reason=Reason.DISPATCH,
                                 changes={"generation_attempts": 1})  # lease given back: as if it crashed
    with pytest.raises(OperatorRefused, match="CREATE_IN_FLIGHT"):
        op.suspend(in_flight.id, "no", "gina")
    with pytest.raises(OperatorRefused, match="CREATE_IN_FLIGHT"):
        op.kill(in_flight.id, "no", "gina")
    assert row(engine, job.id)["version"] == in_flight.version


def test_operator_never_takes_a_live_workers_lease(cfg: Settings, engine: sa.Engine, op: Operator) -> None:
    worker = Store(engine, "reconcile:busy", lease_seconds=60)
    worker.schedule(cfg.products[PRODUCT], today(engine))
    (job,) = worker.list_jobs()
    assert worker.acquire_lease(job.id, job.version) is not None
    before = row(engine, job.id)
    with pytest.raises(JobTaken, match=r"leased by reconcile:busy .*retry in a minute"):
        op.suspend(job.id, "incident", "hank")
    assert row(engine, job.id) == before
    clock.advance_clock(engine, 61)
    assert op.suspend(job.id, "incident", "hank").state == State.MANUALLY_SUSPENDED


# -- cancel ---------------------------------------------------------------------------


def test_cancel_race_harvests_and_publishes_exactly_once(cfg: Settings, engine: sa.Engine, sim: Simulator,
                                                         op: Operator, tmp_path: Path) -> None:
    job_id = accepted(cfg, engine)
    sim.add_faults([{"op": "cancel", "fault": "cancel_race"}])
    job = op.cancel(job_id, "wrong prompt", "ivan")
    stats = sim.stats()
    assert stats["faults_fired"].get("cancel_race") == 1 and stats["cancels"] == 0
    r = row(engine, job_id)
    assert job.state == r["state"] == State.RETRIEVED_NOT_VALIDATED
    assert r["payload"] and r["total_tokens"] > 0 and r["next_attempt_at"] is not None
    assert [(e["to_state"], e["reason"]) for e in job_events(engine, job_id)][-2:] == [
        ("COMPLETED_NOT_RETRIEVED", "operator_cancel"), ("RETRIEVED_NOT_VALIDATED", "operator_harvest")]

    tick(cfg, engine)
    assert row(engine, job_id)["state"] == State.SAVED_NOT_PUBLIC
    relay.run(cfg, engine)
    relay.run(cfg, engine)
    assert row(engine, job_id)["state"] == State.PUBLISHED
    langs = cfg.products[PRODUCT].languages
    assert row_count(engine, tables.editions) == len(langs)
    assert row_count(engine, tables.outbox) == len(langs)
    day = row(engine, job_id)["edition_date"].isoformat()
    for lang in langs:
        assert (tmp_path / "public" / PRODUCT / day / f"{lang}.html").is_file()
    assert sim.stats()["creates_total"] == 1


def test_cancel_of_a_running_response_quarantines_it(cfg: Settings, engine: sa.Engine, sim: Simulator,
                                                     op: Operator) -> None:
    job_id, response_id = accepted_response(cfg, engine)
    job = op.cancel(job_id, "runaway spend", "judy")
    r = row(engine, job_id)
    assert job.state == r["state"] == State.QUARANTINED
    assert r["quarantine_reason"] == "operator_cancelled" and r["response_id"] == response_id
    assert sim.stats()["cancels"] == 1
    e = last_event(engine, job_id)
    assert (e["reason"], e["worker"], e["detail"]["status"]) == ("operator_cancel", "operator:judy", "cancelled")
    # Parked: no tick re-creates it on its own.
    clock.advance_clock(engine, 60)
    tick(cfg, engine)
    assert row(engine, job_id)["state"] == State.QUARANTINED and sim.stats()["creates_total"] == 1


def test_a_cancelled_response_polled_again_parks_again_and_is_never_created_again_by_itself(
        cfg: Settings, engine: sa.Engine, sim: Simulator, op: Operator) -> None:
    """After `iipub cancel`, the provider's `cancelled` is the operator's doing: `quarantine show`
    does not offer watching it again, and a release that polls it anyway (free) parks it again at
    its first read, never a confirmed loss that pays for a new create by itself."""
    job_id, response_id = accepted_response(cfg, engine)
    op.cancel(job_id, "runaway spend", "judy")
    parked_job = Job.from_row(row(engine, job_id))
    shown = parked.of(parked_job, cfg.budgets.max_generation_attempts, 60)
    assert shown is not None
    commands = [r.command for r in shown.remedies]
    assert not [c for c in commands if "--resume-polling" in c or "import-payload" in c], commands
    assert any("--verified-lost" in c for c in commands) and any(c.startswith("iipub kill") for c in commands)

    op.release(job_id, ReleaseMode.RESUME_POLLING, "look again", "judy")
    for _ in range(4):
        clock.advance_clock(engine, 600)  # past any loss confirmation's spacing
        tick(cfg, engine)
    r = row(engine, job_id)
    assert (r["state"], r["quarantine_reason"], r["response_id"]) == (State.QUARANTINED, "operator_cancelled",
                                                                      response_id)
    assert r["generation_attempts"] == 1 and sim.stats()["creates_total"] == 1
    reasons = [e["reason"] for e in job_events(engine, job_id)]
    assert "loss_confirmed" not in reasons and "recreate_after_loss" not in reasons
    assert "was cancelled by an operator" in r["last_error"]


def test_a_cancel_of_a_response_id_the_provider_cannot_be_asked_about_is_refused_and_gives_its_lease_back(
        cfg: Settings, engine: sa.Engine, sim: Simulator, op: Operator) -> None:
    job_id, _ = accepted_response(cfg, engine)
    with engine.begin() as conn:  # a row written by hand (or by an older version)
        conn.execute(tables.jobs.update().values(response_id="resp_abc/../def ghi"))
    with pytest.raises(OperatorRefused, match="cannot be asked about"):
        op.cancel(job_id, "stop", "judy")
    r = row(engine, job_id)
    assert r["state"] == State.ACCEPTED and r["lease_owner"] is None and sim.stats()["cancels"] == 0
    assert op.kill(job_id, "give it up", "judy").state == State.CLEANUP_PENDING  # not held by the refused cancel


def test_cancel_that_fails_changes_nothing(cfg: Settings, engine: sa.Engine, sim: Simulator,
                                           op: Operator) -> None:
    job_id = accepted(cfg, engine)
    before, journal = row(engine, job_id), job_events(engine, job_id)
    sim.add_faults([{"op": "cancel", "fault": "server_error"}])
    with pytest.raises(OperatorRefused, match=r"cancel of resp_.* failed, nothing changed"):
        op.cancel(job_id, "stop", "kim")
    after = row(engine, job_id)
    assert {k: v for k, v in after.items() if k != "version"} == {k: v for k, v in before.items() if k != "version"}
    assert job_events(engine, job_id) == journal
    with pytest.raises(OperatorRefused, match="only a job waiting on the provider"):
        op.cancel(unticked_slot(cfg, engine), "stop", "kim")


# -- kill -----------------------------------------------------------------------------


def test_kill_deletes_remote_data_and_never_publishes(cfg: Settings, engine: sa.Engine, sim: Simulator,
                                                      op: Operator) -> None:
    job_id, response_id = accepted_response(cfg, engine)
    job = op.kill(job_id, "duplicate edition", "leo")
    r = row(engine, job_id)
    assert job.state == r["state"] == State.CLEANUP_PENDING and r["kill_requested"]
    e = last_event(engine, job_id)
    assert (e["reason"], e["detail"]["by"], e["detail"]["killed_in"]) == ("operator_kill", "leo", "ACCEPTED")
    tick(cfg, engine)
    assert row(engine, job_id)["state"] == State.DELETED
    stats = sim.stats()
    assert stats["deleted_ids"] == [response_id] and stats["deletes"] == 1
    relay.run(cfg, engine)
    assert row_count(engine, tables.editions) == 0 and row_count(engine, tables.outbox) == 0


def test_kill_is_refused_once_the_edition_is_saved(cfg: Settings, engine: sa.Engine, sim: Simulator,
                                                   op: Operator) -> None:
    job_id = accepted(cfg, engine)
    finish(cfg, engine, sim, job_id, State.SAVED_NOT_PUBLIC)
    before = row(engine, job_id)
    with pytest.raises(OperatorRefused, match="the edition is already saved"):
        op.kill(job_id, "too late", "mia")
    assert row(engine, job_id) == before


# -- backfill -------------------------------------------------------------------------


def backfill(cfg: Settings, engine: sa.Engine, product: str, first: dt.date, last: dt.date, *, today: dt.date,
             dry_run: bool = False, progress: scheduling.Progress | None = None) -> scheduling.BackfillReport:
    return scheduling.backfill(Store(engine, "test"), cfg.product(product), first, last, today,
                               dry_run=dry_run, progress=progress)


def test_42_backfill_yields_to_today(cfg: Settings, engine: sa.Engine, sim: Simulator, op: Operator) -> None:
    cfg = replace(cfg, reconcile=replace(cfg.reconcile, max_in_flight=1, concurrency=1))
    day = today(engine)
    report = backfill(cfg, engine, PRODUCT, day - dt.timedelta(days=3), day - dt.timedelta(days=1), today=day)
    assert len(report.created) == 3 and report.present == []
    tick = sweep.run(cfg, engine)  # schedules today's slot, then dispatches
    assert tick.creates == 1 and tick.held_back >= 1
    (first,) = sim.stats()["create_metadata"]
    assert first["iipub_slot"] == f"{PRODUCT}/{day.isoformat()}"
    slots = {r["edition_date"]: r for r in job_rows(engine)}
    assert slots[day]["state"] == State.ACCEPTED and not slots[day]["is_backfill"]
    assert all(r["is_backfill"] and r["priority"] > slots[day]["priority"] for d, r in slots.items() if d != day)


def test_backfill_is_idempotent_and_dry_run_writes_nothing(cfg: Settings, engine: sa.Engine, op: Operator) -> None:
    day = today(engine)
    start = day - dt.timedelta(days=2)
    seen: list[tuple[dt.date, bool]] = []
    dry = backfill(cfg, engine, PRODUCT, start, day, dry_run=True, today=day, progress=lambda d, c: seen.append((d, c)))
    assert dry.created == [start, start + dt.timedelta(days=1), day] and row_count(engine, tables.jobs) == 0
    assert seen == [(d, True) for d in dry.created]
    first = backfill(cfg, engine, PRODUCT, start, day, today=day)
    assert first.created == dry.created and first.present == []
    again = backfill(cfg, engine, PRODUCT, start, day, today=day)
    assert again.created == [] and again.present == dry.created
    assert row_count(engine, tables.jobs) == 3
    flags = {r["edition_date"]: r["is_backfill"] for r in job_rows(engine)}
    assert flags == {start: True, start + dt.timedelta(days=1): True, day: False}


def test_backfill_refusals(cfg: Settings, engine: sa.Engine, op: Operator) -> None:
    day = today(engine)
    with pytest.raises(UsageError, match="is after"):
        backfill(cfg, engine, PRODUCT, day - dt.timedelta(days=1), day - dt.timedelta(days=2), today=day)
    with pytest.raises(UsageError, match="in the future"):
        backfill(cfg, engine, PRODUCT, day, day + dt.timedelta(days=1), today=day)
    with pytest.raises(UsageError, match="at most 366 days"):
        backfill(cfg, engine, PRODUCT, day - dt.timedelta(days=366), day, today=day)
    with pytest.raises(UsageError, match="more than 366 days in the past"):  # a 2016 typed for 2026
        backfill(cfg, engine, PRODUCT, day - dt.timedelta(days=400), day - dt.timedelta(days=390), today=day)
    with pytest.raises(UsageError, match="unknown product 'nope'"):
        backfill(cfg, engine, "nope", day, day, today=day)
    assert row_count(engine, tables.jobs) == 0


def test_resume_polling_is_refused_while_the_config_has_drifted(cfg: Settings, engine: sa.Engine,
                                                                 sim: Simulator) -> None:
    job_id = accepted(cfg, engine)
    sim.add_faults([{"op": "retrieve", "fault": "unknown_status", "job_id": job_id, "times": 1}])
    tick(cfg, engine)  # one poll that leaves the job waiting on its response
    assert row(engine, job_id)["poll_count"] == 1
    p = cfg.products[PRODUCT]
    # Quarantined while its response runs (here: the poll budget ran out) under a drifted config.
    drifted = replace(cfg, products={PRODUCT: replace(p, prompt=p.prompt + " Drifted.")},
                      budgets=replace(cfg.budgets, max_poll_attempts=row(engine, job_id)["poll_count"]))
    tick(drifted, engine)
    assert row(engine, job_id)["quarantine_reason"] == "poll_budget_exhausted"
    before = row(engine, job_id)
    with Operator(drifted, engine) as op, pytest.raises(OperatorRefused, match="differs from the one"):
        op.release(job_id, ReleaseMode.RESUME_POLLING, "deployed", "nina")
    assert row(engine, job_id) == before
    with Operator(cfg, engine) as op:  # the old config is back
        assert op.release(job_id, ReleaseMode.RESUME_POLLING, "rolled back", "nina").state == State.ACCEPTED
    finish(cfg, engine, sim, job_id, State.SAVED_NOT_PUBLIC)
