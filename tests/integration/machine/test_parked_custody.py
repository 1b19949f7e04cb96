"""Parked is never lost (PRODUCT.md section 20): a quarantined or suspended job whose response
finishes has its output taken into custody, by the custody watch of every tick (webhooks off)
or at once by the response's verified webhook, and it stays parked with its reason. A response
the watch finds gone is reported, never paid for."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.core.errors import OperatorRefused
from iipub.machine import settle, sweep
from iipub.machine.run import run_context
from iipub.model.states import State
from iipub.observe import queries
from iipub.operate.executor import Operator
from iipub.provider.openai.adapter import OpenAIAdapter
from iipub.provider.openai.simulator import Simulator
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import clock
from iipub.store.deliveries import Deliveries
from iipub.store.job_store import Store
from tests.support.cli import run_cli
from tests.support.rows import job_events, job_rows
from tests.support.simulator import MINUTE

pytestmark = [pytest.mark.simulator(**MINUTE), pytest.mark.no_auto_schedule]
PRODUCT = "daily-brief"


@pytest.fixture
def parked_cfg(cfg: Settings) -> Settings:
    """One product on the minute simulator; a poll budget of one poll."""
    return replace(cfg, budgets=replace(cfg.budgets, max_poll_attempts=1))


def the_job(engine: sa.Engine) -> dict[str, Any]:
    (row,) = job_rows(engine)
    return row


def quarantined_poll_budget(s: Settings, engine: sa.Engine) -> dict[str, Any]:
    """Today's slot created, polled once (still running) and parked poll_budget_exhausted."""
    with engine.connect() as conn:
        today = clock.read_now(conn).date()
    Store(engine, "test").schedule(s.products[PRODUCT], today)
    for _ in range(4):
        sweep.run(s, engine)
        if the_job(engine)["state"] == State.QUARANTINED:
            break
        clock.advance_clock(engine, 40)
    row = the_job(engine)
    assert (row["state"], row["quarantine_reason"]) == ("QUARANTINED", "poll_budget_exhausted"), row
    assert row["response_id"] and row["payload"] is None
    return row


def test_a_quarantined_job_whose_response_finishes_keeps_its_output_and_stays_parked(
        parked_cfg: Settings, engine: sa.Engine, sim: Simulator) -> None:
    parked = quarantined_poll_budget(parked_cfg, engine)
    reads = sim.stats()["requests"]["retrieve"]
    # Still running: the watch reads it, writes no version and no journal row.
    clock.advance_clock(engine, 61)
    sweep.run(parked_cfg, engine)
    row = the_job(engine)
    assert sim.stats()["requests"]["retrieve"] == reads + 1
    assert row["version"] == parked["version"] and row["payload"] is None
    # Within its cadence it is not read again.
    sweep.run(parked_cfg, engine)
    assert sim.stats()["requests"]["retrieve"] == reads + 1
    sim.advance(120)  # the response finishes while the job is parked
    clock.advance_clock(engine, 61)
    sweep.run(parked_cfg, engine)
    row = the_job(engine)
    assert (row["state"], row["quarantine_reason"]) == ("QUARANTINED", "poll_budget_exhausted")
    assert row["payload"] and row["payload_sha256"] and row["version"] == parked["version"] + 1
    assert row["last_error"] == parked["last_error"] and row["poll_count"] == parked["poll_count"]
    last = job_events(engine, row["id"])[-1]
    last["detail"] = json.loads(last["detail"])
    assert (last["reason"], last["from_state"], last["to_state"]) == ("retrieved", "QUARANTINED", "QUARANTINED")
    assert last["detail"]["while_parked"] == "QUARANTINED"
    assert last["detail"]["quarantine_reason"] == "poll_budget_exhausted"
    # Custody once: later ticks read nothing more, and the provider's retention may pass.
    reads = sim.stats()["requests"]["retrieve"]
    sim.advance(900)
    clock.advance_clock(engine, 300)
    sweep.run(parked_cfg, engine)
    assert sim.stats()["requests"]["retrieve"] == reads
    assert sim.stats()["requests"].get("delete", 0) == 0
    with Operator(parked_cfg, engine) as op:
        with pytest.raises(OperatorRefused, match="already holds its output in custody"):
            op.release(row["id"], "resume-polling", "provider recovered", "alice")
        assert op.get(row["id"]).version == row["version"]
        done = op.revalidate(row["id"], "output is safe: validate it", "alice")
    assert done.state == State.RETRIEVED_NOT_VALIDATED
    for _ in range(3):
        sweep.run(parked_cfg, engine)
        relay.run(parked_cfg, engine)
    row = the_job(engine)
    assert row["state"] in ("PUBLISHED", "CLEANUP_PENDING", "DELETED")
    assert sim.stats()["creates_total"] == 1


