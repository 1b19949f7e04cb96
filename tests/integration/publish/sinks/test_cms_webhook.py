from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import openai
import pytest

from iipub.core.backoff import parse_retry_after
from iipub.publish.sinks import EditionEvent, Parked, Published, RetryLater, Sink
from iipub.publish.sinks.cms_webhook import WebhookSink, sign
from tests.support.loopback import recording_server, send_reply

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()


@dataclass
class Receiver:
    url: str
    mode: str = "ok"  # ok | 503 | 400 | 429-date | close | redirect
    requests: list[dict[str, Any]] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    receiver: Receiver

    # `format` is the name BaseHTTPRequestHandler.log_message gives its parameter.
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  # keep test output quiet
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        rec = self.server.recorder  # type: ignore[attr-defined]
        rec.requests.append({"path": self.path, "headers": dict(self.headers.items()), "body": body})
        if rec.mode == "close":
            self.close_connection = True  # drop the connection without answering
            return
        status, headers, reply = {
            "ok": (200, {}, b'{"ok":true}'),
            "503": (503, {"retry-after": "7"}, b"busy"),
            "429-date": (429, {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, b"slow down"),
            "400": (400, {}, b'{"error":"unknown product"}\n' + b"x" * 5000),
            "redirect": (302, {"location": "http://127.0.0.1:1/"}, b""),
        }[rec.mode]
        send_reply(self, status, headers, reply)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with recording_server(_Handler, Receiver, "/hooks/iipub") as rec:
        yield rec


@pytest.fixture
def sink(receiver: Receiver) -> Iterator[WebhookSink]:
    with WebhookSink(receiver.url, SECRET, timeout=5.0) as s:
        yield s


def event() -> EditionEvent:
    return EditionEvent(
        event_id="evt_01HZY",
        job_id="job-42",
        product="daily-brief",
        edition_date="2025-03-07",
        lang="es",
        sha256="ab" * 32,
        artifact={"title": "Resumen «hoy»", "items": [{"headline": "<b>x</b>"}]},
        published_at="2025-03-07T06:00:00Z",
    )


def verify(body: bytes, headers: dict[str, str]) -> None:
    client = openai.OpenAI(api_key="x", webhook_secret=SECRET)
    try:
        client.webhooks.verify_signature(body, headers, secret=SECRET)
    finally:
        client.close()


def test_webhook_sink_satisfies_the_protocol(sink: WebhookSink) -> None:
    assert isinstance(sink, Sink)
    assert sink.name == "webhook"
    assert SECRET not in repr(sink)


def test_delivery_posts_signed_event(receiver: Receiver, sink: WebhookSink) -> None:
    ev = event()
    assert sink.publish(ev) == Published()
    assert len(receiver.requests) == 1
    req = receiver.requests[0]
    headers = {k.lower(): v for k, v in req["headers"].items()}
    assert req["path"] == "/hooks/iipub"
    assert req["body"] == ev.body()
    assert json.loads(req["body"]) == ev.to_payload()
    assert headers["content-type"] == "application/json"
    assert headers["idempotency-key"] == "evt_01HZY"
    assert headers["webhook-id"] == "evt_01HZY"
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 60
    assert headers["webhook-signature"].startswith("v1,")
    assert SECRET not in json.dumps(req["headers"]) and SECRET[6:] not in json.dumps(req["headers"])
    # The official SDK accepts what was received...
    verify(req["body"], headers)
    # ...and rejects the same headers over a tampered body.
    tampered = req["body"].replace("«hoy»".encode(), "«ayer»".encode())
    assert tampered != req["body"]
    with pytest.raises(openai.InvalidWebhookSignatureError):
        verify(tampered, headers)


def test_redelivery_keeps_the_idempotency_key(receiver: Receiver, sink: WebhookSink) -> None:
    assert sink.publish(event()) == Published()
    assert sink.publish(event()) == Published()
    keys = [r["headers"]["Idempotency-Key"] for r in receiver.requests]
    assert keys == ["evt_01HZY", "evt_01HZY"]
    assert receiver.requests[0]["body"] == receiver.requests[1]["body"]


def test_signature_timestamp_comes_from_the_clock(receiver: Receiver) -> None:
    with WebhookSink(receiver.url, SECRET, clock=lambda: time.time() - 3600) as stale:
        assert stale.publish(event()) == Published()
    headers = {k.lower(): v for k, v in receiver.requests[0]["headers"].items()}
    with pytest.raises(openai.InvalidWebhookSignatureError, match="too old"):
        verify(receiver.requests[0]["body"], headers)


def test_503_is_retried_after_the_servers_delay(receiver: Receiver, sink: WebhookSink) -> None:
    receiver.mode = "503"
    result = sink.publish(event())
    assert isinstance(result, RetryLater)
    assert result.delay == 7.0
    assert "503" in result.why


def test_429_with_http_date_retry_after(receiver: Receiver, sink: WebhookSink) -> None:
    receiver.mode = "429-date"
    result = sink.publish(event())
    assert isinstance(result, RetryLater)
    assert result.delay is None  # a date in the past is stale advice: the relay's own backoff decides


def test_400_is_parked_with_a_short_reason(receiver: Receiver, sink: WebhookSink) -> None:
    receiver.mode = "400"
    result = sink.publish(event())
    assert isinstance(result, Parked)
    assert result.why.startswith('HTTP 400: {"error":"unknown product"}')
    assert len(result.why) < 300


def test_redirect_is_not_followed(receiver: Receiver, sink: WebhookSink) -> None:
    receiver.mode = "redirect"
    result = sink.publish(event())
    assert isinstance(result, Parked) and result.why.startswith("HTTP 302")
    assert len(receiver.requests) == 1


def test_dropped_connection_is_retried(receiver: Receiver, sink: WebhookSink) -> None:
    receiver.mode = "close"
    result = sink.publish(event())
    assert isinstance(result, RetryLater)
    assert result.delay is None
    assert len(receiver.requests) == 1


def test_connection_refused_is_retried() -> None:
    with socket.socket() as s:  # a port that was free a moment ago and has no listener
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with WebhookSink(f"http://127.0.0.1:{port}/", SECRET, timeout=2.0) as dead:
        result = dead.publish(event())
    assert isinstance(result, RetryLater)
    assert "ConnectError" in result.why
    assert SECRET not in result.why


def test_injected_client_is_used_and_not_closed(receiver: Receiver) -> None:
    with httpx.Client() as client:
        sink = WebhookSink(receiver.url, SECRET, client=client)
        assert sink.publish(event()) == Published()
        sink.close()
        assert not client.is_closed


def test_sign_matches_the_standard_webhooks_example() -> None:
    # The worked example from the Standard Webhooks specification.
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = '{"test": 2432232314}'
    assert sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body) == (
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    )
    # Without the prefix the rest is still base64, as the reference libraries read it.
    assert sign(secret.removeprefix("whsec_"), "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body) == (
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    )


