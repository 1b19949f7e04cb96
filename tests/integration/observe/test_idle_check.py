"""The wake-up check against a real database: an idle cron run is answered with the driver alone,
and every kind of change since the last full run (a write, a clock move, the environment, a
watched file, time reaching the next due moment) makes the next run a full one."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import io
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iipub.observe import idle_check
from iipub.provider.openai.simulator import Simulator
from iipub.store import clock, tables
from tests.support.cli import run_cli
from tests.support.databases import snapshot_rows
from tests.support.settings import ledger_file_of, sim_env

# Products open at 05:00; the database clock is set to 00:30, so today's slots are scheduled and
# nothing is due until 05:00. No catch-up days: past slots would be due at once.


def _with_reconcile(tmp_path: Path, line: str) -> None:
    cfg = tmp_path / "iipub.toml"
    cfg.write_text(cfg.read_text().replace("[reconcile]\n", f"[reconcile]\n{line}\n", 1))
    settle_files()


def settle_files() -> None:
    """A file written within a clock tick (4 ms) before a full run starts counts as written during
    it (file times come from the kernel's coarse clock): the run then records "due". Tests that
    expect an idle answer right after let the tick pass."""
    time.sleep(0.02)


def _set_db_time(engine: sa.Engine, hour: int, minute: int = 0) -> None:
    with engine.connect() as conn:
        now = clock.read_now(conn)
    clock.advance_clock(engine, (dt.datetime.combine(now.date(), dt.time(hour, minute)) - now).total_seconds())


@pytest.fixture
def env(engine: sa.Engine, cli_env: dict[str, str], sim: Simulator, tmp_path: Path) -> dict[str, str]:
    _set_db_time(engine, 0, 30)
    env = {**sim_env(cli_env, sim, tmp_path), "IIPUB_LOG_FORMAT": "json"}
    _with_reconcile(tmp_path, "catch_up_days = 0")
    return env


@contextlib.contextmanager
def _environment(env: dict[str, str], cwd: Path) -> Iterator[None]:
    saved, old_cwd = dict(os.environ), os.getcwd()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        os.chdir(old_cwd)


def check(env: dict[str, str], cwd: Path, command: str = "reconcile") -> tuple[int | None, str, str]:
    """The console script's first step, in process: (0 idle | None full run, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with _environment(env, cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = idle_check.run([command])
    return code, out.getvalue(), err.getvalue()


def full(env: dict[str, str], cwd: Path, command: str = "reconcile") -> dict[str, Any]:
    result = run_cli(command, env=env, cwd=cwd, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _runs(engine: sa.Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(tables.runs).order_by(tables.runs.c.id)).mappings()]


def _work_tables(engine: sa.Engine) -> dict[str, Any]:
    rows = snapshot_rows(engine)
    rows.pop("runs", None)
    rows.pop("wakeups", None)
    return rows


def test_an_idle_run_is_answered_by_the_check_and_recorded(engine: sa.Engine, env: dict[str, str],
                                                           tmp_path: Path) -> None:
    assert check(env, tmp_path)[0] is None  # nothing recorded yet: a full run
    full(env, tmp_path)
    with engine.connect() as conn:
        row = conn.execute(sa.select(tables.wakeups).where(tables.wakeups.c.command == "reconcile")).mappings().one()
        now = clock.read_now(conn)
    # The earliest due moment: today's slots open at 05:00 (the 5-minute cap comes sooner).
    assert row["next_at"] is not None
    assert now < row["next_at"] <= now + dt.timedelta(seconds=301)
    before = _work_tables(engine)
    runs_before = len(_runs(engine))
    code, out, err = check(env, tmp_path)
    assert code == 0
    summary = json.loads(out)
    assert summary["idle"] is True and summary["leased"] == 0 and summary["worker"].startswith("reconcile:")
    line = json.loads(err)
    assert line["event"] == "tick_done" and line["idle"] is True and line["level"] == "info"
    runs = _runs(engine)
    assert len(runs) == runs_before + 1
    assert runs[-1]["command"] == "reconcile" and runs[-1]["ok"] and runs[-1]["finished_at"] is not None
    assert json.loads(runs[-1]["summary"])["idle"] is True
    assert _work_tables(engine) == before  # nothing else written


def test_next_at_is_the_earliest_due_moment(engine: sa.Engine, env: dict[str, str], tmp_path: Path) -> None:
    _with_reconcile(tmp_path, "idle_check_max_seconds = 3600")
    _set_db_time(engine, 4, 30)
    full(env, tmp_path)
    with engine.connect() as conn:
        next_at = conn.execute(sa.select(tables.wakeups.c.next_at)).scalar_one()
        now = clock.read_now(conn)
    assert next_at == dt.datetime.combine(now.date(), dt.time(5, 0))
    assert check(env, tmp_path)[0] == 0
    # Time reaching it (the clock is moved by the drill offset, itself a change) or the row saying so.
    with engine.begin() as conn:
        conn.execute(tables.wakeups.update().values(next_at=now - dt.timedelta(seconds=1)))
    assert check(env, tmp_path)[0] is None


@pytest.mark.parametrize("change", ["pause", "schedule", "clock", "delivery", "config", "environment", "ledger",
                                    "suspend", "due by hand"])
def test_any_change_since_the_last_full_run_wakes_the_next(engine: sa.Engine, env: dict[str, str],
                                                           tmp_path: Path, change: str) -> None:
    full(env, tmp_path)
    assert check(env, tmp_path)[0] == 0
    if change == "pause":
        run_cli("pause", "--reason", "drill", env=env, cwd=tmp_path, check=True)
    elif change == "schedule":
        run_cli("schedule", "--date", (dt.datetime.now(dt.UTC).date() + dt.timedelta(days=3)).isoformat(),
                env=env, cwd=tmp_path, check=True)
    elif change == "clock":
        clock.advance_clock(engine, 1)
    elif change == "delivery":
        with engine.begin() as conn:
            conn.execute(tables.webhook_deliveries.insert().values(
                webhook_id="wh_1", event_type="response.completed", response_id="resp_x", outcome="awaiting_create",
                received_at=clock.now(conn)))
    elif change == "config":
        cfg = tmp_path / "iipub.toml"
        cfg.write_text(cfg.read_text() + "\n[relay]\nbatch_size = 7\n")
    elif change == "environment":
        env = {**env, "OPENAI_PROJECT_ID": "proj_other"}
    elif change == "ledger":
        ledger = ledger_file_of(tmp_path)
        ledger.parent.mkdir(parents=True, exist_ok=True)
        ledger.write_text("")
    elif change == "suspend":
        with engine.connect() as conn:
            job_id = conn.execute(sa.select(tables.jobs.c.id).limit(1)).scalar_one()
        run_cli("suspend", job_id, "--reason", "drill", env=env, cwd=tmp_path, check=True)
    elif change == "due by hand":  # no fenced write: no version, no updated_at moves
        with engine.begin() as conn:
            first = conn.execute(sa.select(tables.jobs.c.id).order_by(tables.jobs.c.id).limit(1)).scalar_one()
            conn.execute(tables.jobs.update().where(tables.jobs.c.id == first)
                         .values(next_attempt_at=dt.datetime(2000, 1, 1)))
    assert check(env, tmp_path)[0] is None


def test_the_check_fails_open(engine: sa.Engine, env: dict[str, str], tmp_path: Path) -> None:
    full(env, tmp_path)
    assert check(env, tmp_path)[0] == 0
    with engine.begin() as conn:  # code newer than the schema: the full run says what is pending
        newest = conn.execute(sa.select(sa.func.max(tables.schema_migrations.c.version))).scalar_one()
        conn.execute(tables.schema_migrations.delete().where(tables.schema_migrations.c.version == newest))
    assert check(env, tmp_path)[0] is None
    assert check({k: v for k, v in env.items() if k != "OPENAI_API_KEY"}, tmp_path)[0] is None
    assert check({**env, "IIPUB_WAKEUP_CHECK": "off"}, tmp_path)[0] is None
    assert check({**env, "IIPUB_DATABASE_URL": env["IIPUB_DATABASE_URL"] + "?x=1"}, tmp_path)[0] is None
    assert check({**env, "IIPUB_LOG_LEVEL": "loud"}, tmp_path)[0] is None
    with engine.begin() as conn:
        conn.execute(tables.wakeups.update().values(files="not json"))
    assert check(env, tmp_path)[0] is None


def test_a_run_that_worked_leaves_due(engine: sa.Engine, env: dict[str, str], tmp_path: Path) -> None:
    full(env, tmp_path)
    _set_db_time(engine, 6)  # the slots are open: creates
    summary = full(env, tmp_path)
    assert summary["creates"] >= 1
    with engine.connect() as conn:
        assert conn.execute(sa.select(tables.wakeups.c.next_at)
                            .where(tables.wakeups.c.command == "reconcile")).scalar_one() is None
    assert check(env, tmp_path)[0] is None


@pytest.mark.slow
def test_the_relay_is_idle_until_an_event_is_saved(engine: sa.Engine, env: dict[str, str], tmp_path: Path) -> None:
    full(env, tmp_path, "relay")
    code, out, _ = check(env, tmp_path, "relay")
    assert code == 0 and json.loads(out)["idle"] is True and json.loads(out)["published"] == 0
    _set_db_time(engine, 6)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # create, poll until the response finishes, custody, save
        full(env, tmp_path)
        with engine.connect() as conn:
            if conn.execute(sa.select(sa.func.count()).select_from(tables.outbox)).scalar_one():
                break
        time.sleep(0.2)
    with engine.connect() as conn:
        outbox = conn.execute(sa.select(tables.outbox)).mappings().all()
    assert outbox, "no edition saved"
    assert check(env, tmp_path, "relay")[0] is None
    summary = full(env, tmp_path, "relay")
    assert summary["published"] >= 1, (summary, [dict(r) for r in outbox])


OPERATIONS = st.lists(st.sampled_from(["tick", "relay", "clock_small", "clock_hours", "pause", "unpause",
                                       "suspend", "resume", "schedule", "delivery"]), min_size=1, max_size=7)


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=OPERATIONS)
def test_the_check_never_skips_a_run_the_full_run_would_act_on(engine: sa.Engine, env: dict[str, str],
                                                               tmp_path: Path, ops: list[str]) -> None:
    """After any sequence of ticks, operator commands, deliveries and clock moves: whenever the check
    answers idle, a full run at that moment does nothing and writes nothing."""
    full(env, tmp_path)
    full(env, tmp_path, "relay")
    for i, op in enumerate(ops):
        _apply(engine, env, tmp_path, op, i)
        for command in ("reconcile", "relay"):
            if check(env, tmp_path, command)[0] != 0:
                continue
            before = _work_tables(engine)
            summary = full(env, tmp_path, command)
            worked = {k: v for k, v in summary.items() if k not in ("worker", "seconds", "shadow", "held",
                                                                    "paused_everything") and v}
            assert not worked, (ops[: i + 1], command, worked)
            assert _work_tables(engine) == before, (ops[: i + 1], command)


