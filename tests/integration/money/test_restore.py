"""The restore drill: back up the database, let iipub pay (and publish), restore the backup,
tick again. The spend ledger outside the database keeps iipub from paying twice, and the live
page is never replaced."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.machine import sweep
from iipub.money.ledger import SpendLedger
from iipub.provider.openai.simulator import Simulator
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import tables
from iipub.store.job_store import Store
from tests.support.cli import run_cli
from tests.support.rows import job_events, job_rows
from tests.support.settings import MIDNIGHT_PRODUCT_TOML, ledger_file_of, sim_env

DAY = dt.date(2026, 11, 29)
PRODUCT = "daily-brief"
Backup = dict[str, list[dict[str, Any]]]


pytestmark = pytest.mark.no_auto_schedule  # `cfg` (conftest): one product


def backup(engine: sa.Engine) -> Backup:
    """Every row of every table (a logical dump, the same on SQLite and MariaDB)."""
    with engine.connect() as conn:
        return {t.name: [dict(r) for r in conn.execute(sa.select(t)).mappings()] for t in tables.metadata.sorted_tables}


def restore(engine: sa.Engine, dump: Backup) -> None:
    with engine.begin() as conn:
        for t in reversed(tables.metadata.sorted_tables):
            conn.execute(t.delete())
        for t in tables.metadata.sorted_tables:
            if dump[t.name]:
                conn.execute(t.insert(), dump[t.name])


def ticks(s: Settings, engine: sa.Engine, sim: Simulator, n: int) -> None:
    for _ in range(n):
        sweep.run(s, engine)
        relay.run(s, engine)
        sim.advance(5)


def pages(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_restore_from_before_the_create_adopts_the_paid_response_instead_of_paying_again(
    cfg: Settings, engine: sa.Engine, sim: Simulator
) -> None:
    Store(engine, "test").schedule(cfg.products[PRODUCT], DAY)
    dump = backup(engine)  # the nightly backup: the slot exists, nothing paid yet
    sweep.run(cfg, engine)  # paid create, accepted
    (paid,) = job_rows(engine)
    assert paid["state"] == "ACCEPTED" and sim.stats()["creates_total"] == 1
    restore(engine, dump)
    assert job_rows(engine)[0]["state"] == "NO_JOB"
    ticks(cfg, engine, sim, 5)
    (row,) = job_rows(engine)
    assert sim.stats()["creates_total"] == 1  # nothing paid twice
    assert row["state"] in ("PUBLISHED", "CLEANUP_PENDING", "DELETED") and row["response_id"] == paid["response_id"]
    reasons = [e["reason"] for e in job_events(engine, row["id"])]
    assert "restored_behind_ledger" in reasons and "restored_adopted" in reasons and "dispatch" not in reasons
    assert row["generation_attempts"] == 1


def test_a_restore_from_before_a_published_edition_pays_nothing_and_leaves_the_page_alone(
    cfg: Settings, engine: sa.Engine, sim: Simulator
) -> None:
    assert cfg.static_sink is not None
    root = Path(cfg.static_sink.root)
    Store(engine, "test").schedule(cfg.products[PRODUCT], DAY)
    dump = backup(engine)
    ticks(cfg, engine, sim, 6)  # created, published, cleaned up (the remote response is deleted)
    (done,) = job_rows(engine)
    assert done["state"] == "DELETED"
    live = pages(root)
    restore(engine, dump)
    sim.advance(700)  # and the provider forgot the response anyway
    ticks(cfg, engine, sim, 4)
    (row,) = job_rows(engine)
    # The ledger recorded the editions published and the site still serves them: the slot is done.
    assert row["state"] == "DELETED" and row["generation_attempts"] == 1
    reasons = [e["reason"] for e in job_events(engine, row["id"])]
    assert reasons[-2:] == ["restored_behind_ledger", "restored_published"] and "dispatch" not in reasons
    assert sim.stats()["creates_total"] == 1
    assert pages(root) == live  # the live page is unchanged


def test_check_ledger_reports_the_slots_the_database_is_behind_on(
    cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine
) -> None:
    env = sim_env(cli_env, sim, tmp_path, MIDNIGHT_PRODUCT_TOML, auto_schedule=False)
    run_cli("schedule", env=env, cwd=tmp_path, check=True)
    run_cli("reconcile", env=env, cwd=tmp_path, check=True)  # today's slot, created
    assert run_cli("check", "--ledger", env=env, cwd=tmp_path).returncode == 0
    ledger = SpendLedger(ledger_file_of(tmp_path))
    spend, bad = ledger.read()
    assert bad == 0 and spend and all(s.charged == 1 and s.response_id for s in spend.values())
    with engine.begin() as conn:  # a restore from before the creates
        conn.execute(tables.jobs.update().values(generation_attempts=0, response_id=None, state="CREATE_ELIGIBLE"))
    result = run_cli("check", "--ledger", env=env, cwd=tmp_path)
    assert result.returncode == 1 and "behind_ledger" in result.stdout


@pytest.mark.slow
def test_a_different_edition_never_replaces_a_live_page_without_republish(
    cfg: Settings, engine: sa.Engine, sim: Simulator, cli_env: dict[str, str], tmp_path: Path
) -> None:
    assert cfg.static_sink is not None
    root = Path(cfg.static_sink.root)
    Store(engine, "test").schedule(cfg.products[PRODUCT], DAY)
    dump = backup(engine)
    ticks(cfg, engine, sim, 6)
    live = pages(root)
    restore(engine, dump)
    ledger = cfg.ledger_path()
    assert ledger is not None
    ledger.unlink()  # the ledger is gone too (the worst case): the slot is generated again ...
    cfg = replace(cfg, products={PRODUCT: replace(cfg.products[PRODUCT], items=2)})  # ... differently
    ticks(cfg, engine, sim, 3)
    # The payment authority sees the live site serving the slot: nothing is paid again.
    (row,) = job_rows(engine)
    assert (row["state"], row["quarantine_reason"]) == ("QUARANTINED", "payment_refused")
    assert "the live site already serves" in row["last_error"] and "--pay-again" in row["last_error"]
    assert sim.stats()["creates_total"] == 1
    # The operator truly wants a new, different edition: bought again on purpose, journaled.
    env = sim_env(cli_env, sim, tmp_path, MIDNIGHT_PRODUCT_TOML.replace("items = 3", "items = 2"))
    refused = run_cli("quarantine", "release", row["id"], "--verified-lost", "--reason", "new edition", "--by",
                      "alice", env=env)
    assert refused.returncode == 3 and "the live site already serves" in refused.stderr
    released = run_cli("quarantine", "release", row["id"], "--verified-lost", "--pay-again", "--reason",
                       "a new edition on purpose", "--by", "alice", env=env)
    assert released.returncode == 0, released.stderr
    grant = [e for e in job_events(engine, row["id"]) if e["reason"] == "operator_release_verified_lost"][-1]
    assert json.loads(grant["detail"])["pay_again"] == {"why": "a new edition on purpose", "overrides": ["live"]}
    ticks(cfg, engine, sim, 6)
    (row,) = job_rows(engine)
    assert sim.stats()["creates_total"] == 2 and row["state"] == "SAVED_NOT_PUBLIC"
    assert pages(root) == live  # ... but the new, different edition does not replace the live page
    with engine.connect() as conn:
        parked = conn.execute(sa.select(tables.outbox_deliveries.c.last_error)
                              .where(tables.outbox_deliveries.c.parked_at.is_not(None))).scalars().all()
    assert parked and all("conflicting_republish" in e for e in parked)
    from iipub.operate.executor import Operator

    with Operator(cfg, engine) as op:
        assert op.republish(row["id"], "the regenerated edition is the one we want", "alice") == len(parked)
    ticks(cfg, engine, sim, 3)
    assert job_rows(engine)[0]["state"] in ("PUBLISHED", "CLEANUP_PENDING", "DELETED")
    assert pages(root) != live


def _restored_behind_ledger(cfg: Settings, engine: sa.Engine, sim: Simulator) -> dict[str, Any]:
    """A slot paid for once, its database restored from before the create, the response gone at
    the provider and nothing published: parked `restored_behind_ledger`."""
    sim.backend.zdr = True  # gone ~10 minutes after it finished (a store:true response outlives that)
    Store(engine, "test").schedule(cfg.products[PRODUCT], DAY)
    dump = backup(engine)
    sweep.run(cfg, engine)  # paid create, accepted
    sim.advance(1000)  # it finished and the provider's retention ran out
    restore(engine, dump)
    ticks(cfg, engine, sim, 2)
    (row,) = job_rows(engine)
    assert (row["state"], row["quarantine_reason"]) == ("QUARANTINED", "restored_behind_ledger")
    assert sim.stats()["creates_total"] == 1 and row["generation_attempts"] == 0
    return row


def test_verified_lost_on_a_restored_job_charges_the_ledgers_count_and_is_not_parked_again(
    cfg: Settings, engine: sa.Engine, sim: Simulator, cli_env: dict[str, str], tmp_path: Path
) -> None:
    row = _restored_behind_ledger(cfg, engine, sim)
    env = sim_env(cli_env, sim, tmp_path, MIDNIGHT_PRODUCT_TOML)  # the ticks' configuration
    released = run_cli("quarantine", "release", row["id"], "--verified-lost", "--reason", "gone at the provider",
                       "--by", "alice", env=env)
    assert released.returncode == 0, released.stderr
    assert "charged 1 paid create(s) the spend ledger recorded" in released.stdout
    assert job_rows(engine)[0]["generation_attempts"] == 1  # the budget is honest
    ticks(cfg, engine, sim, 6)  # the loop is gone: it is created once more and published
    (done,) = job_rows(engine)
    assert done["state"] in ("PUBLISHED", "CLEANUP_PENDING", "DELETED") and done["generation_attempts"] == 2
    assert sim.stats()["creates_total"] == 2
    reasons = [e["reason"] for e in job_events(engine, done["id"])]
    assert reasons.count("restored_behind_ledger") == 1 and reasons.count("dispatch") == 1


def test_verified_lost_on_a_restored_job_is_refused_when_the_ledger_used_the_budget(
    cfg: Settings, engine: sa.Engine, sim: Simulator, cli_env: dict[str, str], tmp_path: Path
) -> None:
    cfg = replace(cfg, budgets=replace(cfg.budgets, max_generation_attempts=1))
    row = _restored_behind_ledger(cfg, engine, sim)
    env = sim_env(cli_env, sim, tmp_path, "[budgets]\nmax_generation_attempts = 1\n" + MIDNIGHT_PRODUCT_TOML)
    journal = job_events(engine, row["id"])
    refused = run_cli("quarantine", "release", row["id"], "--verified-lost", "--reason", "gone", "--by", "alice",
                      env=env)
    assert refused.returncode == 3 and "the spend ledger records 1 paid creates" in refused.stderr
    assert refused.stdout == ""  # no success line
    ticks(cfg, engine, sim, 3)
    assert job_events(engine, row["id"]) == journal  # nothing changed, nothing parked again
    assert sim.stats()["creates_total"] == 1
