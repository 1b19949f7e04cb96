"""The simulator's HTTP side: a threaded stdlib server speaking the Responses API subset.

Routes:
  POST   /v1/responses                 create
  GET    /v1/responses/{id}            retrieve
  POST   /v1/responses/{id}/cancel     cancel
  DELETE /v1/responses/{id}            delete
  GET    /v1/models/{model}            model (the SDK's `Model`; the account's 403/404)
  /_sim/...                            control (faults, clock, stats, reset) for tests and demos

With `webhook_url` set it also sends the signed webhooks OpenAI sends when a background
response finishes (see `webhooks`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import re
import secrets
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import structlog

from iipub.core.errors import ConfigError
from iipub.provider.openai.simulator.backend import Backend, Reply, error_reply
from iipub.provider.openai.simulator.faults import FLEX_UNAVAILABLE, OUTPUT_SHAPES, FaultRule, rule_from_dict
from iipub.provider.openai.simulator.webhooks import WebhookLog, WebhookSender, parse_secret

log = structlog.get_logger("iipub.simulator")

_RESPONSE_PATH = re.compile(r"^/v1/responses/([A-Za-z0-9_\-]{1,200})(/cancel)?$")
_MODEL_PATH = re.compile(r"^/v1/models/([A-Za-z0-9_.:\-]{1,200})$")


@dataclass(frozen=True)
class SimulatorOptions:
    queued_seconds: float = 2.0
    in_progress_seconds: float = 5.0
    # A finished response answers 404 this long after it finished when it was created with
    # `store: false` or the project is zero-data-retention (`zdr`); with `store: true` (what iipub
    # sends) it is kept `stored_retention_seconds`, as the real API keeps it (30 days).
    retention_seconds: float = 600.0
    stored_retention_seconds: float = 30 * 86_400.0
    zdr: bool = False
    # (API key, project) pairs: the project a key acts in when a request names none (keys not
    # listed share the organization's default project). A key rotated to another project is one
    # listed here with another project.
    key_projects: tuple[tuple[str, str], ...] = ()
    time_scale: float = 1.0  # simulated seconds per real second
    slow_seconds: float = 35.0  # real seconds; longer than a client's read timeout
    seed: int | None = None
    faults: tuple[FaultRule, ...] = ()  # per-run rules
    log_requests: bool = False  # one line per API request on stderr
    max_body_bytes: int = 8 * 1024 * 1024
    idle_timeout_seconds: float = 60.0  # keep-alive connections idle longer are closed
    latency_seconds: float = 0.0  # real seconds slept before answering every /v1 request
    webhook_url: str | None = None  # where finished background responses are announced
    # Further endpoints of the same project: each is sent every event too, with its own webhook-id
    # (the provider announces every response of a project to every endpoint it has).
    webhook_also: tuple[str, ...] = ()
    webhook_secret: str | None = None  # whsec_<base64>; required with webhook_url
    webhook_late_seconds: float = 2.0  # real seconds webhook_late holds an event back
    webhook_retries: int = 3  # retries after a failed attempt (0.25 s, 0.5 s, 1 s ... apart)
    webhook_timeout_seconds: float = 5.0  # per attempt
    # Flex mode: a create asking for service_tier "flex" is refused (429 resource unavailable)
    # with this probability, and a flex response takes `flex_slowdown` times as long to finish.
    flex_refusal_rate: float = 0.0
    flex_slowdown: float = 3.0
    # One language corrupted, the others intact (a language track's own failure): its sources
    # link to `corrupt_domain` (fails where the product's allowed_domains lacks it: a config fix
    # cures it), or, without a domain, to a host that is never public (only a new generation cures it).
    corrupt_lang: str | None = None
    corrupt_domain: str | None = None
    # Output shapes every response is written in (`faults.OUTPUT_SHAPES`, e.g. the realistic mix
    # REALISTIC_OUTPUT: a reasoning item, commentary and final_answer phases, several parts).
    output_shapes: tuple[str, ...] = ()
    # The account (`Backend`): models its projects may not use (403), models that do not exist
    # (404), the organization's tokens-per-minute limit (a larger create: 429 Request too large).
    no_access_models: tuple[str, ...] = ()
    unknown_models: tuple[str, ...] = ()
    tokens_per_minute: int | None = None


# What a reasoning model's completed response looks like at the real API.
REALISTIC_OUTPUT = ("output_reasoning", "output_phases", "output_parts")


class Simulator:
    """The simulator in a background thread. Binds loopback only unless told otherwise."""

    def __init__(
        self,
        options: SimulatorOptions | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        allow_non_loopback: bool = False,
    ) -> None:
        self.options = options or SimulatorOptions()
        if not allow_non_loopback and not is_loopback(host):
            raise ConfigError(
                f"refusing to bind the simulator to {host!r}: not a loopback address "
                "(pass allow_non_loopback / --allow-non-loopback to override)"
            )
        o = self.options
        if min(o.queued_seconds, o.in_progress_seconds, o.retention_seconds, o.stored_retention_seconds,
               o.slow_seconds, o.latency_seconds) < 0 or o.time_scale <= 0:
            raise ConfigError("simulator durations must be >= 0 and time_scale > 0")
        if set(o.output_shapes) - set(OUTPUT_SHAPES):
            raise ConfigError(f"unknown output shape(s): {', '.join(sorted(set(o.output_shapes) - set(OUTPUT_SHAPES)))}"
                              f" (known: {', '.join(OUTPUT_SHAPES)})")
        if not 0 <= o.flex_refusal_rate <= 1 or o.flex_slowdown <= 0:
            raise ConfigError("flex_refusal_rate must be within 0..1 and flex_slowdown > 0")
        flex = ((FaultRule("create", FLEX_UNAVAILABLE, probability=o.flex_refusal_rate),)
                if o.flex_refusal_rate else ())
        self._webhook_key = _webhook_key(o, allow_non_loopback)
        self.host = host
        self.port = port
        self.backend = Backend(
            queued_seconds=o.queued_seconds,
            in_progress_seconds=o.in_progress_seconds,
            retention_seconds=o.retention_seconds,
            time_scale=o.time_scale,
            seed=o.seed,
            run_faults=tuple(_checked(r, None) for r in o.faults + flex),
            announce=o.webhook_url is not None,
            flex_slowdown=o.flex_slowdown,
            corrupt_lang=o.corrupt_lang,
            corrupt_domain=o.corrupt_domain,
            output_shapes=frozenset(o.output_shapes),
            stored_retention_seconds=o.stored_retention_seconds,
            zdr=o.zdr,
            key_projects=dict(o.key_projects),
            no_access_models=o.no_access_models,
            unknown_models=o.unknown_models,
            tokens_per_minute=o.tokens_per_minute,
        )
        self.stopping = threading.Event()
        self.webhook_log = WebhookLog()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._sender: WebhookSender | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> Simulator:
        if self._server is not None:
            return self
        self.stopping.clear()
        self._server = _Server((self.host, self.port), self)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="iipub-simulator", daemon=True
        )
        self._thread.start()
        o = self.options
        if o.webhook_url is not None and self._webhook_key is not None:
            self._sender = WebhookSender(
                self.backend, self.webhook_log, self.stopping, urls=(o.webhook_url, *o.webhook_also),
                key=self._webhook_key,
                late_seconds=o.webhook_late_seconds, retries=o.webhook_retries,
                timeout_seconds=o.webhook_timeout_seconds, log_sends=o.log_requests,
            )
            self._sender.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self.stopping.set()  # wakes handlers sleeping on a `slow` fault, and the webhook sender
        sender, self._sender = self._sender, None
        if sender is not None:
            sender.stop()
        server.shutdown()
        server.close_connections()
        server.server_close()  # joins the handler threads
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def origin(self) -> str:
        if self._server is None:
            raise RuntimeError("simulator is not running")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def url(self) -> str:
        """The base URL clients use (OPENAI_BASE_URL)."""
        return self.origin + "/v1"

    # -- control ----------------------------------------------------------------------------

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("the simulator clock only moves forward")
        return self.backend.clock.advance(seconds)

    def add_faults(self, rules: Iterable[FaultRule | Mapping[str, Any]]) -> None:
        """Add rules. Rules given as dicts fire once unless they say `times`;
        `FaultRule` objects are used as they are (their default is unlimited)."""
        parsed = [_checked(r, 1) for r in rules]
        self.backend.faults.add(parsed)

    def clear_faults(self) -> None:
        self.backend.faults.clear()

    def stats(self) -> dict[str, Any]:
        return self.backend.stats() | self.webhook_log.to_dict()

    def reset(self) -> None:
        sender = self._sender
        with sender.resetting() if sender is not None else contextlib.nullcontext():
            self.backend.reset()
            self.webhook_log.reset()

    def flush_webhooks(self, timeout: float = 5.0) -> bool:
        """Wait (real time) until every finished background response has been announced and no
        send is pending: none held late or out of order, retrying or in flight. False on timeout."""
        if self.options.webhook_url is None:
            return True
        deadline = time.monotonic() + timeout
        while True:
            sender = self._sender
            if sender.idle() if sender is not None else self.backend.unannounced_finished() == 0:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)


def _checked(rule: FaultRule | Mapping[str, Any], default_times: int | None) -> FaultRule:
    raw = rule.to_dict() if isinstance(rule, FaultRule) else rule
    return rule_from_dict(raw, default_times=default_times)


def _check_webhook_url(url: str, allow_non_loopback: bool) -> None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise ConfigError(f"webhook URL {url!r} is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"webhook URL {url!r} must be http(s)://HOST[:PORT]/PATH")
    if not allow_non_loopback and not is_loopback(parts.hostname):
        raise ConfigError(
            f"refusing to send webhooks to {parts.hostname!r}: not a loopback address "
            "(pass allow_non_loopback / --allow-non-loopback to override)"
        )


def _webhook_key(o: SimulatorOptions, allow_non_loopback: bool) -> bytes | None:
    """The HMAC key, once the webhook options are known to be usable (one-line ConfigErrors)."""
    key = parse_secret(o.webhook_secret) if o.webhook_secret is not None else None
    if o.webhook_url is None:
        return key
    if key is None:
        raise ConfigError("a webhook URL needs a secret: webhook_secret / --webhook-secret / "
                          "IIPUB_SIM_WEBHOOK_SECRET (whsec_<base64>)")
    for url in (o.webhook_url, *o.webhook_also):
        _check_webhook_url(url, allow_non_loopback)
    if o.webhook_late_seconds < 0 or o.webhook_timeout_seconds <= 0 or o.webhook_retries < 0:
        raise ConfigError("webhook_late_seconds and webhook_retries must be >= 0, webhook_timeout_seconds > 0")
    return key


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # many workers connect at once; the stdlib default backlog is 5
    block_on_close = True  # server_close() joins handler threads

    def __init__(self, address: tuple[str, int], sim: Simulator) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.sim = sim
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, which can stall on a machine
        # without working reverse DNS; the name is only used in CGI environments.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])

    def track(self, conn: socket.socket, alive: bool) -> None:
        with self._conns_lock:
            (self._conns.add if alive else self._conns.discard)(conn)

    def close_connections(self) -> None:
        """Unblock handlers waiting on idle keep-alive connections so shutdown is prompt."""
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return  # clients hanging up is part of the job
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    server_version = "iipub-simulator"
    sys_version = ""

    def setup(self) -> None:
        # typeshed declares `timeout` a ClassVar; StreamRequestHandler.setup reads it per instance.
        self.timeout = self.server.sim.options.idle_timeout_seconds  # type: ignore[misc]
        super().setup()
        # Headers and body go out as separate writes; without this, Nagle + delayed ACK
        # add ~40 ms to every keep-alive exchange.
        if self.connection.family in (socket.AF_INET, socket.AF_INET6):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, False)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # requests are logged in _dispatch when asked to

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        path = urlsplit(self.path).path
        body = self._read_body()
        if body is None:
            return
        if path.startswith("/_sim/"):
            self._send(self._control(method, path, body))
            return
        latency = self.server.sim.options.latency_seconds
        if latency > 0 and self.server.sim.stopping.wait(latency):  # a remote provider's round trip
            self.close_connection = True
            return
        op, response_id = _route(method, path)
        if op is None:
            known = path == "/v1/responses" or _RESPONSE_PATH.fullmatch(path) or _MODEL_PATH.fullmatch(path)
            status = 405 if known else 404
            self._send(error_reply(status, f"Unknown request URL: {method} {path}."))
            return
        backend = self.server.sim.backend
        backend.record_request(op, self.headers.get("x-stainless-retry-count"))
        auth = self.headers.get("authorization", "")
        if op not in ("create", "model") and response_id:
            backend.record_call(op, response_id, auth[len("Bearer ") :].strip())
        # The scope of the request: responses are visible only where they were created.
        scope = (self.headers.get("openai-organization", "").strip(), self.headers.get("openai-project", "").strip(),
                 auth[len("Bearer ") :].strip())
        if not auth.startswith("Bearer ") or not auth[len("Bearer ") :].strip():
            reply = error_reply(401, "You didn't provide an API key.", code="invalid_api_key")
        elif op == "create":
            reply = backend.create(body, scope)
        elif op == "model":
            reply = backend.model(response_id, scope)
        elif op == "retrieve":
            reply = backend.retrieve(response_id, scope)
        elif op == "cancel":
            reply = backend.cancel(response_id, scope)
        else:
            reply = backend.delete(response_id, scope)
        if self.server.sim.options.log_requests:
            # Through the one structured logger (timestamped; one line per event from any thread).
            log.info("sim_request", method=method, path=path, status=reply.status, delivery=reply.delivery,
                     message=f"{method} {path} -> {reply.status}")
        self._deliver(reply)

    def _deliver(self, reply: Reply) -> None:
        if reply.delivery == "drop":
            # The work is done, but the client never hears about it: its view is a
            # connection closed mid-request, exactly the ambiguous case.
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        if reply.delivery == "slow" and self.server.sim.stopping.wait(self.server.sim.options.slow_seconds):
            self.close_connection = True
            return
        self._send(reply)

    def _control(self, method: str, path: str, body: bytes) -> Reply:
        sim = self.server.sim
        try:
            data = json.loads(body) if body else None
        except ValueError:
            return error_reply(400, "control body is not JSON")
        try:
            if path == "/_sim/faults" and method == "POST":
                rules: list[Any] = data if isinstance(data, list) else [data]
                parsed = [rule_from_dict(r, default_times=1) for r in rules]
                sim.add_faults(parsed)
                return Reply(200, {"added": len(parsed), "faults": sim.backend.faults.snapshot()})
            if path == "/_sim/faults" and method == "GET":
                return Reply(200, {"faults": sim.backend.faults.snapshot()})
            if path == "/_sim/faults" and method == "DELETE":
                sim.clear_faults()
                return Reply(200, {"cleared": True})
            if path == "/_sim/advance" and method == "POST":
                seconds = (data or {}).get("seconds") if isinstance(data, dict) else None
                if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
                    return error_reply(400, '"seconds" must be a non-negative number')
                return Reply(200, {"now": sim.advance(float(seconds))})
            if path == "/_sim/stats" and method == "GET":
                return Reply(200, sim.stats())
            if path == "/_sim/reset" and method == "POST":
                sim.reset()
                return Reply(200, {"reset": True})
            if path == "/_sim/health" and method == "GET":
                return Reply(200, {"ok": True, "now": sim.backend.clock.now()})
        except ConfigError as exc:
            return error_reply(400, str(exc))
        return error_reply(404, f"unknown control endpoint {method} {path}")

    def _read_body(self) -> bytes | None:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            self.close_connection = True
            self._send(error_reply(411, "Chunked request bodies are not supported."))
            return None
        try:
            length = int(self.headers.get("content-length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > self.server.sim.options.max_body_bytes:
            self.close_connection = True  # do not read what we refuse
            self._send(error_reply(413, "Request body too large or malformed length."))
            return None
        return self.rfile.read(length) if length else b""

    def _send(self, reply: Reply) -> None:
        payload = json.dumps(reply.body, ensure_ascii=False).encode("utf-8")
        try:
            self.send_response(reply.status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.send_header("x-request-id", "req_" + _hex())
            for name, value in reply.headers.items():
                self.send_header(name, value)
            if self.close_connection:
                self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            self.close_connection = True  # the client left; nothing to tell it


def _route(method: str, path: str) -> tuple[str | None, str]:
    if path == "/v1/responses":
        return ("create", "") if method == "POST" else (None, "")
    model = _MODEL_PATH.fullmatch(path)
    if model:
        return ("model", model.group(1)) if method == "GET" else (None, "")
    m = _RESPONSE_PATH.fullmatch(path)
    if not m:
        return None, ""
    response_id, cancel = m.group(1), m.group(2)
    if cancel:
        return ("cancel", response_id) if method == "POST" else (None, "")
    if method == "GET":
        return "retrieve", response_id
    if method == "DELETE":
        return "delete", response_id
    return None, ""


def _hex() -> str:
    return secrets.token_hex(12)