def test_quarantine_show_names_where_the_output_is_and_the_remedies_that_apply(
        parked_cfg: Settings, engine: sa.Engine, sim: Simulator, cli_env: dict[str, str]) -> None:
    parked = quarantined_poll_budget(parked_cfg, engine)
    shown = json.loads(run_cli("quarantine", "show", parked["id"][:8], "--json", env=cli_env, check=True).stdout)
    assert shown["id"] == parked["id"] and shown["events"] and "kept and watched" in shown["output"]
    commands = [r["command"] for r in shown["remedies"]]
    assert any("--resume-polling" in c for c in commands) and commands[-1].startswith(f"iipub kill {parked['id']}")
    assert run_cli("quarantine", "list", env=cli_env, check=True).stdout.splitlines()[1].split()[8] == "watched"
    sim.advance(120)
    clock.advance_clock(engine, 61)
    sweep.run(parked_cfg, engine)
    shown = json.loads(run_cli("quarantine", "show", parked["id"], "--json", env=cli_env, check=True).stdout)
    assert shown["output"].startswith("in custody (sha256 ") and "safe" in shown["output"]
    commands = [r["command"] for r in shown["remedies"]]
    assert commands[0].startswith(f"iipub revalidate {parked['id']}")
    assert not any("--resume-polling" in c or "--verified-lost" in c for c in commands)
    text = run_cli("quarantine", "show", parked["id"], env=cli_env, check=True).stdout
    assert "in custody" in text and "remedies:" in text and "poll_budget_exhausted" in text
    listed = run_cli("quarantine", "list", env=cli_env, check=True).stdout.splitlines()
    assert listed[0].split()[8] == "OUTPUT" and listed[1].split()[8] == "custody"


def test_a_parked_job_whose_response_is_gone_is_reported_not_paid_for(
        parked_cfg: Settings, engine: sa.Engine, sim: Simulator) -> None:
    parked = quarantined_poll_budget(parked_cfg, engine)
    sim.add_faults([{"op": "retrieve", "fault": "not_found"}])
    for _ in range(3):
        clock.advance_clock(engine, 61)
        sweep.run(parked_cfg, engine)
    row = the_job(engine)
    assert (row["state"], row["quarantine_reason"], row["payload"]) == ("QUARANTINED", "poll_budget_exhausted", None)
    reasons = [e["reason"] for e in job_events(engine, row["id"])]
    assert reasons.count("parked_response_gone") == 1  # reported once, not per read
    assert reasons.count("loss_confirmed") == 0 and reasons.count("recreate_after_loss") == 0
    assert row["version"] == parked["version"] + 1 and row["generation_attempts"] == 1
    assert sim.stats()["creates_total"] == 1
    # Read again much later: a 404 may be spurious, and the output is stored if it comes back.
    sim.clear_faults()
    sim.advance(120)
    clock.advance_clock(engine, 601)
    sweep.run(parked_cfg, engine)
    row = the_job(engine)
    assert row["state"] == "QUARANTINED" and row["payload"]


def test_a_suspended_quarantined_job_keeps_its_output_and_resumes_into_quarantine(
        parked_cfg: Settings, engine: sa.Engine, sim: Simulator) -> None:
    parked = quarantined_poll_budget(parked_cfg, engine)
    with Operator(parked_cfg, engine) as op:
        op.suspend(parked["id"], "incident", "alice")
    report = queries.collect(engine, parked_cfg)
    assert [(j.id, j.state) for j in report.parked] == [(parked["id"], "MANUALLY_SUSPENDED")]
    code, line = report.check()
    assert code >= 1 and "1 job parked for an operator (MANUALLY_SUSPENDED 1" in line
    sim.advance(120)
    clock.advance_clock(engine, 61)
    sweep.run(parked_cfg, engine)
    row = the_job(engine)
    assert (row["state"], row["suspended_from"]) == ("MANUALLY_SUSPENDED", "QUARANTINED") and row["payload"]
    with Operator(parked_cfg, engine) as op:
        back = op.resume(row["id"], "alice", "over")
    assert back.state == State.QUARANTINED and back.quarantine_reason == "poll_budget_exhausted" and back.payload


def test_a_verified_webhook_takes_a_parked_jobs_custody_at_once(
        parked_cfg: Settings, engine: sa.Engine, sim: Simulator) -> None:
    parked = quarantined_poll_budget(parked_cfg, engine)
    sim.advance(120)
    hooked = replace(parked_cfg, webhooks=replace(parked_cfg.webhooks, enabled=True))
    store = Store(engine, "webhook:test")
    with OpenAIAdapter(hooked.provider, "sk-test") as provider:
        t = run_context.for_delivery(hooked, store, provider, deadline=float("inf"), rng=__import__("random").Random(1))
        settled = settle.response_event(t, Deliveries(engine), parked["response_id"], "response.completed",
                                        lease_wait=0.1)
    assert settled.outcome == "custody"
    row = the_job(engine)
    assert (row["state"], row["quarantine_reason"]) == ("QUARANTINED", "poll_budget_exhausted")
    assert row["payload"] and row["version"] == parked["version"] + 1
    assert sim.stats()["creates_total"] == 1
