"""Day two: the moves an operator is told to make keep working. Relative paths, the default
static root included, are the configuration file's folder's whatever the working directory; the
configuration identity survives the same file run from another folder, through a symlink or
moved, and still refuses another configuration; the runbook's move of a whole installation folder
(`config accept` after it) takes creates again on the same spend ledger; read-only commands read
under another configuration; the WSGI receiver checks the identity at every delivery."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from iipub.provider.openai.simulator import Simulator
from iipub.provider.openai.webhook_signature import sign
from iipub.settings.loading import load_settings
from iipub.store import db, tables
from iipub.store.job_store import Store
from iipub.webhooks.receiver import Receiver
from tests.support.cli import one_line_error, run_cli
from tests.support.rows import job_rows

PRODUCT = ('[[products]]\nname = "daily-brief"\nprompt = "Write the brief."\nopens_at = "00:00"\nitems = 3\n')
# Every path relative: the installation folder can move as a whole.
RELATIVE = ("[reconcile]\npoll_interval_seconds = 0\nlease_seconds = 10\ntick_seconds = 20\nauto_schedule = false\n"
            "catch_up_days = 0\n"
            "[provider]\ntimeout_seconds = 2\nconnect_timeout_seconds = 1\nloss_confirm_seconds = 0\n"
            '[ledger]\npath = "state/spend-ledger.jsonl"\n' + PRODUCT)
DAY = dt.date(2026, 11, 20)


def _identity_rows(db_url: str) -> list[dict[str, object]]:
    engine = db.make_engine(db_url)
    try:
        with engine.connect() as conn:
            return [dict(r) for r in conn.execute(
                sa.select(tables.config_identity).order_by(tables.config_identity.c.id)).mappings()]
    finally:
        engine.dispose()


def _install(folder: Path, text: str = RELATIVE) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    cfg = folder / "iipub.toml"
    cfg.write_text(text, encoding="utf-8")
    return cfg


def test_the_default_static_root_is_the_config_folders_from_any_working_directory(
        db_url: str, cli_env: dict[str, str], tmp_path: Path) -> None:
    cfg = _install(tmp_path / "srv")
    env = {**cli_env, "IIPUB_CONFIG": str(cfg)}
    elsewhere = tmp_path / "home"
    elsewhere.mkdir()
    assert load_settings(env).static_sink.root == tmp_path / "srv" / "public"  # type: ignore[union-attr]
    run_cli("db", "migrate", env=cli_env, check=True)
    run_cli("schedule", "--date", "2026-01-05", env=env, cwd=tmp_path / "srv", check=True)
    # cron's environment, from another folder: the same configuration
    paused = run_cli("pause", "--reason", "night work", env=env, cwd=elsewhere)
    assert paused.returncode == 0, paused.stderr
    run_cli("unpause", env=env, cwd=Path("/"), check=True)
    rows = _identity_rows(db_url)
    assert [r["kind"] for r in rows] == ["adopted"]
    assert rows[0]["static_root"] == str(tmp_path / "srv" / "public")
    # a relative IIPUB_CONFIG names the same file
    run_cli("schedule", "--date", "2026-01-06", env={**env, "IIPUB_CONFIG": "srv/iipub.toml"}, cwd=tmp_path,
            check=True)
    assert len(_identity_rows(db_url)) == 1


def test_a_symlink_and_a_moved_file_are_the_same_configuration_another_one_is_refused(
        db_url: str, cli_env: dict[str, str], tmp_path: Path) -> None:
    state = tmp_path / "state"
    text = f'[ledger]\npath = "{state / "ledger.jsonl"}"\n[sinks.static]\nroot = "{tmp_path / "www"}"\n' + PRODUCT
    cfg = _install(tmp_path / "etc", text)
    run_cli("db", "migrate", env=cli_env, check=True)
    run_cli("schedule", "--date", "2026-01-05", env={**cli_env, "IIPUB_CONFIG": str(cfg)}, check=True)

    link = tmp_path / "iipub.toml"
    link.symlink_to(cfg)
    run_cli("schedule", "--date", "2026-01-06", env={**cli_env, "IIPUB_CONFIG": str(link)}, check=True)
    assert [r["kind"] for r in _identity_rows(db_url)] == ["adopted"]

    # a copy of the same content while the original stays: nothing to record, both work
    copy = tmp_path / "copy" / "iipub.toml"
    copy.parent.mkdir()
    shutil.copyfile(cfg, copy)
    run_cli("schedule", "--date", "2026-01-07", env={**cli_env, "IIPUB_CONFIG": str(copy)}, check=True)
    assert [r["kind"] for r in _identity_rows(db_url)] == ["adopted"]

    # the file moved: accepted and journaled once
    moved = tmp_path / "new-etc" / "iipub.toml"
    moved.parent.mkdir()
    copy.unlink()
    shutil.move(cfg, moved)
    run_cli("schedule", "--date", "2026-01-08", env={**cli_env, "IIPUB_CONFIG": str(moved)}, check=True)
    run_cli("schedule", "--date", "2026-01-09", env={**cli_env, "IIPUB_CONFIG": str(moved)}, check=True)
    rows = _identity_rows(db_url)
    assert [r["kind"] for r in rows] == ["adopted", "moved"] and rows[-1]["config_path"] == str(moved)

    # another file (other content) at the old place, and the built-in defaults: refused
    _install(tmp_path / "etc", text + "[budgets]\nmax_generation_attempts = 2\n")
    refused = run_cli("schedule", "--date", "2026-01-10", env={**cli_env, "IIPUB_CONFIG": str(cfg)})
    one_line_error(refused, 78, "another configuration")
    one_line_error(run_cli("schedule", "--date", "2026-01-10", env=cli_env, cwd=tmp_path), 78, "another configuration")
    # the moved file edited while a stale copy of its old content turns up elsewhere: not a move
    stale = tmp_path / "stale.toml"
    shutil.copyfile(moved, stale)
    moved.write_text(text + "[budgets]\nmax_generation_attempts = 3\n", encoding="utf-8")
    run_cli("schedule", "--date", "2026-01-11", env={**cli_env, "IIPUB_CONFIG": str(moved)}, check=True)
    one_line_error(run_cli("schedule", "--date", "2026-01-12", env={**cli_env, "IIPUB_CONFIG": str(stale)}), 78,
                   "another configuration")
    assert [r["kind"] for r in _identity_rows(db_url)] == ["adopted", "moved", "edited"]


READERS: tuple[tuple[str, ...], ...] = (
    ("status",), ("jobs", "list"), ("quarantine", "list"), ("quarantine", "show", "0"), ("ledger", "show"),
    ("config", "show"), ("budget", "show"), ("outbox", "list"), ("orphans", "list"), ("check",), ("db", "status"))


def test_read_only_commands_read_under_another_configuration(db_url: str, cli_env: dict[str, str],
                                                             tmp_path: Path) -> None:
    cfg = _install(tmp_path / "srv")
    run_cli("db", "migrate", env=cli_env, check=True)
    run_cli("schedule", "--date", "2026-01-05", env={**cli_env, "IIPUB_CONFIG": str(cfg)}, check=True)
    job = job_rows(db.make_engine(db_url))[0]["id"]
    for reader in READERS:
        args = tuple(str(job) if a == "0" else a for a in reader)
        done = run_cli(*args, env=cli_env, cwd=tmp_path)  # no IIPUB_CONFIG: another configuration
        assert done.returncode != 78, (args, done.stderr)
        assert "refusing to write" not in done.stderr, (args, done.stderr)
    assert [r["kind"] for r in _identity_rows(db_url)] == ["adopted"]


@pytest.mark.slow
def test_the_runbooks_move_of_an_installation_folder_keeps_its_ledger_and_pays_once(
        db_url: str, cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine) -> None:
    old = _install(tmp_path / "old")
    env = {**cli_env, "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": sim.url, "IIPUB_CONFIG": str(old)}
    run_cli("db", "migrate", env=cli_env, check=True)
    Store(engine, "test").schedule(load_settings(env).products["daily-brief"], DAY)
    for _ in range(4):
        run_cli("reconcile", env=env, cwd=tmp_path, check=True)
        run_cli("relay", env=env, cwd=tmp_path, check=True)
        sim.advance(5)
    assert (tmp_path / "old" / "state" / "spend-ledger.jsonl").exists()
    assert list((tmp_path / "old" / "public").rglob("index.html"))

    # runbook "Moving an installation": pause, move the folder, point cron at it, accept, resume
    run_cli("pause", "--reason", "moving to /srv", env=env, check=True)
    shutil.move(tmp_path / "old", tmp_path / "new")
    new_env = {**env, "IIPUB_CONFIG": str(tmp_path / "new" / "iipub.toml")}
    one_line_error(run_cli("unpause", env=new_env), 78, "another configuration")
    run_cli("config", "accept", "--reason", "moved to /srv", "--by", "ops", env=new_env, check=True)
    run_cli("unpause", env=new_env, check=True)
    check = run_cli("status", "--check", env=new_env)
    assert "spend ledger" not in check.stdout and "another configuration" not in check.stdout, check.stdout

    nxt = DAY + dt.timedelta(days=1)
    Store(engine, "test").schedule(load_settings(new_env).products["daily-brief"], nxt)
    for _ in range(4):
        run_cli("reconcile", env=new_env, cwd=Path("/"), check=True)
        run_cli("relay", env=new_env, cwd=Path("/"), check=True)
        sim.advance(5)
    states = {str(r["edition_date"])[:10]: r["state"] for r in job_rows(engine)}
    assert states[nxt.isoformat()] in ("PUBLISHED", "CLEANUP_PENDING", "DELETED"), states
    assert sim.stats()["creates_total"] == 2
    lines = (tmp_path / "new" / "state" / "spend-ledger.jsonl").read_text().splitlines()
    assert sum(1 for line in lines if json.loads(line)["t"] == "intent") == 2
    assert sum(1 for line in lines if json.loads(line)["t"] == "open") == 1  # the same ledger, not a new one
    assert (tmp_path / "new" / "public" / "daily-brief" / nxt.isoformat()).exists() or \
        any(nxt.isoformat() in str(p) for p in (tmp_path / "new" / "public").rglob("*"))


SECRET = "whsec_" + "QUJD" * 8


def _delivery(hook: Receiver, response_id: str) -> tuple[bytes, dict[str, str]]:
    now = int(time.time())
    body = json.dumps({"id": f"evt_{response_id}", "object": "event", "type": "response.completed",
                       "created_at": now, "data": {"id": response_id}}).encode()
    return body, sign(SECRET, f"wh_{response_id}", body, now)


@pytest.mark.usefixtures("sim")
def test_the_receiver_refuses_to_record_under_another_configuration_at_every_delivery(
        db_url: str, cli_env: dict[str, str], tmp_path: Path, engine: sa.Engine,
        monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _install(tmp_path / "srv")
    run_cli("schedule", "--date", "2026-01-05", env={**cli_env, "IIPUB_CONFIG": str(cfg)}, check=True)
    monkeypatch.setenv("OPENAI_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("IIPUB_DATABASE_URL", db_url)
    monkeypatch.delenv("IIPUB_CONFIG", raising=False)  # the WSGI server's environment lacks it
    hook = Receiver(load_settings(), engine)
    try:
        answer = hook.receive(*_delivery(hook, "resp_" + "a" * 20))
        assert answer.status == 503 and "configuration" in answer.message
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(tables.webhook_deliveries)).scalar_one() == 0
        # the same receiver, once the configuration it runs with is the database's
        monkeypatch.setenv("IIPUB_CONFIG", str(cfg))
        hook.settings = load_settings()
        answer = hook.receive(*_delivery(hook, "resp_" + "b" * 20))
        assert answer.status == 200, answer.message
        # and after the file is replaced by another configuration while it runs
        cfg.write_text(RELATIVE.replace("state/spend-ledger.jsonl", "elsewhere.jsonl"), encoding="utf-8")
        hook.settings = load_settings()
        answer = hook.receive(*_delivery(hook, "resp_" + "c" * 20))
        assert answer.status == 503
    finally:
        hook.close()
