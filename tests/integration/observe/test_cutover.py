"""The cutover drill (PRODUCT.md section 16, the seed's section 18): responses a legacy system
started at the provider without iipub -> `iipub adopt` -> shadow ticks (nothing created,
deleted or published; decisions journaled) -> cutover -> every edition published once, no
paid create by iipub for an adopted slot -> `pause --everything` and `export --in-flight`
while jobs are still in flight -> `adopt` into a second database, which finishes them with no
extra create and no second publication."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path
from typing import Any

import openai
import pytest
import sqlalchemy as sa

from iipub.provider.factory import load_settings
from iipub.provider.openai.adapter import create_input
from iipub.provider.openai.simulator import Simulator
from iipub.settings.edition_schema import text_format
from iipub.store import clock, db, migrate, tables
from tests.support.cli import run_cli
from tests.support.databases import fresh_database
from tests.support.rows import job_rows, utc_today
from tests.support.settings import ledger_file_of, sim_env


def legacy_create(sim: Simulator, env: dict[str, str], product: str, day: dt.date) -> str:
    """What the legacy poller does: a paid background create with the official SDK, without any
    iipub metadata."""
    p = load_settings(env).products[product]
    client = openai.OpenAI(api_key="sk-legacy", base_url=sim.url, max_retries=0)
    try:
        resp = client.responses.create(model=p.model, instructions=p.prompt, input=create_input(p, day),
                                       background=True, store=True,
                                       text={"format": text_format(p.languages, p.items)})  # type: ignore[call-overload]
    finally:
        client.close()
    rid = str(resp.id)
    assert rid.startswith("resp_")
    return rid


def cli_tick(env: dict[str, str], cwd: Path, sim: Simulator, *args: str) -> None:
    """One cron minute on the command line: `iipub reconcile`, `iipub relay`, then the simulator's clock moves on."""
    run_cli("reconcile", *args, env=env, cwd=cwd, check=True)
    run_cli("relay", env=env, cwd=cwd, check=True)
    sim.advance(5)


def reasons(engine: sa.Engine) -> Counter[str]:
    with engine.connect() as conn:
        return Counter(conn.execute(sa.select(tables.job_events.c.reason)).scalars())


def editions(engine: sa.Engine) -> Counter[tuple[str, str, str]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(tables.editions.c.product, tables.editions.c.edition_date,
                                      tables.editions.c.lang))
        return Counter((p, str(d)[:10], lang) for p, d, lang in rows)


def intents(ledger: Path) -> list[dict[str, Any]]:
    if not ledger.exists():
        return []
    return [rec for rec in map(json.loads, ledger.read_text().splitlines()) if rec["t"] == "intent"]


