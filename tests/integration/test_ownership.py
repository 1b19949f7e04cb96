"""Ownership (PRODUCT.md: ownership and installation ids): two installations, two databases, one
provider project whose webhooks reach both receivers. Each reads, cancels and deletes only its
own responses (the simulator counts every request by response id and by caller), a response with
no iipub metadata is touched by neither, and each counts the others' deliveries as foreign."""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import openai
import pytest
import sqlalchemy as sa

from iipub import db, installation, migrate, reconcile, relay, webhook
from iipub.config import Settings, WebhookSettings
from iipub.deliveries import Deliveries
from iipub.simulator import Simulator, SimulatorOptions
from iipub.simulator.backend import caller
from iipub.states import State
from tests.helpers import fresh_database, job_rows, make_settings, run_cli, serving

SECRET = "whsec_" + base64.b64encode(b"iipub-test-webhook-secret-0123456789").decode()


class _Late:
    """A WSGI app whose receiver is set once the simulator's URL is known."""

    target: Any = None

    def __call__(self, environ: Mapping[str, Any], start_response: Any) -> Any:
        return self.target(environ, start_response)


@dataclass
class Installation:
    name: str
    settings: Settings
    engine: sa.Engine
    installation_id: str
    db_url: str

    @property
    def key(self) -> str:
        return self.settings.api_key or ""

    def job(self) -> dict[str, Any]:
        (row,) = job_rows(self.engine)
        return row

    def outcomes(self) -> list[str]:
        with self.engine.connect() as conn:
            return sorted(conn.execute(sa.select(db.webhook_deliveries.c.outcome)).scalars())


def hooked(base: Settings, api_key: str) -> Settings:
    """One product open since midnight; webhooks on; polls 250 s apart, so custody comes by webhook."""
    p = replace(base.products["daily-brief"], items=3, prompt="Write the brief.", opens_at=dt.time(0, 0))
    return replace(base, products={"daily-brief": p}, webhook_sink=None, api_key=api_key,
                   provider_webhook_secret=SECRET,
                   reconcile=replace(base.reconcile, poll_interval_seconds=250),
                   webhooks=WebhookSettings(enabled=True, poll_interval_seconds=300, lease_wait_seconds=0.3,
                                            request_seconds=10))


@contextmanager
def two_installations(tmp_path: Path) -> Iterator[tuple[Simulator, list[Installation]]]:
    with ExitStack() as stack:
        apps = [_Late(), _Late()]
        servers = [webhook.make_wsgi_server("127.0.0.1", 0, app) for app in apps]
        for server in servers:
            stack.enter_context(serving(server))
        urls = [f"http://127.0.0.1:{s.server_port}/" for s in servers]
        sim = stack.enter_context(Simulator(SimulatorOptions(
            queued_seconds=0.2, in_progress_seconds=0.3, slow_seconds=8,
            webhook_url=urls[0], webhook_also=tuple(urls[1:]), webhook_secret=SECRET)))
        found = []
        for name, app in zip("ab", apps, strict=True):
            (tmp_path / name).mkdir()
            url = stack.enter_context(fresh_database(tmp_path / name))
            engine = db.make_engine(url, pool_size=24)
            stack.callback(engine.dispose)
            migrate.migrate(engine)
            settings = hooked(make_settings(url, sim.url, tmp_path / name / "public"), f"sk-test-{name * 6}")
            receiver = webhook.Receiver(settings, engine=engine)
            stack.callback(receiver.close)
            app.target = receiver
            found.append(Installation(name, settings, engine, installation.read(engine), url))
        yield sim, found


def test_migrate_gives_each_database_its_own_installation_id_once(tmp_path: Path) -> None:
    ids = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        with fresh_database(tmp_path / name) as url:
            engine = db.make_engine(url)
            try:
                migrate.migrate(engine)
                first = installation.read(engine)
                assert migrate.migrate(engine) == []  # a second migrate keeps it
                assert installation.read(engine) == first and first.startswith("inst_")
                with engine.connect() as conn:
                    assert conn.execute(sa.select(sa.func.count()).select_from(db.installation)).scalar_one() == 1
                ids.append(first)
            finally:
                engine.dispose()
    assert ids[0] != ids[1]


