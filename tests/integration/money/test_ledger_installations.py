"""The spend ledger belongs to one installation: every line names the installation id of the
database that wrote it, and the restore fence, `check --ledger` and every other reader count
only their own installation's lines. Two databases may write to one file; two `iipub demo` runs
in two folders keep two ledgers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.provider.openai.simulator import Simulator
from iipub.store import db
from tests.support.cli import clean_env, run_cli
from tests.support.databases import fresh_database
from tests.support.settings import MIDNIGHT_PRODUCT_TOML, ledger_file_of, sim_env


def _rows(url: str) -> list[dict[str, Any]]:
    eng = db.make_engine(url)
    try:
        with eng.connect() as conn:
            return [dict(r) for r in conn.execute(sa.text(
                "SELECT product, edition_date, state, generation_attempts, quarantine_reason FROM jobs")).mappings()]
    finally:
        eng.dispose()


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_two_demos_in_two_folders_each_pay_once_per_slot_and_keep_their_own_ledger(tmp_path: Path) -> None:
    env = clean_env()
    for folder in ("one", "two"):
        res = run_cli("demo", "--dir", str(tmp_path / folder), env=env, cwd=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        rows = _rows(f"sqlite:///{tmp_path / folder / 'iipub.sqlite3'}")
        assert rows and {(r["state"], r["generation_attempts"]) for r in rows} == {("DELETED", 1)}, rows
        book = tmp_path / folder / "spend-ledger.jsonl"
        assert f"ledger      {book}" in res.stdout
        intents = [r for r in _lines(book) if r["t"] == "intent"]
        assert len(intents) == len(rows)  # one paid create per slot, written in the demo's own folder
        assert len({r["installation"] for r in _lines(book)}) == 1
    assert not (tmp_path / "xdg-state" / "iipub" / "spend-ledger.jsonl").exists()  # the account's is untouched


@pytest.mark.slow
def test_two_databases_writing_to_one_ledger_each_pay_once_per_slot(
    cli_env: dict[str, str], db_url: str, sim: Simulator, tmp_path: Path
) -> None:
    """A production database pointed at a ledger another database already writes to: each reads
    only its own lines, so neither parks the other's slots `restored_behind_ledger`."""
    shared = tmp_path / "shared-ledger.jsonl"
    (tmp_path / "b").mkdir()
    with fresh_database(tmp_path / "b") as url_b:
        envs = {"a": sim_env(cli_env, sim, tmp_path, MIDNIGHT_PRODUCT_TOML),
                "b": {**sim_env(cli_env, sim, tmp_path / "b", MIDNIGHT_PRODUCT_TOML), "IIPUB_DATABASE_URL": url_b}}
        for folder in (tmp_path, tmp_path / "b"):  # both configurations name the one ledger
            cfg = folder / "iipub.toml"
            cfg.write_text(cfg.read_text().replace(str(ledger_file_of(folder)), str(shared)))
        urls = {"a": db_url, "b": url_b}
        for env in envs.values():
            run_cli("db", "migrate", env=env, check=True)
        for _ in range(8):
            for env in envs.values():
                run_cli("reconcile", env=env, check=True)
                run_cli("relay", env=env, check=True)
            sim.advance(5)
            if all({r["state"] for r in _rows(u)} == {"DELETED"} for u in urls.values()):
                break
        slots = 0
        for name, url in urls.items():
            rows = _rows(url)
            assert rows and {(r["state"], r["generation_attempts"]) for r in rows} == {("DELETED", 1)}, (name, rows)
            slots += len(rows)
            check = run_cli("check", "--ledger", env=envs[name])
            assert check.returncode == 0, check.stdout + check.stderr
            assert "other installations" in check.stdout  # the other database's lines, named and not counted
        assert sim.stats()["creates_total"] == slots  # one paid create per slot, nothing paid twice
        owners = {r["installation"] for r in _lines(shared)}
        assert len(owners) == 2 and all(o.startswith("inst_") for o in owners)


@pytest.mark.slow
def test_old_lines_without_an_installation_count_only_when_this_database_knows_their_job(
    cli_env: dict[str, str], db_url: str, sim: Simulator, tmp_path: Path
) -> None:
    """Lines written before lines named their installation: another database's (a job and a
    response this one never saw) are noted and ignored; this database's own still fence a
    restore (`tests/unit/money/test_ledger.py` folds both kinds)."""
    env = sim_env(cli_env, sim, tmp_path, MIDNIGHT_PRODUCT_TOML)
    run_cli("db", "migrate", env=env, check=True)
    book = tmp_path / "xdg-state" / "iipub" / "spend-ledger.jsonl"
    book.parent.mkdir(parents=True)
    res = run_cli("jobs", "list", "--json", env=env)
    assert res.returncode == 0
    foreign = [{"t": "intent", "job_id": "someone-elses-job", "slot": f"daily-brief/{day}", "attempt": 1,
                "fingerprint": "x", "worker": "w"} for day in _recent_days()]
    foreign += [{"t": "outcome", "job_id": "someone-elses-job", "slot": f"daily-brief/{day}", "attempt": 1,
                 "outcome": "accepted", "response_id": "resp_elsewhere"} for day in _recent_days()]
    book.write_text("".join(json.dumps(r) + "\n" for r in foreign))
    for _ in range(6):
        run_cli("reconcile", env=env, check=True)
        run_cli("relay", env=env, check=True)
        sim.advance(5)
    rows = _rows(db_url)
    assert rows and {(r["state"], r["generation_attempts"]) for r in rows} == {("DELETED", 1)}, rows
    assert sim.stats()["creates_total"] == len(rows)
    check = run_cli("check", "--ledger", env=env)
    assert check.returncode == 0, check.stdout
    assert f"{len(foreign)} old line(s) without an installation id" in check.stdout


def _recent_days() -> list[str]:
    import datetime as dt

    today = dt.datetime.now(dt.UTC).date()
    return [(today - dt.timedelta(days=i)).isoformat() for i in range(3)]