def _apply(engine: sa.Engine, env: dict[str, str], cwd: Path, op: str, i: int) -> None:
    if op == "tick":
        full(env, cwd)
    elif op == "relay":
        full(env, cwd, "relay")
    elif op == "clock_small":
        clock.advance_clock(engine, 20)
    elif op == "clock_hours":
        clock.advance_clock(engine, 3 * 3600)
    elif op in ("pause", "unpause"):
        run_cli(*(["pause", "--reason", "drill"] if op == "pause" else ["unpause"]), env=env, cwd=cwd)
    elif op in ("suspend", "resume"):
        with engine.connect() as conn:
            job_id = conn.execute(sa.select(tables.jobs.c.id).order_by(tables.jobs.c.id).limit(1)).scalar()
        if job_id is not None:
            run_cli(*([op, job_id, "--reason", "drill"] if op == "suspend" else [op, job_id]), env=env, cwd=cwd)
    elif op == "schedule":
        run_cli("schedule", "--date", (dt.datetime.now(dt.UTC).date() + dt.timedelta(days=1)).isoformat(),
                env=env, cwd=cwd)
    elif op == "delivery":
        with engine.begin() as conn:
            conn.execute(tables.webhook_deliveries.insert().values(
                webhook_id=f"wh_{i}_{os.urandom(4).hex()}", event_type="response.completed",
                response_id=f"resp_{i}", outcome="foreign", received_at=clock.now(conn)))


