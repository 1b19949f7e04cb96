"""Ledger I/O you can trust: a short write (a full disk) stops the create before it is sent; a
torn line is skipped and reported, never the line after it; a missing ledger is a violation
and a CRITICAL once creates were paid; the default path is absolute, beside the configuration
and never next to the SQLite file, and never inside the public tree."""

from __future__ import annotations

import datetime as dt
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import sqlalchemy as sa
from structlog.testing import capture_logs

from iipub.machine import sweep
from iipub.money import ledger, ledger_position, restore
from iipub.money.ledger import SpendLedger
from iipub.provider.factory import load_settings
from iipub.provider.openai.simulator import Simulator
from iipub.settings.config import Settings
from iipub.store import clock
from iipub.store.job_store import Store
from tests.support.cli import one_line_error, run_cli
from tests.support.rows import job_events, job_rows
from tests.support.settings import MIDNIGHT_PRODUCT_TOML, ledger_file_of, sim_env

DAY = dt.date(2026, 11, 29)
pytestmark = pytest.mark.no_auto_schedule


def test_a_short_ledger_write_sends_no_create_and_refunds_the_attempt(
    cfg: Settings, engine: sa.Engine, sim: Simulator
) -> None:
    Store(engine, "test").schedule(cfg.products["daily-brief"], DAY)
    # The disk fills in the middle of a line while the sweep runs in this process: the ledger's one
    # write is made short (a real full disk would fail every other file of the test run too).
    with ledger.writes_through(lambda fd, data: os.write(fd, data[:7])):  # the disk fills mid-line
        sweep.run(cfg, engine)
    (row,) = job_rows(engine)
    assert sim.stats()["creates_total"] == 0  # nothing was sent, so nothing was paid
    assert (row["state"], row["generation_attempts"]) == ("CREATE_ELIGIBLE", 0)
    refused = [e for e in job_events(engine, row["id"]) if e["reason"] == "create_refused"]
    assert refused and "short write" in refused[-1]["detail"]
    # room again: the next tick pays once
    clock.advance_clock(engine, 120)  # past the refund's backoff
    engine_ledger = cfg.ledger_path()
    assert engine_ledger is not None
    with capture_logs() as logs:
        sweep.run(cfg, engine)
    assert sim.stats()["creates_total"] == 1 and job_rows(engine)[0]["generation_attempts"] == 1
    # The first tick's two writes (the ledger's `open` line, then the intent) were both torn.
    assert any(e["event"] == "ledger_unreadable_lines" and e["lines"] == 2 for e in logs)
    book = restore.ledger_of(cfg, engine)
    assert book is not None and ledger_position.count(book).bad == 2
    spend, bad = SpendLedger(engine_ledger).read()
    assert bad == 2 and spend["daily-brief/2026-11-29"].charged == 1  # each torn line cost only itself


_WRITER = textwrap.dedent("""
    import resource, sys
    from iipub.money.ledger import LedgerError, SpendLedger
    book = SpendLedger(sys.argv[1])
    size = book.path.stat().st_size
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 40, resource.RLIM_INFINITY))  # a disk 40 bytes from full
    try:
        book.intent("job-2", "daily-brief/2026-11-30", 1, "fp", "w")
    except LedgerError as exc:
        print(exc)
        sys.exit(exc.exit_code)
""")


@pytest.mark.skipif(not hasattr(resource, "RLIMIT_FSIZE"), reason="needs RLIMIT_FSIZE")
def test_a_full_file_system_is_a_short_write_in_a_real_process(tmp_path: Path) -> None:
    book = SpendLedger(ledger_file_of(tmp_path))
    book.intent("job-1", "daily-brief/2026-11-29", 1, "fp", "w")
    done = subprocess.run([sys.executable, "-c", _WRITER, str(book.path)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 74, (done.stdout, done.stderr)
    assert "short write" in done.stdout or "File too large" in done.stdout
    book.intent("job-3", "daily-brief/2026-12-01", 1, "fp", "w")  # after the disk was cleaned up
    spend, bad = book.read()
    assert bad == 1 and set(spend) == {"daily-brief/2026-11-29", "daily-brief/2026-12-01"}


def test_check_ledger_and_status_check_report_a_missing_ledger_once_creates_were_paid(
    cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine
) -> None:
    env = sim_env(cli_env, sim, tmp_path, "[monitoring]\nheartbeat_after_seconds = 0\n" + MIDNIGHT_PRODUCT_TOML,
                  auto_schedule=False)
    book = ledger_file_of(tmp_path)
    assert run_cli("check", "--ledger", env=env).returncode == 0  # nothing paid yet: no ledger needed
    run_cli("schedule", env=env, check=True)
    run_cli("reconcile", env=env, check=True)  # today's slot, paid for
    assert book.is_file() and run_cli("check", "--ledger", env=env).returncode == 0
    assert run_cli("status", "--check", env=env).returncode != 2
    book.rename(tmp_path / "elsewhere.jsonl")  # lost (or cron started with another directory)
    found = run_cli("check", "--ledger", env=env)
    assert found.returncode == 1 and "ledger_missing" in found.stdout
    status = run_cli("status", "--check", env=env)
    assert status.returncode == 2 and status.stdout.startswith("IIPUB CRITICAL") and "spend ledger" in status.stdout


def test_the_default_ledger_path_is_absolute_beside_the_config_and_not_next_to_the_database(
    tmp_path: Path
) -> None:
    conf = tmp_path / "etc" / "iipub.toml"
    conf.parent.mkdir()
    conf.write_text("")
    db_file = tmp_path / "data" / "iipub.sqlite3"
    with_config = load_settings({"IIPUB_CONFIG": str(conf), "IIPUB_DATABASE_URL": f"sqlite:///{db_file}"})
    assert with_config.ledger_path() == tmp_path / "etc" / "state" / "spend-ledger.jsonl"
    xdg = load_settings({"XDG_STATE_HOME": str(tmp_path / "xdg"), "IIPUB_DATABASE_URL": f"sqlite:///{db_file}"})
    assert xdg.ledger_path() == tmp_path / "xdg" / "iipub" / "spend-ledger.jsonl"
    for s in (with_config, xdg):
        path = s.ledger_path()
        assert path is not None and path.is_absolute() and path.parent != db_file.parent


def test_a_ledger_inside_the_public_tree_is_refused_at_load(cli_env: dict[str, str], tmp_path: Path) -> None:
    conf = tmp_path / "iipub.toml"
    conf.write_text(f'[sinks.static]\nroot = "{tmp_path / "public"}"\n'
                    f'[ledger]\npath = "{tmp_path / "public" / "spend-ledger.jsonl"}"\n')
    one_line_error(run_cli("status", env={**cli_env, "IIPUB_CONFIG": str(conf)}), 78, "must be outside")
    conf.write_text('[sinks.static]\nroot = "."\n')  # the default (state/ beside the config) is public here
    one_line_error(run_cli("status", env={**cli_env, "IIPUB_CONFIG": str(conf)}), 78, "must be outside")
