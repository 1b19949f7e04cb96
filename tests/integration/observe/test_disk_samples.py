"""The host under iipub: disk headroom of the filesystems holding the ledger, the static site,
the SQLite database and the logs (WARNING and CRITICAL before a write can fail), and the host's
clock against the database's (WARNING past `[status] clock_warn_seconds`), in `status`, `--json`,
`--check` and Prometheus."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from iipub.observe import queries
from iipub.provider.factory import load_settings
from iipub.provider.openai.simulator import Simulator
from tests.support.cli import run_cli

pytestmark = pytest.mark.no_auto_schedule


def _env(cli_env: dict[str, str], tmp_path: Path, status: str = "") -> dict[str, str]:
    (tmp_path / "logs").mkdir(exist_ok=True)
    cfg = tmp_path / "iipub.toml"
    cfg.write_text(f'[ledger]\npath = "{tmp_path / "state" / "ledger.jsonl"}"\n'
                   f'[sinks.static]\nroot = "{tmp_path / "public"}"\n'
                   f'[status]\nlog_dir = "logs"\n{status}', encoding="utf-8")
    env = {**cli_env, "IIPUB_CONFIG": str(cfg)}
    run_cli("db", "migrate", env=env, check=True)
    return env


def test_every_place_iipub_writes_is_measured(cli_env: dict[str, str], tmp_path: Path, db_url: str) -> None:
    env = _env(cli_env, tmp_path)
    settings = load_settings(env)
    paths = queries.watched_paths(settings)
    assert paths["ledger"] == str(tmp_path / "state") and paths["logs"] == str(tmp_path / "logs")
    assert paths["static_root"] == str(tmp_path / "public")
    doc = json.loads(run_cli("status", "--json", env=env, cwd=tmp_path).stdout)
    roles = {role for d in doc["disks"] for role in d["roles"]}
    assert {"ledger", "static_root", "logs"} <= roles
    for d in doc["disks"]:  # not made yet (state/, public/): measured at the nearest existing folder
        assert d["error"] is None and 0 < d["free_bytes"] <= d["size_bytes"] and 0 < d["free_ratio"] <= 1
    assert abs(doc["clock"]["offset_seconds"]) < 2
    check = run_cli("status", "--check", env=env, cwd=tmp_path).stdout
    assert "disk of" not in check.split("|")[0] and "clock_offset=" in check and "disk_free_" in check


def test_low_headroom_warns_then_is_critical(cli_env: dict[str, str], tmp_path: Path, db_url: str) -> None:
    warn = _env(cli_env, tmp_path, "disk_warn_free_percent = 100\ndisk_crit_free_percent = 0.001\n"
                                   "disk_crit_free_bytes = 0\n")
    check = run_cli("status", "--check", env=warn, cwd=tmp_path)
    line = check.stdout.split("|")[0]
    assert "disk of " in line and "free of" in line and "< 100%" in line, check.stdout
    assert "ledger" in line
    crit = _env(cli_env, tmp_path, f"disk_crit_free_bytes = {2 ** 60}\n")
    critical = run_cli("status", "--check", env=crit, cwd=tmp_path)
    assert critical.returncode == 2 and "disk of " in critical.stdout, critical.stdout
    prom = tmp_path / "m.prom"
    run_cli("status", "--prometheus", str(prom), env=crit, cwd=tmp_path)
    families = {f.name: f for f in text_string_to_metric_families(prom.read_text(encoding="utf-8"))}
    ratios = list(families["iipub_disk_free_ratio"].samples)
    assert ratios and all(0 < s.value <= 1 for s in ratios)
    assert any("ledger" in s.labels["roles"] for s in families["iipub_disk_free_bytes"].samples)


def test_a_host_clock_apart_from_the_databases_warns(cli_env: dict[str, str], tmp_path: Path, db_url: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    env = _env(cli_env, tmp_path)
    # The host's clock 30 s ahead of the database's: a test cannot move the machine's clock (root,
    # and every other test's clock with it), so `status` is handed a clock that reads 30 s ahead.
    monkeypatch.setattr(queries, "time", SimpleNamespace(time=lambda: time.time() + 30.0))
    check = run_cli("status", "--check", env=env, cwd=tmp_path)
    assert "host clock 30.0s ahead of the database's (> 5s" in check.stdout, check.stdout
    doc = json.loads(run_cli("status", "--json", env=env, cwd=tmp_path).stdout)
    assert doc["clock"]["offset_seconds"] == pytest.approx(-30.0, abs=1.0)
    prom = tmp_path / "m.prom"
    run_cli("status", "--prometheus", str(prom), env=env, cwd=tmp_path)
    families = {f.name: f for f in text_string_to_metric_families(prom.read_text(encoding="utf-8"))}
    assert families["iipub_clock_offset_seconds"].samples[0].value == pytest.approx(-30.0, abs=1.0)
    calm = _env(cli_env, tmp_path, "clock_warn_seconds = 60\n")
    assert "host clock" not in run_cli("status", "--check", env=calm, cwd=tmp_path).stdout


def test_a_filesystem_filling_fast_is_reported_before_it_is_full(cli_env: dict[str, str], tmp_path: Path,
                                                                db_url: str, sim: Simulator) -> None:
    """The relay samples the free space every ten minutes; `status` turns the trend into the
    time left: full within [status] disk_full_crit_hours (6) at this rate is CRITICAL."""
    import datetime as dt

    import sqlalchemy as sa

    from iipub.store import clock, db, tables

    env = {**_env(cli_env, tmp_path), "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": sim.url}
    assert run_cli("relay", env=env, cwd=tmp_path).returncode == 0  # the first run samples: none is there yet
    engine = db.make_engine(db_url)
    try:
        with engine.begin() as conn:
            rows = conn.execute(sa.select(tables.disk_samples)).mappings().all()
            assert rows and all(r["free_bytes"] > 0 for r in rows)
            # two hours ago the same filesystem had twice the free space: it fills in about two hours
            two_hours_ago = clock.read_now(conn) - dt.timedelta(hours=2)
            conn.execute(tables.disk_samples.update().values(at=two_hours_ago,
                                                             free_bytes=tables.disk_samples.c.free_bytes * 2))
    finally:
        engine.dispose()
    check = run_cli("status", "--check", env=env, cwd=tmp_path)
    assert check.returncode == 2, check.stdout
    assert "filling" in check.stdout and "at this rate" in check.stdout, check.stdout
    doc = json.loads(run_cli("status", "--json", env=env, cwd=tmp_path).stdout)
    assert all(d["filling_bytes_per_hour"] > 0 for d in doc["disks"])
    relaxed = _env(cli_env, tmp_path, "disk_full_warn_hours = 1\ndisk_full_crit_hours = 0.5\n")
    assert "at this rate" not in run_cli("status", "--check", env=relaxed, cwd=tmp_path).stdout