def test_the_console_script_answers_an_idle_cron_minute_with_one_log_line(engine: sa.Engine, env: dict[str, str],
                                                                           tmp_path: Path) -> None:
    """The process is the subject: the installed script, stdout and stderr in one file as cron's
    `>>log 2>&1` makes them. The idle minute leaves one line, the full run's event with `idle`."""
    import subprocess

    from tests.support.cli import iipub_exe

    full(env, tmp_path)
    log = tmp_path / "reconcile.log"
    with open(log, "ab") as f:
        done = subprocess.run([*iipub_exe(), "reconcile"], env=env, cwd=tmp_path, stdout=f, stderr=f, timeout=60)
    assert done.returncode == 0
    lines = log.read_text().splitlines()
    assert len(lines) == 1, lines
    assert json.loads(lines[0])["event"] == "tick_done" and json.loads(lines[0])["idle"] is True
    assert json.loads(_runs(engine)[-1]["summary"])["idle"] is True


@pytest.mark.parametrize("command", ["reconcile", "relay"])
def test_an_idle_run_under_pause_everything_reports_the_pause(engine: sa.Engine, env: dict[str, str], tmp_path: Path,
                                                             command: str) -> None:
    """An idle minute's summary and `runs` row say what the full run's said: under
    `pause --everything` the reconcile is paused and the relay held, not a quiet normal minute."""
    run_cli("pause", "--everything", "--reason", "drill", env=env, cwd=tmp_path, check=True)
    before = full(env, tmp_path, command)
    code, out, _ = check(env, tmp_path, command)
    assert code == 0
    idle = json.loads(out)
    flag = "paused_everything" if command == "reconcile" else "held"
    assert before[flag] in (True, "paused_everything")
    assert idle[flag] == before[flag]
    assert json.loads(_runs(engine)[-1]["summary"])[flag] == before[flag]


