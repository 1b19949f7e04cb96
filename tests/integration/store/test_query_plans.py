"""Every per-minute query reads through an index: against months of history copied from a really
published slot, each statement the cron commands and the monitoring send (an idle reconcile and
relay with their wake-up recorder, the wake-up check's own SQL, a working tick, `status --check`,
`status --prometheus`, the heartbeats) is captured as it runs and explained, and
none scans a history table whole (MariaDB's EXPLAIN: no `ALL` or full `index` access; SQLite's
EXPLAIN QUERY PLAN: no `SCAN` of one), nor reads the journal's (state, at) indexes without
their time range (every entry into a state ever)."""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from iipub.provider.openai.simulator import Simulator
from iipub.store import clock, db, tables, wakeup_sql
from tests.integration.observe.test_idle_check import _set_db_time, _with_reconcile, check, full
from tests.support import history
from tests.support.cli import run_cli
from tests.support.settings import sim_env

HISTORY_TABLES = frozenset({"jobs", "tracks", "job_events", "editions", "spend", "outbox", "runs",
                            "outbox_deliveries", "webhook_deliveries", "provider_deletes"})
HISTORY_DAYS = 366
# The counts `status` shows of every job and track ever (by state) still read the whole history,
# but only a narrow index of it, never the rows: a few bytes per slot, not its payloads. Any
# other statement reading a history table whole fails the test.
WHOLE_HISTORY_COUNTS = {
    "GROUP BY jobs.product, jobs.state": "ix_jobs_product_state",
    "GROUP BY tracks.product, tracks.lang, tracks.state": "ix_tracks_product_lang_state",
}
# The journal's indexes by state and time: read by a state alone, they hold every entry into (or
# out of) that state ever.
STATE_TIME_INDEXES = frozenset({"ix_job_events_to_at", "ix_job_events_from_at"})


@pytest.fixture
def env(engine: sa.Engine, cli_env: dict[str, str], sim: Simulator, tmp_path: Path) -> dict[str, str]:
    """As tests/integration/observe/test_idle_check.py's: today's slots scheduled at 00:30, no catch-up days."""
    _set_db_time(engine, 0, 30)
    env = {**sim_env(cli_env, sim, tmp_path), "IIPUB_LOG_FORMAT": "json"}
    _with_reconcile(tmp_path, "catch_up_days = 0")
    return env


def _published_slot(engine: sa.Engine, env: dict[str, str], tmp_path: Path) -> str:
    """Drive today's slots from NO_JOB to DELETED (created, polled, saved, delivered, cleaned up)."""
    _set_db_time(engine, 6)
    for _ in range(40):
        full(env, tmp_path)
        full(env, tmp_path, "relay")
        with engine.connect() as conn:
            deleted = conn.execute(sa.select(tables.jobs.c.id).where(tables.jobs.c.state == "DELETED")
                                   .order_by(tables.jobs.c.id)).scalars().first()
            states = set(conn.execute(sa.select(tables.jobs.c.state)).scalars())
        if deleted is not None and states == {"DELETED"}:
            return str(deleted)
        clock.advance_clock(engine, 120)
        time.sleep(0.05)
    raise AssertionError(f"no slot published and cleaned up: {states}")


