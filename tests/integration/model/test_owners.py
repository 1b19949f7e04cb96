"""Ownership (PRODUCT.md: ownership and installation ids): two installations, two databases, one
provider project whose webhooks reach both receivers. Each reads, cancels and deletes only its
own responses (the simulator counts every request by response id and by caller), a response with
no iipub metadata is touched by neither, and each counts the others' deliveries as foreign."""

from __future__ import annotations

import base64
import datetime as dt
import json
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import sqlalchemy as sa
import standardwebhooks

from iipub.machine import sweep
from iipub.model.states import State
from iipub.provider.openai.simulator import Simulator
from iipub.provider.openai.simulator.backend import caller
from iipub.publish import relay
from iipub.settings.config import Settings, WebhookSettings
from iipub.store import clock, db, installation, migrate, tables
from iipub.store.deliveries import Deliveries
from iipub.store.job_store import Store
from iipub.webhooks import receiver as webhook
from iipub.webhooks import server as webhook_server
from tests.support.cli import run_cli
from tests.support.databases import fresh_database, restore_rows, snapshot_rows
from tests.support.rows import job_events, job_rows, utc_today
from tests.support.settings import make_settings
from tests.support.simulator import simulator

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
            return sorted(conn.execute(sa.select(tables.webhook_deliveries.c.outcome)).scalars())


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
        servers = [stack.enter_context(webhook_server.running(app, WebhookSettings())) for app in apps]
        urls = [f"http://127.0.0.1:{s.port}/" for s in servers]
        # Responses finish when the test advances the simulator, not while a loaded host is slow
        # to get from one installation's first tick to the other's.
        sim = stack.enter_context(simulator(
            in_progress_seconds=4.5, webhook_url=urls[0], webhook_also=tuple(urls[1:]), webhook_secret=SECRET))
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
                    assert conn.execute(sa.select(sa.func.count()).select_from(tables.installation)).scalar_one() == 1
                ids.append(first)
            finally:
                engine.dispose()
    assert ids[0] != ids[1]


@pytest.mark.slow
def test_two_installations_on_one_project_touch_only_their_own_responses(tmp_path: Path) -> None:
    with two_installations(tmp_path) as (sim, (a, b)):
        assert a.installation_id != b.installation_id
        other = openai.OpenAI(api_key="sk-someone-else", base_url=sim.url, max_retries=0)
        bare = other.responses.create(model="gpt-test", input="not iipub's", background=True)
        named = other.responses.create(model="gpt-test", input="an old iipub's", background=True,
                                       metadata={"iipub_job_id": "00000000-0000-0000-0000-000000000000",
                                                 "iipub_attempt": "1"})
        for i in (a, b):
            sweep.run(i.settings, i.engine)
            assert i.job()["state"] == State.ACCEPTED.value
        sim.advance(5)
        assert sim.flush_webhooks(15)
        for i in (a, b):  # each took its own output into custody from its own webhook
            assert i.job()["payload_sha256"] is not None
        for _ in range(6):
            for i in (a, b):
                sweep.run(i.settings, i.engine)
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
            prom = tmp_path / f"{i.name}.prom"
            shown = run_cli("status", "--json", "--prometheus", str(prom), env={"IIPUB_DATABASE_URL": i.db_url})
            status = json.loads(shown.stdout)
            assert status["installation_id"] == i.installation_id and status["webhooks"]["foreign"] == 3
            assert "iipub_foreign_webhook_deliveries 3.0" in prom.read_text()
        meta = [m for m in stats["create_metadata"] if m.get("iipub_installation")]
        assert sorted(m["iipub_installation"] for m in meta) == sorted([a.installation_id, b.installation_id])


@pytest.mark.parametrize("claimed", [True, False])
def test_link_refuses_a_response_of_another_installation(
        cfg: Settings, engine: sa.Engine, sim: Simulator, cli_env: dict[str, str], claimed: bool) -> None:
    sim.add_faults([{"fault": "drop_after_accept", "op": "create"}])
    sweep.run(cfg, engine)
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


# -- orphans of this installation: kept, never deleted automatically, adopted for free ------------------


@pytest.fixture
def receiver_url(cfg: Settings, engine: sa.Engine) -> Iterator[tuple[Settings, str]]:
    settings = hooked(cfg, "sk-test")
    r = webhook.Receiver(settings, engine=engine)
    try:
        with webhook_server.running(r, settings.webhooks) as server:
            yield settings, f"http://127.0.0.1:{server.port}/"
    finally:
        r.close()


