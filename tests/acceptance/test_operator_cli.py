"""The operator commands through the `iipub` command line (in process: `iipub.cli.main` with
its own environment and stdout/stderr), against a real database (and the simulator over real
HTTP where a job must first be quarantined). Setup runs in-process through the library;
assertions read the database directly.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import sqlalchemy as sa

from iipub.machine import sweep
from iipub.provider.openai.simulator import Simulator
from iipub.settings.config import Settings
from iipub.store.job_store import Store
from tests.support.cli import CliResult, one_line_error, run_cli
from tests.support.rows import job_events, job_rows, job_versions, utc_today

JOB_KEYS = {"id", "product", "edition_date", "state", "version", "generation_attempts", "poll_count",
            "response_id", "quarantine_reason", "lease_owner", "lease_expiry", "next_attempt_at",
            "config_fingerprint"}


def iipub(*args: str, env: dict[str, str], cwd: Path) -> CliResult:
    return run_cli(*args, env=env, cwd=cwd)


def slot(engine: sa.Engine, settings: Settings, day: dt.date) -> str:
    store = Store(engine, "test-scheduler")
    store.schedule(settings.products["daily-brief"], day)
    return store.list_jobs(day=day)[0].id


def tick_daily_brief(settings: Settings, engine: sa.Engine) -> None:
    """One in-process tick on a single product that is due whatever the hour, with a provider
    timeout generous enough that a loaded machine does not turn a create ambiguous."""
    p = replace(settings.products["daily-brief"], opens_at=dt.time(0, 0))
    sweep.run(replace(settings, products={p.name: p}, provider=replace(settings.provider, timeout_seconds=10),
                          reconcile=replace(settings.reconcile, lease_seconds=30)), engine)


def quarantined(engine: sa.Engine, settings: Settings, sim: Simulator) -> str:
    """One job quarantined as create_outcome_unknown by a real tick."""
    sim.add_faults([{"op": "create", "fault": "drop_after_accept"}])
    tick_daily_brief(settings, engine)
    (job,) = job_rows(engine)
    assert (job["state"], job["quarantine_reason"]) == ("QUARANTINED", "create_outcome_unknown")
    return str(job["id"])


# -- quarantine -----------------------------------------------------------------------


@pytest.mark.slow
def test_quarantine_list_json_and_table(engine: sa.Engine, settings: Settings, sim: Simulator,
                                        cli_env: dict[str, str], tmp_path: Path) -> None:
    job_id = quarantined(engine, settings, sim)
    proc = iipub("quarantine", "list", "--json", env=cli_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (item,) = json.loads(proc.stdout)
    assert set(item) >= JOB_KEYS and "events" not in item
    assert (item["id"], item["state"], item["quarantine_reason"]) == (job_id, "QUARANTINED", "create_outcome_unknown")
    assert item["generation_attempts"] == 1 and item["poll_count"] == 0 and item["age_seconds"] >= 0
    human = iipub("quarantine", "list", env=cli_env, cwd=tmp_path).stdout.splitlines()
    assert human[0].split() == ["ID", "PRODUCT", "DATE", "REASON", "AGE", "RESPONSE", "GEN", "POLLS", "OUTPUT",
                                "LAST", "ERROR"]
    assert "none" in human[1].split()  # no response recorded: nothing to watch
    assert human[1].split()[:4] == [job_id, "daily-brief", str(job_rows(engine)[0]["edition_date"]),
                                    "create_outcome_unknown"]
    assert "1/3" in human[1] and "0/30" in human[1]


def test_release_usage_errors_and_unknown_id(engine: sa.Engine, settings: Settings, cli_env: dict[str, str],
                                             tmp_path: Path) -> None:
    job_id = slot(engine, settings, utc_today())
    before = job_versions(engine)
    proc = iipub("quarantine", "release", job_id, "--verified-lost", "--link", "resp_abc", "--reason", "r",
                 env=cli_env, cwd=tmp_path)
    one_line_error(proc, 2, "give exactly one of --verified-lost, --link RESP_ID, --resume-polling")
    # What is missing is named, all of it, whatever is missing (not only click's first required option).
    for args, needle in (
            ([job_id, "--reason", "r"], "missing a remedy: one of --verified-lost, --link RESP_ID, --resume-polling"),
            ([], ("missing a job ID (or --all --quarantine-reason R); a remedy: one of --verified-lost, --link "
                  "RESP_ID, --resume-polling; --reason TEXT")),
            (["--verified-lost"], "missing a job ID (or --all --quarantine-reason R); --reason TEXT"),
            ([job_id, "--resume-polling"], "missing --reason TEXT"),
            (["--all", "--verified-lost", "--reason", "r"], "missing --quarantine-reason R (with --all)")):
        proc = iipub("quarantine", "release", *args, env=cli_env, cwd=tmp_path)
        one_line_error(proc, 2, needle)
    proc = iipub("quarantine", "release", "00000000-0000-0000-0000-000000000000", "--verified-lost",
                 "--reason", "r", env=cli_env, cwd=tmp_path)
    one_line_error(proc, 4, "no job with id")
    assert job_versions(engine) == before


@pytest.mark.slow
def test_release_verified_lost_journals_who_and_why(engine: sa.Engine, settings: Settings, sim: Simulator,
                                                    cli_env: dict[str, str], tmp_path: Path) -> None:
    job_id = quarantined(engine, settings, sim)
    proc = iipub("quarantine", "release", job_id[:8], "--verified-lost", "--reason", "checked the dashboard",
                 "--by", "alice", env=cli_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (job,) = job_rows(engine)
    assert proc.stdout.strip() == f"job {job_id}: QUARANTINED -> CREATE_ELIGIBLE (version {job['version']})"
    assert job["state"] == "CREATE_ELIGIBLE" and job["quarantine_reason"] is None and job["lease_owner"] is None
    last = job_events(engine, job_id)[-1]
    assert (last["reason"], last["worker"]) == ("operator_release_verified_lost", "operator:alice")
    detail = json.loads(last["detail"])
    assert (detail["by"], detail["why"]) == ("alice", "checked the dashboard")


# -- one job ----------------------------------------------------------------------------


def test_suspend_resume_kill(engine: sa.Engine, settings: Settings, cli_env: dict[str, str],
                             tmp_path: Path) -> None:
    job_id = slot(engine, settings, utc_today() - dt.timedelta(days=3))
    moves = []
    for args in (("suspend", job_id, "--reason", "incident", "--by", "bob"), ("resume", job_id, "--by", "bob"),
                 ("kill", job_id, "--reason", "not wanted", "--by", "bob")):
        proc = iipub(*args, env=cli_env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        m = re.fullmatch(rf"job {job_id}: (\w+) -> (\w+) \(version (\d+)\)", proc.stdout.strip())
        assert m, proc.stdout
        moves.append((m.group(1), m.group(2), int(m.group(3))))
    (job,) = job_rows(engine)
    assert [m[:2] for m in moves] == [("NO_JOB", "MANUALLY_SUSPENDED"), ("MANUALLY_SUSPENDED", "NO_JOB"),
                                      ("NO_JOB", "CLEANUP_PENDING")]
    assert moves[-1][2] == job["version"] and job["kill_requested"]
    assert [(e["reason"], e["worker"]) for e in job_events(engine, job_id)][-3:] == [
        ("operator_suspend", "operator:bob"), ("operator_resume", "operator:bob"), ("operator_kill", "operator:bob")]


def test_refusal_is_one_line_and_changes_nothing(engine: sa.Engine, settings: Settings, cli_env: dict[str, str],
                                                 tmp_path: Path) -> None:
    job_id = slot(engine, settings, utc_today())
    before = job_versions(engine)
    one_line_error(iipub("resume", job_id, env=cli_env, cwd=tmp_path), 3, "not suspended; nothing to resume")
    assert job_versions(engine) == before


# -- backfill -----------------------------------------------------------------------------


def test_backfill_reports_created_and_present(engine: sa.Engine, cli_env: dict[str, str], tmp_path: Path) -> None:
    end = utc_today() - dt.timedelta(days=10)

    def day(back: int) -> str:
        return (end - dt.timedelta(days=back)).isoformat()

    dry = iipub("backfill", "--product", "daily-brief", "--from", day(2), "--to", day(0), "--dry-run",
                env=cli_env, cwd=tmp_path)
    assert dry.returncode == 0 and dry.stdout.splitlines()[-1] == "dry run: would create 3, already present 0"
    assert job_rows(engine) == []
    short = iipub("backfill", "--product", "daily-brief", "--from", day(1), "--to", day(0), env=cli_env, cwd=tmp_path)
    assert short.stdout.splitlines() == [f"daily-brief {day(1)}: created", f"daily-brief {day(0)}: created",
                                         "created 2, already present 0"]
    long = iipub("backfill", "--product", "daily-brief", "--from", day(44), "--to", day(0), env=cli_env, cwd=tmp_path)
    assert long.returncode == 0 and long.stdout.strip() == "created 43, already present 2"
    # Progress lines go to stderr as JSON objects, like every other stderr line.
    progress = [m for m in (json.loads(ln).get("message", "") for ln in long.stderr.splitlines())
                if m.startswith("daily-brief ")]
    assert len(progress) == 45 and progress[-1] == f"daily-brief {day(0)}: already present"
    found = job_rows(engine)
    assert len(found) == 45 and all(r["is_backfill"] and r["state"] == "NO_JOB" for r in found)


def test_backfill_bad_ranges_are_one_line_errors(engine: sa.Engine, cli_env: dict[str, str], tmp_path: Path) -> None:
    today = utc_today()
    cases = [
        (("daily-brief", "2026-02-30", today.isoformat()), 2, "'2026-02-30' is not a date in YYYY-MM-DD form"),
        (("daily-brief", today.isoformat(), (today - dt.timedelta(days=2)).isoformat()), 2, "is after --to"),
        (("daily-brief", today.isoformat(), (today + dt.timedelta(days=3)).isoformat()), 2, "is in the future"),
        (("nope", today.isoformat(), today.isoformat()), 2, "unknown product 'nope'"),
    ]
    for (product, start, end), code, needle in cases:
        proc = iipub("backfill", "--product", product, "--from", start, "--to", end, env=cli_env, cwd=tmp_path)
        one_line_error(proc, code, needle)
    assert job_rows(engine) == []


# -- configuration ------------------------------------------------------------------------


def test_37_missing_api_key_before_any_lease(engine: sa.Engine, settings: Settings, sim: Simulator,
                                             cli_env: dict[str, str], tmp_path: Path) -> None:
    """`cli_env` has no OPENAI_API_KEY: the cron command and the operator commands that call
    the provider stop with a configuration error before touching any job."""
    env = {**cli_env, "OPENAI_BASE_URL": sim.url}
    job_id = slot(engine, settings, utc_today() - dt.timedelta(days=1))
    slot(engine, settings, utc_today())
    before = job_versions(engine)
    one_line_error(iipub("reconcile", env=env, cwd=tmp_path), 78, "OPENAI_API_KEY")
    one_line_error(iipub("cancel", job_id, "--reason", "stop", env=env, cwd=tmp_path), 78, "OPENAI_API_KEY")
    one_line_error(iipub("quarantine", "release", job_id, "--link", "resp_abc", "--reason", "r", env=env,
                         cwd=tmp_path), 78, "OPENAI_API_KEY")
    assert job_versions(engine) == before
    assert all(r["lease_owner"] is None for r in job_rows(engine))
    assert sum(sim.stats()["requests"].values()) == 0


def test_cancel_after_the_provider_finished_keeps_the_output(engine: sa.Engine, settings: Settings,
                                                             sim: Simulator, cli_env: dict[str, str],
                                                             tmp_path: Path) -> None:
    tick_daily_brief(settings, engine)
    (job,) = job_rows(engine)
    assert job["state"] == "ACCEPTED", job
    env = {**cli_env, "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": sim.url}
    sim.advance(5)  # the provider has finished: the cancel arrives too late and is refused
    proc = iipub("cancel", job["id"], "--reason", "wrong prompt", "--by", "ivan", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (after,) = job_rows(engine)
    first, note = proc.stdout.strip().splitlines()
    assert first == f"job {job['id']}: ACCEPTED -> RETRIEVED_NOT_VALIDATED (version {after['version']})"
    assert "output is kept" in note
    assert after["payload"] and after["lease_owner"] is None
    assert sim.stats()["requests"]["cancel"] == 1 and sim.stats()["cancels"] == 0

    proc = iipub("quarantine", "release", job["id"], "--link", "resp_missing", "--reason", "r", env=env,
                 cwd=tmp_path)
    one_line_error(proc, 3, "not QUARANTINED")