def test_a_config_rewritten_in_place_with_its_size_and_mtime_kept_wakes_the_next_run(
        engine: sa.Engine, env: dict[str, str], tmp_path: Path) -> None:
    """`cp -p` or `rsync -a --inplace` of another version of the configuration (or of a prompt
    file) keeps the inode and sets the old modification time; the same size is common (one
    word changed). The change time moves with any write: the check sees the edit."""
    full(env, tmp_path)
    assert check(env, tmp_path)[0] == 0
    cfg = tmp_path / "iipub.toml"
    before = os.stat(cfg)
    text = cfg.read_text()
    assert "catch_up_days = 0" in text
    with open(cfg, "r+") as f:
        f.write(text.replace("catch_up_days = 0", "catch_up_days = 1", 1))
    os.utime(cfg, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(cfg)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    assert check(env, tmp_path)[0] is None


@pytest.mark.parametrize("bad_key", ["sk-one two", "sk-caf\u00e9", "sk-line\nbreak"])
def test_a_key_the_full_run_refuses_is_not_answered_idle(engine: sa.Engine, env: dict[str, str], tmp_path: Path,
                                                         bad_key: str) -> None:
    """A key edited into one that cannot go into an HTTP header (the env file's usual slip) is a
    configuration error the full run reports (exit 78) before any lease; the idle answer (exit
    0, a heartbeat) would hide it."""
    full(env, tmp_path)
    assert check(env, tmp_path)[0] == 0
    broken = {**env, "OPENAI_API_KEY": bad_key}
    assert check(broken, tmp_path)[0] is None
    assert run_cli("reconcile", env=broken, cwd=tmp_path).returncode == 78


# -- several places, edits during a run, leases, the environment, URLs (issue 47) --------------


def _second_place(env: dict[str, str], tmp_path: Path) -> tuple[dict[str, str], Path]:
    """Another host on the same database, as this machine can stand for one: the same
    configuration file, another working folder (a host's own files mark differently)."""
    other = tmp_path / "second"
    other.mkdir()
    return dict(env), other


def test_two_places_on_one_database_each_keep_their_idle_minutes(engine: sa.Engine, env: dict[str, str],
                                                                 tmp_path: Path) -> None:
    env2, cwd2 = _second_place(env, tmp_path)
    for command in ("reconcile", "relay"):
        full(env, tmp_path, command)
        full(env2, cwd2, command)
    for _ in range(3):  # minute after minute, neither wakes the other
        for command in ("reconcile", "relay"):
            assert check(env, tmp_path, command)[0] == 0, command
            assert check(env2, cwd2, command)[0] == 0, command
    with engine.connect() as conn:
        rows = conn.execute(sa.select(tables.wakeups.c.command, tables.wakeups.c.place)).all()
    assert len(rows) == 4 and len({place for _, place in rows}) == 2
    # A write wakes both; each place's full run puts its own row back to sleep.
    clock.advance_clock(engine, 1)
    assert check(env, tmp_path)[0] is None and check(env2, cwd2)[0] is None
    full(env, tmp_path)
    full(env2, cwd2)
    assert check(env, tmp_path)[0] == 0 and check(env2, cwd2)[0] == 0


def test_a_file_written_after_the_run_started_records_due(engine: sa.Engine, env: dict[str, str],
                                                          tmp_path: Path) -> None:
    """The run loads its configuration at its start; marks taken at its end would stand for an
    edit it never saw. A watched file written after the run started makes the row "due"."""
    from iipub.observe import wakeup_store
    from iipub.settings.loading import load_settings

    full(env, tmp_path)
    assert check(env, tmp_path)[0] == 0
    with _environment(env, tmp_path):
        started = wakeup_store.run_started()
        settings = load_settings()  # what the run saw
        cfg = tmp_path / "iipub.toml"
        cfg.write_text(cfg.read_text() + "\n[relay]\nbatch_size = 7\n")  # the edit, during the run
        wakeup_store.record(engine, "reconcile", settings, busy=False, started_ns=started, due_now=lambda: False,
                            future=wakeup_store.reconcile_future, idle_summary={"leased": 0})
    with engine.connect() as conn:
        row = conn.execute(sa.select(tables.wakeups).where(tables.wakeups.c.command == "reconcile")).mappings().one()
    assert row["next_at"] is None and row["signature"] == ""  # due, and nothing computed for it
    assert check(env, tmp_path)[0] is None
    settle_files()
    full(env, tmp_path)  # a run that starts after the edit sees it
    assert check(env, tmp_path)[0] == 0


def test_a_busy_minute_after_a_busy_minute_writes_nothing(engine: sa.Engine, env: dict[str, str],
                                                         tmp_path: Path) -> None:
    """A run that did work records "due"; when the row already says so (same identity, files and
    idle summary: `idle_report` leaves the worker out, the idle run names its own), the recorder
    reads it and writes nothing."""
    from iipub.observe import wakeup_store
    from iipub.settings.loading import load_settings

    writes: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "wakeups" in statement and statement.lstrip().split(None, 1)[0].upper() in ("INSERT", "UPDATE"):
            writes.append(statement)

    with _environment(env, tmp_path):
        settings = load_settings()
        sa.event.listen(engine, "before_cursor_execute", seen)
        try:
            for _ in range(2):
                summary = {"leased": 0, "worker": ""}
                wakeup_store.record(engine, "reconcile", settings, busy=True, started_ns=wakeup_store.run_started(),
                                    due_now=lambda: False, future=wakeup_store.reconcile_future,
                                    idle_summary=summary)
                assert len(writes) == 1, writes  # the first wrote the row; the second found it so
            (tmp_path / "iipub.toml").write_text((tmp_path / "iipub.toml").read_text() + "\n")
            wakeup_store.record(engine, "reconcile", settings, busy=True, started_ns=wakeup_store.run_started(),
                                due_now=lambda: False, future=wakeup_store.reconcile_future,
                                idle_summary={"leased": 0, "worker": ""})
        finally:
            sa.event.remove(engine, "before_cursor_execute", seen)
    assert len(writes) == 2  # a watched file changed: the row's marks with it


def test_nothing_is_recorded_with_the_check_off(engine: sa.Engine, env: dict[str, str], tmp_path: Path) -> None:
    full({**env, "IIPUB_WAKEUP_CHECK": "off"}, tmp_path)
    full({**env, "IIPUB_WAKEUP_CHECK": "off"}, tmp_path, "relay")
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(tables.wakeups)).scalar_one() == 0


