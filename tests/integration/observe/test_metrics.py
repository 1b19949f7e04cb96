"""`iipub status --prometheus PATH` (in process, `iipub.cli.main`): the node_exporter textfile is
written atomically beside the usual output, and parsed back with prometheus_client's own parser
it holds the figures of the database itself."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from iipub.provider.factory import settings_from_dict
from iipub.store import clock, tables
from iipub.store.job_store import Store
from tests.support.cli import clean_env, one_line_error, run_cli
from tests.support.rows import record_heartbeats


def metrics(path: Path) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """metric name -> {sorted labels: value}."""
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(path.read_text(encoding="utf-8")):
        assert family.name.startswith("iipub_") and family.documentation, family.name
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


@pytest.fixture
def populated(engine: sa.Engine) -> sa.Engine:
    """Jobs in a few states (slots of past dates, some moved on by hand), tokens spent, runs recorded."""
    products = settings_from_dict({}).products
    with engine.connect() as conn:
        today = clock.read_now(conn).date()
    store = Store(engine, "test")
    for name in products:
        for back in range(3):
            assert store.schedule(products[name], today - dt.timedelta(days=back))
    with engine.begin() as conn:
        ids = list(conn.execute(sa.select(tables.jobs.c.id).order_by(tables.jobs.c.product, tables.jobs.c.edition_date))
                   .scalars())
        conn.execute(tables.jobs.update().where(tables.jobs.c.id.in_(ids[:2])).values(
            state="QUARANTINED", quarantine_reason="create_outcome_unknown"))
        conn.execute(tables.jobs.update().where(tables.jobs.c.id == ids[2]).values(
            state="QUARANTINED", quarantine_reason="poll_budget_exhausted"))
        conn.execute(tables.jobs.update().where(tables.jobs.c.id == ids[3]).values(
            state="DELETED", input_tokens=1200, output_tokens=3400, total_tokens=4600))
    record_heartbeats(engine)
    return engine


def test_the_textfile_holds_the_database_s_figures(populated: sa.Engine, cli_env: dict[str, str],
                                                   tmp_path: Path) -> None:
    path = tmp_path / "textfile" / "iipub.prom"
    path.parent.mkdir()
    result = run_cli("status", "--check", "--prometheus", str(path), env=cli_env, cwd=tmp_path)
    assert result.stdout.startswith("IIPUB ") and len(result.stdout.strip().splitlines()) == 1  # as ever
    assert sorted(p.name for p in path.parent.iterdir()) == ["iipub.prom"]  # no temp file left
    m = metrics(path)

    with populated.connect() as conn:
        by_state = Counter({(p, s): int(n) for p, s, n in conn.execute(
            sa.select(tables.jobs.c.product, tables.jobs.c.state, sa.func.count()).group_by(tables.jobs.c.product,
                                                                                   tables.jobs.c.state))})
        tokens = conn.execute(sa.select(sa.func.sum(tables.jobs.c.input_tokens),
                                        sa.func.sum(tables.jobs.c.output_tokens),
                                        sa.func.sum(tables.jobs.c.total_tokens))).one()
    jobs = {(dict(k)["product"], dict(k)["state"]): v for k, v in m["iipub_jobs"].items()}
    assert {k: v for k, v in jobs.items() if v} == by_state
    assert jobs[("daily-brief", "PUBLISHED")] == 0  # every state has a series, zero included
    quarantined = {dict(k)["reason"]: v for k, v in m["iipub_quarantined_jobs"].items()}
    assert {r: v for r, v in quarantined.items() if v} == {"create_outcome_unknown": 2, "poll_budget_exhausted": 1}
    spend = Counter[str]()
    for k, v in m["iipub_spend_tokens"].items():
        spend[dict(k)["kind"]] += int(v)
    assert (spend["input"], spend["output"], spend["total"]) == tuple(tokens) == (1200, 3400, 4600)

    doc = json.loads(run_cli("status", "--json", env=cli_env, cwd=tmp_path).stdout)
    for sli, key in (("time_to_dispatch", "time_to_dispatch"), ("unretrieved_dwell", "unretrieved_dwell")):
        assert m["iipub_sli_samples"][(("sli", sli),)] == doc["slis"][key]["count"]
        assert m["iipub_sli_slo_seconds"][(("sli", sli),)] == doc["slis"][key]["slo_seconds"]
    assert m["iipub_outbox_unpublished_events"][()] == doc["outbox"]["unpublished"] == 0
    assert m["iipub_outbox_lag_seconds"][()] == 0
    assert m["iipub_create_breaker_open"][()] == 0 and m["iipub_creates_paused"][()] == 0
    assert m["iipub_orphan_responses"][()] == 0 and m["iipub_webhooks_healthy"][()] == 0
    for command in ("reconcile", "relay"):
        assert 0 <= m["iipub_heartbeat_age_seconds"][(("command", command),)] < 30
        assert m["iipub_heartbeat_last_run_ok"][(("command", command),)] == 1
        last_ok = doc["heartbeats"][command]["last_ok"]["finished_at"]
        assert m["iipub_heartbeat_last_ok_timestamp_seconds"][(("command", command),)] == pytest.approx(
            dt.datetime.fromisoformat(last_ok).timestamp(), abs=0.001)
    assert m["iipub_check_status"][()] == result.returncode == doc["check"]["code"]

    # Paused, and written again over the same file: the new figures replace the old.
    assert run_cli("pause", "--reason", "drill", "--by", "ops", env=cli_env, cwd=tmp_path).returncode == 0
    again = run_cli("status", "--json", "--prometheus", str(path), env=cli_env, cwd=tmp_path)
    assert again.returncode == 0 and json.loads(again.stdout)["create_gate"]["paused"] is True  # JSON as ever
    assert metrics(path)["iipub_creates_paused"][()] == 1
    assert sorted(p.name for p in path.parent.iterdir()) == ["iipub.prom"]


def test_an_unwritable_path_is_one_error_line_or_a_warning_under_check(
    engine: sa.Engine, cli_env: dict[str, str], tmp_path: Path
) -> None:
    record_heartbeats(engine)
    missing = tmp_path / "no-such-dir" / "iipub.prom"
    plain = run_cli("status", "--prometheus", str(missing), env=cli_env, cwd=tmp_path)
    assert plain.stdout.startswith("iipub status at ")  # the report itself is printed
    one_line_error(plain, 73, f"cannot write metrics file {missing}")

    check = run_cli("status", "--check", "--prometheus", str(missing), env=cli_env, cwd=tmp_path)
    assert check.returncode == 1, check.stdout
    assert check.stdout.startswith("IIPUB WARNING - cannot write metrics file ") and "No such file" in check.stdout
    assert not missing.parent.exists()


def test_without_a_database_nothing_is_written(tmp_path: Path) -> None:
    env = {**clean_env(), "IIPUB_DATABASE_URL": f"sqlite:///{tmp_path / 'empty.sqlite3'}"}
    path = tmp_path / "iipub.prom"
    check = run_cli("status", "--check", "--prometheus", str(path), env=env, cwd=tmp_path)
    assert check.returncode == 3 and check.stdout.startswith("IIPUB UNKNOWN - schema not ready")
    assert not path.exists()  # a stale file ages visibly (iipub_status_generated_timestamp_seconds)
