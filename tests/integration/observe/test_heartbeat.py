"""Heartbeats and the dead-man's switch: every `iipub reconcile` / `iipub relay` run (in process,
`iipub.cli.main`) leaves a `runs` row by the database clock; `iipub status` shows the last of
each and `--check` is CRITICAL when none finished OK recently; `[monitoring] ping_url` is
fetched after each successful run, by a receiver on loopback started here."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.core.errors import DatabaseUnavailable
from iipub.machine import sweep
from iipub.observe import heartbeat
from iipub.provider.openai.simulator import Simulator
from iipub.store import clock, tables
from iipub.store.job_store import Store
from tests.support.cli import one_line_error, run_cli
from tests.support.loopback import recording_server, send_reply
from tests.support.rows import record_heartbeats
from tests.support.settings import sim_env

# One product whose slot opens late in the day: a run has nothing to pay for.
LATE_PRODUCT = '[[products]]\nname = "daily-brief"\nprompt = "Write it."\nitems = 3\nopens_at = "23:59"\n'


# -- a ping receiver on loopback ---------------------------------------------------------------------


@dataclass
class PingReceiver:
    base: str
    mode: str = "ok"  # ok | 500 | hang
    requests: list[tuple[str, str]] = field(default_factory=list)  # (path, user agent)
    release: threading.Event = field(default_factory=threading.Event)


class _PingHandler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:
        rec: PingReceiver = self.server.recorder  # type: ignore[attr-defined]
        rec.requests.append((self.path, self.headers.get("User-Agent", "")))
        if rec.mode == "hang":
            rec.release.wait(10)
            return
        status = 200 if rec.mode == "ok" else 500
        send_reply(self, status, {}, b"OK")


@contextmanager
def ping_receiver(mode: str = "ok") -> Iterator[PingReceiver]:
    with recording_server(_PingHandler, lambda base: PingReceiver(base=base, mode=mode)) as rec:
        try:
            yield rec
        finally:
            rec.release.set()


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


# -- helpers ----------------------------------------------------------------------------------------


def env_for(cli_env: dict[str, str], sim: Simulator, tmp_path: Path, monitoring: str = "") -> dict[str, str]:
    return sim_env(cli_env, sim, tmp_path, LATE_PRODUCT + ("[monitoring]\n" + monitoring if monitoring else ""))


def run_rows(engine: sa.Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(tables.runs).order_by(tables.runs.c.id)).mappings()]


def status_json(env: dict[str, str], cwd: Path) -> tuple[int, dict[str, Any]]:
    result = run_cli("status", "--json", "--check", env=env, cwd=cwd)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout)


def problems(doc: dict[str, Any]) -> list[str]:
    return [f"{p['severity']} {p['text']}" for p in doc["check"]["problems"]]


def log_events(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


# -- recording -------------------------------------------------------------------------------------


def test_each_reconcile_and_relay_run_is_recorded_and_shown_by_status(
    cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine
) -> None:
    env = env_for(cli_env, sim, tmp_path)
    tick = run_cli("reconcile", env=env, cwd=tmp_path, check=True)
    relay = run_cli("relay", env=env, cwd=tmp_path, check=True)
    rows = run_rows(engine)
    assert [r["command"] for r in rows] == ["reconcile", "relay"]
    host = socket.gethostname()
    for row, out in zip(rows, (tick, relay), strict=True):
        assert row["ok"] is True and row["error"] is None
        assert row["host"] == host and row["pid"] == os.getpid()
        assert row["worker"].startswith(f"{row['command']}:{host}:{os.getpid()}:")
        assert row["started_at"] <= row["finished_at"]
        assert json.loads(row["summary"]) == json.loads(out.stdout)  # what the run printed
        assert json.loads(row["summary"])["worker"] == row["worker"]  # the worker its journal rows name
    with engine.connect() as conn:
        now = clock.read_now(conn)
    assert all(abs((now - r["finished_at"]).total_seconds()) < 30 for r in rows)  # the database clock

    _, doc = status_json(env, tmp_path)
    beats = doc["heartbeats"]
    assert beats["after_seconds"] == 300 and beats["recorded"] is True and beats["ping_configured"] is False
    for command, row in zip(("reconcile", "relay"), rows, strict=True):
        b = beats[command]
        assert b["last"]["id"] == b["last_ok"]["id"] == row["id"] and b["last"]["host"] == host
        assert b["last"]["ok"] is True and 0 <= b["age_seconds"] < 30
        assert b["in_window"] == {"ok": 1, "failed": 0, "unfinished": 0} and b["running"] == 0
    assert not [p for p in problems(doc) if "run" in p], problems(doc)

    human = run_cli("status", env=env, cwd=tmp_path, check=True).stdout
    assert "CRON RUNS (CRITICAL after 5m00s without an OK run)" in human
    lines = {line.split()[0]: line for line in human.splitlines() if line.startswith(("reconcile ", "relay "))}
    for command in ("reconcile", "relay"):
        assert f"on {host}" in lines[command] and ": ok" in lines[command] and " ago)" in lines[command]
        assert "in 24h: 1 ok, 0 failed, 0 unfinished" in lines[command]


def test_a_failed_run_is_recorded_with_its_error_and_pings_nothing(
    cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    def lost(*_args: Any, **_kwargs: Any) -> Any:
        raise DatabaseUnavailable("database unavailable: lost connection during the sweep")

    # The database lost in the middle of the sweep (a fault injected where the command calls it):
    # what is checked is how the cron command records and reports a run that failed.
    monkeypatch.setattr(sweep, "run", lost)
    with ping_receiver() as rec:
        env = env_for(cli_env, sim, tmp_path, f'ping_url = "{rec.base}/ping/{{command}}"\n')
        one_line_error(run_cli("reconcile", env=env, cwd=tmp_path), 69, "lost connection during the sweep")
        (row,) = run_rows(engine)
        assert row["ok"] is False and row["finished_at"] is not None and row["summary"] is None
        assert row["error"] == "DatabaseUnavailable: database unavailable: lost connection during the sweep"
        assert rec.requests == []  # a dead-man's switch hears only from runs that worked

        # A run has been recorded, none succeeded: CRITICAL for both commands, with the failure.
        code, doc = status_json(env, tmp_path)
        assert code == 2
        (rc,) = [p for p in problems(doc) if "no reconcile run" in p]
        assert rc.startswith("CRITICAL no reconcile run finished OK in 5m00s (none recorded; last run failed ")
        assert "lost connection during the sweep" in rc
        assert any(p.startswith("CRITICAL no relay run finished OK") for p in problems(doc))
        assert doc["heartbeats"]["reconcile"]["last_ok"] is None
        assert doc["heartbeats"]["reconcile"]["in_window"]["failed"] == 1

        # After an OK run, a later failure is only a WARNING while the OK one is recent.
        record_heartbeats(engine)
        assert run_cli("reconcile", env=env, cwd=tmp_path).returncode == 69
        code, doc = status_json(env, tmp_path)
        (only,) = [p for p in problems(doc) if "reconcile" in p]
        assert only.startswith("WARNING reconcile: last run failed 0s ago on ") and "lost connection" in only
        assert rec.requests == []


def test_an_unreachable_database_fails_the_run_as_before_and_pings_nothing(
    cli_env: dict[str, str], sim: Simulator, tmp_path: Path
) -> None:
    with ping_receiver() as rec:
        env = {**env_for(cli_env, sim, tmp_path, f'ping_url = "{rec.base}/ping"\n'),
               "IIPUB_DATABASE_URL": f"mysql+pymysql://root@127.0.0.1:{closed_port()}/none"}
        for command in ("reconcile", "relay"):
            one_line_error(run_cli(command, env=env, cwd=tmp_path), 69, "database unreachable")
        assert rec.requests == []


def test_recording_never_fails_a_run(cli_env: dict[str, str], sim: Simulator, tmp_path: Path,
                                     engine: sa.Engine) -> None:
    # A database without migration 0005 (or one refusing the write): the run goes on, with a warning.
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE runs"))
    with ping_receiver() as rec:
        env = env_for(cli_env, sim, tmp_path, f'ping_url = "{rec.base}/ping/{{command}}"\n')
        for command in ("reconcile", "relay"):
            result = run_cli(command, env=env, cwd=tmp_path)
            assert result.returncode == 0, result.stderr
            warned = [e for e in log_events(result.stderr) if e.get("event") == "heartbeat_not_recorded"]
            assert [e["stage"] for e in warned] == ["start", "finish"]
            assert all(e["level"] == "warning" and e["command"] == command for e in warned)
        assert [path for path, _ in rec.requests] == ["/ping/reconcile", "/ping/relay"]  # the runs succeeded
    check = run_cli("status", "--check", env=env, cwd=tmp_path)
    assert check.returncode == 3 and check.stdout.startswith("IIPUB UNKNOWN - schema not ready")
    assert "iipub db migrate" in check.stdout


# -- the check ----------------------------------------------------------------------------------------


def test_check_is_critical_when_the_last_run_finished_too_long_ago(
    cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine
) -> None:
    env = env_for(cli_env, sim, tmp_path)
    run_cli("reconcile", env=env, cwd=tmp_path, check=True)
    run_cli("relay", env=env, cwd=tmp_path, check=True)
    code, doc = status_json(env, tmp_path)
    assert not [p for p in problems(doc) if " run " in p], problems(doc)

    clock.advance_clock(engine, 301)  # cron stopped five minutes ago
    code, doc = status_json(env, tmp_path)
    assert code == 2
    found = [p for p in problems(doc) if " run " in p]
    assert len(found) == 2 and all(p.startswith("CRITICAL no ") for p in found), found
    assert "CRITICAL no reconcile run finished OK in 5m00s (last OK 5m0" in found[0]
    assert f"ago on {socket.gethostname()})" in found[0]
    assert doc["heartbeats"]["reconcile"]["age_seconds"] > 300

    # A longer limit ([monitoring], or [status] as PRODUCT.md names it), or none at all.
    for i, extra in enumerate(("[monitoring]\nheartbeat_after_seconds = 600\n",
                               "[status]\nheartbeat_after_seconds = 600\n",
                               "[monitoring]\nheartbeat_after_seconds = 0\n")):
        (tmp_path / str(i)).mkdir()
        relaxed = sim_env(cli_env, sim, tmp_path / str(i), LATE_PRODUCT + extra)  # its own config file
        code, doc = status_json(relaxed, tmp_path)
        assert not [p for p in problems(doc) if " run " in p], (extra, problems(doc))

    # The next run clears it.
    run_cli("reconcile", env=env, cwd=tmp_path, check=True)
    code, doc = status_json(env, tmp_path)
    (left,) = [p for p in problems(doc) if " run " in p]
    assert left.startswith("CRITICAL no relay run finished OK in 5m00s")


def test_a_new_install_warns_until_something_runs_and_jobs_without_runs_are_critical(
    cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine
) -> None:
    env = env_for(cli_env, sim, tmp_path)
    check = run_cli("status", "--check", env=env, cwd=tmp_path)
    assert check.returncode == 1, check.stdout
    assert check.stdout.startswith("IIPUB WARNING - no reconcile or relay run recorded yet: is cron installed")

    # Slots exist but nothing ever reconciled them: cron is missing.
    from iipub.provider.factory import load_settings

    product = load_settings({"IIPUB_CONFIG": env["IIPUB_CONFIG"]}).products["daily-brief"]
    with engine.connect() as conn:
        today = clock.read_now(conn).date()
    assert Store(engine, "test").schedule(product, today)
    code, doc = status_json(env, tmp_path)
    assert code == 2
    assert {p for p in problems(doc) if " run " in p} == {
        "CRITICAL no reconcile run finished OK in 5m00s (none recorded)",
        "CRITICAL no relay run finished OK in 5m00s (none recorded)"}


def test_a_run_that_never_finished_is_reported(cli_env: dict[str, str], sim: Simulator, tmp_path: Path,
                                               engine: sa.Engine) -> None:
    record_heartbeats(engine)
    heartbeat.start(engine, "reconcile", "reconcile:test-killed")  # killed before it could finish
    env = env_for(cli_env, sim, tmp_path)
    code, doc = status_json(env, tmp_path)
    assert doc["heartbeats"]["reconcile"]["running"] == 1  # recent: it may still be running
    assert not [p for p in problems(doc) if "did not finish" in p]
    clock.advance_clock(engine, 290)  # past any tick and lease, not yet past the heartbeat limit
    record_heartbeats(engine)
    code, doc = status_json(env, tmp_path)
    assert doc["heartbeats"]["reconcile"]["in_window"]["unfinished"] == 0  # 290 s < 300 s
    clock.advance_clock(engine, 20)
    code, doc = status_json(env, tmp_path)
    assert doc["heartbeats"]["reconcile"]["in_window"]["unfinished"] == 1
    assert code == 1 and problems(doc) == [
        "WARNING 1 reconcile run did not finish in 24h (killed by timeout, the OOM killer or a reboot?)"]


# -- the dead-man's switch -------------------------------------------------------------------------------


def test_the_ping_url_is_fetched_after_each_successful_run(
    cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine
) -> None:
    with ping_receiver() as rec:
        env = env_for(cli_env, sim, tmp_path, f'ping_url = "{rec.base}/hc/key/iipub-{{command}}"\n')
        run_cli("reconcile", env=env, cwd=tmp_path, check=True)
        run_cli("relay", env=env, cwd=tmp_path, check=True)
        run_cli("relay", "--prune", env=env, cwd=tmp_path, check=True)  # housekeeping: neither recorded nor pinged
        assert [p for p, _ in rec.requests] == ["/hc/key/iipub-reconcile", "/hc/key/iipub-relay"]
        assert all(agent.startswith("iipub/") for _, agent in rec.requests)
    assert [r["command"] for r in run_rows(engine)] == ["reconcile", "relay"]
    _, doc = status_json(env, tmp_path)
    assert doc["heartbeats"]["ping_configured"] is True
    assert "/hc/key" not in json.dumps(doc)  # the URL's path is the secret: never shown


@pytest.mark.parametrize("mode", ["refused", "500", "hang"])
def test_a_ping_url_that_is_down_does_not_fail_the_run(
    mode: str, cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine
) -> None:
    with ping_receiver("ok" if mode == "refused" else mode) as rec:
        base = f"http://127.0.0.1:{closed_port()}" if mode == "refused" else rec.base
        env = env_for(cli_env, sim, tmp_path, f'ping_url = "{base}/secret-uuid"\nping_timeout_seconds = 0.2\n')
        result = run_cli("reconcile", env=env, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        (warned,) = [e for e in log_events(result.stderr) if e.get("event") == "ping_failed"]
        assert warned["level"] == "warning" and warned["target"] == base and warned["command"] == "reconcile"
        assert "secret-uuid" not in result.stderr
        assert {"500": "HTTP 500", "hang": "Timeout", "refused": "ConnectError"}[mode] in warned["error"]
    (row,) = run_rows(engine)
    assert row["ok"] is True  # the run itself succeeded, and says so


# -- pruning ------------------------------------------------------------------------------------------


def test_runs_prune_their_own_table(engine: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    with engine.begin() as conn:  # a week and a day ago, and a day ago
        for days in (8, 8, 1):
            conn.execute(tables.runs.insert().values(
                command="reconcile", host="h", pid=1, worker="w", started_at=clock.now(conn, -days * 86_400.0),
                finished_at=clock.now(conn, -days * 86_400.0 + 1), ok=True))
    # The pruning cadence and size are module constants: made small, not waited out.
    monkeypatch.setattr(heartbeat, "PRUNE_EVERY", 1)  # every run prunes (normally one in twenty)
    run = heartbeat.start(engine, "relay", "relay:test")
    heartbeat.finish(run, ok=True)
    kept = [(r["command"], r["host"]) for r in run_rows(engine)]
    assert kept == [("reconcile", "h"), ("relay", socket.gethostname())]

    monkeypatch.setattr(heartbeat, "KEEP_ROWS", 2)  # and only the newest rows are kept
    record_heartbeats(engine)
    assert [r["command"] for r in run_rows(engine)] == ["reconcile", "relay"]
    assert [r["worker"] for r in run_rows(engine)] == ["reconcile:test", "relay:test"]
