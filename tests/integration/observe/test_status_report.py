"""`iipub.observe.status_report` against a real journal: jobs driven by `reconcile.run` and `relay.run`
through the simulator over HTTP, figures checked against the rows themselves."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.core.severity import Severity
from iipub.core.timefmt import duration
from iipub.machine import sweep
from iipub.model.states import POLL_REASONS, State
from iipub.observe import queries
from iipub.observe import status_report as st
from iipub.provider.openai.simulator import Simulator
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import clock, tables
from iipub.store.job_store import Store
from iipub.store.outbox import Outbox
from tests.support.rows import job_rows
from tests.support.settings import open_at_midnight

# The tests schedule their own slots; a tick across midnight must not add more.
pytestmark = pytest.mark.no_auto_schedule


@pytest.fixture
def s(settings: Settings) -> Settings:
    return open_at_midnight(settings)


def today(engine: sa.Engine) -> dt.date:
    with engine.connect() as conn:
        return clock.read_now(conn).date()


def schedule(s: Settings, engine: sa.Engine, day: dt.date | None = None) -> None:
    store = Store(engine, "test-scheduler")
    for p in s.products.values():
        assert store.schedule(p, day or today(engine))


def journal(engine: sa.Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(tables.job_events).order_by(tables.job_events.c.id)).mappings()]


def drive(s: Settings, engine: sa.Engine, sim: Simulator, until: set[str], limit: int = 15,
          deliver: bool = True) -> None:
    for _ in range(limit):
        if {j["state"] for j in job_rows(engine)} <= until:
            return
        sweep.run(s, engine)
        if deliver:
            relay.run(s, engine)
        sim.advance(5)
    raise AssertionError([(j["product"], j["state"], j["last_error"]) for j in job_rows(engine)])


def collect(s: Settings, engine: sa.Engine) -> st.Status:
    return queries.collect(engine, s)


# -- healthy ---------------------------------------------------------------------------------


def test_counts_and_slis_match_the_journal_and_healthy_is_ok(s: Settings, engine: sa.Engine, sim: Simulator) -> None:
    schedule(s, engine)
    drive(s, engine, sim, {State.DELETED.value})
    rows = job_rows(engine)
    events = journal(engine)
    report = collect(s, engine)

    assert report.counts == {"daily-brief": {"DELETED": 1}, "revolution-watch": {"DELETED": 1}}
    assert report.by_state == {"DELETED": 2} and report.jobs_total == 2

    # Time to dispatch: slot open (created after opens_at, so its creation) -> first CREATE_IN_FLIGHT.
    expected_dispatch = sorted(
        (min(e["at"] for e in events if e["job_id"] == j["id"] and e["to_state"] == "CREATE_IN_FLIGHT")
         - max(j["opens_at"], j["created_at"])).total_seconds()
        for j in rows
    )
    assert report.dispatch.count == 2 and report.dispatch.open == 0
    assert sorted(report.dispatch.durations) == pytest.approx(expected_dispatch, abs=1e-3)
    assert report.dispatch.percentile(99) == pytest.approx(expected_dispatch[-1], abs=1e-3)
    assert report.dispatch.share == 1.0 and not report.dispatch.breached

    # Dwell: one COMPLETED_NOT_RETRIEVED -> RETRIEVED_NOT_VALIDATED pair per job.
    pairs = [e for e in events if (e["from_state"], e["to_state"]) == ("COMPLETED_NOT_RETRIEVED",
                                                                       "RETRIEVED_NOT_VALIDATED")]
    assert len(pairs) == 2 and report.dwell.count == 2 and report.dwell.failed == 0
    assert report.dwell.share == 1.0

    # Overdue polls: one sample per journaled provider observation, from its `due_at`.
    polls = [e for e in events if e["reason"] in POLL_REASONS]
    assert polls and all("due_at" in json.loads(e["detail"]) for e in polls)
    assert report.overdue_polls.count == len(polls) == sum(j["poll_count"] for j in rows)
    lateness = sorted(
        (e["at"] - dt.datetime.fromisoformat(json.loads(e["detail"])["due_at"])).total_seconds() for e in polls
    )
    assert sorted(report.overdue_polls.durations) == pytest.approx([max(0.0, x) for x in lateness], abs=1e-3)

    assert report.duplicate_publications == 0
    assert report.stranded == () and report.quarantined == ()
    assert report.outbox_unpublished == 0 and report.outbox_lag_seconds == 0 and report.outbox_problems == ()
    assert report.expired_now == 0 and report.expired_in_window == 0

    spend = {(x.product, x.edition_date): x for x in report.spend}
    for j in rows:
        row = spend[(j["product"], j["edition_date"])]
        assert j["total_tokens"] > 0
        assert (row.input_tokens, row.output_tokens, row.total_tokens) == (
            j["input_tokens"], j["output_tokens"], j["total_tokens"])

    code, line = report.check()
    assert code == Severity.OK, line
    assert line.startswith("IIPUB OK - 2 jobs, 0 quarantined, outbox lag 0s | jobs=2 quarantined=0")
    doc = report.to_dict()
    assert doc["check"] == {"code": 0, "status": "OK", "line": line, "problems": []}
    assert doc["slis"]["time_to_dispatch"]["count"] == 2 and doc["jobs"]["by_state"] == {"DELETED": 2}


# -- warnings ------------------------------------------------------------------------------


def test_one_quarantined_job_is_a_warning(s: Settings, engine: sa.Engine, sim: Simulator) -> None:
    schedule(s, engine)
    sim.add_faults([{"op": "create", "fault": "drop_after_accept"}])  # fires once
    sweep.run(s, engine)
    quarantined = [j for j in job_rows(engine) if j["state"] == "QUARANTINED"]
    assert len(quarantined) == 1 and quarantined[0]["quarantine_reason"] == "create_outcome_unknown"

    report = collect(s, engine)
    assert [q.id for q in report.quarantined] == [quarantined[0]["id"]]
    assert report.quarantine_reasons == {"create_outcome_unknown": 1}
    assert report.stranded == ()
    code, line = report.check()
    assert code == Severity.WARNING, line
    # the unknown outcome also opened the create breaker (WARNING while young)
    assert line.startswith("IIPUB WARNING - ") and "1 quarantined (create_outcome_unknown)" in line
    assert "create breaker open (create_outcome_unknown)" in line
    assert " quarantined=1;0 " in line
    doc = report.to_dict()["quarantine"]
    assert doc["count"] == 1 and doc["oldest"]["id"] == quarantined[0]["id"]
    assert doc["oldest"]["reason"] == "create_outcome_unknown" and doc["oldest"]["state"] == "QUARANTINED"


def test_late_polls_breach_the_overdue_poll_slo(s: Settings, engine: sa.Engine) -> None:
    schedule(s, engine)
    sweep.run(s, engine)
    assert {j["state"] for j in job_rows(engine)} == {"ACCEPTED"}
    clock.advance_clock(engine, 200)  # cron missed a few minutes: the polls run 200 s late
    open_report = collect(s, engine)
    assert open_report.overdue_polls.open == 2 and open_report.overdue_polls.breached
    sweep.run(s, engine)
    report = collect(s, engine)
    sli = report.overdue_polls
    assert sli.count == 2 and sli.open == 0 and sli.within == 0 and sli.breached
    assert min(sli.durations) >= 200
    code, line = report.check()
    assert code == Severity.WARNING and "SLO breach: overdue_polls 0/2 within 90s" in line, line


def test_outbox_lag_and_parked_deliveries(s: Settings, engine: sa.Engine, sim: Simulator) -> None:
    schedule(s, engine)
    drive(s, engine, sim, {State.SAVED_NOT_PUBLIC.value}, deliver=False)
    report = collect(s, engine)
    assert report.outbox_unpublished == 4 and report.check()[0] == Severity.OK

    clock.advance_clock(engine, 700)
    report = collect(s, engine)
    assert report.outbox_lag_seconds >= 700 and report.stranded == ()
    code, line = report.check()
    assert code == Severity.WARNING and "outbox lag" in line and "> 600s" in line, line

    clock.advance_clock(engine, 3000)
    code, line = collect(s, engine).check()
    assert code == Severity.CRITICAL and "> 3600s" in line, line

    relay.run(s, engine)
    report = collect(s, engine)
    assert report.outbox_unpublished == 0 and report.outbox_lag_seconds == 0
    with engine.connect() as conn:
        event_id = conn.execute(sa.select(tables.outbox.c.event_id).limit(1)).scalar_one()
    Outbox(engine, "test", 10).record(event_id, "webhook", parked=True, error="HTTP 410")
    report = collect(s, engine)
    assert report.outbox_parked == 1
    code, line = report.check()
    assert code == Severity.WARNING and "1 parked sink delivery " in line, line
    assert "deliveries" not in line.split("|")[0], line


# -- critical --------------------------------------------------------------------------------


def test_a_job_stuck_for_three_hours_is_critical(s: Settings, engine: sa.Engine) -> None:
    schedule(s, engine)
    later = today(engine) + dt.timedelta(days=2)
    schedule(s, engine, later)  # NO_JOB slots that have not opened: never stranded
    sweep.run(s, engine)
    states = {(j["edition_date"], j["state"]) for j in job_rows(engine)}
    assert states == {(today(engine), "ACCEPTED"), (later, "NO_JOB")}
    assert collect(s, engine).check()[0] == Severity.OK

    clock.advance_clock(engine, 3 * 3600)
    report = collect(s, engine)
    accepted = {j["id"] for j in job_rows(engine) if j["state"] == "ACCEPTED"}
    assert {r.id for r in report.stranded} == accepted
    assert all(r.state == "ACCEPTED" and r.age_seconds >= 3 * 3600 for r in report.stranded)
    code, line = report.check()
    assert code == Severity.CRITICAL, line
    assert line.startswith("IIPUB CRITICAL - 2 stranded > 2h00m (oldest ")
    assert " stranded=2;;0 " in line


def test_a_slot_never_dispatched_counts_against_dispatch_and_strands(s: Settings, engine: sa.Engine) -> None:
    schedule(s, engine)  # no tick ever runs: cron is broken
    clock.advance_clock(engine, 300)
    report = collect(s, engine)
    assert report.dispatch.open == 2 and report.dispatch.breached and report.stranded == ()
    assert report.check()[0] == Severity.WARNING
    clock.advance_clock(engine, 3 * 3600)
    report = collect(s, engine)
    assert {r.state for r in report.stranded} == {"NO_JOB"} and len(report.stranded) == 2
    assert report.check()[0] == Severity.CRITICAL


# -- the arithmetic ----------------------------------------------------------------------------


def test_sli_arithmetic() -> None:
    sli = st.Sli("x", slo_seconds=10, target=0.95, durations=tuple(float(i) for i in range(1, 101)))
    assert sli.percentile(50) == 50 and sli.percentile(99) == 99 and sli.within == 9
    assert sli.breached
    assert st.Sli("x", 10, 0.99).share is None and not st.Sli("x", 10, 0.99).breached
    t0 = dt.datetime(2026, 1, 1, 5, 0)
    cnr, rnv = "COMPLETED_NOT_RETRIEVED", "RETRIEVED_NOT_VALIDATED"
    durations, failed = st.dwell_samples([
        ("a", "IN_PROGRESS", cnr, t0),
        ("a", cnr, cnr, t0 + dt.timedelta(seconds=5)),
        ("a", cnr, rnv, t0 + dt.timedelta(seconds=30)),
        ("b", "QUEUED", cnr, t0),
        ("b", cnr, "PROVIDER_EXPIRED_OR_MISSING", t0 + dt.timedelta(seconds=700)),
        ("c", cnr, rnv, t0),  # entered before the window: no sample
    ])
    assert durations == [30.0] and failed == 1
    assert st.poll_lateness(t0, json.dumps({"due_at": "2026-01-01 04:59:30.500000"})) == 29.5
    assert st.poll_lateness(t0, json.dumps({"due_at": "2026-01-01 04:59:30"})) == 30.0
    assert st.poll_lateness(t0, None) is None and st.poll_lateness(t0, "{}") is None
    assert duration(45) == "45s" and duration(7260) == "2h01m" and duration(725) == "12m05s"


def test_a_healthy_day_spends_no_error_budget(s: Settings, engine: sa.Engine, sim: Simulator) -> None:
    """Every dispatch and custody of a day driven through the simulator is a good sample of its
    SLO's budget (the same journal rows as the SLIs), and nothing burns or freezes."""
    schedule(s, engine)
    drive(s, engine, sim, {State.DELETED.value})
    report = collect(s, engine)
    budgets = {b.name: b for b in report.budgets}
    assert budgets["time_to_dispatch"].events == report.dispatch.count == 2
    assert budgets["unretrieved_dwell"].events == report.dwell.count == 2
    assert budgets["overdue_polls"].events == report.overdue_polls.count
    assert all(b.bad == 0 and b.left == 1.0 and not b.fast_burn and not b.slow_burn for b in budgets.values())
    assert report.freeze() == [] and report.check()[0] == Severity.OK
