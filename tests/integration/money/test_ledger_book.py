"""The database remembers the spend ledger it writes to (identity and position), so a ledger
deleted, truncated or swapped is noticed: new creates are held, `status --check` stays CRITICAL
until `iipub ledger acknowledge --accept KIND`, and the acknowledged ledger takes creates again.
With `[ledger] mirror_path`, a restore of the database and the ledger from the same night is
caught by the mirror being ahead, and nothing is paid again."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.money import ledger_position
from iipub.provider.factory import load_settings
from iipub.provider.openai.simulator import Simulator
from iipub.store import tables
from iipub.store.job_store import Store
from tests.support.cli import run_cli
from tests.support.rows import job_rows
from tests.support.settings import MIDNIGHT_PRODUCT_TOML, ledger_file_of, sim_env

DAY = dt.date(2026, 11, 20)
DONE = ("PUBLISHED", "CLEANUP_PENDING", "DELETED")


def _env(cli_env: dict[str, str], sim: Simulator, tmp_path: Path, ledger: str = "") -> dict[str, str]:
    """One product; the ticks make no slots of their own (the test's are the only ones)."""
    env = sim_env(cli_env, sim, tmp_path, MIDNIGHT_PRODUCT_TOML, auto_schedule=False)
    cfg = Path(env["IIPUB_CONFIG"])
    text = cfg.read_text().replace("[reconcile]\n", "[reconcile]\ncatch_up_days = 0\n", 1)
    cfg.write_text(text.replace("[ledger]\n", "[ledger]\n" + ledger, 1))
    return env


def _slot(env: dict[str, str], engine: sa.Engine, day: dt.date) -> None:
    Store(engine, "test").schedule(load_settings(env).products["daily-brief"], day)


def _tick(env: dict[str, str], sim: Simulator, n: int = 1) -> None:
    for _ in range(n):
        run_cli("reconcile", env=env, check=True)
        run_cli("relay", env=env, check=True)
        sim.advance(5)


def _states(engine: sa.Engine) -> dict[str, Any]:
    return {str(r["edition_date"])[:10]: (r["state"], r["generation_attempts"]) for r in job_rows(engine)}


def _damage(kind: str, book: Path, tmp_path: Path) -> None:
    if kind == "missing":
        book.unlink()
    elif kind == "behind":  # truncated: the last intent (and what follows it) is gone
        lines = book.read_text().splitlines(keepends=True)
        last_intent = max(i for i, line in enumerate(lines) if '"t": "intent"' in line)
        book.write_text("".join(lines[:last_intent]))
    else:  # replaced: another installation's ledger in its place
        book.write_text('{"t": "open", "ledger_id": "ledger_elsewhere", "installation": "inst_other", '
                        '"slot": "", "attempt": 0}\n')


@pytest.mark.parametrize("kind", ["missing", "behind", "replaced"])
@pytest.mark.parametrize("position", [False, True], ids=["read_whole", "position_kept"])
@pytest.mark.slow
def test_a_lost_ledger_holds_creates_and_stays_critical_until_acknowledged(
    kind: str, position: bool, cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if position:  # every reader keeps where it stopped counting (`ledger_position`), as at 64 KiB of lines
        monkeypatch.setattr(ledger_position, "SAVE_AFTER_BYTES", 1)
    env = _env(cli_env, sim, tmp_path)
    book = ledger_file_of(tmp_path)
    _slot(env, engine, DAY)
    _tick(env, sim, 4)
    assert _states(engine)[DAY.isoformat()][0] in DONE and sim.stats()["creates_total"] == 1
    assert "spend ledger" not in run_cli("status", "--check", env=env).stdout
    assert ledger_position.position_path(book).exists() == position
    _damage(kind, book, tmp_path)
    nxt = DAY + dt.timedelta(days=1)
    _slot(env, engine, nxt)
    for _ in range(2):
        _tick(env, sim)
        status = run_cli("status", "--check", env=env)
        assert status.returncode == 2 and f"spend ledger {kind}" in status.stdout, status.stdout
    assert _states(engine)[nxt.isoformat()] == ("CREATE_ELIGIBLE", 0)
    assert sim.stats()["creates_total"] == 1  # nothing sent while the ledger is in doubt
    shown = run_cli("ledger", "show", "--json", env=env)
    assert shown.returncode == 0 and f'"problem": "{kind}"' in shown.stdout
    checked = run_cli("check", "--ledger", env=env)
    assert checked.returncode == 1 and "ledger_lost" in checked.stdout

    other = next(k for k in ("missing", "behind", "replaced") if k != kind)
    wrong = run_cli("ledger", "acknowledge", "--accept", other, "--reason", "r", "--by", "ops", env=env)
    assert wrong.returncode == 3 and f"the spend ledger is {kind}, not {other}" in wrong.stderr
    ack = run_cli("ledger", "acknowledge", "--accept", kind, "--reason", "lost with the old disk", "--by", "ops",
                  env=env)
    assert ack.returncode == 0, ack.stderr
    assert ack.stdout.startswith("accepted: ") and "may pay for up to 1 of them again" in ack.stdout
    with engine.connect() as conn:
        journaled = conn.execute(sa.select(tables.gate_events.c.kind)).scalars().all()
    assert "ledger_acknowledged" in journaled
    _tick(env, sim, 4)
    assert _states(engine)[nxt.isoformat()][0] in DONE and sim.stats()["creates_total"] == 2
    status = run_cli("status", "--check", env=env)
    assert "spend ledger" not in status.stdout
    assert "ledger_lost" not in run_cli("check", "--ledger", env=env).stdout


@pytest.mark.slow
def test_a_mirror_catches_a_restore_of_the_database_and_ledger_from_the_same_night(
    cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine, db_url: str
) -> None:
    if not db_url.startswith("sqlite"):
        pytest.skip("the host image is a copy of the SQLite file")
    mirror = tmp_path / "backup-mount" / "spend-ledger.jsonl"
    env = _env(cli_env, sim, tmp_path, f'mirror_path = "{mirror}"\n')
    book = ledger_file_of(tmp_path)
    database = Path(db_url.removeprefix("sqlite:///"))
    _slot(env, engine, DAY)
    _tick(env, sim)  # the ledger is opened
    nxt = DAY + dt.timedelta(days=1)
    _slot(env, engine, nxt)  # the next day's slot exists, not paid for yet: the night's image is taken now
    engine.dispose()
    image = tmp_path / "image"
    image.mkdir()
    shutil.copy(database, image / "db")
    shutil.copy(book, image / "ledger")
    _tick(env, sim, 4)  # the next day is paid for (and both days published)
    assert sim.stats()["creates_total"] == 2
    engine.dispose()
    for suffix in ("-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    shutil.copy(image / "db", database)  # the host is restored from the night's image ...
    shutil.copy(image / "ledger", book)  # ... its ledger copy too; the mirror is on the backup mount
    _tick(env, sim)
    status = run_cli("status", "--check", env=env)
    assert status.returncode == 2 and "spend ledger behind" in status.stdout
    report = run_cli("ledger", "show", env=env)  # the check line is clipped; `ledger show` says it whole
    assert "restore the shorter copy from the longer one" in report.stdout, report.stdout
    assert sim.stats()["creates_total"] == 2  # the next day's slot is not paid again
    shutil.copy(mirror, book)  # the runbook's step: the mirror back over the primary
    _tick(env, sim, 4)
    assert sim.stats()["creates_total"] == 2  # the restore fence adopts what the ledger recorded
    assert all(state in DONE for state, _ in _states(engine).values()), job_rows(engine)[-1]["last_error"]
    with engine.connect() as conn:
        reasons = set(conn.execute(sa.select(tables.job_events.c.reason)).scalars())
    assert "restored_adopted" in reasons or "restored_published" in reasons
    assert "spend ledger" not in run_cli("status", "--check", env=env).stdout