def test_two_installations_on_one_project_touch_only_their_own_responses(tmp_path: Path) -> None:
    with two_installations(tmp_path) as (sim, (a, b)):
        assert a.installation_id != b.installation_id
        other = openai.OpenAI(api_key="sk-someone-else", base_url=sim.url, max_retries=0)
        bare = other.responses.create(model="gpt-test", input="not iipub's", background=True)
        named = other.responses.create(model="gpt-test", input="an old iipub's", background=True,
                                       metadata={"iipub_job_id": "00000000-0000-0000-0000-000000000000",
                                                 "iipub_attempt": "1"})
        for i in (a, b):
            reconcile.run(i.settings, i.engine)
            assert i.job()["state"] == State.ACCEPTED.value
        sim.advance(5)
        assert sim.flush_webhooks(15)
        for i in (a, b):  # each took its own output into custody from its own webhook
            assert i.job()["payload_sha256"] is not None
        for _ in range(6):
            for i in (a, b):
                reconcile.run(i.settings, i.engine)
                relay.run(i.settings, i.engine)
            sim.advance(5)
        for i in (a, b):
            assert i.job()["state"] == State.DELETED.value
        mine = {i.name: i.job()["response_id"] for i in (a, b)}
        stats = sim.stats()
        assert stats["creates_total"] == 4  # one per installation, and the two of the other application
        assert sorted(stats["deleted_ids"]) == sorted(mine.values())
        for i in (a, b):
            assert set(stats["callers_by_response"][mine[i.name]]) == {caller(i.key)}
        assert bare.id not in stats["calls_by_response"] and named.id not in stats["calls_by_response"]
        for i in (a, b):
            # Its own delivery, and three foreign ones: the other installation's and the other application's two.
            assert i.outcomes().count("foreign") == 3
            assert Deliveries(i.engine).orphans() == []
            with i.engine.connect() as conn:
                deletes = installation.deletes(conn)
            assert [(d["response_id"], d["basis"]) for d in deletes] == [(mine[i.name], "custody")]
            status = json.loads(run_cli("status", "--json", env={"IIPUB_DATABASE_URL": i.db_url}).stdout)
            assert status["installation_id"] == i.installation_id and status["webhooks"]["foreign"] == 3
        meta = [m for m in stats["create_metadata"] if m.get("iipub_installation")]
        assert sorted(m["iipub_installation"] for m in meta) == sorted([a.installation_id, b.installation_id])


@pytest.mark.parametrize("claimed", [True, False])
def test_link_refuses_a_response_of_another_installation(
        cfg: Settings, engine: sa.Engine, sim: Simulator, cli_env: dict[str, str], claimed: bool) -> None:
    sim.add_faults([{"fault": "drop_after_accept", "op": "create"}])
    reconcile.run(cfg, engine)
    (job,) = job_rows(engine)
    assert job["quarantine_reason"] == "create_outcome_unknown"
    meta = {"iipub_job_id": job["id"], "iipub_attempt": "1", "iipub_fingerprint": job["config_fingerprint"]}
    if claimed:
        meta["iipub_installation"] = "inst_of_someone_else"
    other = openai.OpenAI(api_key="sk-someone-else", base_url=sim.url, max_retries=0)
    resp = other.responses.create(model="gpt-test", input="x", background=True, metadata=meta)
    env = {**cli_env, "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": sim.url}
    result = run_cli("quarantine", "release", job["id"], "--link", resp.id, "--reason", "found it", env=env)
    (after,) = job_rows(engine)
    if claimed:
        assert result.returncode == 3 and "belongs to installation 'inst_of_someone_else'" in result.stderr
        assert after["state"] == State.QUARANTINED.value and after["response_id"] is None
    else:  # made before installation ids, naming this job: the operator's link stands
        assert result.returncode == 0, result.stderr
        assert after["response_id"] == resp.id
