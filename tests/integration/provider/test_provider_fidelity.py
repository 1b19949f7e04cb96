"""Against a simulator that answers like the real Responses API (PRODUCT.md section 18): the
shipped products publish; every output shape the real API writes publishes, or parks with the
model's refusal, for exactly one paid create; a parameter the model refuses costs one refused
create and holds that product alone until its configuration changes; a response stopped at the
output cap is kept and parked; a flex 429 of any body shape holds no default-tier create."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.machine import sweep
from iipub.model.states import Reason, State
from iipub.observe import queries
from iipub.provider.openai.simulator import Simulator
from iipub.provider.openai.simulator.faults import FaultRule
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import clock, tables
from iipub.store.job_store import Store
from tests.support.cli import run_cli
from tests.support.rows import job_events, job_rows

DAY = dt.date(2026, 11, 20)
pytestmark = pytest.mark.no_auto_schedule  # ticks work on the slots a test schedules, not today's as well


def schedule(settings: Settings, engine: sa.Engine, *days: dt.date) -> None:
    store = Store(engine, "test-scheduler")
    for day in days or (DAY,):
        for p in settings.products.values():
            store.schedule(p, day, backfill=True)


def drive(settings: Settings, engine: sa.Engine, sim: Simulator, ticks: int = 6) -> None:
    for _ in range(ticks):
        sweep.run(settings, engine)
        sim.advance(5)
        if all(j["state"] in (State.SAVED_NOT_PUBLIC.value, State.QUARANTINED.value) for j in job_rows(engine)):
            return


def reasons(engine: sa.Engine, job_id: str) -> list[str]:
    return [e["reason"] for e in job_events(engine, job_id)]


def details(engine: sa.Engine, job_id: str, reason: Reason) -> list[dict[str, Any]]:
    return [json.loads(e["detail"] or "{}") for e in job_events(engine, job_id) if e["reason"] == reason.value]


def test_the_shipped_products_send_what_the_api_takes_and_publish(settings: Settings, engine: sa.Engine,
                                                                  sim: Simulator) -> None:
    schedule(settings, engine)
    drive(settings, engine, sim)
    relay.run(settings, engine)
    rows = job_rows(engine)
    assert len(rows) == 2 and all(r["state"] == State.PUBLISHED.value for r in rows), rows
    stats = sim.stats()
    assert stats["creates_total"] == 2 and stats["param_refused"] == 0
    for sent in stats["create_params"]:
        assert "temperature" not in sent["keys"] and "top_p" not in sent["keys"]
        assert sent["model"] == "gpt-5-mini" and sent["max_output_tokens"] >= 16_000


@pytest.mark.parametrize("shape", ["output_reasoning", "output_phases", "output_parts", "realistic"])
def test_each_output_shape_publishes_with_one_paid_create(cfg: Settings, engine: sa.Engine, sim: Simulator,
                                                          shape: str) -> None:
    faults = ["output_reasoning", "output_phases", "output_parts"] if shape == "realistic" else [shape]
    sim.add_faults([FaultRule("create", name, times=1) for name in faults])
    schedule(cfg, engine)
    drive(cfg, engine, sim)
    (job,) = job_rows(engine)
    assert job["state"] == State.SAVED_NOT_PUBLIC.value, (job["state"], job["last_error"])
    assert sim.stats()["creates_total"] == 1
    assert json.loads(job["payload"]).keys() == {"en", "es"}  # the final answer alone, parts joined
    assert sim.stats()["faults_fired"] == dict.fromkeys(faults, 1)


def test_a_refusal_parks_provider_refused_with_its_text(cfg: Settings, engine: sa.Engine, sim: Simulator,
                                                       cli_env: dict[str, str]) -> None:
    sim.add_faults([FaultRule("create", "output_refusal", times=1)])
    schedule(cfg, engine)
    drive(cfg, engine, sim)
    (job,) = job_rows(engine)
    assert job["state"] == State.QUARANTINED.value and job["quarantine_reason"] == "provider_refused"
    assert "I'm sorry, but I can't help with that request." in job["last_error"]
    assert job["payload"] == "I'm sorry, but I can't help with that request." and job["output_end"] == "refusal"
    (custody,) = details(engine, job["id"], Reason.RETRIEVED)
    assert custody["refusal"] == "I'm sorry, but I can't help with that request."
    (parked,) = details(engine, job["id"], Reason.PROVIDER_REFUSED)
    assert parked["refusal"] == job["payload"]
    shown = run_cli("jobs", "show", job["id"], env=cli_env)
    assert shown.returncode == 0 and "I'm sorry, but I can't help with that request." in shown.stdout
    assert sim.stats()["creates_total"] == 1
    drive(cfg, engine, sim, ticks=2)  # parked: nothing is paid again
    assert sim.stats()["creates_total"] == 1


def test_a_response_stopped_at_the_output_cap_is_kept_and_parked(cfg: Settings, engine: sa.Engine,
                                                                 sim: Simulator) -> None:
    sim.add_faults([FaultRule("create", "incomplete", times=1)])
    schedule(cfg, engine)
    drive(cfg, engine, sim)
    (job,) = job_rows(engine)
    assert job["state"] == State.QUARANTINED.value and job["quarantine_reason"] == "output_cap_reached"
    assert job["payload"] and job["output_end"] == "max_output_tokens"
    cap = cfg.products["daily-brief"].output_token_cap()
    assert f"max_output_tokens ({cap})" in job["last_error"] and "Raise [[products]] max_output_tokens" in \
        job["last_error"]
    assert reasons(engine, job["id"])[-2:] == [Reason.RETRIEVED.value, Reason.OUTPUT_CAP_REACHED.value]
    drive(cfg, engine, sim, ticks=2)
    assert sim.stats()["creates_total"] == 1  # no automatic second payment


def test_a_refused_parameter_holds_its_product_alone_until_the_config_changes(
        settings: Settings, engine: sa.Engine, sim: Simulator) -> None:
    brief = replace(settings.products["daily-brief"], items=3, prompt="Write the brief.")
    watch = replace(settings.products["revolution-watch"], items=3, prompt="Write the watch.")
    # A configuration the load check would refuse (a temperature for gpt-5-mini), as a table
    # that does not know a model would let through: the provider's 400 is the last line.
    broken = replace(settings, webhook_sink=None,
                     products={"daily-brief": replace(brief, temperature=0.2), "revolution-watch": watch})
    schedule(broken, engine, DAY, DAY - dt.timedelta(days=1))
    reports = [sweep.run(broken, engine) for _ in range(3)]
    assert sum(r.held_by_product for r in reports) >= 2  # the other slot, and the first one again
    assert not any(r.errors for r in reports)
    stats = sim.stats()
    assert stats["param_refused"] == 1  # one refused create, not one per slot
    assert stats["creates_total"] == 2  # revolution-watch's two slots went on
    held = [j for j in job_rows(engine) if j["product"] == "daily-brief"]
    assert {j["state"] for j in held} == {State.CREATE_ELIGIBLE.value}
    assert all(j["generation_attempts"] == 0 for j in held)  # refunded: nothing was billed
    with engine.connect() as conn:
        (hold,) = conn.execute(sa.select(tables.product_holds)).mappings()
    assert hold["product"] == "daily-brief" and hold["param"] == "temperature" and hold["code"] == "unsupported_value"
    refused = next(d for j in held for d in details(engine, j["id"], Reason.CREATE_PARAM_REFUSED))
    assert refused["param"] == "temperature" and refused["product_held"] == "daily-brief"
    assert [r["state"] for r in _spend(engine) if r["product"] == "daily-brief"] == ["refused"]
    code, line = queries.collect(engine, broken).check()
    assert code == 2 and "creates of daily-brief held" in line and "'temperature'" in line
    # Fixed (the temperature removed): the hold lifts and both slots publish, one create each.
    fixed = replace(broken, products={"daily-brief": brief, "revolution-watch": watch})
    assert "held" not in queries.collect(engine, fixed).check()[1]  # fixed: no longer in force
    for _ in range(3):  # past the held slots' recheck delay
        clock.advance_clock(engine, 120)
        drive(fixed, engine, sim, ticks=2)
    assert {j["state"] for j in job_rows(engine)} == {State.SAVED_NOT_PUBLIC.value}
    stats = sim.stats()
    assert stats["param_refused"] == 1 and stats["creates_total"] == 4
    with engine.connect() as conn:
        assert conn.execute(sa.select(tables.product_holds)).first() is None
        lifted = conn.execute(sa.select(tables.gate_events).where(
            tables.gate_events.c.kind == "product_hold_lifted")).mappings().all()
    assert len(lifted) == 1


@pytest.mark.parametrize("shape", ["flex_unavailable", "flex_unavailable_bare", "flex_unavailable_overloaded"])
def test_a_flex_refusal_of_any_shape_is_capacity_and_holds_no_default_tier_create(
        settings: Settings, engine: sa.Engine, sim: Simulator, shape: str) -> None:
    brief = replace(settings.products["daily-brief"], items=3, prompt="Write the brief.", service_tier="flex",
                    flex_until_minutes=30)
    watch = replace(settings.products["revolution-watch"], items=3, prompt="Write the watch.")
    s = replace(settings, webhook_sink=None, products={"daily-brief": brief, "revolution-watch": watch},
                reconcile=replace(settings.reconcile, flex_poll_interval_seconds=0))
    sim.add_faults([FaultRule("create", shape, times=1)])
    schedule(s, engine)
    sweep.run(s, engine)
    rows = {j["product"]: j for j in job_rows(engine)}
    assert rows["daily-brief"]["state"] == State.CREATE_ELIGIBLE.value
    assert rows["daily-brief"]["generation_attempts"] == 0
    (refusal,) = details(engine, rows["daily-brief"]["id"], Reason.CREATE_REFUSED)
    assert refusal["capacity"] is True and refusal["service_tier_asked"] == "flex"
    with engine.connect() as conn:
        gate = conn.execute(sa.select(tables.create_gate)).mappings().one()
    assert gate["cooldown_until"] is None and gate["breaker"] == "closed"
    assert rows["revolution-watch"]["generation_attempts"] == 1  # the default-tier create went out
    assert sim.stats()["creates_by_tier"] == {"default": 1}


def _spend(engine: sa.Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(tables.spend).order_by(tables.spend.c.id)).mappings()]


def test_a_key_rotated_to_another_project_with_jobs_in_flight_pays_nothing_again(
        cfg: Settings, engine: sa.Engine, sim: Simulator) -> None:
    sim.backend.key_projects["sk-rotated"] = "proj_elsewhere"  # the new key belongs to another project
    schedule(cfg, engine)
    sweep.run(cfg, engine)  # created (and paid) under sk-test's project
    (job,) = job_rows(engine)
    assert job["state"] == State.ACCEPTED.value and job["create_scope"]
    assert "sk-test" not in job["create_scope"]  # a fingerprint of the key, never the key
    # Naming the project the key acts in anyway changes the scope's text, not what reads see: no alarm.
    named = replace(cfg, provider=replace(cfg.provider, project="proj_default"))
    assert "in flight created under" not in queries.collect(engine, named).check()[1]
    rotated = replace(cfg, api_key="sk-rotated")
    for _ in range(6):  # far more reads than the loss confirmation needs
        sim.advance(30)
        clock.advance_clock(engine, 180)
        sweep.run(rotated, engine)
    (job,) = job_rows(engine)
    assert job["state"] == State.ACCEPTED.value and job["generation_attempts"] == 1
    trail = reasons(engine, job["id"])
    assert Reason.SCOPE_MISMATCH.value in trail and Reason.LOSS_CONFIRMED.value not in trail
    assert Reason.LOSS_SUSPECTED.value not in trail
    assert sim.stats()["creates_total"] == 1  # nothing paid again
    code, line = queries.collect(engine, rotated).check()
    assert code == 2 and "1 job in flight created under" in line and job["create_scope"] in line
    # The old key back: the response is read, published; still one paid create.
    clock.advance_clock(engine, 180)
    drive(cfg, engine, sim)
    (job,) = job_rows(engine)
    assert job["state"] == State.SAVED_NOT_PUBLIC.value and sim.stats()["creates_total"] == 1


def test_a_job_in_flight_under_the_old_fingerprint_is_not_drifted_by_the_upgrade(
        cfg: Settings, engine: sa.Engine, sim: Simulator) -> None:
    """Jobs recorded their fingerprint under version 2 (temperature 0.2 always); after the upgrade
    the same configuration has no temperature and hashes as version 3: they still publish."""
    from iipub.settings import fingerprint

    schedule(cfg, engine)
    sweep.run(cfg, engine)
    (job,) = job_rows(engine)
    product = cfg.products["daily-brief"]
    old = fingerprint.legacy_v2(product)
    assert old is not None and old != product.fingerprint()
    with engine.begin() as conn:
        conn.execute(tables.jobs.update().where(tables.jobs.c.id == job["id"]).values(config_fingerprint=old))
    drive(cfg, engine, sim)
    (job,) = job_rows(engine)
    assert job["state"] == State.SAVED_NOT_PUBLIC.value and job["quarantine_reason"] is None
    assert job["config_fingerprint"] == old and sim.stats()["creates_total"] == 1
