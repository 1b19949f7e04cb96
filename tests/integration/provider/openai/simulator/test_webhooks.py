"""The webhooks the simulator sends when background responses finish, received over real loopback
HTTP and checked with the verifiers a receiver would use (the official SDK's and the
`standardwebhooks` package's): one event per response with its true status, retries, and each
webhook fault as the receiver sees it."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import openai
import pytest
import standardwebhooks

from iipub.core.errors import ConfigError
from iipub.provider.openai.simulator import Simulator, SimulatorOptions
from iipub.provider.openai.simulator.faults import WEBHOOK_FAULTS, parse_fault_spec
from tests.support.cli import clean_env, one_line_error, run_cli
from tests.support.loopback import SECRET, recording_server, wait_for
from tests.support.simulator import simulator_options_seen

QUEUED = 5.0
RUNNING = 5.0
DONE = QUEUED + RUNNING + 1


# -- a receiver that records what arrives -----------------------------------------------------------


@dataclass
class Hit:
    headers: dict[str, str]
    body: bytes
    at: float  # time.monotonic() on arrival

    @property
    def event(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.body)
        return result

    @property
    def timestamp(self) -> int:
        return int(self.headers["webhook-timestamp"])


@dataclass
class Hooks:
    """Records every POST. Answers the next of `answers` (200 once they run out); with `verify`,
    400 to what the SDK's verifier refuses; with `hang`, holds every answer until `release`."""

    url: str = ""
    answers: list[int] = field(default_factory=list)
    verify: bool = False
    hang: bool = False
    release: threading.Event = field(default_factory=threading.Event)
    hits: list[Hit] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def got(self) -> list[Hit]:
        with self.lock:
            return list(self.hits)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_POST(self) -> None:
        hooks: Hooks = self.server.recorder  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        hit = Hit({k.lower(): v for k, v in self.headers.items()}, body, time.monotonic())
        with hooks.lock:
            hooks.hits.append(hit)
            status = hooks.answers.pop(0) if hooks.answers else 200
        if hooks.hang:
            hooks.release.wait(10)
        if hooks.verify:
            status = 200 if sdk_accepts(hit) else 400
        try:
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()
        except OSError:
            pass  # the sender gave up on us


@pytest.fixture
def hooks() -> Iterator[Hooks]:
    with recording_server(_Handler, Hooks, "/hooks/openai") as rec:
        try:
            yield rec
        finally:
            rec.release.set()


# -- verifying as a receiver would ---------------------------------------------------------------------

def sdk_check(hit: Hit, tolerance: int = 300) -> None:
    with openai.OpenAI(api_key="x") as client:  # sends nothing: verifying is local
        client.webhooks.verify_signature(hit.body, hit.headers, secret=SECRET, tolerance=tolerance)


def sdk_accepts(hit: Hit) -> bool:
    try:
        sdk_check(hit)
    except openai.InvalidWebhookSignatureError:
        return False
    return True


def both_accept(hit: Hit) -> bool:
    """The SDK's verifier and standardwebhooks' agree, and say yes."""
    try:
        standardwebhooks.Webhook(SECRET).verify(hit.body, hit.headers)
        std = True
    except standardwebhooks.WebhookVerificationError:
        std = False
    assert std == sdk_accepts(hit), hit
    return std


# -- the simulator ------------------------------------------------------------------------------------------


@contextmanager
def simulator(hooks: Hooks, **options: Any) -> Iterator[tuple[Simulator, openai.OpenAI]]:
    opts = SimulatorOptions(queued_seconds=QUEUED, in_progress_seconds=RUNNING, slow_seconds=8, seed=3,
                            webhook_url=hooks.url, webhook_secret=SECRET, **options)
    with Simulator(opts) as sim:
        client = openai.OpenAI(base_url=sim.url, api_key="sk-test", max_retries=0)
        try:
            yield sim, client
        finally:
            client.close()


