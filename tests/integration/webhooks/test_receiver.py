"""The webhook receiver (PRODUCT.md section 9) over real HTTP, with deliveries signed by the
Standard Webhooks reference package (not by iipub's own code): verification before anything
is parsed, idempotency by webhook-id, custody in seconds through the fenced path, and unknown
responses settled by proof or recorded as orphans. Seed acceptance items 19 and 20 are named."""

from __future__ import annotations

import base64
import datetime as dt
import json
import signal
import time
from collections.abc import Iterator
from dataclasses import replace
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
from iipub.publish import relay
from iipub.settings.config import Settings, WebhookSettings
from iipub.store import clock, installation, tables
from iipub.store.deliveries import Deliveries
from iipub.store.job_store import Store
from iipub.webhooks import receiver as webhook
from iipub.webhooks import server as webhook_server
from tests.support.cli import error_messages, run_cli, start_iipub
from tests.support.rows import job_events, job_rows
from tests.support.settings import sim_env

SECRET = "whsec_" + base64.b64encode(b"iipub-test-webhook-secret-0123456789").decode()
OTHER_SECRET = "whsec_" + base64.b64encode(b"somebody-else-entirely-9876543210").decode()


# -- fixtures and helpers ---------------------------------------------------------------------


@pytest.fixture
def hooked(cfg: Settings) -> Settings:
    """One product; webhooks on; in-flight jobs polled every 250 s, so only a webhook is fast."""
    return replace(
        cfg, provider_webhook_secret=SECRET,
        reconcile=replace(cfg.reconcile, poll_interval_seconds=250),
        webhooks=WebhookSettings(enabled=True, poll_interval_seconds=300, lease_wait_seconds=0.3, request_seconds=10),
    )


@pytest.fixture
def receiver(hooked: Settings, engine: sa.Engine) -> Iterator[webhook.Receiver]:
    r = webhook.Receiver(hooked, engine=engine)
    yield r
    r.close()


@pytest.fixture
def url(receiver: webhook.Receiver) -> Iterator[str]:
    """The receiver on waitress on a loopback port (what `iipub webhook serve` runs)."""
    with webhook_server.running(receiver, receiver.settings.webhooks) as server:
        yield f"http://127.0.0.1:{server.port}/"


def event(response_id: str, kind: str = "response.completed", event_id: str = "evt_test") -> bytes:
    doc = {"id": event_id, "object": "event", "created_at": 1764547200, "type": kind, "data": {"id": response_id}}
    return json.dumps(doc).encode()


_counter = iter(range(10**6))


def signed(body: bytes, *, webhook_id: str | None = None, at: dt.datetime | None = None,
           secret: str = SECRET) -> dict[str, str]:
    """Headers for `body`, signed by the Standard Webhooks reference implementation."""
    wid = webhook_id or f"wh_test_{next(_counter)}"
    when = at or dt.datetime.now(dt.UTC)
    signature = standardwebhooks.Webhook(secret).sign(wid, when, body.decode())
    return {"webhook-id": wid, "webhook-timestamp": str(int(when.timestamp())), "webhook-signature": signature,
            "content-type": "application/json"}


def post(url: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(url, content=body, headers=headers, timeout=15)


def deliveries(engine: sa.Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(tables.webhook_deliveries)).mappings()]


def the_job(engine: sa.Engine) -> dict[str, Any]:
    (row,) = job_rows(engine)
    return row


def in_flight(settings: Settings, engine: sa.Engine, sim: Simulator) -> dict[str, Any]:
    """Today's slot dispatched and accepted (next poll 250 s away), its response now finished."""
    sweep.run(settings, engine)
    job = the_job(engine)
    assert job["state"] == State.ACCEPTED.value, job
    sim.advance(5)
    return job


# -- verification: nothing unverified is believed ------------------------------------------------


