"""`iipub relay` as a real process, killed after a sink wrote and before the event was marked.
Only the relay that is killed is a child; the ticks around it run in process (`run_cli`)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import signal
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from iipub.provider.factory import settings_from_dict
from iipub.provider.openai.simulator import Simulator
from iipub.store import clock, tables
from iipub.store.job_store import Store
from tests.support.cli import run_cli, start_iipub
from tests.support.loopback import SECRET, receiver
from tests.support.rows import job_rows
from tests.support.settings import sim_env

PRODUCT = (
    '[[products]]\nname = "daily-brief"\nlanguages = ["en", "es"]\nopens_at = "00:00"\n'
    'prompt = "Write the brief."\nitems = 3\n'
)


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".lock"}


def _unpublished(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).where(tables.outbox.c.published_at.is_(None))).scalar_one())


@pytest.mark.slow
def test_relay_killed_between_sink_write_and_mark_redelivers_identically(
    engine: sa.Engine, sim: Simulator, cli_env: dict[str, str], tmp_path: Path
) -> None:
    with receiver() as hook:
        env = sim_env(cli_env, sim, tmp_path,
                      PRODUCT + f'[sinks.webhook]\nurl = "{hook.url}"\ntimeout_seconds = 30.0\n')
        env["IIPUB_WEBHOOK_SECRET"] = SECRET
        product = settings_from_dict({"products": [{"name": "daily-brief", "prompt": "Write the brief.", "items": 3,
                                                    "opens_at": "00:00"}]}).products["daily-brief"]
        Store(engine, "test").schedule(product, dt.date(2026, 11, 28))
        for _ in range(4):
            run_cli("reconcile", env=env, cwd=tmp_path, check=True)
            sim.advance(5)
        with engine.connect() as conn:
            assert set(conn.execute(sa.select(tables.jobs.c.state)).scalars()) == {"SAVED_NOT_PUBLIC"}
        events = _unpublished(engine)
        # Two languages per slot: 2026-11-28, today's, and the days between that catch-up schedules.
        assert events == 2 * len(job_rows(engine)) >= 4

        hook.mode = "hang"  # the static sink writes, then the webhook POST never returns
        proc = start_iipub("relay", env=env, cwd=tmp_path)
        try:
            end = time.monotonic() + 30
            while not hook.requests and time.monotonic() < end:
                time.sleep(0.05)
            assert hook.requests, "the relay never reached the webhook"
            first = hook.requests[0]["headers"]["idempotency-key"]  # recorded whole before the kill
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        # Webhook deliveries run in a small pool: the dead relay may have reached the receiver
        # with several events (each hung) before it was killed. A request it was still sending
        # when it died is not a delivery: the receiver drops a short body (it once recorded an
        # empty one).
        hook.quiet()
        root = tmp_path / "public"
        written = _tree(root)
        assert any(name.endswith(".html") for name in written)  # the static sink had written
        assert _unpublished(engine) == events  # nothing was marked

        hook.mode = "ok"
        clock.advance_clock(engine, 61)  # the dead relay's claim expires
        out = run_cli("relay", env=env, cwd=tmp_path, check=True).stdout
        report = json.loads(out.strip().splitlines()[-1])
        assert report["published"] == events and report["jobs_published"] == len(job_rows(engine))
        assert _unpublished(engine) == 0
        after = _tree(root)
        # Every edition the dead relay wrote is re-written byte-identical (the pages, indexes and
        # feed legitimately change by the editions delivered since: links to a newer edition).
        editions = {k: v for k, v in written.items() if k.count("/") == 2 and k.endswith(".json")}
        assert editions and {k: after[k] for k in editions} == editions
        keys = hook.keys()
        # Each event the dead relay had reached (at least the first, which made the test kill it;
        # others of the pool may or may not have arrived whole in time) is sent again with the same
        # Idempotency-Key and the same bytes, once more; the others once.
        assert len(keys) == events and keys[first] == 2 and set(keys.values()) <= {1, 2}, keys
        bodies: dict[str, set[bytes]] = {}
        for r in hook.requests:
            bodies.setdefault(r["headers"]["idempotency-key"], set()).add(r["body"])
        assert all(len(b) == 1 for b in bodies.values()), "a redelivery differs from the first delivery"
        assert hook.verified() == len(hook.requests)
        delivered = sum(keys.values())
        run_cli("relay", env=env, cwd=tmp_path, check=True)
        assert sum(hook.keys().values()) == delivered  # nothing more once marked
        assert _tree(root) == after
        run_cli("reconcile", env=env, cwd=tmp_path, check=True)
        with engine.connect() as conn:
            assert set(conn.execute(sa.select(tables.jobs.c.state)
                .where(tables.jobs.c.edition_date == dt.date(2026, 11, 28)))
                       .scalars()) == {"DELETED"}