def create(client: openai.OpenAI, job_id: str, *, background: bool = True) -> str:
    return client.responses.create(
        model="gpt-5-mini", instructions="x", input="y", background=background, store=True,
        metadata={"iipub_job_id": job_id},
    ).id


def finish_all(sim: Simulator, timeout: float = 3.0) -> None:
    sim.advance(DONE)
    assert sim.flush_webhooks(timeout)


def attempts(sim: Simulator) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = sim.stats()["webhooks"]
    return result


# -- one event per finished response ---------------------------------------------------------------------------


def test_one_signed_event_per_finished_response_with_its_true_status(hooks: Hooks) -> None:
    with simulator(hooks) as (sim, client):
        sim.add_faults([{"fault": "fail", "job_id": "j-failed"}, {"fault": "incomplete", "job_id": "j-incomplete"},
                        {"fault": "cancelled_then_completed", "job_id": "j-done"}])
        ids = {job: create(client, job) for job in ("j-done", "j-failed", "j-cancelled", "j-incomplete")}
        assert client.responses.cancel(ids["j-cancelled"]).status == "cancelled"
        sim.add_faults([{"fault": "report_failed", "op": "retrieve", "job_id": "j-done", "times": 2}])
        finish_all(sim)
        for _ in range(2):  # reads that lie do not change what is announced
            client.responses.retrieve(ids["j-done"])
        sim.advance(DONE)  # nothing is announced twice
        assert sim.flush_webhooks(2)
        time.sleep(0.1)
        hits = hooks.got()
        completed_at = client.responses.retrieve(ids["j-done"]).completed_at

    by_response = {h.event["data"]["id"]: h for h in hits}
    assert len(hits) == 4 and set(by_response) == set(ids.values())
    types = {job: by_response[rid].event["type"] for job, rid in ids.items()}
    assert types == {"j-done": "response.completed", "j-failed": "response.failed",
                     "j-cancelled": "response.cancelled", "j-incomplete": "response.incomplete"}
    for hit in hits:
        assert both_accept(hit)
        assert hit.headers["content-type"] == "application/json"
        assert hit.headers["webhook-id"].startswith("wh_")
        assert abs(hit.timestamp - time.time()) < 10  # real time, not the simulated clock
        event = hit.event
        assert set(event) == {"id", "object", "created_at", "type", "data"} and event["object"] == "event"
        assert event["id"].startswith("evt_") and isinstance(event["created_at"], int)
        assert hit.body == json.dumps(event, separators=(",", ":")).encode()  # compact
    assert by_response[ids["j-done"]].event["created_at"] == completed_at
    assert len({h.headers["webhook-id"] for h in hits}) == 4 and len({h.event["id"] for h in hits}) == 4
    stats = sim.stats()
    assert stats["webhooks_sent"] == 4 and stats["webhook_answers"] == {"200": 4}
    rows = stats["webhooks"]
    assert {(r["job_id"], r["type"], r["attempt"], r["answer"], r["fault"], r["stale"]) for r in rows} == {
        (job, types[job], 1, 200, None, False) for job in ids}
    assert {r["webhook_id"] for r in rows} == {h.headers["webhook-id"] for h in hits}
    assert {r["event_id"] for r in rows} == {h.event["id"] for h in hits}


def test_no_webhooks_for_foreground_responses_and_reset_forgets(hooks: Hooks) -> None:
    with simulator(hooks) as (sim, client):
        create(client, "j-fg", background=False)
        finish_all(sim)
        time.sleep(0.1)
        assert hooks.got() == [] and sim.stats()["webhooks_sent"] == 0
        create(client, "j-bg")
        finish_all(sim)
        assert len(hooks.got()) == 1 and sim.stats()["webhooks_sent"] == 1
        sim.reset()
        stats = sim.stats()
        assert (stats["webhooks_sent"], stats["webhook_answers"], stats["webhooks"]) == (0, {}, [])


def test_a_response_deleted_after_it_finished_is_still_announced(hooks: Hooks) -> None:
    with simulator(hooks) as (sim, client):
        rid = create(client, "j-1")
        sim.advance(DONE)
        client.responses.delete(rid)
        assert sim.flush_webhooks(3)
        assert [h.event["data"]["id"] for h in hooks.got()] == [rid]


