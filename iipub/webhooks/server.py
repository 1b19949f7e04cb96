"""`iipub webhook serve`: the receiver's WSGI application on waitress, a pure-Python production
server, with the limits an endpoint on the open internet needs, all from `[webhooks]`:

- `threads` settle deliveries at once (a fixed pool: no thread per connection);
- at most `connection_limit` connections are open; more wait in a listen backlog of `backlog`
  (the kernel queues them: a burst is answered late, not reset);
- a whole-request deadline: a request's line, headers and body must all have arrived within
  `read_seconds` of its first byte (of the connection, for its first request), or it is answered
  408 and the connection closed, however slowly the bytes trickle in. waitress itself only closes
  connections idle for `channel_timeout`, so the deadline is enforced here, in its maintenance
  pass (every second, in the event loop: no thread is spent on a slow client);
- keep-alive: an idle connection is closed after `keepalive_seconds`, any connection after
  `keepalive_requests` requests;
- a malformed request (request line, header, Content-Length) is waitress's 400; every refusal
  at this level is logged as `webhook_rejected` with the client's address and the reason;
- `Server: iipub`, no version.

waitress buffers a whole body before the application sees it, so a delivery's thread is taken
only once its request is complete; the request budget counts from then (`webhook.RECEIVED_AT`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import structlog
from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask, WSGITask
from waitress.utilities import Error

from iipub.settings.config import WebhookSettings
from iipub.webhooks.receiver import RECEIVED_AT

log = structlog.get_logger("iipub.webhook")

App = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
IDENT = "iipub"  # the Server header: no version
_MAINTENANCE_SECONDS = 1  # how often deadlines are checked (and so their precision)


class RequestTimeout(Error):
    code = 408
    reason = "Request Timeout"


class _Parser(HTTPRequestParser):
    """One request being received: when its first byte came (wall clock, as waitress keeps
    time), when its last did (monotonic, for the request budget), and whether it is the
    connection's last one."""

    def __init__(self, adj: Adjustments, started: float, last: bool) -> None:
        super().__init__(adj)
        self.started = started
        self.last = last
        self.received_at: float | None = None

    def received(self, data: bytes) -> int:
        n: int = super().received(data)
        if self.completed and self.received_at is None:
            self.received_at = time.monotonic()
            if self.last:  # keepalive_requests reached: this response closes the connection
                self.headers["CONNECTION"] = "close"
        return n


class _Task(WSGITask):
    def get_environment(self) -> dict[str, Any]:
        environ: dict[str, Any] = super().get_environment()
        environ[RECEIVED_AT] = getattr(self.request, "received_at", None) or time.monotonic()
        return environ

    def build_response_header(self) -> bytes:
        if self.status[:1] == "4":
            self.set_close_on_finish()  # what follows a refused request on the same connection is not trusted
        header: bytes = super().build_response_header()
        return header


class _ErrorTask(ErrorTask):
    """waitress's own refusals (malformed request line or header, bad Content-Length, too large,
    not received in time): answered by waitress, logged here."""

    def execute(self) -> None:
        error = self.request.error
        wid = self.request.headers.get("WEBHOOK_ID")
        log.warning("webhook_rejected", status=error.code, reason=str(error.body)[:300],
                    webhook_id=wid[:255] if isinstance(wid, str) else None, client=_address(self.channel.addr))
        super().execute()


class _Channel(HTTPChannel):
    task_class = _Task
    error_task_class = _ErrorTask
    requests_started = 0

    def parser_class(self, adj: Adjustments) -> _Parser:
        # waitress makes a parser when a request's first byte arrives; the connection's first
        # request is timed from the connection itself (a client that connects and says nothing).
        self.requests_started += 1
        first = self.requests_started == 1
        limit = self.server.settings.keepalive_requests
        return _Parser(adj, self.creation_time if first else time.time(), self.requests_started >= limit)


