"""One TLS client context per process for every HTTP client iipub builds.

Building a context reads the whole CA bundle (30-70 ms of CPU here). A reconcile tick builds
one provider, a webhook receiver one per delivery, the relay one webhook client per run: they
share the process's context instead. A context is keyed by the certificate locations the
environment names, so a changed SSL_CERT_FILE or SSL_CERT_DIR is honoured.
"""

from __future__ import annotations

import os
import ssl
import threading

_lock = threading.Lock()
_contexts: dict[tuple[str | None, str | None], ssl.SSLContext] = {}


def client_context() -> ssl.SSLContext:
    """The verifying client context httpx would build by default (`verify=True`, the
    environment trusted), built once per process per certificate location."""
    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    with _lock:
        ctx = _contexts.get(key)
        if ctx is None:
            import httpx

            ctx = _contexts[key] = httpx.create_ssl_context()
        return ctx
