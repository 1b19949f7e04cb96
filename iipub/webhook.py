"""The provider's webhooks, received: `iipub.webhook:application` (WSGI, for mod_wsgi, Passenger
or gunicorn) and `iipub webhook serve`. Deliveries are `POST` at the application's root.

Nothing in a body is believed before the official SDK has verified its signature over the raw
bytes (constant-time, ±5 minutes). A verified delivery is recorded once by its `webhook-id`
(a duplicate or an in-window replay is 200 and changes nothing) and then settled (`settle`):
custody within the request, or the job made due now. Answers: 200 done or nothing to do; 400
not verified or not understood (sending it again will not help); 413 too large; 503 could not
be settled now (nothing recorded: the provider delivers it again). Never a traceback.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
import socketserver
import threading
import time
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import openai
import sqlalchemy as sa
import structlog
from openai.types.webhooks import UnwrapWebhookEvent

from . import db, gate, logs, settle
from .config import Settings, load_settings
from .deliveries import IGNORED, Deliveries
from .errors import Contention, DatabaseUnavailable, IipubError
from .jobs import new_worker_id
from .provider import Provider
from .store import Store
from .tick import Tick
from .timefmt import naive_utc

log = structlog.get_logger("iipub.webhook")

TOLERANCE_SECONDS = 300  # the SDK's and Standard Webhooks' window, both ways
RESPONSE_EVENTS = frozenset({"response.completed", "response.failed", "response.cancelled", "response.incomplete"})
_WEBHOOK_ID = re.compile(r"[\x21-\x7e]{1,255}")
_RESPONSE_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")


def _known_event_types() -> frozenset[str]:
    """Every event type the SDK knows (its union of webhook event models): an unknown one is
    answered 400, a known one that is not about a response is recorded and ignored."""
    union = typing.get_args(UnwrapWebhookEvent)
    members = typing.get_args(union[0]) if union and typing.get_origin(union[0]) is typing.Union else union
    found: set[str] = set()
    for model in members:
        field = getattr(model, "model_fields", {}).get("type")
        if field is not None:
            found.update(str(v) for v in typing.get_args(field.annotation))
    return frozenset(found) | RESPONSE_EVENTS


KNOWN_EVENT_TYPES = _known_event_types()


@dataclass(frozen=True)
class Answer:
    status: int
    message: str

    @property
    def status_line(self) -> str:
        return f"{self.status} {_REASONS.get(self.status, 'Error')}"


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 411: "Length Required",
            413: "Content Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass(frozen=True)
class Event:
    webhook_id: str
    event_id: str | None
    type: str
    response_id: str | None
    created_at: int | None


class Rejected(Exception):
    """A delivery answered 400: not verified, or not understood."""


class Receiver:
    """One per process: settings, engine, provider client and verifier, shared by requests."""

    def __init__(self, settings: Settings, engine: sa.Engine | None = None, provider: Provider | None = None) -> None:
        self.settings = settings
        self.secret = settings.require_provider_webhook_secret()
        api_key = settings.require_api_key()
        self.engine = engine or db.make_engine(settings.database_url)
        self._own_engine = engine is None
        self.provider = provider or Provider(settings.provider, api_key)
        self._own_provider = provider is None
        # The SDK's verifier lives on a client; this one never sends a request.
        self._verifier = openai.OpenAI(api_key="verify-only", base_url="http://127.0.0.1:9/", max_retries=0).webhooks
        self.deliveries = Deliveries(self.engine)
        self.worker = new_worker_id("webhook")

    def close(self) -> None:
        if self._own_provider:
            self.provider.close()
        if self._own_engine:
            self.engine.dispose()

    # -- one delivery -------------------------------------------------------------------

    def receive(self, body: bytes, headers: Mapping[str, str]) -> Answer:
        started = time.monotonic()
        try:
            event = self.verify(body, headers)
        except Rejected as exc:
            log.warning("webhook_rejected", error=str(exc))
            return Answer(400, str(exc))
        try:
            held = gate.paused_everything(self.engine)
        except (Contention, DatabaseUnavailable, sa.exc.OperationalError) as exc:
            log.warning("webhook_not_recorded", webhook_id=event.webhook_id, error=str(exc))
            return Answer(503, "not recorded; deliver again")
        if held is not None:  # the immediate abort: nothing recorded or settled, the provider delivers again
            log.warning("webhook_paused", webhook_id=event.webhook_id, by=held.paused_by)
            return Answer(503, "paused (pause --everything); deliver again later")
        try:
            new = self.deliveries.record(event.webhook_id, event.type, event.event_id, event.response_id,
                                         _when(event.created_at))
        except (Contention, DatabaseUnavailable) as exc:
            log.warning("webhook_not_recorded", webhook_id=event.webhook_id, error=str(exc))
            return Answer(503, "not recorded; deliver again")
        if not new:
            log.info("webhook_duplicate", webhook_id=event.webhook_id, type=event.type)
            return Answer(200, "duplicate: already received")
        try:
            return self._settle(event, started)
        except Exception as exc:  # recorded nothing decided: let the provider deliver it again
            level = log.warning if isinstance(exc, (settle.Retry, Contention, DatabaseUnavailable)) else log.error
            level("webhook_not_settled", webhook_id=event.webhook_id, response_id=event.response_id,
                  error=f"{type(exc).__name__}: {exc}")
            try:
                self.deliveries.forget(event.webhook_id)
            except Exception:  # the row then stays `received` and is taken over by a later delivery
                log.warning("webhook_not_forgotten", webhook_id=event.webhook_id)
            return Answer(503, "not settled now; deliver again")

    def _settle(self, event: Event, started: float) -> Answer:
        if event.type not in RESPONSE_EVENTS or event.response_id is None:
            self.deliveries.settle(event.webhook_id, IGNORED, detail={"type": event.type})
            return Answer(200, f"ignored: {event.type}")
        w = self.settings.webhooks
        store = Store(self.engine, self.worker, self.settings.reconcile.lease_seconds)
        tick = Tick(self.settings, store, self.provider, started + w.request_seconds, random.Random())
        result = settle.response_event(tick, self.deliveries, event.response_id, event.type,
                                       lease_wait=min(w.lease_wait_seconds, w.request_seconds / 2))
        self.deliveries.settle(event.webhook_id, result.outcome, job_id=result.job_id, detail=result.detail)
        log.info("webhook_settled", webhook_id=event.webhook_id, type=event.type, response_id=event.response_id,
                 job_id=result.job_id, outcome=result.outcome, seconds=round(time.monotonic() - started, 3))
        return Answer(200, result.outcome)

    def verify(self, body: bytes, headers: Mapping[str, str]) -> Event:
        """The event in `body`, once the SDK verified it came from the provider; `Rejected`
        otherwise (bad or missing signature, a timestamp outside ±5 minutes, a body that is
        not an event)."""
        lowered = {k.lower(): v for k, v in headers.items() if k.lower() in _HEADERS}
        missing = [h for h in _HEADERS if not lowered.get(h)]
        if missing:
            raise Rejected(f"missing header(s): {', '.join(missing)}")
        try:
            self._verifier.verify_signature(body, lowered, secret=self.secret, tolerance=TOLERANCE_SECONDS)
        except openai.InvalidWebhookSignatureError as exc:
            raise Rejected(f"not verified: {exc}") from None
        except ValueError as exc:  # undecodable body or header
            raise Rejected(f"not verified: {type(exc).__name__}") from None
        webhook_id = lowered["webhook-id"]
        if not _WEBHOOK_ID.fullmatch(webhook_id):
            raise Rejected("webhook-id is not 1-255 printable characters")
        try:
            doc = json.loads(body)
        except ValueError:
            raise Rejected("body is not JSON") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("type"), str):
            raise Rejected("body is not an event object with a type")
        kind = doc["type"]
        if kind not in KNOWN_EVENT_TYPES:
            raise Rejected(f"unknown event type {kind[:80]!r}")
        event_id = doc.get("id") if isinstance(doc.get("id"), str) else None
        created = doc.get("created_at")
        created_at = created if isinstance(created, int) and not isinstance(created, bool) else None
        response_id = None
        if kind in RESPONSE_EVENTS:
            data = doc.get("data")
            rid = data.get("id") if isinstance(data, dict) else None
            if not isinstance(rid, str) or not _RESPONSE_ID.fullmatch(rid):
                raise Rejected("response event without a valid data.id")
            response_id = rid
        return Event(webhook_id, event_id[:255] if event_id else None, kind, response_id, created_at)

    # -- WSGI ---------------------------------------------------------------------------

    def __call__(self, environ: Mapping[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        answer = self._wsgi(environ)
        payload = (json.dumps({"status": answer.status, "message": answer.message}) + "\n").encode()
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))]
        if answer.status == 405:
            headers.append(("Allow", "POST"))
        start_response(answer.status_line, headers)
        return [payload]

    def _wsgi(self, environ: Mapping[str, Any]) -> Answer:
        try:
            if environ.get("PATH_INFO", "") not in ("", "/"):
                return Answer(404, "deliveries are POSTed to the root")
            if environ.get("REQUEST_METHOD") != "POST":
                return Answer(405, "POST only")
            body = _read_body(environ, self.settings.webhooks.max_body_bytes)
            if isinstance(body, Answer):
                return body
            headers = {k[5:].replace("_", "-").lower(): str(v) for k, v in environ.items()
                       if k.startswith("HTTP_")}
            return self.receive(body, headers)
        except Exception as exc:  # the client never sees a traceback; the log has it
            log.exception("webhook_failed", error=f"{type(exc).__name__}: {exc}")
            return Answer(500, "internal error")


def _read_body(environ: Mapping[str, Any], limit: int) -> bytes | Answer:
    raw = environ.get("CONTENT_LENGTH") or ""
    if not raw.strip().isdigit():
        return Answer(411, "a Content-Length is required")
    length = int(raw)
    if length > limit:
        return Answer(413, f"body over {limit} bytes")
    body: bytes = environ["wsgi.input"].read(length)
    if len(body) != length:
        return Answer(400, "body shorter than its Content-Length")
    return body


def _when(epoch: int | None) -> dt.datetime | None:
    if epoch is None or not 0 < epoch < 2**33:
        return None
    return naive_utc(dt.datetime.fromtimestamp(epoch, dt.UTC))


# -- serving it ------------------------------------------------------------------------------


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True  # deliveries overlap (a duplicate, a retry): one thread each
    block_on_close = True


class _QuietHandler(WSGIRequestHandler):
    timeout = 30  # a client that stops sending mid-body is cut off

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # the receiver logs every delivery itself

    def address_string(self) -> str:
        return str(self.client_address[0])  # no reverse DNS per request


def make_wsgi_server(host: str, port: int, app: Callable[..., Iterable[bytes]]) -> WSGIServer:
    """A threaded stdlib WSGI server for `app` (`iipub webhook serve`; tests; benchmarks)."""
    return make_server(host, port, app, server_class=_ThreadingServer, handler_class=_QuietHandler)


# -- the WSGI entry point -------------------------------------------------------------------

_lock = threading.Lock()
_receiver: Receiver | None = None


def application(environ: Mapping[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """WSGI entry point. Settings come from the process environment (IIPUB_CONFIG,
    IIPUB_DATABASE_URL, OPENAI_API_KEY, OPENAI_WEBHOOK_SECRET), read at the first request; a
    configuration problem answers 503 (and is logged) until it is fixed and the app reloaded."""
    global _receiver
    with _lock:
        if _receiver is None:
            try:
                logs.configure("info")
                _receiver = Receiver(load_settings())
            except IipubError as exc:
                log.error("webhook_unconfigured", error=str(exc))
                start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
                return [b"webhook receiver not configured\n"]
        receiver = _receiver
    return receiver(environ, start_response)
