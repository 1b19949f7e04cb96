"""`iipub report`: three days of real cron minutes (`iipub reconcile` / `relay` in process against
the simulator, the database clock moved a day between them) give a page whose tables hold the
database's own figures; every query goes through an index. The command's own cases (an empty
database, bad input) are tests/integration/cli/test_report_cmd.py's."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.provider.openai.simulator import Simulator, parse_fault_spec
from iipub.store import clock, history_rows, tables
from tests.integration.observe.test_idle_check import check as wakeup_check
from tests.support.cli import run_cli
from tests.support.databases import MYSQL_URL
from tests.support.settings import MIDNIGHT_PRODUCT_TOML, sim_env

CEILING = 900_000
CONFIG = MIDNIGHT_PRODUCT_TOML + f"[budgets]\nmax_tokens_per_day = {CEILING}\n"


class _Tables(HTMLParser):
    """Every `<table data-chart=KEY>` of the page as {key: [[cell, ...], ...]} (header row first)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._key: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._key = dict(attrs).get("data-chart")
            self.tables[self._key or "?"] = []
        elif tag == "tr" and self._key is not None:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None and self._key is not None:
            self.tables[self._key].append(self._row)
            self._row = None
        elif tag == "table":
            self._key = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        self.texts.append(data)


def parse(page: str) -> _Tables:
    p = _Tables()
    p.feed(page)
    return p


def by_day(table: list[list[str]]) -> dict[str, dict[str, str]]:
    head, *rows = table
    return {row[0]: dict(zip(head[1:], row[1:], strict=True)) for row in rows}


def _tick_until_deleted(env: dict[str, str], cwd: Path, sim: Simulator, engine: sa.Engine, day: dt.date) -> str:
    state = "?"
    for _ in range(12):
        run_cli("reconcile", env=env, cwd=cwd, check=True)
        run_cli("relay", env=env, cwd=cwd, check=True)
        sim.advance(5)
        with engine.connect() as conn:
            state = conn.execute(sa.select(tables.jobs.c.state).where(tables.jobs.c.edition_date == day)).scalar_one()
        if state in ("DELETED", "QUARANTINED"):
            break
    return state


def _days(engine: sa.Engine) -> dt.date:
    with engine.connect() as conn:
        return clock.read_now(conn).date()


@pytest.fixture
def three_days(engine: sa.Engine, cli_env: dict[str, str], sim: Simulator,
               tmp_path: Path) -> tuple[dict[str, str], list[tuple[dt.date, str]]]:
    """Three UTC days of cron minutes: the first day's create is refused by the provider
    (`fail_refused`, quarantined `provider_refused`), the next two are published."""
    env = sim_env(cli_env, sim, tmp_path, CONFIG)
    seen = []
    for n in range(3):
        day = _days(engine)
        seen.append((day, _tick_until_deleted(env, tmp_path, sim, engine, day)))
        if n < 2:
            clock.advance_clock(engine, 86_400)
    return env, seen


