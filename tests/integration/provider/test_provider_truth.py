"""What the provider says is evidence, not proof (PRODUCT.md section 8), over real HTTP to the
simulator with the official SDK: every fault below is counted in the simulator's paid creates.

- a suspected loss that flips back costs nothing: one paid create per slot;
- a confirmed provider fault costs exactly one more, a refusal none (quarantined);
- an outage over 20 due slots quarantines only the breaker's probes, and every other slot
  publishes once the provider is back;
- an exhausted quota is CRIT within a few ticks and sends a bounded number of requests.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.core.severity import Severity
from iipub.machine import sweep
from iipub.observe import invariants, queries
from iipub.operate.executor import Operator, ReleaseMode
from iipub.provider.openai.simulator import Simulator, SimulatorOptions
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import clock, tables
from iipub.store.job_store import Store
from tests.support.suite import fast_first

DAY = dt.date(2026, 11, 30)
PRODUCT = "daily-brief"


pytestmark = pytest.mark.no_auto_schedule  # `cfg` (conftest): one product


def schedule(s: Settings, engine: sa.Engine, n: int = 1) -> list[str]:
    store = Store(engine, "test")
    for i in range(n):
        store.schedule(s.products[PRODUCT], DAY - dt.timedelta(days=i))
    with engine.connect() as conn:
        return list(conn.execute(sa.select(tables.jobs.c.id).order_by(tables.jobs.c.edition_date.desc())).scalars())


def rows(engine: sa.Engine) -> dict[str, dict[str, Any]]:
    with engine.connect() as conn:
        return {r["id"]: dict(r) for r in conn.execute(sa.select(tables.jobs)).mappings()}


def reasons(engine: sa.Engine, job_id: str) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(tables.job_events.c.reason).where(tables.job_events.c.job_id == job_id)
                                 .order_by(tables.job_events.c.id)).scalars())


def run(s: Settings, engine: sa.Engine, sim: Simulator, ticks: int, *, db_seconds: float = 0.0) -> None:
    for _ in range(ticks):
        sweep.run(s, engine)
        relay.run(s, engine)
        sim.advance(5)
        if db_seconds:
            clock.advance_clock(engine, db_seconds)


def published(engine: sa.Engine) -> set[str]:
    return {j for j, r in rows(engine).items() if r["state"] in ("PUBLISHED", "CLEANUP_PENDING", "DELETED")}


def no_violation(s: Settings, engine: sa.Engine, sim: Simulator) -> None:
    found = invariants.check(engine, settings=s, sim_stats=sim.stats())
    assert found == [], [str(v) for v in found]


# -- suspected losses that flip back cost nothing ---------------------------------------------------


@pytest.mark.parametrize("rule", fast_first([
    {"op": "create", "fault": "cancelled_then_completed"},
    {"op": "retrieve", "fault": "not_found", "times": 1},
    {"op": "retrieve", "fault": "not_found", "times": 2},
    {"op": "retrieve", "fault": "report_cancelled", "times": 1},
    {"op": "retrieve", "fault": "report_failed", "times": 2},
    {"op": "retrieve", "fault": "unknown_status", "times": 3},
], fast=2), ids=lambda r: f"{r['fault']}x{r.get('times', 'always')}")
@pytest.mark.slow
def test_a_suspected_loss_that_flips_back_is_published_with_one_paid_create(
    cfg: Settings, engine: sa.Engine, sim: Simulator, rule: dict[str, Any]
) -> None:
    (job_id,) = schedule(cfg, engine)
    sim.add_faults([{**rule, "job_id": job_id}])
    run(cfg, engine, sim, 8)
    assert published(engine) == {job_id}
    assert sim.stats()["creates_by_job"] == {job_id: 1}
    trail = reasons(engine, job_id)
    assert "loss_confirmed" not in trail and "recreate_after_loss" not in trail
    if rule["fault"] == "unknown_status":
        assert trail.count("provider_unexpected_status") == 3
        assert queries.collect(engine, cfg).unexpected_statuses == 3
    else:
        assert "loss_suspected" in trail
    assert sim.stats()["faults_fired"].get(rule["fault"], 0) >= 1
    no_violation(cfg, engine, sim)


def test_a_404_that_holds_is_paid_for_exactly_once_more(cfg: Settings, engine: sa.Engine, sim: Simulator) -> None:
    (job_id,) = schedule(cfg, engine)
    run(cfg, engine, sim, 1)
    first = rows(engine)[job_id]["response_id"]
    sim.add_faults([{"op": "retrieve", "fault": "not_found", "times": cfg.provider.loss_confirm_reads}])
    run(cfg, engine, sim, 8)
    assert published(engine) == {job_id}
    assert sim.stats()["creates_by_job"] == {job_id: 2}
    trail = reasons(engine, job_id)
    assert trail.count("loss_suspected") == cfg.provider.loss_confirm_reads - 1
    assert trail.count("loss_confirmed") == 1 and rows(engine)[job_id]["response_id"] != first
    no_violation(cfg, engine, sim)


# -- failed, by cause -----------------------------------------------------------------------------------


def test_a_provider_fault_is_paid_for_once_more(cfg: Settings, engine: sa.Engine, sim: Simulator) -> None:
    (job_id,) = schedule(cfg, engine)
    sim.add_faults([{"op": "create", "fault": "fail", "job_id": job_id}])  # failed: server_error
    run(cfg, engine, sim, 10)
    assert published(engine) == {job_id}
    assert sim.stats()["creates_by_job"] == {job_id: 2}
    no_violation(cfg, engine, sim)


@pytest.mark.parametrize("fault", fast_first(["fail_refused", "fail_policy", "fail_unknown_code"]))
def test_a_refusal_is_quarantined_without_paying_again(cfg: Settings, engine: sa.Engine, sim: Simulator,
                                                       fault: str) -> None:
    (job_id,) = schedule(cfg, engine)
    sim.add_faults([{"op": "create", "fault": fault, "job_id": job_id}])
    run(cfg, engine, sim, 8)
    row = rows(engine)[job_id]
    assert (row["state"], row["quarantine_reason"]) == ("QUARANTINED", "provider_refused")
    assert row["response_id"] and row["last_error"]
    assert sim.stats()["creates_by_job"] == {job_id: 1}
    no_violation(cfg, engine, sim)


# -- an outage quarantines the probes, not the slots ---------------------------------------------------------


@pytest.mark.slow
def test_an_outage_over_20_slots_quarantines_only_the_probes_and_all_publish_after(
    cfg: Settings, engine: sa.Engine, sim: Simulator
) -> None:
    ids = schedule(cfg, engine, 20)
    sim.add_faults([{"op": "create", "fault": "service_unavailable", "times": 1000}])
    run(cfg, engine, sim, 6, db_seconds=cfg.provider.breaker_cooldown_seconds + 1)
    during = rows(engine)
    probes = {j for j, r in during.items() if r["state"] == "QUARANTINED"}
    assert probes and all(during[j]["quarantine_reason"] == "create_outcome_unknown" for j in probes)
    assert sim.stats()["requests"]["create"] == len(probes) <= 4  # 60 s, 120 s, 240 s cool-downs in 6 minutes
    assert all(r["state"] == "CREATE_ELIGIBLE" and r["generation_attempts"] == 0
               for j, r in during.items() if j not in probes)
    gate = queries.collect(engine, cfg)
    code, line = gate.check()
    assert code >= Severity.WARNING and "create breaker open (create_outcome_unknown)" in line
    sim.clear_faults()  # the provider is back
    run(cfg, engine, sim, 6, db_seconds=cfg.provider.breaker_cooldown_cap_seconds)
    assert published(engine) == set(ids) - probes
    stats = sim.stats()
    assert all(stats["creates_by_job"].get(j) == 1 for j in set(ids) - probes)
    # The one remedy for the probes, after checking the dashboard: each gets one more paid create.
    with Operator(cfg, engine) as op:
        dry = op.release_all("create_outcome_unknown", ReleaseMode.VERIFIED_LOST, "outage, nothing in dashboard",
                             "alice", dry_run=True)
        assert {r.job.id for r in dry} == probes and {r.outcome for r in dry} == {"would release"}
        assert all(r["state"] == "QUARANTINED" for j, r in rows(engine).items() if j in probes)
        done = op.release_all("create_outcome_unknown", ReleaseMode.VERIFIED_LOST, "outage, nothing in dashboard",
                              "alice")
        assert {r.outcome for r in done} == {"released"}
    run(cfg, engine, sim, 6)
    assert published(engine) == set(ids)
    no_violation(cfg, engine, sim)


@pytest.mark.slow
def test_the_breaker_is_shared_by_processes_and_a_probe_closes_it(cfg: Settings, engine: sa.Engine,
                                                                  sim: Simulator) -> None:
    ids = schedule(cfg, engine, 3)
    sim.add_faults([{"op": "create", "fault": "service_unavailable", "times": 1}])
    sweep.run(cfg, engine, worker="reconcile:host-a")
    other = sweep.run(cfg, engine, worker="reconcile:host-b")  # another process, same database
    assert other.creates == 0 and sim.stats()["requests"]["create"] == 1
    clock.advance_clock(engine, cfg.provider.breaker_cooldown_seconds + 1)
    run(cfg, engine, sim, 6)
    assert len(published(engine)) == 2 and sim.stats()["creates_total"] == 2
    g = queries.collect(engine, cfg).gate
    assert g is not None and not g.is_open and g.open_count == 0
    assert len(ids) == 3


# -- an exhausted quota ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_exhausted_quota_is_critical_and_sends_a_bounded_number_of_requests(
    cfg: Settings, engine: sa.Engine, sim: Simulator
) -> None:
    ids = schedule(cfg, engine, 5)
    sim.add_faults([{"op": "create", "fault": "quota_exhausted", "times": 1000}])
    run(cfg, engine, sim, 3, db_seconds=60)
    code, line = queries.collect(engine, cfg).check()
    assert code == Severity.CRITICAL and "quota_exhausted" in line
    run(cfg, engine, sim, 10, db_seconds=60)  # 13 minutes of cron
    assert sim.stats()["requests"]["create"] <= 2  # the first refusal, at most one probe in 15 minutes
    everything = rows(engine)
    assert all(r["state"] == "CREATE_ELIGIBLE" and r["generation_attempts"] == 0 for r in everything.values())
    sim.clear_faults()  # billing fixed
    run(cfg, engine, sim, 6, db_seconds=cfg.provider.breaker_cooldown_cap_seconds)
    assert published(engine) == set(ids) and all(n == 1 for n in sim.stats()["creates_by_job"].values())
    no_violation(cfg, engine, sim)


# -- containment and late editions -----------------------------------------------------------------------------


def test_pause_stops_creates_everywhere_but_custody_goes_on(cfg: Settings, engine: sa.Engine,
                                                           sim: Simulator) -> None:
    first, second = schedule(cfg, engine, 2)
    run(cfg, engine, sim, 1)  # both created
    assert {r["state"] for r in rows(engine).values()} <= {"ACCEPTED", "QUEUED", "IN_PROGRESS"}
    with Operator(cfg, engine) as op:
        g = op.pause("alice", "provider incident")
        assert g.paused and g.paused_by == "alice"
        with pytest.raises(Exception, match="already paused"):
            op.pause("bob", "again")
    Store(engine, "test").schedule(cfg.products[PRODUCT], DAY - dt.timedelta(days=5))
    run(cfg, engine, sim, 5)
    assert published(engine) == {first, second}  # custody and publication went on
    assert sim.stats()["creates_total"] == 2  # the new slot waited
    code, line = queries.collect(engine, cfg).check()
    assert code >= Severity.WARNING and "creates paused by alice" in line
    with Operator(cfg, engine) as op:
        assert not op.unpause("alice", "over").paused
    run(cfg, engine, sim, 5)
    assert len(published(engine)) == 3 and sim.stats()["creates_total"] == 3
    with engine.connect() as conn:
        kinds = list(conn.execute(sa.select(tables.gate_events.c.kind).order_by(tables.gate_events.c.id)).scalars())
    assert kinds.count("pause") == 1 and kinds.count("unpause") == 1


def test_a_slot_looping_on_refused_creates_is_a_late_edition(cfg: Settings, engine: sa.Engine,
                                                             sim: Simulator) -> None:
    (job_id,) = schedule(cfg, engine)
    sim.add_faults([{"op": "create", "fault": "rate_limit", "times": 1000}])
    run(cfg, engine, sim, 2)
    late = cfg.status.late_after_minutes * 60
    clock.advance_clock(engine, late + 60)
    run(cfg, engine, sim, 1)
    report = queries.collect(engine, cfg)
    assert [j.id for j in report.late] == [job_id] and not report.stranded
    code, line = report.check()
    assert code == Severity.WARNING and "1 edition late" in line
    clock.advance_clock(engine, cfg.status.stranded_after_seconds)
    report = queries.collect(engine, cfg)
    assert report.check()[0] == Severity.CRITICAL and [j.id for j in report.stranded] == [job_id]
    violations = invariants.check(engine, settings=cfg, stranded_after_seconds=cfg.status.stranded_after_seconds)
    stranded = [v for v in violations if v.kind == "stranded"]
    assert [v.job_id for v in stranded] == [job_id]  # `iipub check` agrees
    assert rows(engine)[job_id]["generation_attempts"] == 0
    doc = report.to_dict()
    assert doc["late"]["count"] == 1 and json.dumps(doc)


def test_a_tick_of_polls_commits_once_per_chunk_not_once_per_job(cfg: Settings, engine: sa.Engine) -> None:
    with Simulator(SimulatorOptions(queued_seconds=60, in_progress_seconds=60)) as slow:
        s = replace(cfg, provider=replace(cfg.provider, kind="openai", base_url=slow.url))
        ids = schedule(s, engine, 16)
        sweep.run(s, engine)  # the creates (a probe first, the rest in later passes)
        assert {r["state"] for r in rows(engine).values()} == {"ACCEPTED"}
        commits: list[int] = []
        sa.event.listen(engine, "commit", lambda conn: commits.append(1))
        sweep.run(s, engine)  # every job polled once: still queued
        assert slow.stats()["requests"]["retrieve"] == 16
    assert all(r["poll_count"] == 1 and r["lease_owner"] is None and r["state"] == "QUEUED"
               for r in rows(engine).values())
    assert all(reasons(engine, job_id)[-1] == "poll" for job_id in ids)
    # Two chunks of 8: a claim and a write each, plus the tick's own bookkeeping; not 16 writes.
    assert len(commits) <= 8, len(commits)