def announce(url: str, response_id: str) -> int:
    """A signed `response.completed` delivery for `response_id`, as the provider sends it."""
    body = json.dumps({"id": f"evt_{response_id[-8:]}", "object": "event", "created_at": 1764547200,
                       "type": "response.completed", "data": {"id": response_id}}).encode()
    wid = f"wh_{response_id[-12:]}_{time.monotonic_ns()}"
    when = dt.datetime.now(dt.UTC)
    headers = {"webhook-id": wid, "webhook-timestamp": str(int(when.timestamp())), "content-type": "application/json",
               "webhook-signature": standardwebhooks.Webhook(SECRET).sign(wid, when, body.decode())}
    return httpx.post(url, content=body, headers=headers, timeout=15).status_code


def restored_before_dispatch(settings: Settings, engine: sa.Engine) -> tuple[str, str]:
    """Today's slot scheduled, backed up, dispatched (one paid create, in the spend ledger), and the
    backup restored: the job is back in NO_JOB and no row knows the response it paid for."""
    store = Store(engine, "test")
    store.schedule(settings.products["daily-brief"], utc_today())
    backup = snapshot_rows(engine)
    sweep.run(settings, engine)
    (job,) = job_rows(engine)
    assert job["state"] == State.ACCEPTED.value
    restore_rows(engine, backup)
    (restored,) = job_rows(engine)
    assert restored["state"] == State.NO_JOB.value and restored["response_id"] is None
    return job["id"], job["response_id"]


def announced_orphan(receiver_url: tuple[Settings, str], engine: sa.Engine,
                     sim: Simulator) -> tuple[Settings, str, str]:
    """`restored_before_dispatch`, then the response finishes and its webhook is answered 200:
    an orphan of this installation. Returns the settings, the job's id and the response's."""
    settings, url = receiver_url
    job_id, response_id = restored_before_dispatch(settings, engine)
    sim.advance(5)
    assert announce(url, response_id) == 200
    return settings, job_id, response_id


@pytest.mark.no_auto_schedule
def test_an_orphan_of_this_installation_is_kept_not_deleted_and_adopted_with_no_new_create(
        receiver_url: tuple[Settings, str], engine: sa.Engine, sim: Simulator, cli_env: dict[str, str]) -> None:
    settings, job_id, response_id = announced_orphan(receiver_url, engine, sim)
    here = settings.static_sink.root.parent  # type: ignore[union-attr]  # the receiver's configuration: its folder
    (orphan,) = Deliveries(engine).orphans()
    assert orphan["response_id"] == response_id and orphan["output_kept"] and orphan["fate"] is None
    assert orphan["installation_id"] == installation.read(engine)
    assert sim.stats()["deleted_ids"] == []
    shown = run_cli("orphans", "show", response_id, "--json", env=cli_env, cwd=here)
    doc = json.loads(shown.stdout)
    assert doc["named_job"]["id"] == job_id and doc["named_job"]["state"] == State.NO_JOB.value
    assert doc["output_bytes"] > 0 and doc["metadata"]["iipub_job_id"] == job_id

    adopted = run_cli("orphans", "adopt", response_id, job_id[:8], "--reason", "restored from backup", env=cli_env,
                      cwd=here)
    assert adopted.returncode == 0, adopted.stderr
    (row,) = job_rows(engine)
    assert row["state"] == State.RETRIEVED_NOT_VALIDATED.value and row["payload_sha256"] == orphan["output_sha256"]
    assert row["response_id"] == response_id and row["generation_attempts"] == 1
    again = run_cli("orphans", "adopt", response_id, job_id, "--reason", "twice", env=cli_env, cwd=here)
    assert again.returncode == 3 and "already adopted" in again.stderr

    for _ in range(4):
        sweep.run(settings, engine)
        relay.run(settings, engine)
    (row,) = job_rows(engine)
    assert row["state"] == State.DELETED.value
    with engine.connect() as conn:
        editions = conn.execute(sa.select(sa.func.count()).select_from(tables.editions)).scalar_one()
        deletes = installation.deletes(conn)
    assert editions == len(settings.products["daily-brief"].languages)
    stats = sim.stats()
    assert stats["creates_total"] == 1 and stats["deleted_ids"] == [response_id]
    assert [(d["response_id"], d["basis"]) for d in deletes] == [(response_id, "custody")]
    assert settings.static_sink is not None
    checked = run_cli("check", "--json", "--static-root", str(settings.static_sink.root), env=cli_env, cwd=here)
    assert checked.returncode == 0, checked.stdout