class Server(TcpWSGIServer):
    """waitress's TCP server with the whole-request deadline (see the module docstring)."""

    channel_class = _Channel

    def __init__(self, app: App, settings: WebhookSettings, host: str, port: int) -> None:
        self.settings = settings
        adj = Adjustments(
            host=host, port=port, threads=settings.threads, connection_limit=settings.connection_limit,
            backlog=settings.backlog, channel_timeout=int(settings.keepalive_seconds),
            cleanup_interval=_MAINTENANCE_SECONDS, asyncore_loop_timeout=_MAINTENANCE_SECONDS,
            max_request_body_size=settings.max_body_bytes + 1,  # waitress refuses a body of exactly its limit
            max_request_header_size=64 * 1024, ident=IDENT, expose_tracebacks=False,
            # The application reads X-Forwarded-For itself, from [webhooks] trusted_proxies only.
            clear_untrusted_proxy_headers=False, log_socket_errors=False, asyncore_use_poll=True,
            ipv6=":" in host, ipv4=":" not in host,
        )
        super().__init__(app, adj=adj)

    @property
    def port(self) -> int:
        return int(self.effective_port)

    def maintenance(self, now: float) -> None:
        super().maintenance(now)  # idle connections (keepalive_seconds)
        cutoff = now - self.settings.read_seconds
        for channel in list(self.active_channels.values()):
            if channel.requests or channel.will_close or channel.close_when_flushed:
                continue  # being answered, or closing already
            request = channel.request
            started = request.started if request is not None else (
                channel.creation_time if channel.requests_started == 0 else None)
            if started is not None and started < cutoff:
                self._time_out(channel, request)

    def _time_out(self, channel: _Channel, request: _Parser | None) -> None:
        """408 and close, from the event loop (no task runs for this channel: nothing else writes
        to it)."""
        wid = request.headers.get("WEBHOOK_ID") if request is not None else None
        reason = f"request not received within {self.settings.read_seconds:g} s"
        log.warning("webhook_rejected", status=408, reason=reason,
                    webhook_id=wid[:255] if isinstance(wid, str) else None, client=_address(channel.addr))
        body = b"request not received in time\n"
        response = b"\r\n".join([
            b"HTTP/1.1 408 Request Timeout", b"Connection: close", b"Content-Type: text/plain",
            b"Server: " + IDENT.encode(), b"Content-Length: " + str(len(body)).encode(), b"", body])
        with channel.outbuf_lock:
            channel.outbufs[-1].append(response)
            channel.total_outbufs_len += len(response)
        channel.request = None
        channel.close_when_flushed = True

    def set_app(self, app: App) -> None:
        self.application = app

    def busy(self) -> bool:
        """Whether any request is being answered."""
        return any(c.requests for c in list(self.active_channels.values()))

    def serve(self, stop: threading.Event) -> None:
        """Until `stop` is set (then `wake()`): stop accepting, let the requests in hand be
        answered (within one request budget), close every connection."""
        while self._map and not stop.is_set():
            wasyncore.poll2(_MAINTENANCE_SECONDS, self._map)
        if self.socket is not None:
            wasyncore.dispatcher.close(self)  # no new connection; the kernel's backlog is refused
        drain_until = time.monotonic() + self.settings.request_seconds + 1
        while self._map and self.busy() and time.monotonic() < drain_until:
            wasyncore.poll2(0.1, self._map)
        wasyncore.close_all(self._map)
        self.task_dispatcher.shutdown(timeout=5)

    def wake(self) -> None:
        """Interrupt the event loop's wait (after setting `serve`'s stop event)."""
        with contextlib.suppress(OSError):
            self.trigger.pull_trigger()


@contextlib.contextmanager
def running(app: App, settings: WebhookSettings, host: str = "127.0.0.1", port: int = 0) -> Iterator[Server]:
    """`app` served on (`host`, `port`) from a background thread for the duration of the block
    (tests, benchmarks)."""
    server = Server(app, settings, host, port)
    stop = threading.Event()
    thread = threading.Thread(target=server.serve, args=(stop,), name="webhook-server", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        stop.set()
        server.wake()
        thread.join(timeout=settings.request_seconds + 10)


def _address(addr: Any) -> str:
    return str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)
