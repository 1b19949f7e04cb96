"""PyMySQL's connection as iipub opens it, shared by SQLAlchemy's engines (`db`) and the wake-up
check (`idle_check`, which runs before SQLAlchemy loads)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any


@functools.cache
def connection_class() -> type:
    """PyMySQL's connection with its default TLS context ("preferred" mode: TLS when the server
    offers it) built once per process, and only when a server offers TLS: PyMySQL builds one
    for every connection up front, which reads the CA bundle (30-40 ms of CPU) even for a
    server without TLS. A URL with its own TLS settings gets its own context, as before."""
    import pymysql

    lock = threading.Lock()
    shared: list[Any] = []

    def preferred_context(base: Any) -> Any:
        with lock:
            if not shared:
                shared.append(base._create_ssl_ctx({}))
            return shared[0]

    class Connection(pymysql.connections.Connection):  # type: ignore[misc]
        def _create_ssl_ctx(self, sslp: Any) -> Any:
            if sslp != {}:
                return super()._create_ssl_ctx(sslp)
            if shared:
                return shared[0]
            return _OnFirstUse(lambda: preferred_context(super(Connection, self)))

    return Connection


class _OnFirstUse:
    """A TLS context built at its first use (the handshake's `wrap_socket`), not before."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self._build = build

    def __getattr__(self, name: str) -> Any:
        return getattr(self._build(), name)