@pytest.mark.no_auto_schedule
def test_adopt_refuses_a_job_with_custody_or_another_slot_and_discard_deletes_only_then(
        receiver_url: tuple[Settings, str], engine: sa.Engine, sim: Simulator, cli_env: dict[str, str]) -> None:
    settings, job_id, response_id = announced_orphan(receiver_url, engine, sim)
    here = settings.static_sink.root.parent  # type: ignore[union-attr]  # the receiver's configuration: its folder
    other_day = Store(engine, "test")
    other_day.schedule(settings.products["daily-brief"], utc_today() - dt.timedelta(days=1))
    (other,) = [j for j in job_rows(engine) if j["id"] != job_id]
    refused = run_cli("orphans", "adopt", response_id, other["id"], "--reason", "wrong day", env=cli_env, cwd=here)
    assert refused.returncode == 3 and "--other-slot" in refused.stderr
    assert {j["state"] for j in job_rows(engine)} == {State.NO_JOB.value}
    unknown = run_cli("orphans", "show", "resp_nope", env=cli_env, cwd=here)
    assert unknown.returncode == 4 and "no orphan" in unknown.stderr
    assert sim.stats()["deleted_ids"] == []

    env = {**cli_env, "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": sim.url}
    dropped = run_cli("orphans", "discard", response_id, "--reason", "not wanted", env=env, cwd=here)
    assert dropped.returncode == 0, dropped.stderr
    assert sim.stats()["deleted_ids"] == [response_id]
    (orphan,) = Deliveries(engine).orphans()
    assert orphan["fate"] == "discarded" and orphan["remote_deleted_at"] is not None
    with engine.connect() as conn:
        assert [(d["basis"], d["job_id"]) for d in installation.deletes(conn)] == [("discard", None)]
    late = run_cli("orphans", "adopt", response_id, job_id, "--reason", "after all", env=cli_env, cwd=here)
    assert late.returncode == 3 and "already discarded" in late.stderr
    assert run_cli("check", "--json", env=cli_env, cwd=here).returncode == 0


# -- on the webhook path a 404 is evidence, not proof ----------------------------------------------------


@pytest.mark.no_auto_schedule
def test_a_webhook_404_of_a_jobs_own_response_is_a_suspected_loss_read_again_by_the_next_tick(
        receiver_url: tuple[Settings, str], engine: sa.Engine, sim: Simulator) -> None:
    settings, url = receiver_url
    Store(engine, "test").schedule(settings.products["daily-brief"], utc_today())
    sweep.run(settings, engine)
    (job,) = job_rows(engine)
    sim.add_faults([{"fault": "not_found", "op": "retrieve", "times": 1}])
    sim.advance(5)
    assert announce(url, job["response_id"]) == 200
    (row,) = job_rows(engine)
    assert row["state"] == State.ACCEPTED.value and row["response_id"] == job["response_id"]
    assert "loss_suspected" in [e["reason"] for e in job_events(engine, job["id"])]
    with engine.connect() as conn:
        assert clock.read_now(conn) >= row["next_attempt_at"]  # due again now, not a relaxed poll away
    sweep.run(settings, engine)
    (row,) = job_rows(engine)
    assert row["payload_sha256"] is not None and sim.stats()["creates_total"] == 1


@pytest.mark.no_auto_schedule
def test_a_webhook_404_of_an_unknown_response_is_read_again_until_reads_agree(
        receiver_url: tuple[Settings, str], engine: sa.Engine, sim: Simulator) -> None:
    settings, url = receiver_url
    _, response_id = restored_before_dispatch(settings, engine)
    sim.add_faults([{"fault": "not_found", "op": "retrieve", "times": 1}])
    sim.advance(5)
    assert announce(url, response_id) == 200
    with engine.connect() as conn:
        (delivery,) = conn.execute(sa.select(tables.webhook_deliveries)).mappings().all()
    # One 404 is not believed: nothing recorded as lost, the delivery waits for the next reads.
    assert delivery["outcome"] == "unconfirmed" and Deliveries(engine).orphans() == []
    sweep.run(settings, engine)  # the next read finds the response after all
    with engine.connect() as conn:
        (delivery,) = conn.execute(sa.select(tables.webhook_deliveries)).mappings().all()
    assert delivery["outcome"] == "orphan"
    (orphan,) = Deliveries(engine).orphans()
    assert orphan["status"] == "completed" and orphan["output_kept"]
    assert sim.stats()["creates_total"] == 1


@pytest.mark.no_auto_schedule
def test_an_orphan_a_job_took_back_no_longer_counts_as_awaiting_a_decision(
        receiver_url: tuple[Settings, str], engine: sa.Engine, sim: Simulator) -> None:
    settings, job_id, response_id = announced_orphan(receiver_url, engine, sim)
    assert Deliveries(engine).orphan_count() == 1
    sweep.run(settings, engine)  # the spend ledger's fence takes the response back for its job
    (row,) = job_rows(engine)
    assert row["id"] == job_id and row["response_id"] == response_id and row["generation_attempts"] == 1
    assert Deliveries(engine).orphan_count() == 0
    (orphan,) = Deliveries(engine).orphans()
    assert orphan["held_by_job"] == job_id and orphan["fate"] is None
    assert sim.stats()["creates_total"] == 1 and sim.stats()["deleted_ids"] in ([], [response_id])
