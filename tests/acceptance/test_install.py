"""`iipub init`: one install path that works the first time. It lays out a host under a root
(folders, a configuration that loads, an env file of mode 0600, crontab, systemd units,
logrotate), refuses to overwrite anything, and every line of the crontab it writes exits 0
under cron's environment, each run leaving one line with time and level in its log."""

from __future__ import annotations

import datetime as dt
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa

from iipub.operate import install
from iipub.provider.factory import load_settings
from iipub.provider.openai.simulator import Simulator
from iipub.store import db, tables
from tests.acceptance.test_crontab import crontab_lines
from tests.support.cli import clean_env, iipub_exe, run_cli

ROOT = Path(__file__).resolve().parents[2]


def _init(root: Path, *extra: str) -> tuple[int, str, str]:
    done = run_cli("init", "--root", str(root), "--iipub", iipub_exe()[0], *extra, env=clean_env())
    return done.returncode, done.stdout, done.stderr


def test_init_lays_out_a_host_whose_configuration_loads(tmp_path: Path) -> None:
    code, out, err = _init(tmp_path)
    assert code == 0, err
    layout = install.Layout(tmp_path)
    for folder in (layout.home, layout.static_root, layout.state, layout.logs, layout.textfile_dir):
        assert folder.is_dir(), folder
    assert stat.S_IMODE(layout.env_file.stat().st_mode) == 0o600
    for written in (layout.config, layout.env_file, layout.crontab, layout.logrotate,
                    layout.systemd / "iipub-reconcile.service", layout.systemd / "iipub-reconcile.timer"):
        assert f"wrote   {written}" in out, out
    # the configuration loads as the env file names it, prompts read from their files
    from iipub.settings import envfile

    env = envfile.parse(layout.env_file.read_text(encoding="utf-8"))
    settings = load_settings(env)
    assert set(settings.products) == {"daily-brief", "revolution-watch"}
    assert all(p.prompt.strip() for p in settings.products.values())
    assert settings.ledger_path() == layout.ledger
    assert settings.static_sink is not None and Path(settings.static_sink.root) == layout.static_root
    assert env["IIPUB_DATABASE_URL"] == layout.default_database_url()


def test_init_refuses_to_overwrite_and_writes_nothing(tmp_path: Path) -> None:
    layout = install.Layout(tmp_path)
    layout.home.mkdir(parents=True)
    layout.config.write_text("# mine\n", encoding="utf-8")
    code, out, err = _init(tmp_path)
    assert code == 73, (out, err)
    assert len(err.strip().splitlines()) == 1 and str(layout.config) in err
    assert layout.config.read_text(encoding="utf-8") == "# mine\n"
    assert not layout.env_file.exists() and not layout.crontab.exists() and not layout.logs.exists()
    # a second run over a complete installation changes nothing either
    layout.config.unlink()
    assert _init(tmp_path)[0] == 0
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert _init(tmp_path)[0] == 73
    assert before == {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}


def test_crontab_example_is_what_init_writes() -> None:
    _layout, files = install.plan(Path("/"))
    written = {str(f.path): f.text for f in files}
    assert (ROOT / "crontab.example").read_text(encoding="utf-8") == written["/srv/iipub/crontab"]


def _as_cron(command: str, variables: dict[str, str], home: Path) -> subprocess.CompletedProcess[str]:
    cron_env = {"HOME": str(home), "LOGNAME": "iipub", "SHELL": "/bin/sh", "PATH": "/usr/bin:/bin", **variables}
    return subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in cron_env.items()), "/bin/sh", "-c", command],
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.slow
def test_every_line_of_the_crontab_init_writes_exits_0_under_cron(sim: Simulator, tmp_path: Path) -> None:
    root = tmp_path / "host"
    code, _out, err = _init(root, "--provider-url", sim.url)
    assert code == 0, err
    layout = install.Layout(root)
    # the steps README asks before the crontab: the project's key in place of the placeholder init
    # writes (with it every create is held and `status --check` warns), then the database's schema
    env_text = layout.env_file.read_text(encoding="utf-8")
    assert "sk-CHANGE-ME" in env_text
    layout.env_file.write_text(env_text.replace("sk-CHANGE-ME", "sk-test-installed"), encoding="utf-8")
    migrated = subprocess.run([*iipub_exe(), "--env-file", str(layout.env_file), "db", "migrate"],
                              env={"PATH": "/usr/bin:/bin", "HOME": str(root)}, capture_output=True, text=True,
                              timeout=120, check=False)
    assert migrated.returncode == 0, migrated.stderr
    variables, jobs = crontab_lines(layout.crontab.read_text(encoding="utf-8"))
    assert len(jobs) == 6
    every_minute = [c for s, c in jobs if s == "* * * * *" and "status" not in c]
    for _minute in range(3):
        for command in every_minute:
            ran = _as_cron(command, variables, root)
            assert ran.returncode == 0, (command, ran.stdout, ran.stderr)
    for _schedule, command in jobs:
        ran = _as_cron(command, variables, root)
        assert ran.returncode == 0, (command, ran.stdout, ran.stderr)
        assert ran.stdout == "" and ran.stderr == "", (command, ran.stdout, ran.stderr)  # cron mails nothing

    # one line per run in each log, with time and level: the summary is not written twice
    reconcile_log = (layout.logs / "reconcile.log").read_text(encoding="utf-8").splitlines()
    done = [json.loads(line) for line in reconcile_log if '"tick_done"' in line]
    assert len(done) == 4, reconcile_log
    assert all(line.startswith("{") for line in reconcile_log), reconcile_log  # no bare stdout summary
    assert all(d["level"] == "info" and d["timestamp"] for d in done)
    relay_log = (layout.logs / "relay.log").read_text(encoding="utf-8").splitlines()
    assert all(line.startswith("{") for line in relay_log), relay_log
    assert sum('"relay_done"' in line for line in relay_log) == 4, relay_log
    assert sum('"relay_pruned"' in line for line in relay_log) == 1, relay_log
    assert (layout.logs / "status.last").read_text(encoding="utf-8").startswith("IIPUB "), "no check line"
    assert (layout.textfile_dir / "iipub.prom").is_file()
    report = (layout.reports / "index.html").read_text(encoding="utf-8")  # `iipub report`, outside the site
    assert report.startswith("<!DOCTYPE html>") and not layout.reports.is_relative_to(layout.static_root)
    assert (layout.monitoring / "iipub-alerts.yml").read_text(encoding="utf-8").startswith("# iipub's alert rules")
    assert json.loads((layout.monitoring / "iipub-dashboard.json").read_text(encoding="utf-8"))["uid"]

    engine = db.make_engine(layout.default_database_url())
    try:
        with engine.connect() as conn:
            runs = conn.execute(sa.select(tables.runs.c.command, tables.runs.c.ok)).all()
            states = set(conn.execute(sa.select(tables.jobs.c.state)).scalars())
    finally:
        engine.dispose()
    assert runs and all(ok for _c, ok in runs), runs
    now = dt.datetime.now(dt.UTC)
    if now.time() >= dt.time(6, 5):  # both slots are open: created from cron alone (docs/drill.md: published)
        assert states and "NO_JOB" not in states, states
    assert os.access(layout.ledger.parent, os.W_OK)