@pytest.mark.simulator(faults=(parse_fault_spec("fail_refused@create*1"),))
@pytest.mark.slow
def test_the_page_holds_the_database_s_figures(engine: sa.Engine, three_days: tuple[dict[str, str], Any],
                                               tmp_path: Path) -> None:
    env, seen = three_days
    assert [state for _, state in seen] == ["QUARANTINED", "DELETED", "DELETED"]
    code, _, _ = wakeup_check(env, tmp_path, "relay")  # a cron minute with nothing to deliver: an idle run
    out = tmp_path / "out" / "report.html"
    out.parent.mkdir()
    result = run_cli("report", "--days", "5", "--html", str(out), env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"wrote {out} (") and sorted(p.name for p in out.parent.iterdir()) == [
        "report.html"]
    page = out.read_text(encoding="utf-8")
    doc = parse(page)
    days = [d.isoformat() for d, _ in seen]
    first = (seen[0][0] - dt.timedelta(days=2)).isoformat()

    with engine.connect() as conn:
        spend = Counter[str]()
        for paid_at, total, estimated in conn.execute(sa.select(
                tables.spend.c.paid_at, tables.spend.c.total_tokens, tables.spend.c.estimated_tokens)):
            spend[paid_at.date().isoformat()] += int(total if total is not None else estimated)
        runs = Counter[tuple[str, str]]()
        for started, summary in conn.execute(sa.select(tables.runs.c.started_at, tables.runs.c.summary)):
            runs[(started.date().isoformat(), "idle" if json.loads(summary or "{}").get("idle") else "full")] += 1
        saved, late = Counter[str](), Counter[str]()
        for day, saved_at, opens_at in conn.execute(sa.select(
                tables.editions.c.edition_date, tables.editions.c.created_at, tables.jobs.c.opens_at).join(
                tables.jobs, tables.jobs.c.id == tables.editions.c.job_id)):
            saved[day.isoformat()] += 1
            if (saved_at - opens_at).total_seconds() > 3600:  # [status] late_after_minutes = 60
                late[day.isoformat()] += 1
        with_no_edition = [d.isoformat() for d in conn.execute(sa.select(tables.jobs.c.edition_date).where(
            tables.jobs.c.state == "QUARANTINED")).scalars()]
        reasons = Counter((at.date().isoformat(), r) for at, r, src in conn.execute(sa.select(
            tables.job_events.c.at, tables.job_events.c.reason, tables.job_events.c.from_state).where(
            tables.job_events.c.to_state == "QUARANTINED")) if src != "QUARANTINED")

    # spend per day against the ceiling: the spend table's own sums, every day of the range listed
    table = by_day(doc.tables["spend"])
    assert list(table) == [first, *[(seen[0][0] - dt.timedelta(days=1)).isoformat()], *days]
    assert {d: int(row["daily-brief"].replace(",", "")) for d, row in table.items()} == {
        d: spend.get(d, 0) for d in table}
    assert all(spend[d] > 0 for d in days)
    assert f"ceiling global: {CEILING:,}" in page
    # editions: the second and third days saved both languages (late when saved an hour past the slot's
    # opening at midnight); the refused first day saved none and is late as a slot
    table = by_day(doc.tables["editions"])
    assert {d: int(row["saved on time"]) for d, row in table.items()} == {
        d: saved.get(d, 0) - late.get(d, 0) for d in table}
    assert {d: int(row["late"]) for d, row in table.items()} == {
        d: late.get(d, 0) + with_no_edition.count(d) for d in table}
    assert saved[days[1]] == saved[days[2]] == 2 and saved[days[0]] == 0 and with_no_edition == [days[0]]
    # runs: every reconcile and relay run by day, full or idle
    table = by_day(doc.tables["runs"])
    assert {(d, kind): int(row[kind]) for d, row in table.items() for kind in ("idle", "full")
            if int(row[kind])} == dict(runs)
    assert code == 0 and runs[(days[2], "idle")] == 1  # the wake-up check's run is in the idle column
    # quarantines entered per day, by reason; and the one quarantined now, by age
    table = by_day(doc.tables["quarantines"])
    assert {(d, r): int(v) for d, row in table.items() for r, v in row.items() if r != "total" and int(v)} == dict(
        reasons)
    assert reasons == Counter({(days[0], "provider_refused"): 1})
    now_rows = doc.tables["quarantine-now"]
    assert now_rows[0][:2] == ["reason", "jobs"]
    assert dict(zip(now_rows[0], now_rows[1], strict=True)) | {"oldest": "?"} == {  # quarantined two days ago
        "reason": "provider_refused", "jobs": "1", "< 1 h": "0", "1–4 h": "0", "4–24 h": "0", "1–7 d": "1",
        "> 7 d": "0", "oldest": "?"}
    # dwell: a p50 and p95 on each day custody was taken
    table = by_day(doc.tables["dwell"])
    assert [d for d, row in table.items() if row["p50"] != "–"] == days[1:]
    # provider answers: the journal's reasons out of a create or poll
    table = by_day(doc.tables["provider"])
    assert sum(int(v) for row in table.values() for k, v in row.items() if k == "total") > 0
    # a read-only command: run with another configuration than the database's, it warns and writes
    other = tmp_path / "other.html"
    warned = run_cli("report", "--html", str(other), env={k: v for k, v in env.items() if k != "IIPUB_CONFIG"},
                     cwd=tmp_path)
    assert warned.returncode == 0 and other.is_file() and "another configuration" in warned.stderr, warned.stderr
    # self-contained: nothing to fetch, no script
    assert not re.search(r"<script|<link|@import|url\(|src=|href=", page, re.IGNORECASE)


def test_every_query_goes_through_an_index(engine: sa.Engine) -> None:
    """The database's own plan for each query: an index range, never a scan of the table."""
    since = dt.datetime(2026, 1, 1)
    statements = history_rows.statements(since, since + dt.timedelta(days=30), ["daily-brief"])
    with engine.connect() as conn:
        for name, statement in statements.items():
            compiled = statement.compile(conn, compile_kwargs={"literal_binds": True})
            if MYSQL_URL:
                plan = [dict(r) for r in conn.execute(sa.text(f"EXPLAIN {compiled}")).mappings()]
                assert plan and all(row["type"] not in ("ALL", "index") and row["key"] for row in plan), (name, plan)
            else:
                steps = [str(r[-1]) for r in conn.execute(sa.text(f"EXPLAIN QUERY PLAN {compiled}"))]
                assert steps and all("USING INDEX" in step or "USING COVERING INDEX" in step
                                     or "USING PRIMARY KEY" in step or "TEMP B-TREE" in step
                                     for step in steps), (name, steps)
                assert any("USING" in step for step in steps), (name, steps)
