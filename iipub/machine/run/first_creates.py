"""The first-create rule: until one create of a request (a product's request fingerprint,
`holds.request_fingerprint`) was accepted in this run, this process sends that request's creates
one at a time, so a parameter the provider refuses costs one refused create, not one per thread.
The steps key a model the same way (every product on it), so no access to a model costs one too.
Locks only: no I/O."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class FirstCreates:
    def __init__(self) -> None:
        self._proven: set[str] = set()  # requests accepted in this run
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def one_at_a_time(self, request: str) -> Iterator[None]:
        """Around a create of `request`: one at a time until one of them was accepted
        (`proven`), then no wait at all."""
        with self._lock:
            lock = None if request in self._proven else self._locks.setdefault(request, threading.Lock())
        if lock is None:
            yield
            return
        with lock:
            yield

    def proven(self, request: str) -> None:
        """A create of `request` was accepted: the provider takes its parameters."""
        with self._lock:
            self._proven.add(request)
