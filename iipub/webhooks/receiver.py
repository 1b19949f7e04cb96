"""The provider's webhooks, received: `iipub.webhook:application` (WSGI, for gunicorn, mod_wsgi
or Passenger) and `iipub webhook serve` (the same application on waitress, `webhooks.server`).
Deliveries are `POST`ed at any path (a proxy may pass its own path through).

Nothing in a body is believed before the provider's verifier (`factory.webhook_verifier`) has
checked its signature over the raw bytes (constant-time, ±5 minutes). A verified delivery is
recorded once by its `webhook-id` (a duplicate or an in-window replay is 200 and changes
nothing) and then settled (`settle`): custody within the request, or the job made due now.
Answers: 200 done, nothing to do, or an event type this receiver does not know (counted); 400
not verified or not understood (sending it again will not help); 408 not received in time; 413
too large; 503 not settled within the request budget, provider reads included (nothing
recorded: the provider delivers it again).
Never a 500, never a traceback to the client.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from iipub.core import logs
from iipub.core.errors import ConfigMismatch, Contention, DatabaseUnavailable, IipubError, SchemaNotReady
from iipub.core.timefmt import naive_utc
from iipub.machine import settle
from iipub.machine.run import run_context
from iipub.model.deliveries import IGNORED, UNKNOWN_EVENT
from iipub.model.jobs import new_worker_id
from iipub.money import gate
from iipub.provider import factory
from iipub.provider.factory import load_settings
from iipub.provider.interface import Provider
from iipub.provider.outcomes import DeliveryRejected, EventKind, VerifiedEvent
from iipub.settings.config import Settings, WebhookSettings
from iipub.store import clock, config_identity, db
from iipub.store.deliveries import Deliveries
from iipub.store.handles import Engine, OperationalError, SQLAlchemyError
from iipub.store.job_store import Store

log = structlog.get_logger("iipub.webhook")

TEST_ANSWER = "test delivery verified; database reachable; nothing recorded"
# Set by `webhooks.server` when the request's last byte arrived (time.monotonic()): the budget
# counts the time a delivery waited for a free thread.
RECEIVED_AT = "iipub.received_at"
_PRINTABLE = re.compile(r"[\x20-\x7e]{1,2000}")
_METHOD = re.compile(r"[A-Z]{1,16}")
_HEADER_VALUE = re.compile(r"[\x20-\x7e\t]*")
_CONTENT_LENGTH = re.compile(r"[0-9]+")  # ASCII digits only: str.isdigit() also takes "²"
_READ_CHUNK = 64 * 1024


@dataclass(frozen=True)
class ReceiverAnswer:
    status: int
    message: str

    @property
    def status_line(self) -> str:
        return f"{self.status} {_REASONS.get(self.status, 'Error')}"


_REASONS = {200: "OK", 400: "Bad Request", 405: "Method Not Allowed", 408: "Request Timeout", 411: "Length Required",
            413: "Content Too Large", 503: "Service Unavailable"}


@dataclass(frozen=True)
class Peer:
    """Who sent a request: the connection's address and, when that is a trusted proxy, the
    address the proxy says it forwarded for."""

    address: str
    forwarded_for: str | None = None


def peer_of(environ: Mapping[str, Any], trusted: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]) -> Peer:
    address = str(environ.get("REMOTE_ADDR") or "-")[:64]
    if not trusted or not _within(address, trusted):
        return Peer(address)
    hops = [h.strip() for h in str(environ.get("HTTP_X_FORWARDED_FOR", "")).split(",") if h.strip()]
    # The nearest hop that is not itself a trusted proxy is the client (the farther ones are the
    # client's own word).
    for hop in reversed(hops):
        if not _within(hop, trusted):
            return Peer(address, hop[:64])
    return Peer(address, hops[0][:64] if hops else None)


def _within(address: str, networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in n for n in networks)


def trusted_networks(w: WebhookSettings) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(p, strict=False) for p in w.trusted_proxies)


class Overdue(Exception):
    """The delivery ran past its budget: answered 503, its row forgotten (the redelivery finds
    whatever was done and settles it)."""


class Receiver:
    """One per process: settings, engine, provider client and verifier, shared by requests."""

    def __init__(self, settings: Settings, engine: Engine | None = None, provider: Provider | None = None) -> None:
        self.settings = settings
        w = settings.webhooks
        self.verifier = factory.webhook_verifier(settings)  # the secret is required first
        settings.require_api_key()
        if engine is None:
            db.require_existing(settings.database_url)  # never creates an empty SQLite file
        # A lock is waited for well inside the budget (then 503, delivered again).
        self.engine = engine or db.make_engine(settings.database_url, pool_size=w.threads,
                                               lock_wait_seconds=max(1, int(w.request_seconds / 4)))
        self._own_engine = engine is None
        self.provider: Provider = provider or factory.build(settings)
        self._own_provider = provider is None
        self.deliveries = Deliveries(self.engine)
        self.worker = new_worker_id("webhook")
        self.trusted = trusted_networks(w)

    def warm(self) -> None:
        """What the first delivery would otherwise pay for (1-5 s): the provider's client, the
        modules of the custody path, one database round trip. The pool is emptied afterwards, so
        a process forked from this one (gunicorn --preload) inherits no connection."""
        # Imported to warm: the modules of the custody path.
        from iipub.edition import compose, validate  # noqa: F401
        from iipub.machine import decisions, steps  # noqa: F401
        from iipub.settings import edition_schema
        from iipub.store import outbox  # noqa: F401

        self.provider.ready()
        for p in self.settings.products.values():
            edition_schema.text_format(p.languages, p.items)
        with self.engine.connect() as conn:
            clock.read_now(conn)
        self.engine.dispose()

    def after_fork(self) -> None:
        """In a forked worker: connections the parent opened are the parent's (not closed here)."""
        self.engine.dispose(close=False)

    def close(self) -> None:
        if self._own_provider:
            self.provider.close()
        if self._own_engine:
            self.engine.dispose()

    # -- one delivery -------------------------------------------------------------------

    def receive(self, body: bytes, headers: Mapping[str, str], peer: Peer = Peer("-"),
                received_at: float | None = None) -> ReceiverAnswer:
        """Verify, record and settle one delivery within `[webhooks] request_seconds` of
        `received_at` (`time.monotonic()`; default now)."""
        started = time.monotonic() if received_at is None else received_at
        deadline = started + self.settings.webhooks.request_seconds
        try:
            event = self.verifier.verify(body, headers)
        except DeliveryRejected as exc:
            return self.rejected(ReceiverAnswer(400, str(exc)), headers, peer)
        if time.monotonic() >= deadline:  # it waited for a thread past its budget
            log.warning("webhook_overdue", webhook_id=event.webhook_id, client=peer.address,
                        forwarded_for=peer.forwarded_for, waited=round(time.monotonic() - started, 3))
            return ReceiverAnswer(503, "not settled within the request budget; deliver again")
        try:
            mismatch = self.configuration_mismatch()
        except (Contention, DatabaseUnavailable, OperationalError) as exc:
            log.warning("webhook_not_recorded", webhook_id=event.webhook_id, client=peer.address, error=str(exc))
            return ReceiverAnswer(503, "not recorded; deliver again")
        if mismatch is not None:  # nothing recorded or settled: the provider delivers again
            log.error("webhook_config_mismatch", webhook_id=event.webhook_id, error=mismatch)
            return ReceiverAnswer(503, "this receiver's configuration is not the database's; deliver again")
        if event.kind is EventKind.TEST:
            return self._test_delivery(event, peer)
        try:
            held = gate.paused_everything(self.engine)
        except (Contention, DatabaseUnavailable, OperationalError) as exc:
            log.warning("webhook_not_recorded", webhook_id=event.webhook_id, client=peer.address, error=str(exc))
            return ReceiverAnswer(503, "not recorded; deliver again")
        if held is not None:  # the immediate abort: nothing recorded or settled, the provider delivers again
            log.warning("webhook_paused", webhook_id=event.webhook_id, by=held.paused_by)
            return ReceiverAnswer(503, "paused (pause --everything); deliver again later")
        try:
            new = self.deliveries.record(event.webhook_id, event.type[:64], event.event_id, event.response_id,
                                         _when(event.created_at))
        except (Contention, DatabaseUnavailable) as exc:
            log.warning("webhook_not_recorded", webhook_id=event.webhook_id, client=peer.address, error=str(exc))
            return ReceiverAnswer(503, "not recorded; deliver again")
        if not new:
            log.info("webhook_duplicate", webhook_id=event.webhook_id, type=event.type)
            return ReceiverAnswer(200, "duplicate: already received")
        try:
            return self._settle(event, started, deadline)
        except Exception as exc:  # recorded nothing decided: let the provider deliver it again
            expected = (settle.Retry, Overdue, Contention, DatabaseUnavailable)
            (log.warning if isinstance(exc, expected) else log.error)(
                "webhook_not_settled", webhook_id=event.webhook_id, response_id=event.response_id,
                client=peer.address, error=f"{type(exc).__name__}: {exc}", seconds=round(time.monotonic() - started, 3))
            try:
                self.deliveries.forget(event.webhook_id)
            except Exception:  # the row then stays `received` and is taken over by a later delivery
                log.warning("webhook_not_forgotten", webhook_id=event.webhook_id)
            if isinstance(exc, Overdue):
                return ReceiverAnswer(503, "not settled within the request budget; deliver again")
            return ReceiverAnswer(503, "not settled now; deliver again")

    def configuration_mismatch(self) -> str | None:
        """The database's configuration identity checked as every writing command checks it, at
        each delivery (a file moved, edited or replaced while the receiver runs is seen at the
        next one): one line when this receiver's configuration is not the database's, else None."""
        try:
            config_identity.verify(self.engine, self.settings, command="webhook receiver", by=self.worker,
                                   write=True)
        except (ConfigMismatch, SchemaNotReady) as exc:
            return str(exc)
        return None

    def rejected(self, answer: ReceiverAnswer, headers: Mapping[str, str], peer: Peer) -> ReceiverAnswer:
        """Log a refused request so it can be matched with the provider's delivery log."""
        wid = next((v for k, v in headers.items() if k.lower() == "webhook-id"), None)
        log.warning("webhook_rejected", status=answer.status, reason=answer.message,
                    webhook_id=wid[:255] if wid else None, client=peer.address, forwarded_for=peer.forwarded_for)
        return answer

    def _test_delivery(self, event: VerifiedEvent, peer: Peer) -> ReceiverAnswer:
        try:
            with self.engine.connect() as conn:
                clock.read_now(conn)
        except (SQLAlchemyError, DatabaseUnavailable) as exc:
            log.warning("webhook_test_delivery", webhook_id=event.webhook_id, client=peer.address,
                        database=db.describe_error(exc))
            return ReceiverAnswer(503, "test delivery verified, but the database is unreachable")
        log.info("webhook_test_delivery", webhook_id=event.webhook_id, client=peer.address,
                 forwarded_for=peer.forwarded_for)
        return ReceiverAnswer(200, TEST_ANSWER)

    def _settle(self, event: VerifiedEvent, started: float, deadline: float) -> ReceiverAnswer:
        if event.kind is EventKind.UNKNOWN:
            self.deliveries.settle(event.webhook_id, UNKNOWN_EVENT, detail={"type": event.type[:200]})
            log.info("webhook_unknown_event", webhook_id=event.webhook_id, type=event.type[:200])
            return ReceiverAnswer(200, f"unknown event type {event.type[:80]!r}: counted, nothing done")
        if event.kind is not EventKind.RESPONSE_ENDED or event.response_id is None:
            self.deliveries.settle(event.webhook_id, IGNORED, detail={"type": event.type})
            return ReceiverAnswer(200, f"ignored: {event.type}")
        w = self.settings.webhooks
        store = Store(self.engine, self.worker, self.settings.reconcile.lease_seconds)
        # Every provider call of this delivery ends by the deadline; its context has no create
        # pieces, so a delivery never creates.
        ctx = run_context.for_delivery(self.settings, store, self.provider.until(deadline), deadline,
                                       random.Random())
        result = settle.response_event(ctx, self.deliveries, event.response_id, event.type,
                                       lease_wait=min(w.lease_wait_seconds, w.request_seconds / 2))
        if time.monotonic() > deadline:
            raise Overdue(f"settled as {result.outcome} after {time.monotonic() - started:.1f} s")
        self.deliveries.settle(event.webhook_id, result.outcome, job_id=result.job_id, detail=result.detail)
        log.info("webhook_settled", webhook_id=event.webhook_id, type=event.type, response_id=event.response_id,
                 job_id=result.job_id, outcome=result.outcome, seconds=round(time.monotonic() - started, 3))
        return ReceiverAnswer(200, result.outcome)

    # -- WSGI ---------------------------------------------------------------------------

    def __call__(self, environ: Mapping[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        answer = self._wsgi(environ)
        payload = (json.dumps({"status": answer.status, "message": answer.message}) + "\n").encode()
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))]
        if answer.status == 405:
            headers.append(("Allow", "POST"))
        start_response(answer.status_line, headers)
        return [payload]

    def _wsgi(self, environ: Mapping[str, Any]) -> ReceiverAnswer:
        started = environ.get(RECEIVED_AT)
        if not isinstance(started, float):
            started = time.monotonic()
        peer = peer_of(environ, self.trusted)
        headers: dict[str, str] = {}
        try:
            headers = {k[5:].replace("_", "-").lower(): str(v) for k, v in environ.items() if k.startswith("HTTP_")}
            malformed = _malformed(environ, headers)
            if malformed:
                return self.rejected(ReceiverAnswer(400, malformed), headers, peer)
            if environ.get("REQUEST_METHOD") != "POST":
                return self.rejected(ReceiverAnswer(405, "POST only"), headers, peer)
            w = self.settings.webhooks
            body = read_body(environ, w.max_body_bytes, started + w.read_seconds)
            if isinstance(body, ReceiverAnswer):
                return self.rejected(body, headers, peer)
            return self.receive(body, headers, peer, started)
        except Exception as exc:  # never a 500 nor a traceback to the client; the log has it
            log.exception("webhook_failed", webhook_id=headers.get("webhook-id", "")[:255] or None,
                          client=peer.address, error=f"{type(exc).__name__}: {exc}")
            return ReceiverAnswer(503, "not settled now; deliver again")