def test_20_a_replay_outside_the_tolerance_window_is_400_and_changes_nothing(
        url: str, hooked: Settings, engine: sa.Engine, sim: Simulator) -> None:
    job = in_flight(hooked, engine, sim)
    body = event(job["response_id"])
    wid = "wh_captured"
    for at in (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10), dt.datetime.now(dt.UTC) + dt.timedelta(minutes=10)):
        answer = post(url, body, signed(body, webhook_id=wid, at=at))
        assert answer.status_code == 400, answer.text
        assert "too old" in answer.text or "too new" in answer.text
    assert deliveries(engine) == []
    assert the_job(engine)["version"] == job["version"]
    assert sim.stats()["requests"]["retrieve"] == 0


@pytest.mark.parametrize("case", ["wrong_secret", "tampered_body", "no_signature", "garbage_signature"])
def test_a_delivery_that_does_not_verify_is_400_and_nothing_is_parsed_or_recorded(
        url: str, hooked: Settings, engine: sa.Engine, sim: Simulator, case: str) -> None:
    job = in_flight(hooked, engine, sim)
    body = event(job["response_id"])
    headers = signed(body, secret=OTHER_SECRET) if case == "wrong_secret" else signed(body)
    if case == "tampered_body":
        body = event(job["response_id"], kind="response.failed")
    elif case == "no_signature":
        del headers["webhook-signature"]
    elif case == "garbage_signature":
        headers["webhook-signature"] = "v1,bm90IGEgc2lnbmF0dXJl"
    answer = post(url, body, headers)
    assert answer.status_code == 400
    assert "Traceback" not in answer.text
    assert deliveries(engine) == []
    assert sim.stats()["requests"]["retrieve"] == 0
    assert the_job(engine)["version"] == job["version"]


@pytest.mark.parametrize(("body", "status"), [
    (b"not json at all", 400),
    (b'["an", "array"]', 400),
    (json.dumps({"id": "evt_1", "type": "response.completed", "data": {}}).encode(), 400),
    (json.dumps({"id": "evt_1", "type": "response.completed", "data": {"id": "../../etc"}}).encode(), 400),
    (b"\xff\xfe not utf-8", 400),
    (json.dumps({"id": "evt_1", "type": "batch.completed", "created_at": 1, "data": {"id": "batch_1"}}).encode(), 200),
])
def test_signed_bodies_that_are_not_response_events_are_refused_or_ignored(
        url: str, engine: sa.Engine, sim: Simulator, body: bytes, status: int) -> None:
    try:
        headers = signed(body)
    except UnicodeDecodeError:  # the reference signer takes text; sign the raw bytes by hand
        headers = signed(b"x")
    answer = post(url, body, headers)
    assert answer.status_code == status, answer.text
    rows = deliveries(engine)
    assert [r["outcome"] for r in rows] == (["ignored"] if status == 200 else [])
    assert sim.stats()["requests"]["retrieve"] == 0


def test_http_shape_errors_have_their_own_answers(url: str, hooked: Settings, engine: sa.Engine) -> None:
    assert httpx.get(url).status_code == 405
    big = b"x" * (hooked.webhooks.max_body_bytes + 1)
    assert httpx.post(url, content=big, headers=signed(b"{}")).status_code == 413
    assert deliveries(engine) == []