# -- retries -------------------------------------------------------------------------------------------------------


def test_a_failed_attempt_is_retried_with_the_same_id_and_body_freshly_signed(hooks: Hooks) -> None:
    hooks.answers = [500, 503]
    with simulator(hooks) as (sim, client):
        create(client, "j-1")
        finish_all(sim)
    hits = hooks.got()
    assert len(hits) == 3
    assert len({h.headers["webhook-id"] for h in hits}) == 1 and len({h.body for h in hits}) == 1
    assert all(both_accept(h) for h in hits)
    assert hits[0].timestamp <= hits[1].timestamp <= hits[2].timestamp
    assert hits[1].at - hits[0].at >= 0.22 and hits[2].at - hits[1].at >= 0.45  # 0.25 s, then 0.5 s
    stats = sim.stats()
    assert stats["webhook_answers"] == {"500": 1, "503": 1, "200": 1}
    assert [(r["attempt"], r["answer"]) for r in stats["webhooks"]] == [(1, 500), (2, 503), (3, 200)]


def test_retries_are_bounded_and_transport_errors_count() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    hooks = Hooks(url=f"http://127.0.0.1:{port}/hooks")
    with simulator(hooks, webhook_retries=2) as (sim, client):
        create(client, "j-1")
        finish_all(sim)
        stats = sim.stats()
    assert stats["webhooks_sent"] == 3 and stats["webhook_answers"] == {"error": 3}
    assert [(r["attempt"], r["answer"]) for r in stats["webhooks"]] == [(1, None), (2, None), (3, None)]


def test_stop_is_prompt_while_the_receiver_hangs(hooks: Hooks) -> None:
    hooks.hang = True
    with simulator(hooks) as (sim, client):
        create(client, "j-1")
        sim.advance(DONE)
        wait_for(lambda: len(hooks.got()) == 1, timeout=3)
        assert sim.flush_webhooks(0.2) is False  # the attempt is still in flight
        started = time.monotonic()
        sim.stop()
        assert time.monotonic() - started < 1.5
    hooks.release.set()
    wait_for(lambda: not any(t.name == "iipub-simulator-webhook" for t in threading.enumerate()), timeout=3)


# -- faults -----------------------------------------------------------------------------------------------------------


def test_webhook_faults_parse_on_their_own_op() -> None:
    rule = parse_fault_spec("webhook_late@webhook:0.5*2~10..20")
    assert (rule.op, rule.fault, rule.probability, rule.times, rule.after_seconds) == ("webhook", "webhook_late",
                                                                                        0.5, 2, 10.0)
    for name in WEBHOOK_FAULTS:
        assert parse_fault_spec(name).op == "webhook"
    for bad in ("webhook_late@create", "webhook_dropped@retrieve", "slow@webhook", "fail@webhook"):
        with pytest.raises(ConfigError):
            parse_fault_spec(bad)


def test_dropped_is_never_sent(hooks: Hooks) -> None:
    with simulator(hooks) as (sim, client):
        sim.add_faults([{"fault": "webhook_dropped", "job_id": "j-a"}])  # once
        sim.add_faults([{"fault": "webhook_dropped", "after_seconds": 10_000}])  # not yet in force
        first, second, other = create(client, "j-a"), create(client, "j-a"), create(client, "j-b")
        finish_all(sim)
        time.sleep(0.1)
        got = {h.event["data"]["id"] for h in hooks.got()}
        assert len(hooks.got()) == 2 and other in got and len(got & {first, second}) == 1
        assert sim.stats()["faults_fired"] == {"webhook_dropped": 1}


