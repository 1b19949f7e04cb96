"""runbook.md "Upgrading on one host", run as written from the previous release's schema (the
migrations up to 0014) while cron keeps running: the new release installed first stops every cron
run before it reads or writes (exit 69, one line naming `db migrate`, nothing written), `iipub db
migrate` runs beside the cron runs, and the runs after it carry on: the edition is paid once and
published, and the verification commands say so."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from iipub.provider.openai.simulator import Simulator
from iipub.settings.loading import load_settings
from iipub.store import migrate, tables
from iipub.store.job_store import Store
from tests.support.cli import run_cli, run_iipub
from tests.support.rows import job_rows, utc_today
from tests.support.settings import MIDNIGHT_PRODUCT_TOML, sim_env

PREVIOUS = "0014"  # the last migration of the previous release
DONE = ("PUBLISHED", "CLEANUP_PENDING", "DELETED")


def _previous_release_schema(engine: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    real = migrate.available
    with monkeypatch.context() as m:
        m.setattr(migrate, "available", lambda family: [x for x in real(family) if x.version <= PREVIOUS])
        migrate.migrate(engine)


@pytest.mark.slow  # cron's runs as subprocesses for the length of a migration
def test_upgrading_on_one_host_with_cron_running(cli_env: dict[str, str], sim: Simulator, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from iipub.store import db

    engine = db.make_engine(cli_env["IIPUB_DATABASE_URL"])
    try:
        _previous_release_schema(engine, monkeypatch)
        env = sim_env(cli_env, sim, tmp_path, MIDNIGHT_PRODUCT_TOML, auto_schedule=False)
        Store(engine, "previous release").schedule(load_settings(env).products["daily-brief"], utc_today())
        with engine.connect() as conn:
            before = conn.execute(sa.select(tables.jobs.c.version)).scalar_one()

        # 1. the new release is installed; cron runs it before the migration: it stops, writes nothing
        early = run_iipub("reconcile", env=env, cwd=tmp_path)
        assert early.returncode == 69, early.stderr
        assert "schema is behind this iipub" in early.stderr and "iipub db migrate" in early.stderr
        (job,) = job_rows(engine)
        assert (job["state"], job["version"]) == ("NO_JOB", before) and sim.stats()["creates_total"] == 0

        # 2. `iipub db migrate` while cron-like runs go on
        codes: list[int] = []
        stop = threading.Event()

        def cron() -> None:
            quiet = {**env, "IIPUB_LOG_LEVEL": "warning"}
            while not stop.is_set() and len(codes) < 30:
                codes.extend(run_iipub(command, env=quiet, cwd=tmp_path, timeout=90).returncode
                             for command in ("reconcile", "relay"))
                sim.advance(5)

        runner = threading.Thread(target=cron)
        runner.start()
        try:
            time.sleep(0.5)
            migrated = run_cli("db", "migrate", env=env, cwd=tmp_path)
            assert migrated.returncode == 0, migrated.stderr
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and job_rows(engine)[0]["state"] not in DONE:
                time.sleep(0.5)
        finally:
            stop.set()
            runner.join(timeout=200)
        assert set(codes) <= {0, 69}, codes
        first_ok = codes.index(0)
        assert all(code == 0 for code in codes[first_ok:]), codes  # once migrated, every run works

        # 3. verify, as the runbook says
        (job,) = job_rows(engine)
        assert job["state"] in DONE and job["generation_attempts"] == 1 and sim.stats()["creates_total"] == 1
        shown = run_cli("db", "status", env=env, cwd=tmp_path, check=True).stdout
        assert "pending" not in shown.lower(), shown
        check = run_cli("status", "--check", env=env, cwd=tmp_path)
        assert "schema" not in check.stdout and check.returncode in (0, 1), check.stdout
        with engine.connect() as conn:
            (tagged,) = conn.execute(sa.select(tables.spend.c.ledger_id)).scalars().all()
        assert tagged  # the create after the migration wrote the new release's columns
        assert os.path.exists(Path(load_settings(env).ledger_path() or ""))
    finally:
        engine.dispose()
