"""HTTP servers on loopback for tests: a webhook receiver that records every request (and
answers as its `mode` says), and the pieces to build other recording servers."""

from __future__ import annotations

import base64
import socketserver
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import openai

R = TypeVar("R")


def wait_for(predicate: Any, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


# -- a webhook receiver --------------------------------------------------------------------------------------

SECRET = "whsec_" + base64.b64encode(b"iipub-test-webhook-secret-32byte").decode()


@dataclass
class Receiver:
    """Records every request; answers 200, 503 with retry-after, 400, or hangs (so a relay
    can be killed mid-delivery), as `mode` says."""

    url: str
    mode: str = "ok"  # ok | 503 | 400 | hang
    hang_seconds: float = 30.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    reading: int = 0  # requests whose body is still being read (not yet recorded or dropped)
    truncated: int = 0  # requests whose client went away before the whole body arrived (not recorded)
    answering: int = 0  # recorded requests not yet answered (hanging)
    most_answering: int = 0  # the most that were at once: how many deliveries ran concurrently

    def quiet(self, timeout: float = 10.0) -> None:
        """Wait until no request is half-read: after a client is killed, what was recorded is final."""
        wait_for(lambda: self.reading == 0, timeout)

    def keys(self) -> Counter[str]:
        with self.lock:
            return Counter(r["headers"]["idempotency-key"] for r in self.requests)

    def verified(self) -> int:
        """How many recorded requests carry a valid Standard Webhooks signature (checked
        with the official SDK's verifier; tolerance ±5 min, so checked soon after)."""
        client = openai.OpenAI(api_key="unused", webhook_secret=SECRET)
        ok = 0
        try:
            for r in list(self.requests):
                client.webhooks.verify_signature(r["body"], r["headers"], secret=SECRET)
                ok += 1
        finally:
            client.close()
        return ok


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_POST(self) -> None:
        rec: Receiver = self.server.recorder  # type: ignore[attr-defined]
        with rec.lock:
            rec.reading += 1
        try:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            with rec.lock:
                if len(body) < length:  # the client died mid-request: nothing was delivered
                    rec.truncated += 1
                    return
                rec.requests.append({"headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
        finally:
            with rec.lock:
                rec.reading -= 1
        if rec.mode == "hang":
            with rec.lock:
                rec.answering += 1
                rec.most_answering = max(rec.most_answering, rec.answering)
            try:
                time.sleep(rec.hang_seconds)
            finally:
                with rec.lock:
                    rec.answering -= 1
        status, extra = {"ok": (200, {}), "503": (503, {"retry-after": "120"}), "400": (400, {}),
                         "hang": (200, {})}[rec.mode]
        reply = b'{"ok":true}' if status == 200 else b'{"error":"nope"}'
        with suppress(OSError):  # the client is gone (killed relay)
            send_reply(self, status, extra, reply)


def send_reply(handler: BaseHTTPRequestHandler, status: int, headers: Mapping[str, str], body: bytes) -> None:
    """An answer with `headers`, a Content-Length and `body`."""
    handler.send_response(status)
    for k, v in headers.items():
        handler.send_header(k, v)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[None]:
    """`server` answering from a background thread for the duration of the block."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def recording_server(handler: type[BaseHTTPRequestHandler], recorder: Callable[[str], R],
                     path: str = "") -> Iterator[R]:
    """An HTTP server on loopback answering with `handler` (a thread per request) for the
    duration of the block. Yields `recorder(url)` (the server's URL ending in `path`), which the
    handler finds as `self.server.recorder`."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    rec = recorder(f"http://127.0.0.1:{server.server_address[1]}{path}")
    server.recorder = rec  # type: ignore[attr-defined]
    with serving(server):
        yield rec


@contextmanager
def receiver() -> Iterator[Receiver]:
    """A webhook receiver on loopback for the duration of the block."""
    with recording_server(_Handler, Receiver, "/hooks/iipub") as rec:
        yield rec
