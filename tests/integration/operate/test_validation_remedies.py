"""The operator's ways out of VALIDATION_FAILED_RETAINED: revalidate (free) and regenerate (paid)."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.core.errors import OperatorRefused
from iipub.machine import sweep
from iipub.operate.executor import Operator
from iipub.provider.openai.simulator import Simulator
from iipub.settings.config import Settings
from iipub.store import tables
from iipub.store.job_store import Store
from tests.support.cli import run_cli

DAY = dt.date(2026, 11, 27)
pytestmark = pytest.mark.no_auto_schedule


def _row(engine: sa.Engine) -> dict[str, Any]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.select(tables.jobs)).mappings().one())


def _failed(settings: Settings, engine: sa.Engine, sim: Simulator) -> tuple[Settings, dict[str, Any]]:
    """A daily-brief job whose (good) output failed a too-narrow allowed_domains rule."""
    narrow = replace(settings.products["daily-brief"], allowed_domains=("bbc.co.uk",))
    s = replace(settings, products={"daily-brief": narrow})
    Store(engine, "test").schedule(narrow, DAY)
    for _ in range(4):
        sweep.run(s, engine)
        sim.advance(5)
    row = _row(engine)
    assert row["state"] == "VALIDATION_FAILED_RETAINED" and "domain_not_allowed" in row["last_error"]
    return s, row


def test_revalidate_after_fixing_the_rules_publishes_without_paying_again(
    settings: Settings, engine: sa.Engine, sim: Simulator
) -> None:
    s, failed = _failed(settings, engine, sim)
    fixed = replace(s, products={"daily-brief": replace(s.products["daily-brief"],
                                                         allowed_domains=("reuters.com", "apnews.com"))})
    # The fingerprint does not cover allowed_domains: the job's recorded config still matches.
    with Operator(fixed, engine) as op:
        job = op.revalidate(failed["id"], "allowed_domains fixed", "alice")
    assert job.state == "RETRIEVED_NOT_VALIDATED"
    sweep.run(fixed, engine)
    row = _row(engine)
    assert row["state"] == "SAVED_NOT_PUBLIC" and row["payload_sha256"] == failed["payload_sha256"]
    assert sim.stats()["creates_total"] == 1
    with engine.connect() as conn:
        ev = conn.execute(sa.select(tables.job_events).where(tables.job_events.c.reason == "operator_revalidate")).one()
    assert ev.worker == "operator:alice" and json.loads(ev.detail)["why"] == "allowed_domains fixed"


def test_regenerate_pays_once_more_within_budget_and_is_refused_past_it(
    settings: Settings, engine: sa.Engine, sim: Simulator
) -> None:
    s, failed = _failed(settings, engine, sim)
    with Operator(s, engine) as op:
        job = op.regenerate(failed["id"], "prompt fixed", "bob")
    assert job.state == "CREATE_ELIGIBLE"
    row = _row(engine)
    assert row["payload"] is None and row["response_id"] is None and row["generation_attempts"] == 1
    sweep.run(s, engine)
    assert sim.stats()["creates_total"] == 2 and _row(engine)["generation_attempts"] == 2
    with engine.begin() as conn:  # pretend the budget is spent and it failed again
        conn.execute(tables.jobs.update().values(state="VALIDATION_FAILED_RETAINED", generation_attempts=3,
                                             version=tables.jobs.c.version + 1))
    before = _row(engine)
    with Operator(s, engine) as op, pytest.raises(OperatorRefused, match="paid creates are used"):
        op.regenerate(failed["id"], "again", "bob")
    assert _row(engine) == before


def test_revalidate_cli_refuses_other_states(settings: Settings, engine: sa.Engine, cli_env: dict[str, str],
                                             tmp_path: Path) -> None:
    Store(engine, "test").schedule(settings.products["daily-brief"], DAY)
    job_id = _row(engine)["id"]
    proc = run_cli("revalidate", job_id, "--reason", "x", env=cli_env, cwd=tmp_path)
    assert proc.returncode == 3 and "only a VALIDATION_FAILED_RETAINED job" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
