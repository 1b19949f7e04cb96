"""`iipub status` on the command line (in process: `iipub.cli.main`): `--check` exit codes for
monitoring, `--json` agreeing with the human report, and UNKNOWN when the database cannot be
reached. The jobs are driven in process (reconcile and relay ticks against the simulator) on
the same database."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.machine import sweep
from iipub.provider.openai.simulator import Simulator
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import clock, tables
from iipub.store.job_store import Store
from tests.support.cli import run_cli
from tests.support.rows import record_heartbeats
from tests.support.settings import open_at_midnight

pytestmark = pytest.mark.no_auto_schedule


@pytest.fixture
def s(settings: Settings) -> Settings:
    return open_at_midnight(settings)


def schedule_today(s: Settings, engine: sa.Engine) -> None:
    with engine.connect() as conn:
        day = clock.read_now(conn).date()
    store = Store(engine, "test-scheduler")
    for p in s.products.values():
        assert store.schedule(p, day)


def states(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return sorted(conn.execute(sa.select(tables.jobs.c.state)).scalars())


def drive_to_deleted(s: Settings, engine: sa.Engine, sim: Simulator) -> None:
    for _ in range(15):
        if states(engine) == ["DELETED", "DELETED"]:
            record_heartbeats(engine)  # as the cron commands would have
            return
        sweep.run(s, engine)
        relay.run(s, engine)
        sim.advance(5)
    raise AssertionError(states(engine))


def status(env: dict[str, str], cwd: Path, *args: str) -> tuple[int, str, str]:
    proc = run_cli("status", *args, env=env, cwd=cwd)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


def human_figures(text: str) -> dict[str, Any]:
    """The numbers an operator reads in the human report."""
    lines = text.splitlines()
    found: dict[str, Any] = {}
    for line in lines:
        cells = line.split()
        if not cells:
            continue
        if cells[0] == "TOTAL" and "jobs_total" not in found:
            found["jobs_total"] = int(cells[-1])
        elif cells[0] in ("time_to_dispatch", "unretrieved_dwell", "overdue_polls") and cells[0] not in found:
            found[cells[0]] = int(cells[1])
        elif line.startswith("quarantined ") and cells[1].isdigit():  # not the "... tracks" lines
            found["quarantined"] = int(cells[1])
        elif line.startswith("stranded ") and cells[1].isdigit():
            found["stranded"] = int(cells[1])
        elif line.startswith("unpublished events "):
            found["unpublished"] = int(cells[2])
        elif line.startswith("lag "):
            found["lag"] = int(re.fullmatch(r"(\d+)s", cells[1]).group(1))  # type: ignore[union-attr]
        elif line.startswith("duplicate publications "):
            found["duplicates"] = int(cells[2])
    found["check_line"] = lines[-1]
    return found


def json_figures(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "jobs_total": doc["jobs"]["total"],
        **{name: doc["slis"][name]["count"] for name in ("time_to_dispatch", "unretrieved_dwell", "overdue_polls")},
        "quarantined": doc["quarantine"]["count"],
        "stranded": doc["stranded"]["count"],
        "unpublished": doc["outbox"]["unpublished"],
        "lag": round(doc["outbox"]["lag_seconds"]),
        "duplicates": doc["duplicate_publications"],
        "check_line": doc["check"]["line"],
    }


@pytest.mark.slow
def test_healthy_is_ok_and_json_matches_the_human_report(
    s: Settings, engine: sa.Engine, sim: Simulator, cli_env: dict[str, str], tmp_path: Path
) -> None:
    schedule_today(s, engine)
    drive_to_deleted(s, engine, sim)

    code, out, _ = status(cli_env, tmp_path, "--check")
    assert code == 0, out
    assert len(out.strip().splitlines()) == 1
    assert out.startswith("IIPUB OK - 2 jobs, 0 quarantined, outbox lag 0s | jobs=2 ")

    code, human, err = status(cli_env, tmp_path)
    assert code == 0, err
    code, raw, err = status(cli_env, tmp_path, "--json")
    assert code == 0, err
    doc = json.loads(raw)
    assert set(doc) == {"generated_at", "window_hours", "jobs", "slis", "duplicate_publications", "tracks", "immovable",
                        "parked", "stranded",
                        "outbox", "quarantine", "queues", "error_budgets", "change_freeze", "disks", "clock",
                        "editions", "provider_expired",
                        "spend", "check", "late", "create_gate",
                        "unexpected_statuses", "failing_steps", "webhooks", "heartbeats", "installation_id",
                        "read_cooldown", "cutover", "paid", "other_scope", "product_holds", "model_holds",
                        "api_key_placeholder"}
    assert doc["product_holds"] == [] and doc["other_scope"]["jobs"] == 0
    assert doc["cutover"]["missing_slots"] == [] and doc["cutover"]["paused_everything"] is None
    assert set(doc["heartbeats"]) == {"after_seconds", "recorded", "ping_configured", "reconcile", "relay",
                                      "provider_unreachable_ticks", "unreachable_after_ticks"}
    assert doc["heartbeats"]["reconcile"]["last"]["ok"] is True
    figures = human_figures(human)
    assert figures == json_figures(doc)
    assert figures["jobs_total"] == 2 and figures["time_to_dispatch"] == 2 and figures["unretrieved_dwell"] == 2
    assert doc["jobs"]["by_state"] == {"DELETED": 2}
    with engine.connect() as conn:
        tokens = conn.execute(sa.select(sa.func.sum(tables.jobs.c.total_tokens))).scalar_one()
    assert doc["spend"]["total"]["total_tokens"] == tokens > 0
    assert doc["paid"]["windows"]["today"]["tokens"] == tokens  # paid today, by payment time
    assert doc["paid"]["windows"]["today"]["creates"] == 2 and doc["paid"]["currency"] is None
    assert figures["check_line"] == out.strip()


def test_one_quarantined_job_warns(
    s: Settings, engine: sa.Engine, sim: Simulator, cli_env: dict[str, str], tmp_path: Path
) -> None:
    schedule_today(s, engine)
    sim.add_faults([{"op": "create", "fault": "drop_after_accept"}])
    sweep.run(s, engine)
    record_heartbeats(engine)
    # The first create is the health probe: its unknown outcome opened the breaker, the other waits.
    assert sorted(states(engine)) in (["ACCEPTED", "QUARANTINED"], ["CREATE_ELIGIBLE", "QUARANTINED"])

    code, out, _ = status(cli_env, tmp_path, "--check")
    assert code == 1, out
    assert out.startswith("IIPUB WARNING - ") and "1 quarantined (create_outcome_unknown)" in out

    code, raw, _ = status(cli_env, tmp_path, "--json", "--check")
    assert code == 1
    doc = json.loads(raw)
    assert doc["check"]["code"] == 1 and doc["check"]["status"] == "WARNING"
    assert doc["quarantine"]["count"] == 1 and doc["quarantine"]["by_reason"] == {"create_outcome_unknown": 1}
    assert doc["quarantine"]["oldest"]["reason"] == "create_outcome_unknown"

    code, human, _ = status(cli_env, tmp_path)
    assert code == 0  # without --check the report itself succeeds
    assert human_figures(human) == json_figures(doc)


def test_a_job_stranded_for_three_hours_is_critical(
    s: Settings, engine: sa.Engine, cli_env: dict[str, str], tmp_path: Path
) -> None:
    schedule_today(s, engine)
    sweep.run(s, engine)
    record_heartbeats(engine)
    assert states(engine) == ["ACCEPTED", "ACCEPTED"]
    clock.advance_clock(engine, 3 * 3600)  # cron stopped too: the heartbeats say so after the stranded jobs

    code, out, _ = status(cli_env, tmp_path, "--check")
    assert code == 2, out
    assert out.startswith("IIPUB CRITICAL - 2 stranded > 2h00m")
    code, raw, _ = status(cli_env, tmp_path, "--json", "--check")
    assert code == 2 and json.loads(raw)["stranded"]["count"] == 2


def test_unreachable_database_is_unknown(cli_env: dict[str, str], tmp_path: Path) -> None:
    env = {**cli_env, "IIPUB_DATABASE_URL": "mysql+pymysql://root@127.0.0.1:9/none"}
    code, out, err = status(env, tmp_path, "--check")
    assert code == 3
    assert out.startswith("IIPUB UNKNOWN - database unreachable at 127.0.0.1:9: ")
    assert len(out.strip().splitlines()) == 1
    code, raw, _ = status(env, tmp_path, "--json", "--check")
    assert code == 3 and json.loads(raw)["check"]["status"] == "UNKNOWN"
    # Not in monitoring mode: the ordinary one-line error.
    code, out, err = status(env, tmp_path)
    assert code == 69 and "database unreachable" in err and len(err.strip().splitlines()) == 1

    env = {**cli_env, "IIPUB_DATABASE_URL": f"sqlite:///{tmp_path / 'empty.sqlite3'}"}
    code, out, _ = status(env, tmp_path, "--check")
    assert code == 3 and out.startswith("IIPUB UNKNOWN - schema not ready")
