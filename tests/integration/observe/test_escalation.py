"""Escalation: a quarantined job or a parked language track nobody released within its
reason's `[status]` limit turns `status --check` CRITICAL; `status` shows the operator's queue
depth and age by reason (human, JSON, Prometheus)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from iipub.core.severity import Severity
from iipub.model.track_views import Figures, TrackRef
from iipub.observe import queries
from iipub.provider.factory import settings_from_dict
from iipub.store import clock, db, tables
from tests.support.cli import run_cli
from tests.support.rows import record_heartbeats

pytestmark = pytest.mark.no_auto_schedule


def _quarantine(db_url: str, reason: str, hours: float) -> None:
    """The one scheduled job quarantined for `reason`, `hours` ago by the database clock."""
    engine = db.make_engine(db_url)
    try:
        with engine.begin() as conn:
            since = clock.read_now(conn) - dt.timedelta(hours=hours)
            job_id = conn.execute(sa.select(tables.jobs.c.id).limit(1)).scalar_one()
            conn.execute(tables.jobs.update().where(tables.jobs.c.id == job_id).values(
                state="QUARANTINED", quarantine_reason=reason, state_entered_at=since))
        record_heartbeats(engine, "reconcile", "relay")
    finally:
        engine.dispose()


@pytest.fixture
def env(db_url: str, cli_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    run_cli("db", "migrate", env=cli_env, check=True)
    run_cli("schedule", "--date", "2026-01-05", "--product", "daily-brief", env=cli_env, cwd=tmp_path, check=True)
    return cli_env


def test_a_quarantine_past_its_reasons_limit_is_critical(db_url: str, env: dict[str, str], tmp_path: Path) -> None:
    _quarantine(db_url, "create_outcome_unknown", hours=1.5)  # default limit for this reason: 1 h
    check = run_cli("status", "--check", env=env, cwd=tmp_path)
    assert check.returncode == 2, check.stdout
    assert "1 quarantined job create_outcome_unknown unreleased > 1h" in check.stdout, check.stdout
    assert "queue_overdue=1;;0" in check.stdout

    doc = json.loads(run_cli("status", "--json", env=env, cwd=tmp_path).stdout)
    (queue,) = doc["queues"]
    assert (queue["kind"], queue["reason"], queue["count"], queue["overdue"], queue["critical_after_seconds"]) == \
        ("quarantine", "create_outcome_unknown", 1, 1, 3600.0)
    assert 5300 < queue["oldest_seconds"] < 5500
    human = run_cli("status", env=env, cwd=tmp_path).stdout
    assert "OPERATOR QUEUE" in human and "create_outcome_unknown" in human


def test_a_young_quarantine_stays_a_warning_and_the_limit_is_configurable(db_url: str, env: dict[str, str],
                                                                          tmp_path: Path) -> None:
    _quarantine(db_url, "poll_budget_exhausted", hours=2)  # default limit: 4 h
    check = run_cli("status", "--check", env=env, cwd=tmp_path)
    assert check.returncode == 1 and "unreleased" not in check.stdout, check.stdout
    cfg = tmp_path / "iipub.toml"
    cfg.write_text("[status.critical_after_by_reason]\npoll_budget_exhausted = 3600\n", encoding="utf-8")
    tighter = run_cli("status", "--check", env={**env, "IIPUB_CONFIG": str(cfg)}, cwd=tmp_path)
    assert tighter.returncode == 2 and "poll_budget_exhausted unreleased > 1h" in tighter.stdout, tighter.stdout
    cfg.write_text("[status]\nquarantine_critical_after_seconds = 3600\n", encoding="utf-8")
    default = run_cli("status", "--check", env={**env, "IIPUB_CONFIG": str(cfg)}, cwd=tmp_path)
    assert default.returncode == 2, default.stdout


def test_an_unknown_reason_in_the_limits_is_refused() -> None:
    from iipub.core.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown reason 'no_such'"):
        settings_from_dict({"status": {"critical_after_by_reason": {"no_such": 60}}})
    with pytest.raises(ConfigError, match="seconds between"):
        settings_from_dict({"status": {"critical_after_by_reason": {"config_drift": -1}}})


def test_a_parked_track_past_its_limit_is_critical_and_in_prometheus(db_url: str, env: dict[str, str]) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from iipub.observe import metrics

    settings = settings_from_dict({"status": {"parked_critical_after_seconds": 600}})
    engine = db.make_engine(db_url)
    try:
        report = queries.collect(engine, settings)
    finally:
        engine.dispose()
    old = TrackRef("0123456789ab", "daily-brief", dt.date(2026, 1, 5), "es", "VALIDATION_FAILED_RETAINED", 900.0)
    young = TrackRef("abcdef012345", "daily-brief", dt.date(2026, 1, 5), "en", "VALIDATION_FAILED_RETAINED", 60.0)
    import dataclasses

    report = dataclasses.replace(report, tracks=Figures(counts={}, parked=(old, young)))
    code, line = report.check()
    assert code == Severity.CRITICAL and "1 parked track validation_failed_retained unreleased > 10m" in line, line
    assert "01234567 es" in line
    families = {f.name: f for f in text_string_to_metric_families(metrics.render(report).decode())}
    depth = {s.labels["reason"]: s.value for s in families["iipub_queue_depth"].samples}
    overdue = {s.labels["reason"]: s.value for s in families["iipub_queue_overdue"].samples}
    assert depth == {"validation_failed_retained": 2.0} and overdue == {"validation_failed_retained": 1.0}
