"""Error budgets: each SLO's budget over a rolling window and its multiwindow burn rates (the SRE
workbook's 1h/5m at 14.4x and 6h/30m at 6x) in `status`, `--json`, Prometheus and `--check`; while
a budget is spent the check says the change freeze is on and a configuration edit is flagged in
the journal."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from iipub.core.severity import Severity
from iipub.observe import error_budget as eb
from iipub.store import clock, db, tables
from tests.support.cli import run_cli

NOW = dt.datetime(2026, 3, 1, 12, 0, 0)


def _samples(spec: Sequence[tuple[float, bool]]) -> list[tuple[dt.datetime, bool]]:
    """(minutes ago, good) -> (when, good)."""
    return [(NOW - dt.timedelta(minutes=m), good) for m, good in spec]


def test_budget_left_and_burn_rates() -> None:
    # 1,000 good samples over the month and 5 bad ones: half the budget of a 99 % SLO (10 allowed)
    spec = [(m * 40.0, True) for m in range(1, 1001)] + [(3 * 1440.0 + i, False) for i in range(5)]
    b = eb.compute("x", 0.99, _samples(spec), NOW, 30 * 86400)
    assert (b.events, b.bad) == (1005, 5)
    assert b.left == pytest.approx(1 - 5 / 10.05)
    assert not b.spent and not b.fast_burn and not b.slow_burn
    assert b.rate("1h") == 0.0

    # the last hour: 1 bad of 2 samples is 50x; the last 5 minutes the same: fast burn
    hot = eb.compute("x", 0.99, _samples([(2, False), (3, True), (50, True)]), NOW, 30 * 86400)
    assert hot.rate("5m") == pytest.approx(50.0) and hot.rate("1h") == pytest.approx(1 / 3 / 0.01)
    assert hot.fast_burn and hot.spent
    # bad long ago, nothing now: the long window burns, the short one does not: no alert
    cooled = eb.compute("x", 0.99, _samples([(50, False), (55, False), (2, True), (20, True)]), NOW, 30 * 86400)
    assert cooled.rate("1h") > 14.4 and cooled.rate("5m") == 0.0 and not cooled.fast_burn
    no_samples = eb.compute("x", 0.99, [], NOW, 30 * 86400)
    assert no_samples.left == 1.0 and not no_samples.spent
    assert eb.compute("x", 0.99, _samples([(60 * 24 * 40, False)]), NOW, 30 * 86400).events == 0  # outside the window


def test_slow_burn_needs_both_windows() -> None:
    # 6h: 3 bad of 40 (7.5 % / 1 % = 7.5x); 30m: 1 bad of 5 (20x > 6, and 1h < 14.4)
    spec = [(10, False), *[(11 + i, True) for i in range(4)], (100, False), (200, False),
            *[(40 + i * 8, True) for i in range(33)]]
    b = eb.compute("x", 0.99, _samples(spec), NOW, 30 * 86400)
    assert b.rate("6h") > 6 and b.rate("30m") > 6 and b.rate("5m") == 0.0
    assert b.slow_burn and not b.fast_burn
    # the same hours, the last 30 minutes clean: no alert (the burn is over)
    over = eb.compute("x", 0.99, _samples([(m + 30, good) for m, good in spec]), NOW, 30 * 86400)
    assert over.rate("30m") == 0.0 and not over.slow_burn


def _migrated(cli_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    cfg = tmp_path / "iipub.toml"
    cfg.write_text(f'[ledger]\npath = "{tmp_path / "ledger.jsonl"}"\n', encoding="utf-8")
    env = {**cli_env, "IIPUB_CONFIG": str(cfg)}
    run_cli("db", "migrate", env=env, check=True)
    return env


def _created_a_day_ago(db_url: str) -> None:
    """The slots were created a day ago (cron scheduled them, then nothing dispatched them)."""
    engine = db.make_engine(db_url)
    try:
        with engine.begin() as conn:
            day_ago = clock.read_now(conn) - dt.timedelta(days=1)
            conn.execute(tables.jobs.update().values(created_at=day_ago))
    finally:
        engine.dispose()


def test_a_spent_budget_turns_the_freeze_on_and_flags_a_configuration_edit(db_url: str, cli_env: dict[str, str],
                                                                          tmp_path: Path) -> None:
    env = _migrated(cli_env, tmp_path)
    healthy = json.loads(run_cli("status", "--json", env=env, cwd=tmp_path).stdout)
    assert healthy["change_freeze"] == {"on": False, "slos": []}
    assert healthy["error_budgets"]["time_to_dispatch"]["budget_left"] == 1.0
    cfg = Path(env["IIPUB_CONFIG"])
    # a slot whose window opened days ago and was never dispatched: a bad dispatch sample now
    run_cli("schedule", "--date", "2026-01-05", "--product", "daily-brief", env=env, cwd=tmp_path, check=True)
    _created_a_day_ago(db_url)
    doc = json.loads(run_cli("status", "--json", env=env, cwd=tmp_path).stdout)
    budget = doc["error_budgets"]["time_to_dispatch"]
    assert (budget["events"], budget["bad"], budget["spent"]) == (1, 1, True)
    assert budget["burn_rates"]["5m"] == pytest.approx(100.0) and budget["fast_burn"]
    assert doc["change_freeze"] == {"on": True, "slos": ["time_to_dispatch"]}

    check = run_cli("status", "--check", env=env, cwd=tmp_path)
    assert "change freeze on: error budget spent for time_to_dispatch" in check.stdout, check.stdout
    # one bad sample burns 100x but does not page: fewer than burn_page_min_bad_events (3)
    assert "time_to_dispatch error budget burning fast: 100.0x over 1h" in check.stdout
    assert "budget_left_time_to_dispatch=-9900.0%;0:;0:" in check.stdout and "change_freeze=1;0" in check.stdout

    prom = tmp_path / "iipub.prom"
    run_cli("status", "--prometheus", str(prom), env=env, cwd=tmp_path)
    families = {f.name: f for f in text_string_to_metric_families(prom.read_text(encoding="utf-8"))}
    assert families["iipub_change_freeze"].samples[0].value == 1.0
    burn = {(s.labels["slo"], s.labels["window"]): s.value for s in families["iipub_error_budget_burn_rate"].samples}
    assert burn[("time_to_dispatch", "1h")] == pytest.approx(100.0)
    left = {s.labels["slo"]: s.value for s in families["iipub_error_budget_left_ratio"].samples}
    assert left["time_to_dispatch"] < 0 and left["unretrieved_dwell"] == 1.0

    human = run_cli("status", env=env, cwd=tmp_path).stdout
    assert "ERROR BUDGETS" in human and "CHANGE FREEZE ON (time_to_dispatch)" in human

    # an operator edits the configuration during the freeze: accepted, and flagged in the journal
    cfg.write_text(cfg.read_text(encoding="utf-8") + "[budgets]\nmax_generation_attempts = 2\n", encoding="utf-8")
    edited = run_cli("schedule", "--date", "2026-01-06", "--product", "daily-brief", env=env, cwd=tmp_path)
    assert edited.returncode == 0 and "change freeze" in edited.stderr
    engine = db.make_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.select(tables.config_identity.c.kind, tables.config_identity.c.during_freeze,
                                          tables.config_identity.c.reason)
                                .order_by(tables.config_identity.c.id)).all()
    finally:
        engine.dispose()
    assert [(k, bool(f)) for k, f, _ in rows] == [("adopted", False), ("edited", True)]
    assert "time_to_dispatch" in rows[-1][2]
    shown = run_cli("config", "show", env=env, cwd=tmp_path).stdout
    assert "FREEZE" in shown


def test_a_fast_burn_of_enough_bad_samples_pages(db_url: str, cli_env: dict[str, str], tmp_path: Path) -> None:
    env = _migrated(cli_env, tmp_path)
    for day in ("2026-01-05", "2026-01-06", "2026-01-07"):
        run_cli("schedule", "--date", day, "--product", "daily-brief", env=env, cwd=tmp_path, check=True)
    _created_a_day_ago(db_url)
    check = run_cli("status", "--check", env=env, cwd=tmp_path)
    assert check.returncode == 2 and "time_to_dispatch error budget burning fast" in check.stdout
    doc = json.loads(run_cli("status", "--json", env=env, cwd=tmp_path).stdout)
    problem = [p for p in doc["check"]["problems"] if "burning fast" in p["text"]]
    assert problem and problem[0]["severity"] == "CRITICAL"


def test_the_freeze_alone_is_said_on_an_ok_line(engine: sa.Engine) -> None:
    """A month's budget spent by one late edition long ago: the line says the freeze is on, the
    check stays OK (no WARNING held for a month)."""
    import dataclasses

    from iipub.observe import queries
    from iipub.provider.factory import settings_from_dict
    from tests.support.rows import record_heartbeats

    record_heartbeats(engine, "reconcile", "relay")
    report = queries.collect(engine, settings_from_dict({}))
    spent = eb.compute("time_to_dispatch", 0.99, _samples([(60 * 24 * 3, False), (60 * 24 * 2, True)]), NOW,
                       30 * 86400)
    assert spent.spent and not spent.fast_burn and not spent.slow_burn
    frozen = dataclasses.replace(report, budgets=(spent,))
    code, line = frozen.check()
    assert code == Severity.OK and line.startswith("IIPUB OK - ")
    assert "; change freeze on: error budget spent for time_to_dispatch over 30d" in line.split("|")[0]
    assert "change_freeze=1;0" in line and frozen.to_dict()["change_freeze"] == {"on": True,
                                                                                 "slos": ["time_to_dispatch"]}
