"""The operator commands through the installed `iipub` console script, against a real
database and the simulator over real HTTP."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
from pathlib import Path
from typing import Any

from iipub.simulator import Simulator
from tests.conftest import run_iipub, sim_env

# Today's slot opens at midnight, so `reconcile` has work whatever the hour.
MIDNIGHT_PRODUCT = """
[[products]]
name = "daily-brief"
opens_at = "00:00"
prompt = "Write today's Daily Brief."
"""
JOB_KEYS = {"id", "product", "edition_date", "state", "version", "generation_attempts", "poll_count",
            "response_id", "quarantine_reason", "lease_owner", "lease_expiry", "next_attempt_at",
            "config_fingerprint"}


def iipub(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_iipub(*args, env=env, cwd=cwd)


def ok(*args: str, env: dict[str, str], cwd: Path) -> str:
    return run_iipub(*args, env=env, cwd=cwd, check=True).stdout


def jobs(env: dict[str, str], cwd: Path) -> list[dict[str, Any]]:
    return json.loads(ok("jobs", "list", "--json", env=env, cwd=cwd))  # type: ignore[no-any-return]


def show(job_id: str, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    return json.loads(ok("jobs", "show", job_id, "--json", env=env, cwd=cwd))  # type: ignore[no-any-return]


def one_line_error(proc: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr


def quarantined(cli_env: dict[str, str], sim: Simulator, tmp_path: Path) -> tuple[dict[str, str], str]:
    env = sim_env(cli_env, sim, tmp_path, MIDNIGHT_PRODUCT)
    ok("db", "migrate", env=env, cwd=tmp_path)
    sim.add_faults([{"op": "create", "fault": "drop_after_accept"}])
    ok("reconcile", env=env, cwd=tmp_path)
    (job,) = jobs(env, tmp_path)
    assert (job["state"], job["quarantine_reason"]) == ("QUARANTINED", "create_outcome_unknown")
    return env, job["id"]


def test_quarantine_list_and_release(cli_env: dict[str, str], sim: Simulator, tmp_path: Path) -> None:
    env, job_id = quarantined(cli_env, sim, tmp_path)
    (item,) = json.loads(ok("quarantine", "list", "--json", env=env, cwd=tmp_path))
    assert JOB_KEYS <= set(item) and "events" not in item
    assert item["id"] == job_id and item["quarantine_reason"] == "create_outcome_unknown"
    assert item["generation_attempts"] == 1 and item["age_seconds"] >= 0
    human = ok("quarantine", "list", env=env, cwd=tmp_path).splitlines()
    assert human[0].split()[:5] == ["ID", "PRODUCT", "DATE", "REASON", "AGE"]
    assert "create_outcome_unknown" in human[1] and "1/3" in human[1]

    version = show(job_id, env, tmp_path)["version"]
    for modes in ([], ["--verified-lost", "--resume-polling"], ["--verified-lost", "--link", "resp_x"]):
        proc = iipub("quarantine", "release", job_id, *modes, "--reason", "r", env=env, cwd=tmp_path)
        one_line_error(proc, 2, "give exactly one of")
    proc = iipub("quarantine", "release", "00000000-0000-0000-0000-000000000000", "--verified-lost",
                 "--reason", "r", env=env, cwd=tmp_path)
    one_line_error(proc, 4, "no job with id")
    proc = iipub("quarantine", "release", job_id, "--resume-polling", "--reason", "r", env=env, cwd=tmp_path)
    one_line_error(proc, 3, "no response id to poll")
    proc = iipub("quarantine", "release", job_id, "--verified-lost", env=env, cwd=tmp_path)
    assert proc.returncode == 2 and "--reason" in proc.stderr  # the reason is required
    assert show(job_id, env, tmp_path)["version"] == version  # refusals wrote nothing

    out = ok("quarantine", "release", job_id[:8], "--verified-lost", "--reason", "checked the dashboard",
             "--by", "alice", env=env, cwd=tmp_path)
    shown = show(job_id, env, tmp_path)
    assert out.strip() == f"job {job_id}: QUARANTINED -> CREATE_ELIGIBLE (version {shown['version']})"
    last = shown["events"][-1]
    assert (last["reason"], last["worker"]) == ("operator_release_verified_lost", "operator:alice")
    assert last["detail"]["by"] == "alice" and last["detail"]["why"] == "checked the dashboard"
    assert json.loads(ok("quarantine", "list", "--json", env=env, cwd=tmp_path)) == []
    assert ok("quarantine", "list", env=env, cwd=tmp_path).strip() == "no quarantined jobs"


def test_suspend_resume_cancel_kill(cli_env: dict[str, str], sim: Simulator, tmp_path: Path) -> None:
    env = sim_env(cli_env, sim, tmp_path, MIDNIGHT_PRODUCT)
    ok("db", "migrate", env=env, cwd=tmp_path)
    ok("schedule", "--date", "2026-01-05", env=env, cwd=tmp_path)
    (job,) = jobs(env, tmp_path)
    job_id = job["id"]

    out = ok("suspend", job_id, "--reason", "incident", "--by", "bob", env=env, cwd=tmp_path)
    assert re.fullmatch(rf"job {job_id}: NO_JOB -> MANUALLY_SUSPENDED \(version \d+\)", out.strip())
    one_line_error(iipub("suspend", job_id, "--reason", "again", env=env, cwd=tmp_path), 3, "already suspended")
    one_line_error(iipub("cancel", job_id, "--reason", "stop", env=env, cwd=tmp_path), 3,
                   "only a job waiting on the provider")
    out = ok("resume", job_id, "--by", "bob", env=env, cwd=tmp_path)
    assert re.fullmatch(rf"job {job_id}: MANUALLY_SUSPENDED -> NO_JOB \(version \d+\)", out.strip())
    out = ok("kill", job_id, "--reason", "not wanted", "--by", "bob", env=env, cwd=tmp_path)
    assert re.fullmatch(rf"job {job_id}: NO_JOB -> CLEANUP_PENDING \(version \d+\)", out.strip())
    shown = show(job_id, env, tmp_path)
    assert shown["kill_requested"] is True
    assert [e["reason"] for e in shown["events"]][-3:] == ["operator_suspend", "operator_resume", "operator_kill"]
    ok("reconcile", env=env, cwd=tmp_path)
    assert show(job_id, env, tmp_path)["state"] == "DELETED"
    one_line_error(iipub("kill", job_id, "--reason", "again", env=env, cwd=tmp_path), 3, "already saved")


def test_backfill(cli_env: dict[str, str], sim: Simulator, tmp_path: Path) -> None:
    env = sim_env(cli_env, sim, tmp_path, MIDNIGHT_PRODUCT)
    ok("db", "migrate", env=env, cwd=tmp_path)
    end = utc_today() - dt.timedelta(days=10)

    def day(back: int) -> str:
        return (end - dt.timedelta(days=back)).isoformat()

    dry = iipub("backfill", "--product", "daily-brief", "--from", day(2), "--to", day(0), "--dry-run",
                env=env, cwd=tmp_path)
    assert dry.returncode == 0 and dry.stdout.splitlines()[-1] == "dry run: would create 3, already present 0"
    assert jobs(env, tmp_path) == []
    out = ok("backfill", "--product", "daily-brief", "--from", day(1), "--to", day(0), env=env, cwd=tmp_path)
    assert out.splitlines() == [f"daily-brief {day(1)}: created", f"daily-brief {day(0)}: created",
                                "created 2, already present 0"]
    proc = iipub("backfill", "--product", "daily-brief", "--from", day(44), "--to", day(0), env=env, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "created 43, already present 2"
    progress = [ln for ln in proc.stderr.splitlines() if ln.startswith("daily-brief ")]
    assert len(progress) == 45 and progress[-1] == f"daily-brief {day(0)}: already present"
    rows = jobs(env, tmp_path)
    assert len(rows) == 45 and all(r["is_backfill"] for r in rows)

    future = (utc_today() + dt.timedelta(days=3)).isoformat()
    cases = [
        (("--from", "2026-02-30", "--to", day(0)), 2, "not a date"),
        (("--from", day(0), "--to", "yesterday"), 2, "not a date"),
        (("--from", day(0), "--to", day(2)), 2, "is after"),
        (("--from", day(0), "--to", future), 2, "in the future"),
    ]
    for args, code, needle in cases:
        one_line_error(iipub("backfill", "--product", "daily-brief", *args, env=env, cwd=tmp_path), code, needle)
    one_line_error(iipub("backfill", "--product", "nope", "--from", day(0), "--to", day(0),
                         env=env, cwd=tmp_path), 78, "unknown product")
    assert len(jobs(env, tmp_path)) == 45


def utc_today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def test_37_missing_api_key_before_any_lease(cli_env: dict[str, str], sim: Simulator, tmp_path: Path) -> None:
    env = sim_env(cli_env, sim, tmp_path, MIDNIGHT_PRODUCT)
    ok("db", "migrate", env=env, cwd=tmp_path)
    ok("schedule", "--date", "2026-01-05", env=env, cwd=tmp_path)
    ok("backfill", "--product", "daily-brief", "--from", "2026-01-01", "--to", "2026-01-02", env=env, cwd=tmp_path)
    before = {j["id"]: j["version"] for j in jobs(env, tmp_path)}
    keyless = {k: v for k, v in env.items() if k != "OPENAI_API_KEY"}

    one_line_error(iipub("reconcile", env=keyless, cwd=tmp_path), 78, "OPENAI_API_KEY")
    some_id = next(iter(before))
    one_line_error(iipub("cancel", some_id, "--reason", "stop", env=keyless, cwd=tmp_path), 78, "OPENAI_API_KEY")
    one_line_error(iipub("quarantine", "release", some_id, "--link", "resp_abc", "--reason", "r",
                         env=keyless, cwd=tmp_path), 78, "OPENAI_API_KEY")
    after = jobs(env, tmp_path)
    assert {j["id"]: j["version"] for j in after} == before
    assert all(j["lease_owner"] is None for j in after)
    assert sim.stats()["requests"]["create"] == 0