def test_the_cap_wakes_the_cron_minute_a_cap_after_the_run(engine: sa.Engine, env: dict[str, str],
                                                            tmp_path: Path) -> None:
    """Cron starts at :00 and a full run ends a little later: `next_at` is before the cron minute
    a cap after the run's start, so a full run comes at least every `idle_check_max_seconds`."""
    _with_reconcile(tmp_path, "idle_check_max_seconds = 120")
    with engine.connect() as conn:
        before = clock.read_now(conn)
    full(env, tmp_path)
    with engine.connect() as conn:
        next_at = conn.execute(sa.select(tables.wakeups.c.next_at)).scalar_one()
    assert next_at is not None
    assert next_at < before + dt.timedelta(seconds=120)
    assert next_at > before + dt.timedelta(seconds=60)
    clock.advance_clock(engine, 118)  # the cron minute two minutes on, a little early by the clock
    full(env, tmp_path)  # (the clock's move is a write: put the row back to sleep first)
    with engine.connect() as conn:
        next_at = conn.execute(sa.select(tables.wakeups.c.next_at)).scalar_one()
        now = clock.read_now(conn)
    assert next_at <= now + dt.timedelta(seconds=120)


def _saved_slot(engine: sa.Engine, env: dict[str, str], tmp_path: Path) -> str:
    """Drive a real slot until its edition is saved (SAVED_NOT_PUBLIC, outbox rows written)."""
    _set_db_time(engine, 6)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        full(env, tmp_path)
        with engine.connect() as conn:
            job_id = conn.execute(sa.select(tables.jobs.c.id).where(tables.jobs.c.state == "SAVED_NOT_PUBLIC")
                                  .limit(1)).scalar()
        if job_id is not None:
            return str(job_id)
        time.sleep(0.2)
    raise AssertionError("no edition saved")