def test_duplicate_sends_the_same_delivery_twice(hooks: Hooks) -> None:
    with simulator(hooks) as (sim, client):
        answer = httpx.post(sim.origin + "/_sim/faults", json={"fault": "webhook_duplicate", "job_id": "j-1"})
        assert answer.status_code == 200 and answer.json()["faults"][0]["op"] == "webhook"
        create(client, "j-1")
        finish_all(sim)
        rows = attempts(sim)
    hits = hooks.got()
    assert len(hits) == 2 and hits[0].headers["webhook-id"] == hits[1].headers["webhook-id"]
    assert hits[0].body == hits[1].body and all(both_accept(h) for h in hits)
    assert [(r["attempt"], r["fault"]) for r in rows] == [(1, None), (2, "webhook_duplicate")]


def test_late_arrives_after_a_later_event(hooks: Hooks) -> None:
    with simulator(hooks, webhook_late_seconds=0.5) as (sim, client):
        sim.add_faults([{"fault": "webhook_late", "job_id": "j-late"}])
        late, prompt = create(client, "j-late"), create(client, "j-prompt")
        sim.advance(DONE)
        finished = time.monotonic()
        assert sim.flush_webhooks(3)
        rows = attempts(sim)
    hits = hooks.got()
    assert [h.event["data"]["id"] for h in hits] == [prompt, late]
    assert hits[1].at - finished >= 0.45
    assert all(both_accept(h) for h in hits)
    assert [r["fault"] for r in rows] == [None, "webhook_late"]


def test_out_of_order_waits_for_the_next_event(hooks: Hooks) -> None:
    with simulator(hooks, webhook_late_seconds=2.0) as (sim, client):
        sim.add_faults([{"fault": "webhook_out_of_order", "job_id": "j-early"}])
        early = create(client, "j-early")
        sim.advance(DONE)
        wait_for(lambda: sim.stats()["faults_fired"].get("webhook_out_of_order") == 1, timeout=2)
        held = time.monotonic()
        later = create(client, "j-later")
        sim.advance(DONE)
        assert sim.flush_webhooks(3)
    hits = hooks.got()
    assert [h.event["data"]["id"] for h in hits] == [later, early]  # arrives after a later finish
    assert hits[0].event["created_at"] > hits[1].event["created_at"]
    assert hits[1].at - held < 1.5  # released by the other event, not by the 2 s bound
    assert all(both_accept(h) for h in hits)


def test_out_of_order_alone_goes_after_the_late_bound(hooks: Hooks) -> None:
    with simulator(hooks, webhook_late_seconds=0.3) as (sim, client):
        sim.add_faults([{"fault": "webhook_out_of_order"}])
        create(client, "j-1")
        sim.advance(DONE)
        finished = time.monotonic()
        assert sim.flush_webhooks(3)
    hits = hooks.got()
    assert len(hits) == 1 and hits[0].at - finished >= 0.28


def sent_twice(hooks: Hooks, fault: str) -> tuple[Hit, Hit, list[dict[str, Any]]]:
    """One response finished under webhook `fault`, whose event arrives twice: both arrivals, in
    order (checked to carry the same webhook id and body), and the simulator's attempt rows."""
    with simulator(hooks) as (sim, client):
        sim.add_faults([{"fault": fault}])
        create(client, "j-1")
        finish_all(sim)
        rows = attempts(sim)
    first, second = hooks.got()
    assert first.headers["webhook-id"] == second.headers["webhook-id"] and first.body == second.body
    return first, second, rows


def test_bad_signature_first_then_a_correct_retry(hooks: Hooks) -> None:
    hooks.verify = True  # answers 400 to a signature that does not verify
    forged, genuine, rows = sent_twice(hooks, "webhook_bad_signature")
    assert not both_accept(forged) and both_accept(genuine)
    with pytest.raises(openai.InvalidWebhookSignatureError, match="signature"):
        sdk_check(forged)
    assert genuine.at - forged.at >= 0.22
    assert [(r["attempt"], r["answer"], r["fault"]) for r in rows] == [(1, 400, "webhook_bad_signature"),
                                                                       (2, 200, None)]