@pytest.mark.parametrize("secret", ["whsec_!!!not-base64!!!", "plain text secret", "whsec_c2hvcnQ="])
def test_a_secret_no_standard_receiver_could_verify_is_refused_at_construction(secret: str) -> None:
    with pytest.raises(ValueError, match=r"Standard Webhooks|16 bytes") as info:
        WebhookSink("http://127.0.0.1:1/", secret)
    assert secret.removeprefix("whsec_") not in str(info.value)
    assert "Standard Webhooks" in str(info.value) or "16 bytes" in str(info.value)


@pytest.mark.parametrize("secret", [SECRET, SECRET.removeprefix("whsec_")])
def test_deliveries_verify_with_the_standard_webhooks_reference_library(receiver: Receiver, secret: str) -> None:
    from standardwebhooks.webhooks import Webhook

    with WebhookSink(receiver.url, secret) as sink:
        assert sink.publish(event()) == Published()
    (req,) = receiver.requests
    headers = {k.lower(): v for k, v in req["headers"].items()}
    payload = Webhook(secret).verify(req["body"], headers)  # raises on a bad signature
    assert payload == json.loads(req["body"]) and "evt_01HZY" in json.dumps(payload)
    with pytest.raises(Exception, match=r"(?i)signature"):
        Webhook("whsec_" + base64.b64encode(b"another-secret-of-32-bytes-long!").decode()).verify(
            req["body"], headers)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, None), ("", None), ("7", 7.0), ("1.5", 1.5), ("nonsense", None), ("-3", None), ("99999999", 86400.0)],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, now=1_700_000_000.0) == expected


def test_parse_retry_after_http_date() -> None:
    now = 1_445_412_480.0  # 2015-10-21T07:28:00Z
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now) == 30.0
    # The one parser the provider adapter and the webhook sink share: a zone-less date is GMT,
    # a past one is no hint.
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:30 -0000", now) == 30.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now) is None