def test_the_wsgi_entry_point_answers_503_while_unconfigured(monkeypatch: pytest.MonkeyPatch) -> None:
    # The subject is the module's one receiver per process: the test starts from a process that
    # has none built, and checks that a failed build leaves none (so the next request tries again).
    webhook.forget()
    monkeypatch.delenv("OPENAI_WEBHOOK_SECRET", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    seen: list[str] = []
    out = webhook.application({"REQUEST_METHOD": "POST", "PATH_INFO": "/"}, lambda status, headers: seen.append(status))
    assert seen == ["503 Service Unavailable"]
    assert b"not configured" in b"".join(out)
    assert webhook._receiver is None


# -- idempotency and custody ----------------------------------------------------------------------


def test_a_completion_takes_custody_in_seconds_and_a_duplicate_changes_nothing(
        url: str, hooked: Settings, engine: sa.Engine, sim: Simulator) -> None:
    job = in_flight(hooked, engine, sim)
    body = event(job["response_id"])
    headers = signed(body, webhook_id="wh_once")
    answer = post(url, body, headers)
    assert answer.status_code == 200, answer.text
    after = the_job(engine)
    # Read, stored, validated, composed and saved within the request; the relay publishes it.
    assert after["state"] == State.SAVED_NOT_PUBLIC.value
    assert after["lease_owner"] is None
    assert [r["outcome"] for r in deliveries(engine)] == ["custody"]
    reads = sim.stats()["requests"]["retrieve"]
    assert reads == 1
    # The same delivery again (the provider's retry, or an in-window replay): 200, nothing changes.
    again = post(url, body, signed(body, webhook_id="wh_once"))
    assert again.status_code == 200 and "duplicate" in again.text
    assert the_job(engine)["version"] == after["version"]
    assert sim.stats()["requests"]["retrieve"] == reads
    assert len(deliveries(engine)) == 1
    reasons = [e["reason"] for e in job_events(engine, job["id"])]
    assert reasons.count("retrieved") == 1 and reasons.count("saved") == 1


def test_19_a_webhook_for_a_published_job_is_200_and_a_no_op(
        url: str, hooked: Settings, engine: sa.Engine, sim: Simulator) -> None:
    job = in_flight(hooked, engine, sim)
    clock.advance_clock(engine, 301)  # the poll wins: the webhook is late
    sweep.run(hooked, engine)
    relay.run(hooked, engine)
    sweep.run(hooked, engine)
    done = the_job(engine)
    assert done["state"] in (State.PUBLISHED.value, State.CLEANUP_PENDING.value, State.DELETED.value), done
    events_before = job_events(engine, job["id"])
    reads = sim.stats()["requests"]["retrieve"]
    body = event(job["response_id"])
    answer = post(url, body, signed(body))
    assert answer.status_code == 200
    assert the_job(engine)["version"] == done["version"]
    assert job_events(engine, job["id"]) == events_before
    assert sim.stats()["requests"]["retrieve"] == reads
    assert [r["outcome"] for r in deliveries(engine)] == ["no_op"]
    # The late webhook clears the miss the poll noted: webhooks do arrive, just slowly.
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(tables.webhook_misses)).scalar_one() == 0


def test_a_job_whose_lease_is_held_is_made_due_now_instead(
        url: str, hooked: Settings, engine: sa.Engine, sim: Simulator) -> None:
    job = in_flight(hooked, engine, sim)
    other = Store(engine, "someone-else", 60)
    (held,) = other.claim([(job["id"], job["version"])])
    body = event(job["response_id"])
    answer = post(url, body, signed(body))
    assert answer.status_code == 200
    assert [r["outcome"] for r in deliveries(engine)] == ["deferred"]
    row = the_job(engine)
    assert row["lease_owner"] == "someone-else" and row["version"] == held.version  # the holder's fence stands
    with engine.connect() as conn:
        assert clock.read_now(conn) >= row["next_attempt_at"]
    assert sim.stats()["requests"]["retrieve"] == 0


def test_a_failed_event_is_evidence_not_proof(url: str, hooked: Settings, engine: sa.Engine, sim: Simulator) -> None:
    sim.add_faults([{"fault": "fail", "op": "create"}])
    job = in_flight(hooked, engine, sim)
    body = event(job["response_id"], kind="response.failed")
    assert post(url, body, signed(body)).status_code == 200
    row = the_job(engine)
    # One read that says failed is a suspected loss: the job keeps its response, nothing is paid.
    assert row["state"] == State.ACCEPTED.value and row["response_id"] == job["response_id"]
    assert row["generation_attempts"] == 1
    assert "loss_suspected" in [e["reason"] for e in job_events(engine, job["id"])]
    assert [r["outcome"] for r in deliveries(engine)] == ["polled"]
    assert sim.stats()["creates_total"] == 1