@pytest.mark.slow
def test_cutover_drill_from_a_legacy_poller_and_the_hand_back_to_a_second_database(
    cli_env: dict[str, str], engine: sa.Engine, sim: Simulator, tmp_path: Path
) -> None:
    legacy_file = tmp_path / "legacy-decisions.jsonl"
    env = sim_env(cli_env, sim, tmp_path)
    # The legacy decisions file is named in the config (the [reconcile] table already exists there).
    cfg = Path(env["IIPUB_CONFIG"])
    cfg.write_text(cfg.read_text().replace("[reconcile]\n", f'[reconcile]\nlegacy_decisions_file = "{legacy_file}"\n'))
    today = utc_today()
    days = [today - dt.timedelta(days=n) for n in (3, 2, 1)]

    # -- phase 2: the legacy system still runs; iipub adopts what it started -------------------------
    started = {day: legacy_create(sim, env, "daily-brief", day) for day in days}
    handover = tmp_path / "legacy.csv"
    handover.write_text("product,edition_date,response_id,started_at,attempts\n" + "".join(
        f"daily-brief,{day},{rid},{day}T05:00:00Z,{1 + i % 2}\n" for i, (day, rid) in enumerate(started.items())))
    out = run_cli("adopt", str(handover), "--reason", "cutover phase 2", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count(": adopted resp_") == 3, out.stdout
    adopted = {r["edition_date"]: r for r in job_rows(engine)}
    assert {r["state"] for r in adopted.values()} == {"ACCEPTED"}
    assert {r["origin"] for r in adopted.values()} == {"adopted"}
    assert [adopted[d]["generation_attempts"] for d in days] == [1, 2, 1]
    # A slot iipub has scheduled but the legacy system never started.
    run_cli("schedule", "--date", days[2].isoformat(), "--product", "revolution-watch", env=env, cwd=tmp_path,
            check=True)

    # -- shadow ticks: custody as usual, nothing created, deleted or published -----------------------
    for _ in range(4):
        cli_tick(env, tmp_path, sim, "--shadow")
    stats = sim.stats()
    assert stats["creates_total"] == 3  # the legacy system's own
    assert stats["deletes"] == 0 and stats["cancels"] == 0
    assert editions(engine) == Counter() and not (tmp_path / "public" / "daily-brief").exists()
    shadowed = reasons(engine)
    assert shadowed["retrieved"] == 3 and shadowed["shadow_would_publish"] == 6  # 3 slots x 2 language tracks
    assert shadowed["shadow_would_create"] >= 1  # revolution-watch (and today's slots once open)
    by_day = {(r["product"], r["edition_date"]): r for r in job_rows(engine)}
    assert {by_day["daily-brief", d]["state"] for d in days} == {"COMPOSED_NOT_SAVED"}
    assert by_day["revolution-watch", days[2]]["state"] == "NO_JOB"
    # The legacy system published the first edition meanwhile; status compares.
    legacy_file.write_text(json.dumps({"product": "daily-brief", "edition_date": days[0].isoformat(),
                                       "action": "publish"}) + "\n" + "".join(
        json.dumps({"product": "daily-brief", "edition_date": d.isoformat(), "action": "create"}) + "\n"
        for d in days))
    status = json.loads(run_cli("status", "--json", env=env, cwd=tmp_path).stdout)["cutover"]
    assert status["shadow_decisions"]["publish"] == 3
    diffs = {(d["product"], d["edition_date"], d["action"]): d for d in status["differences"]}
    assert ("daily-brief", days[0].isoformat(), "publish") not in diffs  # both agree
    assert diffs["daily-brief", days[1].isoformat(), "publish"]["shadow"] is True
    assert diffs["revolution-watch", days[2].isoformat(), "create"]["legacy"] is False
    # The legacy creates iipub adopted are not differences (today's slot, not started by it, is).
    assert not any(k[2] == "create" and k[0] == "daily-brief" and k[1] != today.isoformat() for k in diffs)

    # -- phase 4: cutover. Shadowed steps are looked at again within five minutes. ------------------
    clock.advance_clock(engine, 301)
    run_cli("reconcile", env=env, cwd=tmp_path, check=True)
    run_cli("relay", env=env, cwd=tmp_path, check=True)
    published = editions(engine)
    assert {(p, d) for p, d, _ in published} >= {("daily-brief", d.isoformat()) for d in days}
    assert set(published.values()) == {1}
    adopted_slots = {f"daily-brief/{d}" for d in days} | {f"revolution-watch/{days[1]}"}
    iipub_creates = [m for m in sim.stats()["create_metadata"] if m]
    assert iipub_creates and not {m["iipub_slot"] for m in iipub_creates} & adopted_slots
    assert not {rec["slot"] for rec in intents(ledger_file_of(tmp_path))} & adopted_slots
    # A late legacy create, adopted right after cutover: not polled yet when the hand-back is taken
    # (nor is the slot iipub created at cutover).
    late = legacy_create(sim, env, "revolution-watch", days[1])
    (tmp_path / "late.jsonl").write_text(json.dumps({"product": "revolution-watch", "edition_date":
                                                     days[1].isoformat(), "response_id": late}) + "\n")
    run_cli("adopt", str(tmp_path / "late.jsonl"), "--reason", "late legacy create", env=env, cwd=tmp_path,
            check=True)
    creates_before_handback = sim.stats()["creates_total"]

    # -- rollback drill: abort, hand back what is in flight -----------------------------------------
    run_cli("pause", "--everything", "--reason", "rollback drill", env=env, cwd=tmp_path, check=True)
    versions = {r["id"]: r["version"] for r in job_rows(engine)}
    run_cli("reconcile", env=env, cwd=tmp_path, check=True)
    assert {r["id"]: r["version"] for r in job_rows(engine)} == versions  # nothing moved
    check = run_cli("status", "--check", env=env, cwd=tmp_path)
    assert check.returncode == 2 and "finishing unretrieved" in check.stdout, check.stdout
    exported = run_cli("export", "--in-flight", "--format", "json", env=env, cwd=tmp_path, check=True).stdout
    rows = [json.loads(line) for line in exported.splitlines()]
    assert {(r["product"], r["edition_date"]) for r in rows} >= {("revolution-watch", days[1].isoformat()),
                                                                 ("revolution-watch", days[2].isoformat())}
    assert all(r["response_id"].startswith("resp_") and r["attempts"] >= 1 and r["state"] for r in rows)
    (tmp_path / "handback.jsonl").write_text(exported)

    with fresh_database(tmp_path / "second") as url2:
        (tmp_path / "second").mkdir(exist_ok=True)
        eng2 = db.make_engine(url2)
        try:
            migrate.migrate(eng2)
            cfg2 = tmp_path / "second.toml"
            cfg2.write_text(cfg.read_text().replace(str(tmp_path / "public"), str(tmp_path / "public2"))
                            .replace(str(ledger_file_of(tmp_path)), str(tmp_path / "ledger2.jsonl")))
            env2 = {**env, "IIPUB_DATABASE_URL": url2, "IIPUB_CONFIG": str(cfg2)}
            took = run_cli("adopt", str(tmp_path / "handback.jsonl"), "--reason", "rollback", env=env2, cwd=tmp_path)
            assert took.returncode == 0, took.stdout + took.stderr
            assert took.stdout.count(": adopted resp_") == len(rows)
            for _ in range(6):
                cli_tick(env2, tmp_path, sim)
            second = editions(eng2)
            checked = run_cli("check", "--ledger", env=env2, cwd=tmp_path)
            assert checked.returncode == 0, checked.stdout + checked.stderr
            assert {(p, d) for p, d, _ in second} == {(r["product"], r["edition_date"]) for r in rows}
            # Every handed-back job finished (a slot of today this database scheduled itself waits
            # for its window, which before 05:00 UTC has not opened).
            assert {r["state"] for r in job_rows(eng2) if r["origin"] == "adopted"} <= {
                "PUBLISHED", "CLEANUP_PENDING", "DELETED"}
        finally:
            eng2.dispose()
    assert sim.stats()["creates_total"] == creates_before_handback  # nothing paid again
    checked = run_cli("check", "--ledger", env=env, cwd=tmp_path)  # the journal adds up, adopted charges included
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert not set(editions(engine)) & set(second)  # each edition published by one database, once
    assert set(second.values()) == {1}
