"""`iipub adopt FILE`: one refusal line per bad row, the good rows adopted through the fenced
path and the spend ledger, nothing paid, and a second run of the same file changes nothing.
`iipub export --in-flight` writes what `adopt` reads."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from iipub.model.states import Reason, State
from iipub.operate import adoption, handover
from iipub.provider.factory import load_settings
from iipub.provider.openai.simulator import Simulator
from iipub.settings.config import Settings
from iipub.store import tables
from iipub.store.job_store import Store
from tests.support.cli import one_line_error, run_cli
from tests.support.rows import job_events, job_rows, stored, utc_today
from tests.support.settings import ledger_file_of, sim_env

RID = "resp_" + "a" * 48


def _rid(n: int) -> str:
    return f"resp_{n:048d}"


@pytest.fixture
def env(cli_env: dict[str, str], sim: Simulator, tmp_path: Path) -> dict[str, str]:
    return sim_env(cli_env, sim, tmp_path)


def test_each_bad_row_is_refused_in_one_line_and_the_good_rows_are_adopted(
    env: dict[str, str], engine: sa.Engine, sim: Simulator, tmp_path: Path
) -> None:
    day = utc_today() - dt.timedelta(days=1)
    settings = load_settings(env)
    store = Store(engine, "test")
    store.schedule(settings.products["revolution-watch"], day)  # NO_JOB: adoptable
    taken = day - dt.timedelta(days=1)
    store.schedule(settings.products["daily-brief"], taken)
    job = store.list_jobs(day=taken)[0]
    leased = store.acquire_lease(job.id, job.version)
    assert leased is not None
    store.transition(leased, State.CREATE_ELIGIBLE, reason=Reason.WINDOW_OPEN)
    f = tmp_path / "legacy.csv"
    f.write_text("\n".join([
        "product,edition_date,response_id,attempts",
        f"daily-brief,{day},{_rid(1)},2",                 # 2: adopted
        f"revolution-watch,{day},{_rid(2)},1",            # 3: adopted onto the NO_JOB slot
        f"world-news,{day},{_rid(3)},1",                  # 4: unknown product
        f"daily-brief,2026-02-30,{_rid(4)},1",            # 5: bad date
        f"daily-brief,{day - dt.timedelta(days=5)},not-a-response,1",  # 6: malformed id
        f"daily-brief,{day},{_rid(5)},1",                 # 7: duplicate slot (line 2)
        f"daily-brief,{day - dt.timedelta(days=6)},{_rid(1)},1",  # 8: duplicate response (line 2)
        f"daily-brief,{taken},{_rid(6)},1",               # 9: the slot already has a job
        f"daily-brief,{day - dt.timedelta(days=7)},{_rid(7)},zero",  # 10: bad attempts
        f"daily-brief,{day - dt.timedelta(days=8)},,1",   # 11: no response id
    ]) + "\n")
    out = run_cli("adopt", str(f), "--reason", "cutover", env=env, cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    refusals = {int(m.group(1)): line for line in out.stdout.splitlines()
                if (m := re.match(r"line (\d+) \(.*\): refused: ", line))}
    assert sorted(refusals) == [4, 5, 6, 7, 8, 9, 10, 11], out.stdout
    for line, needle in {4: "unknown product", 5: "bad edition_date", 6: "malformed response_id",
                         7: "duplicate: line 2", 8: "duplicate: line 2", 9: "already has a job",
                         10: "attempts", 11: "no response_id"}.items():
        assert needle in refusals[line], refusals[line]
    assert "adopted 2, already adopted 0, refused 8" in out.stdout
    rows = {(r["product"], r["edition_date"]): r for r in job_rows(engine)}
    assert len(rows) == 3
    brief = rows["daily-brief", day]
    assert (brief["state"], brief["response_id"], brief["generation_attempts"], brief["origin"]) == (
        "ACCEPTED", _rid(1), 2, "adopted")
    assert brief["adopted_at"] is not None and brief["poll_count"] == 0
    watch = rows["revolution-watch", day]
    assert (watch["state"], watch["response_id"], watch["origin"]) == ("ACCEPTED", _rid(2), "adopted")
    last = job_events(engine, brief["id"])[-1]
    assert (last["from_state"], last["to_state"], last["reason"]) == ("NO_JOB", "ACCEPTED", "operator_adopt")
    assert rows["daily-brief", taken]["state"] == "CREATE_ELIGIBLE"  # untouched
    ledger = [json.loads(line) for line in (ledger_file_of(tmp_path)).read_text().splitlines()]
    assert [(r["t"], r["slot"], r["attempt"], r["response_id"]) for r in ledger] == [
        ("adopted", f"daily-brief/{day}", 2, _rid(1)), ("adopted", f"revolution-watch/{day}", 1, _rid(2))]
    assert sim.stats()["requests"]["create"] == 0  # nothing paid

    before = stored(engine)
    again = run_cli("adopt", str(f), "--reason", "cutover", env=env, cwd=tmp_path)
    assert again.returncode == 3
    assert "adopted 0, already adopted 2, refused 8" in again.stdout
    assert stored(engine) == before
    assert len((ledger_file_of(tmp_path)).read_text().splitlines()) == 2


def test_a_repeated_adopt_of_a_clean_file_changes_nothing_and_exits_0(
    env: dict[str, str], engine: sa.Engine, tmp_path: Path
) -> None:
    day = utc_today() - dt.timedelta(days=2)
    f = tmp_path / "legacy.jsonl"
    f.write_text(json.dumps({"product": "daily-brief", "edition_date": day.isoformat(), "response_id": RID,
                             "attempts": 1, "started_at": f"{day}T05:00:01Z"}) + "\n")
    dry = run_cli("adopt", str(f), "--dry-run", "--reason", "x", env=env, cwd=tmp_path)
    assert dry.returncode == 0 and "would adopt" in dry.stdout
    assert job_rows(engine) == []
    first = run_cli("adopt", str(f), "--reason", "x", env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    before = stored(engine)
    second = run_cli("adopt", str(f), "--reason", "x", "--json", env=env, cwd=tmp_path)
    assert second.returncode == 0
    doc = json.loads(second.stdout)
    assert doc["adopted"] == [] and [r["response_id"] for r in doc["already_adopted"]] == [RID]
    assert stored(engine) == before


def test_a_file_that_is_not_a_hand_over_file_is_one_error_line_and_nothing_written(
    env: dict[str, str], engine: sa.Engine, tmp_path: Path
) -> None:
    f = tmp_path / "bad.csv"
    f.write_text("slot,response\ndaily-brief/2026-11-01,resp_x\n")
    one_line_error(run_cli("adopt", str(f), "--reason", "x", env=env, cwd=tmp_path), 2, "the header must name")
    one_line_error(run_cli("adopt", str(tmp_path / "missing.csv"), "--reason", "x", env=env, cwd=tmp_path), 2,
                   "cannot read")
    assert job_rows(engine) == []


def test_export_in_flight_writes_what_adopt_reads(env: dict[str, str], engine: sa.Engine, tmp_path: Path) -> None:
    day = utc_today() - dt.timedelta(days=1)
    rows = [handover.Row(0, "daily-brief", day, _rid(9), 2, dt.datetime(2026, 11, 1, 5, 0, 1), None)]
    f = tmp_path / "in.csv"
    f.write_text(handover.render(rows, "csv"))
    run_cli("adopt", str(f), "--reason", "x", env=env, cwd=tmp_path, check=True)
    for fmt in ("csv", "json"):
        out = run_cli("export", "--in-flight", "--format", fmt, env=env, cwd=tmp_path, check=True).stdout
        back, refused = handover.parse(out.encode(), {"daily-brief", "revolution-watch"}, utc_today())
        assert refused == []
        assert [(r.product, r.edition_date, r.response_id, r.attempts, r.state) for r in back] == [
            ("daily-brief", day, _rid(9), 2, "ACCEPTED")]
    assert [r.response_id for r in adoption.in_flight(engine)] == [_rid(9)]


def test_a_webhook_for_an_adopted_legacy_response_is_this_installation_s_own(
    cfg: Settings, engine: sa.Engine, sim: Simulator, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """The response carries no iipub metadata; the adopted job's row holding it is what makes it
    owned (the ownership rule), so a verified delivery takes custody instead of leaving it foreign."""
    from iipub.settings.config import WebhookSettings
    from iipub.webhooks import receiver as webhook
    from tests.integration.observe.test_cutover import legacy_create
    from tests.integration.webhooks.test_receiver import SECRET, event, signed

    day = utc_today() - dt.timedelta(days=1)
    rid = legacy_create(sim, sim_env(cli_env, sim, tmp_path), "daily-brief", day)
    p = cfg.products["daily-brief"]
    legacy = dataclasses.replace(cfg, products={"daily-brief": dataclasses.replace(
        p, items=14, prompt=load_settings({}).products["daily-brief"].prompt)})
    report = adoption.adopt(legacy, engine, handover.render([handover.Row(0, "daily-brief", day, rid)], "csv").encode(),
                            reason="cutover", by="ops")
    assert [r.response_id for r, _ in report.adopted] == [rid]
    sim.advance(30)
    hooked = dataclasses.replace(legacy, provider_webhook_secret=SECRET, webhooks=WebhookSettings(enabled=True))
    receiver = webhook.Receiver(hooked, engine=engine)
    try:
        body = event(rid)
        assert receiver.receive(body, signed(body)).status == 200
    finally:
        receiver.close()
    with engine.connect() as conn:
        outcomes = list(conn.execute(sa.select(tables.webhook_deliveries.c.outcome)).scalars())
    assert outcomes == ["custody"]
    (job,) = job_rows(engine)
    assert job["payload"] is not None and job["origin"] == "adopted"


def test_hostile_rows_are_refused_each_on_its_own_line_and_the_good_ones_adopted(
    env: dict[str, str], engine: sa.Engine, sim: Simulator, tmp_path: Path
) -> None:
    today = utc_today()
    day = today - dt.timedelta(days=1)
    typo = today.replace(year=today.year - 10)  # 2016 typed for 2026
    lines = [
        "product,edition_date,response_id,started_at,attempts",
        f"daily-brief,{day},{_rid(1)},,1",                                    # 2: adopted
        f"daily-brief,{day - dt.timedelta(days=1)},{_rid(2)},,\u00b2",        # 3: superscript two
        f"daily-brief,{day - dt.timedelta(days=2)},{_rid(3)},0001-01-01T00:00:00+01:00,1",  # 4: overflows UTC
        f"daily-brief,{day - dt.timedelta(days=3)},{_rid(4)},,{'9' * 40}",    # 5: overflow
        f"daily\x00-brief,{day - dt.timedelta(days=4)},{_rid(5)},,1",         # 6: NUL
        f"daily-brief,{day - dt.timedelta(days=5)},{_rid(6)},{'2026-01-01T' + '0' * 5000},1",  # 7: huge
        f"daily-brief,1900-01-01,{_rid(7)},,1",                               # 8: 1900
        f"daily-brief,{typo},{_rid(8)},,1",                                   # 9: a decade ago
        f"revolution-watch,{day},{_rid(9)},{today}T05:00:00Z,3",              # 10: adopted
    ]
    f = tmp_path / "hostile.csv"
    f.write_bytes(("\n".join(lines) + "\n").encode())
    out = run_cli("adopt", str(f), "--reason", "cutover", env=env, cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    refusals = {int(m.group(1)): line for line in out.stdout.splitlines()
                if (m := re.match(r"line (\d+) \(.*\): refused: ", line))}
    assert sorted(refusals) == [3, 4, 5, 6, 7, 8, 9], out.stdout
    for line, needle in {3: "attempts must be a whole number", 4: "bad started_at", 5: "attempts must be",
                         6: "unknown product", 7: "bad started_at", 8: "1900-01-01 is more than 366 days in the past",
                         9: f"{typo} is more than 366 days in the past"}.items():
        assert needle in refusals[line], refusals[line]
    assert "\x00" not in out.stdout
    assert "adopted 2, already adopted 0, refused 7" in out.stdout
    rows = {(r["product"], r["edition_date"]): r for r in job_rows(engine)}
    assert sorted(rows) == [("daily-brief", day), ("revolution-watch", day)]
    assert rows["revolution-watch", day]["generation_attempts"] == 3
    assert {r["state"] for r in rows.values()} == {"ACCEPTED"}
    assert sim.stats()["requests"]["create"] == 0
    # `schedule --date` refuses the same dates in the same words.
    sched = run_cli("schedule", "--date", "1900-01-01", env=env, cwd=tmp_path)
    one_line_error(sched, 2, "1900-01-01 is more than 366 days in the past")
