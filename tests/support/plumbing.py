"""Run-wide speed-ups the session fixtures of tests/conftest.py turn on: one TLS context for
every HTTP client, and loopback servers that stop without waiting out their poll interval.
Neither changes what a test observes."""

from __future__ import annotations

import os
import socket
import socketserver
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# -- one TLS context for every HTTP client ----------------------------------------------------------


@contextmanager
def shared_ssl_contexts() -> Iterator[None]:
    """Every httpx client loads the CA bundle into a new SSL context (~30-70 ms here), and
    the tests create hundreds: one per Provider, that is per reconcile tick, plus the SDK
    clients and webhook sinks. All test traffic is plain HTTP on loopback, so let clients
    with the same verification settings share one context. Nothing else changes; without
    httpx's hook (another httpx version) this does nothing."""
    try:
        import httpx._transports.default as transport
    except ImportError:  # pragma: no cover
        yield
        return
    original = getattr(transport, "create_ssl_context", None)
    if original is None:  # pragma: no cover
        yield
        return
    cache: dict[tuple[Any, ...], Any] = {}
    lock = threading.Lock()

    def create_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        if cert is not None or not isinstance(verify, bool):
            return original(verify=verify, cert=cert, trust_env=trust_env)
        key = (verify, trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        with lock:
            if key not in cache:
                cache[key] = original(verify=verify, cert=cert, trust_env=trust_env)
            return cache[key]

    setattr(transport, "create_ssl_context", create_ssl_context)  # noqa: B010 - not re-exported by httpx
    try:
        yield
    finally:
        setattr(transport, "create_ssl_context", original)  # noqa: B010


# -- prompt shutdown of loopback servers -----------------------------------------------------------


def stop_promptly(stop: Callable[[], None], address: tuple[str, int]) -> None:
    """Call `stop` (which shuts a socketserver down) while knocking at `address`.

    `serve_forever` notices a shutdown request only when its select() wakes up: after its poll
    interval (50 ms for the simulator), or at once when a connection arrives. Knocking every
    few milliseconds while `stop` runs saves that wait at the end of every test using a server.
    A knock is a connection closed without a request: no handler records anything for it."""
    done = threading.Event()

    def knock() -> None:
        while not done.is_set():
            try:
                socket.create_connection(address, timeout=0.5).close()
            except OSError:
                return  # closed already: nothing left to wake
            done.wait(0.002)

    knocker = threading.Thread(target=knock, name="stop-promptly", daemon=True)
    knocker.start()
    try:
        stop()
    finally:
        done.set()
        knocker.join(timeout=5)


@contextmanager
def prompt_server_shutdown() -> Iterator[None]:
    """Within the block, every socketserver's `shutdown()` (the simulator's, the webhook
    receivers', the tests' own fake servers) returns as soon as its loop has stopped instead of
    after up to one poll interval (see `stop_promptly`)."""
    original = socketserver.BaseServer.shutdown

    def shutdown(self: socketserver.BaseServer) -> None:
        address = self.server_address
        if isinstance(address, tuple) and len(address) >= 2:
            stop_promptly(lambda: original(self), (str(address[0]), int(address[1])))
        else:  # pragma: no cover - not a TCP server
            original(self)

    socketserver.BaseServer.shutdown = shutdown  # type: ignore[method-assign]
    try:
        yield
    finally:
        socketserver.BaseServer.shutdown = original  # type: ignore[method-assign]
