"""A webhook receiver on loopback for relay tests: records every request, can be told to
answer 200, 503 with retry-after, 400, or to hang (so a relay can be killed mid-delivery)."""

from __future__ import annotations

import base64
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import openai

SECRET = "whsec_" + base64.b64encode(b"iipub-test-webhook-secret-32byte").decode()


@dataclass
class Receiver:
    url: str
    mode: str = "ok"  # ok | 503 | 400 | hang
    hang_seconds: float = 30.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

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
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        rec: Receiver = self.server.receiver  # type: ignore[attr-defined]
        with rec.lock:
            rec.requests.append({"headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
        if rec.mode == "hang":
            time.sleep(rec.hang_seconds)
        status, extra = {"ok": (200, {}), "503": (503, {"retry-after": "120"}), "400": (400, {}),
                         "hang": (200, {})}[rec.mode]
        reply = b'{"ok":true}' if status == 200 else b'{"error":"nope"}'
        try:
            self.send_response(status)
            for k, v in extra.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)
        except OSError:
            pass  # the client is gone (killed relay)


@contextmanager
def receiver() -> Iterator[Receiver]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    rec = Receiver(url=f"http://127.0.0.1:{server.server_address[1]}/hooks/iipub")
    server.receiver = rec  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
