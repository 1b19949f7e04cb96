"""A database knows its configuration: the first writing command records the identity (file,
ledger, static root; the file's SHA-256 beside it), another identity is refused for writing in one
line while read-only commands warn, an edit of the same file is accepted and journaled, and
`iipub config accept` moves to another configuration on purpose."""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa

from iipub.store import config_identity as ci
from iipub.store import db, tables
from tests.support.cli import one_line_error, run_cli

PRODUCT = '[[products]]\nname = "daily-brief"\nprompt = "Write it."\nitems = 3\n'


def _config(path: Path, ledger: Path, extra: str = "") -> Path:
    path.write_text(f'[ledger]\npath = "{ledger}"\n[sinks.static]\nroot = "{path.parent / "public"}"\n'
                    + PRODUCT + extra, encoding="utf-8")
    return path


def _rows(db_url: str) -> list[dict[str, object]]:
    engine = db.make_engine(db_url)
    try:
        with engine.connect() as conn:
            return [dict(r) for r in conn.execute(
                sa.select(tables.config_identity).order_by(tables.config_identity.c.id)).mappings()]
    finally:
        engine.dispose()


def _jobs(db_url: str) -> int:
    engine = db.make_engine(db_url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(tables.jobs)).scalar_one())
    finally:
        engine.dispose()


def test_compare_decides_on_path_ledger_and_root_not_the_fingerprint() -> None:
    a = ci.Identity("/srv/iipub/iipub.toml", "1" * 64, "/var/lib/iipub/l.jsonl", "/srv/iipub/public")
    assert ci.compare(None, a) is ci.IdentityVerdict.ADOPT
    assert ci.compare(a, a) is ci.IdentityVerdict.SAME
    edited = ci.Identity(a.config_path, "2" * 64, a.ledger_path, a.static_root)
    assert ci.compare(a, edited) is ci.IdentityVerdict.EDITED
    for other in (ci.Identity(None, None, a.ledger_path, a.static_root),
                  ci.Identity(a.config_path, a.config_sha256, "/elsewhere.jsonl", a.static_root),
                  ci.Identity(a.config_path, a.config_sha256, a.ledger_path, "/tmp/public")):
        assert ci.compare(a, other) is ci.IdentityVerdict.OTHER


def test_a_command_without_the_databases_configuration_refuses_to_write(db_url: str, cli_env: dict[str, str],
                                                                       tmp_path: Path) -> None:
    cfg = _config(tmp_path / "iipub.toml", tmp_path / "state" / "ledger.jsonl")
    env = {**cli_env, "IIPUB_CONFIG": str(cfg)}
    run_cli("db", "migrate", env=cli_env, check=True)
    run_cli("schedule", "--date", "2026-01-05", env=env, cwd=tmp_path, check=True)
    assert [r["kind"] for r in _rows(db_url)] == ["adopted"]
    assert _rows(db_url)[0]["config_path"] == str(cfg)

    # a shell without IIPUB_CONFIG: built-in defaults, another ledger and static root
    refused = run_cli("schedule", "--date", "2026-01-06", env=cli_env, cwd=tmp_path)
    one_line_error(refused, 78, "refusing to write: this database runs with another configuration")
    assert str(cfg) in refused.stderr
    assert _jobs(db_url) == 1  # nothing written
    assert len(_rows(db_url)) == 1
    for writer in (("reconcile",), ("relay",), ("pause", "--reason", "x"), ("suspend", "0000", "--reason", "x")):
        done = run_cli(*writer, env={**cli_env, "OPENAI_API_KEY": "sk-test"}, cwd=tmp_path)
        assert done.returncode == 78, (writer, done.stderr)

    # read-only commands run, with one warning line; the check says so
    listed = run_cli("jobs", "list", env=cli_env, cwd=tmp_path)
    assert listed.returncode == 0 and "daily-brief" in listed.stdout
    warning = json.loads(listed.stderr.strip().splitlines()[-1])
    assert warning["level"] == "warning" and "another configuration" in warning["message"]
    check = run_cli("status", "--check", env=cli_env, cwd=tmp_path)
    assert "another configuration" in check.stdout and check.returncode >= 1, check.stdout
    same = run_cli("status", "--check", env=env, cwd=tmp_path)
    assert "another configuration" not in same.stdout


def test_editing_the_file_in_place_is_accepted_and_journaled(db_url: str, cli_env: dict[str, str],
                                                            tmp_path: Path) -> None:
    ledger = tmp_path / "state" / "ledger.jsonl"
    cfg = _config(tmp_path / "iipub.toml", ledger)
    env = {**cli_env, "IIPUB_CONFIG": str(cfg)}
    run_cli("db", "migrate", env=cli_env, check=True)
    run_cli("schedule", "--date", "2026-01-05", env=env, check=True)
    _config(cfg, ledger, "[budgets]\nmax_generation_attempts = 2\n")
    run_cli("schedule", "--date", "2026-01-06", env=env, check=True)
    rows = _rows(db_url)
    assert [r["kind"] for r in rows] == ["adopted", "edited"]
    assert rows[0]["config_sha256"] != rows[1]["config_sha256"] and rows[1]["command"] == "schedule"
    run_cli("schedule", "--date", "2026-01-07", env=env, check=True)
    assert len(_rows(db_url)) == 2  # the same fingerprint again: nothing new to journal
    # the same file pointing at another ledger is another configuration
    _config(cfg, tmp_path / "other-ledger.jsonl")
    one_line_error(run_cli("schedule", "--date", "2026-01-08", env=env), 78, "ledger")


def test_config_accept_adopts_another_configuration_on_purpose(db_url: str, cli_env: dict[str, str],
                                                              tmp_path: Path) -> None:
    old = _config(tmp_path / "old.toml", tmp_path / "state" / "ledger.jsonl")
    (tmp_path / "etc").mkdir()
    new = _config(tmp_path / "etc" / "iipub.toml", tmp_path / "state" / "ledger.jsonl")
    run_cli("db", "migrate", env=cli_env, check=True)
    run_cli("schedule", "--date", "2026-01-05", env={**cli_env, "IIPUB_CONFIG": str(old)}, check=True)
    new_env = {**cli_env, "IIPUB_CONFIG": str(new)}
    assert run_cli("schedule", "--date", "2026-01-06", env=new_env).returncode == 78
    accepted = run_cli("config", "accept", "--reason", "moved to etc", "--by", "ops", env=new_env)
    assert accepted.returncode == 0 and str(new) in accepted.stdout
    run_cli("schedule", "--date", "2026-01-06", env=new_env, check=True)
    assert run_cli("schedule", "--date", "2026-01-07", env={**cli_env, "IIPUB_CONFIG": str(old)}).returncode == 78
    last = _rows(db_url)[-1]
    assert (last["kind"], last["by_whom"], last["reason"], last["config_path"]) == \
        ("accepted", "ops", "moved to etc", str(new))
    shown = json.loads(run_cli("config", "show", "--json", env=new_env, check=True).stdout)
    assert shown["verdict"] == "same" and shown["in_force"]["config_path"] == str(new)
    assert [h["kind"] for h in shown["history"]] == ["accepted", "adopted"]
