"""A deploy that changes or removes a product under in-flight jobs, a step that keeps failing,
and operator rules judged on the effective state: custody always comes first, nothing is
published under rules its output was not made for, nothing loops silently."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.core.errors import OperatorRefused
from iipub.core.severity import Severity
from iipub.edition import compose
from iipub.machine import steps, sweep, track_steps
from iipub.model.states import State
from iipub.observe import invariants, queries
from iipub.operate.executor import Operator
from iipub.provider.openai.simulator import Simulator
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import tables
from iipub.store.clock import advance_clock
from iipub.store.job_store import Store
from tests.support.rows import job_events, job_rows
from tests.support.suite import fast_first

DAY = dt.date(2026, 11, 29)
PRODUCT = "daily-brief"


pytestmark = pytest.mark.no_auto_schedule  # `cfg` (conftest): one product


def the_job(engine: sa.Engine) -> dict[str, Any]:
    (row,) = job_rows(engine)
    return row


def drive_to(s: Settings, engine: sa.Engine, sim: Simulator, wanted: str, ticks: int = 6) -> dict[str, Any]:
    for _ in range(ticks):
        if the_job(engine)["state"] == wanted:
            break
        sweep.run(s, engine)
        sim.advance(5)
    row = the_job(engine)
    assert row["state"] == wanted, row["state"]
    return row


def ticked_to_publication(s: Settings, engine: sa.Engine, ticks: int = 3) -> dict[str, Any]:
    """`ticks` reconcile + relay pairs, after which the slot is published (or already past it);
    returns its row."""
    for _ in range(ticks):
        sweep.run(s, engine)
        relay.run(s, engine)
    row = the_job(engine)
    assert row["state"] in ("PUBLISHED", "CLEANUP_PENDING", "DELETED")
    return row


def _shadow(s: Settings) -> Settings:
    return replace(s, reconcile=replace(s.reconcile, mode="shadow"))


def _tracks(engine: sa.Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(tables.tracks)).mappings()]


def drifted(s: Settings) -> Settings:
    p = s.products[PRODUCT]
    return replace(s, products={PRODUCT: replace(p, prompt="A new prompt, deployed mid-flight.")})


@pytest.mark.parametrize("where", fast_first(["RETRIEVED_NOT_VALIDATED", "READY_TO_COMPOSE", "COMPOSED_NOT_SAVED"]))
def test_drift_at_any_step_after_the_create_parks_the_job_with_its_output(
    cfg: Settings, engine: sa.Engine, sim: Simulator, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    Store(engine, "test").schedule(cfg.products[PRODUCT], DAY)
    # Stop the pipeline at `where` by making the next step's own work fail once.
    real = steps.STEPS[State(where)]
    calls = {"n": 0}

    def stop_once(tick: Any, job: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            tick.store.release(job)
            return None
        return real(tick, job)

    if where != "RETRIEVED_NOT_VALIDATED":  # the language tracks stop there: at their fork, or composed
        # No configuration stops the language tracks at their fork: their pass is held for a while.
        real_pass, hold = track_steps.track_pass, {"on": True}
        monkeypatch.setattr(track_steps, "track_pass", lambda tick, pool: 0 if hold["on"] else real_pass(tick, pool))
        drive_to(cfg, engine, sim, "READY_TO_COMPOSE")
        hold["on"] = False
        if where == "COMPOSED_NOT_SAVED":
            sweep.run(_shadow(cfg), engine)  # composed, the save only journaled
            advance_clock(engine, 301)  # past the shadow re-check
            assert {t["state"] for t in _tracks(engine)} == {where} and the_job(engine)["state"] == where
    else:
        monkeypatch.setitem(steps.STEPS, State(where), stop_once)
        drive_to(cfg, engine, sim, where)
    sweep.run(drifted(cfg), engine)
    row = the_job(engine)
    assert (row["state"], row["quarantine_reason"]) == ("QUARANTINED", "config_drift")
    if where != "RETRIEVED_NOT_VALIDATED":  # every language track parked, the slot with them
        assert {(t["state"], t["quarantine_reason"]) for t in _tracks(engine)} == {("QUARANTINED", "config_drift")}
    assert row["payload"] and sim.stats()["creates_total"] == 1
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(tables.editions)).scalar_one() == 0


def test_drift_while_polling_takes_custody_then_revalidate_publishes_under_the_new_rules(
    cfg: Settings, engine: sa.Engine, sim: Simulator
) -> None:
    Store(engine, "test").schedule(cfg.products[PRODUCT], DAY)
    drive_to(cfg, engine, sim, "ACCEPTED", ticks=1)
    new = drifted(cfg)
    sim.advance(5)
    sweep.run(new, engine)
    row = the_job(engine)
    assert (row["state"], row["quarantine_reason"], bool(row["payload"])) == ("QUARANTINED", "config_drift", True)
    with Operator(new, engine) as op:
        assert op.revalidate(row["id"], "the kept output is fine", "alice").state == "RETRIEVED_NOT_VALIDATED"
    row = ticked_to_publication(new, engine)
    assert row["config_fingerprint"] == new.products[PRODUCT].fingerprint()
    assert sim.stats()["creates_total"] == 1
    assert invariants.check(engine, settings=new, sim_stats=sim.stats()) == []


def test_regenerate_after_drift_pays_once_more_under_the_new_config(cfg: Settings, engine: sa.Engine,
                                                                   sim: Simulator) -> None:
    Store(engine, "test").schedule(cfg.products[PRODUCT], DAY)
    drive_to(cfg, engine, sim, "ACCEPTED", ticks=1)
    new = drifted(cfg)
    sim.advance(5)
    sweep.run(new, engine)
    with Operator(new, engine) as op:
        assert op.regenerate(the_job(engine)["id"], "match the new prompt", "alice").state == "CREATE_ELIGIBLE"
    for _ in range(4):
        sweep.run(new, engine)
        relay.run(new, engine)
        sim.advance(5)
    assert the_job(engine)["state"] in ("PUBLISHED", "CLEANUP_PENDING", "DELETED")
    assert sim.stats()["creates_total"] == 2


def test_a_removed_product_keeps_custody_then_quarantines_and_spends_nothing(
    cfg: Settings, engine: sa.Engine, sim: Simulator
) -> None:
    store = Store(engine, "test")
    store.schedule(cfg.products[PRODUCT], DAY)
    drive_to(cfg, engine, sim, "ACCEPTED", ticks=1)
    other = replace(cfg.products[PRODUCT], name="revolution-watch")
    gone = replace(cfg, products={"revolution-watch": other})
    store.schedule(cfg.products[PRODUCT], DAY - dt.timedelta(days=1))  # not created yet
    sim.advance(5)
    reports = [sweep.run(gone, engine) for _ in range(2)]
    assert all(r.errors == 0 for r in reports)  # no traceback loop
    rows = {r["edition_date"]: r for r in job_rows(engine)}
    accepted, fresh = rows[DAY], rows[DAY - dt.timedelta(days=1)]
    assert (accepted["state"], accepted["quarantine_reason"]) == ("QUARANTINED", "product_removed")
    assert accepted["payload"]  # custody first
    assert (fresh["state"], fresh["quarantine_reason"]) == ("QUARANTINED", "product_removed")
    assert sim.stats()["creates_total"] == 1
    code, line = queries.collect(engine, gone).check()
    assert code >= Severity.WARNING and "product_removed" in line


def test_a_step_that_keeps_failing_is_quarantined_step_failing(cfg: Settings, engine: sa.Engine, sim: Simulator,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # Two failures in a row park the job (the default is five: the rule is the same, with fewer ticks).
    cfg = replace(cfg, reconcile=replace(cfg.reconcile, max_step_failures=2))
    Store(engine, "test").schedule(cfg.products[PRODUCT], DAY)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError("disk full")

    # A failure no input can cause (the disk under the composer is full), injected at the composer.
    monkeypatch.setattr(compose, "compose_language", broken)
    limit = cfg.reconcile.max_step_failures
    for _ in range(limit + 2):
        sweep.run(cfg, engine)
        sim.advance(5)
        row = the_job(engine)
        if row["state"] == "QUARANTINED":
            break
        if row["state"] == "READY_TO_COMPOSE":  # each language track counts its own failures
            for track in _tracks(engine):
                assert track["last_error"].startswith("step_failed: OSError: disk full"), track["last_error"]
    row = the_job(engine)
    assert (row["state"], row["quarantine_reason"]) == ("QUARANTINED", "step_failing")
    assert f"{limit} failures in a row" in row["last_error"] and row["payload"]
    reasons = [e["reason"] for e in job_events(engine, row["id"])]
    assert reasons[-1] == "step_failing"
    monkeypatch.undo()
    with Operator(cfg, engine) as op:
        op.revalidate(row["id"], "disk cleaned", "alice")
    ticked_to_publication(cfg, engine)


def test_kill_of_a_suspended_saved_edition_is_refused_like_kill_of_the_saved_edition(
    cfg: Settings, engine: sa.Engine, sim: Simulator
) -> None:
    Store(engine, "test").schedule(cfg.products[PRODUCT], DAY)
    row = drive_to(cfg, engine, sim, "SAVED_NOT_PUBLIC")
    with Operator(cfg, engine) as op:
        op.suspend(row["id"], "incident", "alice")
        with pytest.raises(OperatorRefused, match="already saved"):
            op.kill(row["id"], "never mind", "alice")
        op.resume(row["id"], "alice")
    for _ in range(2):
        relay.run(cfg, engine)
        sweep.run(cfg, engine)
    assert the_job(engine)["state"] in ("PUBLISHED", "CLEANUP_PENDING", "DELETED")
    found = invariants.check(engine, settings=cfg, sim_stats=sim.stats())
    assert found == [], [str(v) for v in found]


def test_a_polling_job_suspended_past_the_retention_keeps_its_output(cfg: Settings, engine: sa.Engine,
                                                                     sim: Simulator) -> None:
    Store(engine, "test").schedule(cfg.products[PRODUCT], DAY)
    row = drive_to(cfg, engine, sim, "ACCEPTED", ticks=1)
    with Operator(cfg, engine) as op:
        op.suspend(row["id"], "incident", "alice")
    sim.add_faults([{"op": "retrieve", "fault": "unknown_status", "times": 1}])
    sweep.run(cfg, engine)  # still running (as far as the provider says): nothing decided, nothing stored
    assert (the_job(engine)["state"], the_job(engine)["payload"]) == ("MANUALLY_SUSPENDED", None)
    sim.advance(5)  # the response finishes while the job is suspended
    from iipub.store import clock
    clock.advance_clock(engine, 60)
    sweep.run(cfg, engine)
    row = the_job(engine)
    assert row["state"] == "MANUALLY_SUSPENDED" and row["payload"]
    assert row["suspended_from"] == "RETRIEVED_NOT_VALIDATED"
    sim.advance(700)  # past the provider's retention: the output is ours already
    with Operator(cfg, engine) as op:
        op.resume(row["id"], "alice", "over")
    ticked_to_publication(cfg, engine)
    assert sim.stats()["creates_total"] == 1
    found = invariants.check(engine, settings=cfg, sim_stats=sim.stats())
    assert found == [], [str(v) for v in found]