def test_replayed_is_correctly_signed_but_stale(hooks: Hooks) -> None:
    genuine, replay, rows = sent_twice(hooks, "webhook_replayed")
    assert both_accept(genuine) and not both_accept(replay)
    assert replay.timestamp <= genuine.timestamp - 600 and replay.timestamp <= time.time() - 600
    with pytest.raises(openai.InvalidWebhookSignatureError, match="too old"):
        sdk_check(replay)
    with pytest.raises(standardwebhooks.WebhookVerificationError, match="too old"):
        standardwebhooks.Webhook(SECRET).verify(replay.body, replay.headers)
    sdk_check(replay, tolerance=10**6)  # the signature itself is right for that old timestamp
    assert [(r["attempt"], r["fault"], r["stale"]) for r in rows] == [(1, None, False),
                                                                      (2, "webhook_replayed", True)]


# -- configuration ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"webhook_url": "http://127.0.0.1:9/h"}, "needs a secret"),
        ({"webhook_url": "http://127.0.0.1:9/h", "webhook_secret": "not-a-secret"}, "whsec_<base64>"),
        ({"webhook_url": "http://127.0.0.1:9/h", "webhook_secret": "whsec_***"}, "not base64"),
        ({"webhook_url": "http://192.0.2.1:9/h", "webhook_secret": SECRET}, "not a loopback address"),
        ({"webhook_url": "ftp://127.0.0.1/h", "webhook_secret": SECRET}, "http(s)"),
        ({"webhook_url": "http://127.0.0.1:9/h", "webhook_secret": SECRET, "webhook_retries": -1}, ">= 0"),
    ],
)
def test_bad_webhook_options_are_one_clear_line(options: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Simulator(SimulatorOptions(**options))
    message = str(caught.value)
    assert needle in message and "\n" not in message and "***" not in message


def test_non_loopback_webhook_url_is_allowed_when_asked() -> None:
    options = SimulatorOptions(webhook_url="http://192.0.2.1:9/h", webhook_secret=SECRET)
    with pytest.raises(ConfigError, match="not a loopback address"):
        Simulator(options)
    allowed = Simulator(options, allow_non_loopback=True)
    # Built with the remote receiver and its signing key; nothing is bound or sent until start().
    assert allowed.options.webhook_url == "http://192.0.2.1:9/h" and allowed.host == "127.0.0.1"
    assert allowed.stats()["webhooks_sent"] == 0


def test_cli_refuses_a_missing_or_bad_secret() -> None:
    url = "http://127.0.0.1:9/hooks"
    one_line_error(run_cli("simulator", "--port", "0", "--webhook-url", url, env=clean_env()), 2, "needs a secret")
    env = {**clean_env(), "IIPUB_SIM_WEBHOOK_SECRET": "whsec_%%%"}
    result = run_cli("simulator", "--port", "0", "--webhook-url", url, env=env)
    one_line_error(result, 2, "not base64")
    assert "%%%" not in result.stderr
    one_line_error(run_cli("simulator", "--webhook-late-seconds", "-1", env=clean_env()), 2, "--webhook-late-seconds")


def test_cli_wires_the_webhook_options(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = simulator_options_seen(monkeypatch)
    env = {**clean_env(), "IIPUB_SIM_WEBHOOK_SECRET": SECRET}
    args = ("simulator", "--webhook-url", "http://127.0.0.1:9/h", "--webhook-late-seconds", "0.5",
            "--fault", "webhook_replayed*2")
    one_line_error(run_cli(*args, env=env), 2, "stop here")
    o = seen[0]
    assert (o.webhook_url, o.webhook_secret, o.webhook_late_seconds) == ("http://127.0.0.1:9/h", SECRET, 0.5)
    assert [(r.op, r.fault, r.times) for r in o.faults] == [("webhook", "webhook_replayed", 2)]
    flag = ("simulator", "--webhook-url", "http://127.0.0.1:9/h", "--webhook-secret", "whsec_b3RoZXI=")
    one_line_error(run_cli(*flag, env=env), 2, "stop here")
    assert seen[1].webhook_secret == "whsec_b3RoZXI="  # the flag wins over the environment