def _malformed(environ: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
    """What is wrong with the request line or a header (a server may pass through what it does
    not check itself: non-ASCII bytes arrive as latin-1 text), or None."""
    if not _METHOD.fullmatch(str(environ.get("REQUEST_METHOD", ""))):
        return "malformed request method"
    path = str(environ.get("SCRIPT_NAME", "")) + str(environ.get("PATH_INFO", ""))
    if path and not _PRINTABLE.fullmatch(path[:2000]):
        return "request path is not printable ASCII"
    for name, value in headers.items():
        if value and not _HEADER_VALUE.fullmatch(value):
            return f"header {name[:40]!r} is not printable ASCII"
    return None


def read_body(environ: Mapping[str, Any], limit: int, deadline: float) -> bytes | ReceiverAnswer:
    """The body as its Content-Length announces it, read by `deadline` (`time.monotonic()`)."""
    raw = str(environ.get("CONTENT_LENGTH") or "").strip()
    if not raw:
        return ReceiverAnswer(411, "a Content-Length is required")
    if not _CONTENT_LENGTH.fullmatch(raw):
        return ReceiverAnswer(400, "Content-Length is not a number")
    length = int(raw) if len(raw) <= 15 else limit + 1
    if length > limit:
        return ReceiverAnswer(413, f"body over {limit} bytes")
    stream = environ["wsgi.input"]
    parts: list[bytes] = []
    got = 0
    while got < length:
        if time.monotonic() > deadline:
            return ReceiverAnswer(408, "body not received in time")
        try:
            chunk = stream.read(min(_READ_CHUNK, length - got))
        except (OSError, ValueError):  # the client went away, or the server's own read timed out
            return ReceiverAnswer(400, "body not received")
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    if got != length:
        return ReceiverAnswer(400, "body shorter than its Content-Length")
    return b"".join(parts)


def _when(epoch: int | None) -> dt.datetime | None:
    if epoch is None or not 0 < epoch < 2**33:
        return None
    return naive_utc(dt.datetime.fromtimestamp(epoch, dt.UTC))


# -- the WSGI entry point -------------------------------------------------------------------

_lock = threading.Lock()
_receiver: Receiver | None = None
PRELOAD_ENV = "IIPUB_WEBHOOK_PRELOAD"


def _build() -> Receiver:
    logs.configure("info")
    receiver = Receiver(load_settings())
    receiver.warm()
    return receiver


def application(environ: Mapping[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """WSGI entry point. Settings come from the process environment (IIPUB_CONFIG,
    IIPUB_DATABASE_URL, OPENAI_API_KEY, OPENAI_WEBHOOK_SECRET), read at import when
    IIPUB_WEBHOOK_PRELOAD=1 (warm start; gunicorn --preload), else at the first request; a
    configuration problem answers 503 (and is logged) until it is fixed and the app reloaded."""
    global _receiver
    with _lock:
        if _receiver is None:
            try:
                _receiver = _build()
            except IipubError as exc:
                log.error("webhook_unconfigured", error=str(exc))
                start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
                return [b"webhook receiver not configured\n"]
        receiver = _receiver
    return receiver(environ, start_response)


def forget() -> None:
    """Drop this process's receiver; the next request builds one again. The test seam for the
    entry point as a process without a receiver meets it."""
    global _receiver
    with _lock:
        _receiver = None


def _after_fork_in_child() -> None:
    if _receiver is not None:
        _receiver.after_fork()


def preload() -> Receiver | None:
    """Build the receiver now (at import, when IIPUB_WEBHOOK_PRELOAD=1): engine, provider client
    and the custody path's modules, and one database round trip, so no worker's first delivery
    is the slow one. Nothing is left open: no thread, no pooled connection, so forking after it
    is safe (each forked worker also drops any connection it inherited)."""
    global _receiver
    with _lock:
        if _receiver is None:
            try:
                _receiver = _build()
            except IipubError as exc:  # answered 503 until fixed, as without preloading
                log.error("webhook_unconfigured", error=str(exc))
        return _receiver


os.register_at_fork(after_in_child=_after_fork_in_child)
if os.environ.get(PRELOAD_ENV, "").strip().lower() in ("1", "true", "yes"):
    preload()