def test_a_completion_of_a_quarantined_jobs_response_is_taken_into_custody_and_the_job_stays_parked(
        url: str, hooked: Settings, engine: sa.Engine, sim: Simulator) -> None:
    tight = replace(hooked, budgets=replace(hooked.budgets, max_poll_attempts=1))
    sweep.run(tight, engine)
    job = the_job(engine)
    sim.add_faults([{"op": "retrieve", "fault": "unknown_status", "times": 1}])  # still running, as far as it says
    for _ in range(2):
        clock.advance_clock(engine, 300)
        sweep.run(tight, engine)
    parked = the_job(engine)
    assert (parked["state"], parked["quarantine_reason"]) == ("QUARANTINED", "poll_budget_exhausted")
    assert parked["payload"] is None and parked["response_id"] == job["response_id"]
    sim.advance(5)  # the response finishes while the job is parked
    body = event(job["response_id"])
    answer = post(url, body, signed(body))
    assert answer.status_code == 200, answer.text
    row = the_job(engine)
    # Stored at once, through the fenced writer; still parked with its reason, nothing paid or deleted.
    assert (row["state"], row["quarantine_reason"]) == ("QUARANTINED", "poll_budget_exhausted")
    assert row["payload"] and row["version"] == parked["version"] + 1
    assert [r["outcome"] for r in deliveries(engine)] == ["custody"]
    assert job_events(engine, job["id"])[-1]["reason"] == "retrieved"
    assert sim.stats()["creates_total"] == 1 and sim.stats()["requests"].get("delete", 0) == 0


# -- unknown responses: proof or orphan -----------------------------------------------------------


def test_a_response_of_no_installation_is_foreign_unread_undeleted_and_counted(
        url: str, hooked: Settings, engine: sa.Engine, sim: Simulator, cli_env: dict[str, str]) -> None:
    client = openai.OpenAI(api_key="sk-test", base_url=sim.url, max_retries=0)
    named = client.responses.create(model="gpt-test", input="hi", background=True,
                                    metadata={"iipub_job_id": "00000000-0000-0000-0000-000000000000"})
    bare = client.responses.create(model="gpt-test", input="hi", background=True)
    sim.advance(5)
    for resp in (named, bare):
        body = event(resp.id)
        assert post(url, body, signed(body)).status_code == 200
    stats = sim.stats()
    assert stats["retrieves_by_response"] == {} and stats["deleted_ids"] == [] and stats["cancels"] == 0
    assert Deliveries(engine).orphans() == []
    assert [r["outcome"] for r in deliveries(engine)] == ["foreign", "foreign"]
    shown = json.loads(run_cli("status", "--json", env=cli_env).stdout)
    assert shown["webhooks"]["foreign"] == 2 and shown["webhooks"]["orphans"] == 0
    assert shown["installation_id"].startswith("inst_")


# -- polling relaxes only while webhooks carry completions -----------------------------------------


def test_polling_relaxes_while_deliveries_arrive_and_tightens_after_a_miss(
        hooked: Settings, engine: sa.Engine, sim: Simulator) -> None:
    settings = replace(hooked, reconcile=replace(hooked.reconcile, poll_interval_seconds=10),
                       webhooks=replace(hooked.webhooks, poll_interval_seconds=200))
    ds = Deliveries(engine)
    assert not ds.health(3600).healthy  # nothing ever delivered
    assert ds.record("wh_1", "response.completed", "evt_1", "resp_elsewhere", None)
    assert ds.health(3600).healthy
    sweep.run(settings, engine)  # dispatch: the first poll is a safety net away
    job = the_job(engine)
    with engine.connect() as conn:
        gap = (job["next_attempt_at"] - clock.read_now(conn)).total_seconds()
    assert 150 < gap <= 200
    # The safety net finds the completion before any webhook: a miss; polling tightens.
    sim.advance(5)
    clock.advance_clock(engine, 201)
    sweep.run(settings, engine)
    assert the_job(engine)["payload"] is not None
    assert not ds.health(3600).healthy
    # Without [webhooks] enabled nothing is recorded and nothing relaxes.
    off = replace(settings, webhooks=replace(settings.webhooks, enabled=False))
    store = Store(engine, "t")
    store.schedule(off.products["daily-brief"], dt.date(2026, 11, 1))
    sweep.run(off, engine)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(tables.jobs.c.next_attempt_at, tables.jobs.c.state)
                            .where(tables.jobs.c.edition_date == dt.date(2026, 11, 1))).one()
        assert (rows.next_attempt_at - clock.read_now(conn)).total_seconds() <= 10