@pytest.mark.slow
def test_the_relay_wakes_when_a_killed_relays_lease_on_a_saved_job_ends(engine: sa.Engine, env: dict[str, str],
                                                                          tmp_path: Path) -> None:
    from iipub.store.job_store import Store

    job_id = _saved_slot(engine, env, tmp_path)
    with engine.connect() as conn:
        version = conn.execute(sa.select(tables.jobs.c.version).where(tables.jobs.c.id == job_id)).scalar_one()
    killed = Store(engine, "relay:killed", 200).acquire_lease(job_id, version)  # and never lets go
    assert killed is not None
    for _ in range(4):  # deliver every event; the leased job cannot be published
        if not full(env, tmp_path, "relay")["claimed"]:
            break
    with engine.connect() as conn:
        row = conn.execute(sa.select(tables.wakeups).where(tables.wakeups.c.command == "relay")).mappings().one()
        job = conn.execute(sa.select(tables.jobs).where(tables.jobs.c.id == job_id)).mappings().one()
    assert job["state"] == "SAVED_NOT_PUBLIC"
    assert row["next_at"] is not None and row["next_at"] <= job["lease_expiry"], (row["next_at"], job["lease_expiry"])
    clock.advance_clock(engine, 201)
    assert check(env, tmp_path, "relay")[0] is None
    full(env, tmp_path, "relay")
    with engine.connect() as conn:
        state = conn.execute(sa.select(tables.jobs.c.state).where(tables.jobs.c.id == job_id)).scalar_one()
    assert state == "PUBLISHED"


def test_the_variables_the_settings_name_and_the_network_ones_are_watched(engine: sa.Engine, env: dict[str, str],
                                                                          tmp_path: Path) -> None:
    cfg = tmp_path / "iipub.toml"
    cfg.write_text(cfg.read_text() + '\n[sinks.webhook]\nurl = "http://127.0.0.1:9/hook"\n'
                   'secret_env = "CMS_HOOK_SECRET"\n')
    settle_files()
    env = {**env, "CMS_HOOK_SECRET": "whsec_" + base64.b64encode(b"0123456789abcdef0123").decode()}
    full(env, tmp_path, "relay")
    assert check(env, tmp_path, "relay")[0] == 0
    unset = {k: v for k, v in env.items() if k != "CMS_HOOK_SECRET"}
    assert check(unset, tmp_path, "relay")[0] is None
    assert run_cli("relay", env=unset, cwd=tmp_path).returncode == 78  # what the idle answer would have hidden
    for name, value in (("SSL_CERT_FILE", str(tmp_path / "no-such-ca.pem")), ("HTTPS_PROXY", "http://[bad"),
                        ("https_proxy", "http://proxy:3128"), ("NO_PROXY", "example.org")):
        assert check({**env, name: value}, tmp_path, "relay")[0] is None, name
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    with_ca = {**env, "REQUESTS_CA_BUNDLE": str(ca)}
    settle_files()
    full(with_ca, tmp_path, "relay")
    assert check(with_ca, tmp_path, "relay")[0] == 0
    ca.unlink()  # the certificate file the run read is gone
    assert check(with_ca, tmp_path, "relay")[0] is None


def test_a_mysql_url_with_options_is_answered(engine: sa.Engine, env: dict[str, str], tmp_path: Path) -> None:
    if not env["IIPUB_DATABASE_URL"].startswith("mysql"):
        pytest.skip("URL options of MySQL/MariaDB")
    env = {**env, "IIPUB_DATABASE_URL": env["IIPUB_DATABASE_URL"] + "?charset=utf8mb4&connect_timeout=5"}
    full(env, tmp_path)
    assert check(env, tmp_path)[0] == 0
    assert check({**env, "IIPUB_DATABASE_URL": env["IIPUB_DATABASE_URL"] + "&x=1"}, tmp_path)[0] is None
