"""crontab.example works as written: each of its command lines, run the way cron runs it (`sh -c`
with nothing but cron's variables and the crontab's own assignments, the settings and secrets
in the environment file the crontab names), exits 0 against a migrated database and the
simulator, and the monitoring lines report OK."""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from iipub.provider.openai.simulator import Simulator
from iipub.store import db, tables
from tests.support.cli import iipub_exe, run_cli
from tests.support.settings import MIDNIGHT_PRODUCT_TOML

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
SCHEDULE = re.compile(r"^(\S+\s+\S+\s+\S+\s+\S+\s+\S+)\s+(.*)$")


def crontab_lines(text: str) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The crontab's variable assignments and its (schedule, command) lines, as cron reads them:
    comments and blank lines skipped, assignments not expanded."""
    variables: dict[str, str] = {}
    jobs: list[tuple[str, str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if (assignment := ASSIGNMENT.match(line)) is not None:
            variables[assignment.group(1)] = assignment.group(2)
            continue
        job = SCHEDULE.match(line)
        assert job is not None, f"not a crontab line: {line!r}"
        jobs.append((job.group(1), job.group(2)))
    return variables, jobs


def _relocated(text: str, home: Path) -> str:
    """The example's paths moved under `home` (a scratch host); nothing else changes."""
    for path, into in (("/srv/iipub", "srv"), ("/var/log/iipub", "log"),
                       ("/var/lib/node_exporter/textfile_collector", "prom"), ("/var/lib/iipub/report", "report")):
        (home / into).mkdir(parents=True, exist_ok=True)
        text = text.replace(path, str(home / into))
    return text