@pytest.mark.slow
def test_a_run_says_its_summary_once_when_stdout_and_stderr_share_the_log(sim: Simulator, tmp_path: Path,
                                                                         cli_env: dict[str, str]) -> None:
    """cron's `>>log 2>&1`: the tick_done / relay_done event (time, level) is the run's one line;
    with stdout apart (a pipe, a terminal) the JSON summary is printed there as before."""
    from tests.support.settings import sim_env

    # Where a run's summary goes is the subject, not its work: the ticks make no slots to pay for.
    env = {**sim_env(cli_env, sim, tmp_path, auto_schedule=False), "IIPUB_LOG_FORMAT": "json"}
    assert run_cli("db", "migrate", env=env).returncode == 0
    log = tmp_path / "run.log"
    for command in ("reconcile", "relay"):
        with log.open("a", encoding="utf-8") as out:
            ran = subprocess.run([*iipub_exe(), command], env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                                 timeout=120, check=False)
        assert ran.returncode == 0
        apart = subprocess.run([*iipub_exe(), command], env=env, cwd=tmp_path, capture_output=True, text=True,
                               timeout=120, check=False)
        assert apart.returncode == 0 and json.loads(apart.stdout.strip().splitlines()[-1]), apart.stdout
    lines = log.read_text(encoding="utf-8").splitlines()
    events = [json.loads(line) for line in lines]  # every line is a log event: no bare summary
    assert [e["event"] for e in events if e["event"] in ("tick_done", "relay_done")] == ["tick_done", "relay_done"]
    assert all(e["timestamp"] and e["level"] for e in events)


def test_the_systemd_units_run_what_the_crontab_runs(tmp_path: Path) -> None:
    layout, files = install.plan(tmp_path, "/opt/iipub/bin/iipub")
    written = {f.path.name: f for f in files}
    crontab = written["crontab"].text
    for job in install.cron_jobs(layout):
        service, timer = written[f"iipub-{job.name}.service"], written[f"iipub-{job.name}.timer"]
        assert f"ExecStart=/opt/iipub/bin/iipub {job.args}\n" in service.text
        assert f"Environment=IIPUB_ENV_FILE={layout.env_file}\n" in service.text
        assert f"OnCalendar={job.calendar}\n" in timer.text
        assert f"{job.schedule} cd {layout.home} && timeout {job.timeout} \"$IIPUB\" {job.args} " in crontab
        assert not service.owned and not timer.owned  # root's, never the service user's
    assert "StandardOutput=null" in written["iipub-reconcile.service"].text  # one line per run, like cron's


def test_init_gives_its_own_folders_to_the_service_user(tmp_path: Path) -> None:
    import pwd

    me = pwd.getpwuid(os.getuid()).pw_name
    code, _out, err = _init(tmp_path, "--user", me)
    assert code == 0, err
    layout = install.Layout(tmp_path)
    assert layout.env_file.stat().st_uid == os.getuid() and layout.logs.stat().st_uid == os.getuid()
    refused = run_cli("init", "--root", str(tmp_path / "other"), "--user", "no-such-user-iipub", env=clean_env())
    assert refused.returncode == 78 and "no-such-user-iipub" in refused.stderr
    assert not (tmp_path / "other").exists()  # checked before anything is written