@contextmanager
def _captured() -> Iterator[list[tuple[str, Any]]]:
    """Every statement any engine sends meanwhile, with its parameters."""
    seen: list[tuple[str, Any]] = []

    def before(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if not executemany:
            seen.append((statement, parameters))

    event.listen(sa.engine.Engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(sa.engine.Engine, "before_cursor_execute", before)


_NAME = re.compile(r"^(\w+?)(?:_\d+)?$")


def _scans(conn: sa.Connection, statement: str, parameters: Any) -> list[str]:
    """The history tables `statement` reads whole, by the database's own plan."""
    if db.dialect_family(conn) == "mysql":
        rows = conn.exec_driver_sql(f"EXPLAIN {statement}", parameters).mappings().all()
        out = []
        for r in rows:
            name = _NAME.match(str(r["table"] or ""))
            # A whole index read in order stops at a LIMIT (the newest heartbeat, one row).
            whole = r["type"] == "ALL" or (r["type"] == "index" and " LIMIT " not in statement
                                           and not _counted_by(statement, str(r["key"])))
            if name and name.group(1) in HISTORY_TABLES and whole:
                out.append(f"{r['table']}: {r['type']} (key {r['key']}, ~{r['rows']} rows)")
            elif r["key"] in STATE_TIME_INDEXES and r["type"] != "range":
                out.append(f"{r['table']}: {r['type']} by a state alone (key {r['key']}, ~{r['rows']} rows)")
        return out
    plan = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters).all()
    out = []
    for step in plan:
        detail = str(step[-1])
        found = re.match(r"SCAN (\w+)(?: USING (?:COVERING )?INDEX (\w+))?", detail)
        if found and ((found.group(2) and _counted_by(statement, found.group(2))) or " LIMIT " in statement):
            continue
        if found and _NAME.match(found.group(1)) and _NAME.match(found.group(1)).group(1) in HISTORY_TABLES:  # type: ignore[union-attr]
            out.append(detail)
        by_state = re.match(r"SEARCH \w+ USING (?:COVERING )?INDEX (\w+) \(\w+=\?\)$", detail)
        if by_state and by_state.group(1) in STATE_TIME_INDEXES:
            out.append(detail)
    return out


def _counted_by(statement: str, index: str) -> bool:
    """Whether `statement` is one of the whole-history counts, read from its narrow index."""
    return any(group in statement and index == key for group, key in WHOLE_HISTORY_COUNTS.items())


def _reads(statement: str) -> bool:
    verb = statement.lstrip().split(None, 1)[0].upper()
    return verb in ("SELECT", "UPDATE", "DELETE", "WITH") and any(
        re.search(rf"\b{t}\b", statement) for t in HISTORY_TABLES)


@pytest.mark.slow
def test_a_copied_slot_is_the_published_slot_but_for_ids_product_date_and_times(
        engine: sa.Engine, env: dict[str, str], tmp_path: Path) -> None:
    job_id = _published_slot(engine, env, tmp_path)
    template = history.template_of(engine, job_id)
    assert len(template.rows["job_events"]) >= 10 and len(template.rows["editions"]) == 2
    assert all(template.rows[name] for name in history.SLOT_TABLES), {n: len(r) for n, r in template.rows.items()}
    day = template.date - dt.timedelta(days=400)
    counter = iter(range(10**6, 10**7))
    copy = history.copy_slot(template, "another-product", day, lambda _name: next(counter))
    shift = dt.timedelta(days=-400)
    renamed = {"id", "job_id", "event_id", "edition_id", "response_id", "product", "edition_date", "payload"}
    for name in history.SLOT_TABLES:
        assert len(copy[name]) == len(template.rows[name]), name
        for old, new in zip(template.rows[name], copy[name], strict=True):
            assert set(old) == set(new), name
            for key, value in old.items():
                if isinstance(value, dt.datetime):
                    assert new[key] == value + shift, (name, key)
                elif key not in renamed or (key == "payload" and name != "outbox"):
                    assert new[key] == value, (name, key)
            if "product" in old:
                assert new["product"] == "another-product"
            if "edition_date" in old:
                assert new["edition_date"] == day
    outbox = json.loads(copy["outbox"][0]["payload"])
    assert job_id not in json.dumps(outbox) and copy["jobs"][0]["id"] in json.dumps(outbox)
    written = history.fill(engine, template, ["daily-brief", "revolution-watch"], [day, day - dt.timedelta(days=1)])
    assert written["jobs"] == 4 and written["job_events"] == 4 * len(template.rows["job_events"])


@pytest.mark.slow  # builds a published history, then EXPLAINs every statement
def test_every_per_minute_query_reads_through_an_index(engine: sa.Engine, env: dict[str, str],
                                                        tmp_path: Path) -> None:
    job_id = _published_slot(engine, env, tmp_path)
    template = history.template_of(engine, job_id)
    with engine.connect() as conn:
        now = clock.read_now(conn)
        products = sorted(set(conn.execute(sa.select(tables.jobs.c.product)).scalars()))
    days = [template.date - dt.timedelta(days=d) for d in range(1, HISTORY_DAYS + 1)]
    history.fill(engine, template, products, days)
    history.fill_runs(engine, 7, now)
    if db.dialect_family(engine) == "mysql":  # what InnoDB's automatic statistics hold after such growth
        with engine.connect() as conn:
            for name in sorted(HISTORY_TABLES):
                conn.exec_driver_sql(f"ANALYZE TABLE {name}").all()
    metrics = tmp_path / "iipub.prom"
    with _captured() as cron:
        for command in ("reconcile", "relay"):  # idle full runs, each recording its wake-up
            full(env, tmp_path, command)
        assert check(env, tmp_path)[0] == 0 and check(env, tmp_path, "relay")[0] == 0
    with _captured() as monitoring:
        run_cli("status", "--check", env=env, cwd=tmp_path)
        run_cli("status", "--prometheus", str(metrics), env=env, cwd=tmp_path)
    with _captured() as working:
        clock.advance_clock(engine, 86_400)  # a new day: its slots are scheduled and created
        full(env, tmp_path)
        full(env, tmp_path, "relay")
    assert metrics.exists()
    family = db.dialect_family(engine)
    statements = {s: p for s, p in cron if _reads(s)}
    statements[wakeup_sql.signature_sql(family)] = ()  # the check's own, on the driver alone
    statements[wakeup_sql.asleep_sql(family, "%s" if family == "mysql" else "?")] = ("reconcile", "x")
    statements.update({s: p for s, p in [*monitoring, *working] if _reads(s)})
    assert len(statements) > 10, len(statements)
    found: dict[str, list[str]] = {}
    with engine.connect() as conn:
        for statement, parameters in statements.items():
            scans = _scans(conn, statement, parameters)
            if scans:
                found[" ".join(statement.split())[:300]] = scans
    assert not found, json.dumps(found, indent=1)