def _run_as_cron(command: str, variables: dict[str, str], home: Path) -> subprocess.CompletedProcess[str]:
    # cron's own variables (SHELL, HOME, LOGNAME, PATH) and the crontab's, nothing inherited
    cron_env = {"HOME": str(home), "LOGNAME": "iipub", "SHELL": "/bin/sh", "PATH": "/usr/bin:/bin", **variables}
    return subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in cron_env.items()),
                           variables["SHELL"], "-c", command],
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.slow
def test_every_crontab_example_line_exits_0_as_cron_runs_it(db_url: str, sim: Simulator, tmp_path: Path) -> None:
    home = tmp_path / "host"
    scratch_crontab = home / "crontab"
    home.mkdir()
    # installed into a scratch crontab file (the system's crontab is not touched), with the
    # iipub of this checkout's virtual environment
    text = _relocated((ROOT / "crontab.example").read_text(encoding="utf-8"), home)
    text = re.sub(r"^IIPUB=.*$", f"IIPUB={iipub_exe()[0]}", text, flags=re.MULTILINE)
    scratch_crontab.write_text(text, encoding="utf-8")
    variables, jobs = crontab_lines(scratch_crontab.read_text(encoding="utf-8"))
    assert {"SHELL", "PATH", "IIPUB", "IIPUB_ENV_FILE"} <= set(variables)
    assert len(jobs) >= 5  # reconcile, relay, status --check, status --prometheus, relay --prune

    srv = home / "srv"
    (srv / "iipub.toml").write_text(
        "[reconcile]\npoll_interval_seconds = 0\nlease_seconds = 10\ntick_seconds = 15\n"
        "[provider]\ntimeout_seconds = 2\nconnect_timeout_seconds = 1\nloss_confirm_seconds = 0\n"
        f"[sinks.static]\nroot = \"{srv / 'public'}\"\n[ledger]\npath = \"{srv / 'spend-ledger.jsonl'}\"\n"
        + MIDNIGHT_PRODUCT_TOML, encoding="utf-8")
    # The environment file the crontab names, in both spellings it accepts.
    Path(variables["IIPUB_ENV_FILE"]).write_text(
        "# settings and secrets of the iipub host\n"
        f"IIPUB_DATABASE_URL={db_url}\n"
        f"export IIPUB_CONFIG='{srv / 'iipub.toml'}'\n"
        "export OPENAI_API_KEY=sk-test\n"
        f'OPENAI_BASE_URL="{sim.url}"\n', encoding="utf-8")
    run_cli("db", "migrate", env={"IIPUB_DATABASE_URL": db_url}, check=True)

    every_minute = [command for schedule, command in jobs if schedule == "* * * * *" and "status" not in command]
    for _minute in range(2):  # two minutes of the per-minute work lines, then every line once
        for command in every_minute:
            ran = _run_as_cron(command, variables, home)
            assert ran.returncode == 0, (command, ran.stdout, ran.stderr)
    for _schedule, command in jobs:
        ran = _run_as_cron(command, variables, home)
        assert ran.returncode == 0, (command, ran.stdout, ran.stderr)
        assert ran.stdout == "" and ran.stderr == "", (command, ran.stdout, ran.stderr)  # cron mails nothing

    log = home / "log"
    assert "OPENAI_API_KEY is not set" not in (log / "reconcile.log").read_text(encoding="utf-8")
    assert (log / "status.last").read_text(encoding="utf-8").startswith("IIPUB OK - "), \
        (log / "status.last").read_text(encoding="utf-8")
    prom = (home / "prom" / "iipub.prom").read_text(encoding="utf-8")
    assert "iipub_check_status 0.0" in prom or "iipub_check_status 0" in prom, prom
    assert (home / "report" / "index.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    engine = db.make_engine(db_url)
    try:
        with engine.connect() as conn:
            states = set(conn.execute(sa.select(tables.jobs.c.state)).scalars())
            runs = conn.execute(sa.select(tables.runs.c.command, tables.runs.c.ok)).all()
    finally:
        engine.dispose()
    assert states and states <= {"PUBLISHED", "CLEANUP_PENDING", "DELETED"}, states  # published from cron alone
    assert {("reconcile", True), ("relay", True)} <= {(c, bool(ok)) for c, ok in runs}, runs
    assert (srv / "public" / "index.html").exists()


@pytest.mark.slow
def test_the_shipped_cron_line_never_kills_a_create_it_sent(db_url: str, tmp_path: Path) -> None:
    """The drill of issue 37 (item 8): crontab.example's reconcile line exactly (`timeout -k 5 58`),
    the default provider timeouts and tick budget, a run kept busy by two slow polls (24 s each)
    until past its create window, and a slow create due then. Before the window existed the
    create went out at about 49 s and the run was KILLed at 63 s with it unanswered
    (`crashed_during_create`, possibly billed). Now it waits for the next minute: nothing is
    sent that cannot finish, and the next run creates it at once."""
    from iipub.machine import sweep
    from iipub.provider.factory import load_settings
    from iipub.store.job_store import Store
    from tests.support.rows import utc_today
    from tests.support.settings import without_auto_schedule
    from tests.support.simulator import simulator

    home = tmp_path / "host"
    home.mkdir()
    text = _relocated((ROOT / "crontab.example").read_text(encoding="utf-8"), home)
    text = re.sub(r"^IIPUB=.*$", f"IIPUB={iipub_exe()[0]}", text, flags=re.MULTILINE)
    variables, jobs = crontab_lines(text)
    (line,) = [command for schedule, command in jobs if schedule == "* * * * *" and " reconcile " in command]
    assert "timeout -k 5 58 " in line
    srv = home / "srv"
    # The shipped defaults: tick_seconds 50, provider connect 5 s + read 30 s, wrapper 58 s.
    (srv / "iipub.toml").write_text(
        "[reconcile]\npoll_interval_seconds = 0\nconcurrency = 1\ncatch_up_days = 0\n"
        f"[sinks.static]\nroot = \"{srv / 'public'}\"\n[ledger]\npath = \"{srv / 'spend-ledger.jsonl'}\"\n"
        + MIDNIGHT_PRODUCT_TOML, encoding="utf-8")
    with simulator(queued_seconds=0.1, in_progress_seconds=3600, slow_seconds=24) as sim:
        env = {"IIPUB_DATABASE_URL": db_url, "IIPUB_CONFIG": str(srv / "iipub.toml"), "OPENAI_API_KEY": "sk-test",
               "OPENAI_BASE_URL": sim.url}
        Path(variables["IIPUB_ENV_FILE"]).write_text("".join(f"{k}={v}\n" for k, v in env.items()), encoding="utf-8")
        run_cli("db", "migrate", env={"IIPUB_DATABASE_URL": db_url}, check=True)
        settings = load_settings(env)
        engine = db.make_engine(db_url)
        try:
            store = Store(engine, "drill")
            for back in (1, 2):  # two paid responses still running: polled first, slowly
                store.schedule(settings.products["daily-brief"], utc_today() - dt.timedelta(days=back))
            sweep.run(without_auto_schedule(settings), engine)  # only those two: today's is the cron run's
            assert sim.stats()["creates_total"] == 2
            sim.add_faults([{"fault": "slow", "op": "retrieve", "times": 2},
                            {"fault": "slow", "op": "create", "times": 1}])
            started = time.monotonic()
            ran = _run_as_cron(line, variables, home)  # today's slot is made by the run itself
            took = time.monotonic() - started
            assert ran.returncode == 0, (ran.stdout, ran.stderr, took)  # finished: never TERMed nor KILLed
            assert took < 58
            with engine.connect() as conn:
                rows = {str(r.edition_date)[:10]: r for r in conn.execute(sa.select(tables.jobs))}
            today = rows[utc_today().isoformat()]
            assert today.state in ("NO_JOB", "CREATE_ELIGIBLE") and today.generation_attempts == 0
            assert sim.stats()["creates_total"] == 2  # the slow create was never sent
            assert '"create_deferred"' in (home / "log" / "reconcile.log").read_text(encoding="utf-8")
            # The next minute: the create goes out at the start of the run and is answered.
            started = time.monotonic()
            again = _run_as_cron(line, variables, home)
            assert again.returncode == 0, (again.stdout, again.stderr)
            assert time.monotonic() - started < 58
            with engine.connect() as conn:
                today_now = conn.execute(sa.select(tables.jobs).where(tables.jobs.c.id == today.id)).one()
            assert today_now.generation_attempts == 1 and today_now.quarantine_reason is None
            assert today_now.state not in ("CREATE_IN_FLIGHT", "QUARANTINED")
            assert sim.stats()["creates_total"] == 3
        finally:
            engine.dispose()