# -- the standalone receiver process --------------------------------------------------------------


@pytest.mark.slow
def test_webhook_serve_verifies_settles_and_stops_on_sigterm(
        hooked: Settings, engine: sa.Engine, sim: Simulator, cli_env: dict[str, str], tmp_path: Path) -> None:
    # The receiver's config file names the same product as `hooked` (same fingerprint).
    product = ('[[products]]\nname = "daily-brief"\nopens_at = "00:00"\nitems = 3\nprompt = "Write the brief."\n'
               "[webhooks]\nenabled = true\n")
    env = sim_env(cli_env, sim, tmp_path, product) | {"OPENAI_WEBHOOK_SECRET": SECRET}
    job = in_flight(hooked, engine, sim)
    proc = start_iipub("webhook", "serve", "--port", "0", env=env, cwd=tmp_path)
    try:
        assert proc.stderr is not None
        line = ""
        deadline = time.monotonic() + 20
        while "listening on" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
        served = json.loads(line)["message"].rsplit(" ", 1)[-1] if "listening on" in line else ""
        assert served.startswith("http://127.0.0.1:"), line
        body = event(job["response_id"])
        assert post(served, body, signed(body, secret=OTHER_SECRET)).status_code == 400
        assert post(served, body, signed(body)).status_code == 200
        assert the_job(engine)["state"] == State.SAVED_NOT_PUBLIC.value
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=10)  # also closes the pipes
    assert proc.returncode == 0


def test_webhook_serve_without_a_secret_is_one_error_line(cli_env: dict[str, str], sim: Simulator,
                                                           tmp_path: Path, engine: sa.Engine) -> None:
    env = sim_env(cli_env, sim, tmp_path)
    result = run_cli("webhook", "serve", "--port", "0", env=env)
    assert result.returncode == 78, result.stderr
    assert error_messages(result.stderr) == [
        "OPENAI_WEBHOOK_SECRET is not set: the webhook receiver cannot verify deliveries"]
    bad = run_cli("webhook", "serve", "--port", "0", env=env | {"OPENAI_WEBHOOK_SECRET": "whsec_***"})
    assert bad.returncode == 78 and "not base64" in bad.stderr


def test_a_response_naming_a_quarantined_job_for_another_attempt_is_an_orphan_left_for_link(
        url: str, hooked: Settings, engine: sa.Engine, sim: Simulator) -> None:
    sim.add_faults([{"fault": "drop_after_accept", "op": "create"}])
    sweep.run(hooked, engine)
    job = the_job(engine)
    assert job["state"] == State.QUARANTINED.value and job["quarantine_reason"] == "create_outcome_unknown"
    client = openai.OpenAI(api_key="sk-test", base_url=sim.url, max_retries=0)
    stale = client.responses.create(model="gpt-test", input="hi", background=True, metadata={
        "iipub_job_id": job["id"], "iipub_attempt": "7", "iipub_fingerprint": job["config_fingerprint"],
        "iipub_installation": installation.read(engine)})
    sim.advance(5)
    body = event(stale.id)
    assert post(url, body, signed(body)).status_code == 200
    assert the_job(engine)["state"] == State.QUARANTINED.value  # no proof for the attempt that was charged
    (orphan,) = Deliveries(engine).orphans()
    assert orphan["response_id"] == stale.id and orphan["named_job_id"] == job["id"]
    assert orphan["remote_deleted_at"] is None and stale.id not in sim.stats()["deleted_ids"]
