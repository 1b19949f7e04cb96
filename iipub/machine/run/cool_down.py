"""One kind of provider call's cool-down as this process keeps it: after a 429, no call of that
kind before a moment on `time.monotonic()`. Clock arithmetic only; sharing it with the other
processes through the gate row is `shared_cool_down`'s."""

from __future__ import annotations

import threading
import time


class CoolDown:
    """`lasts_until`: once started, it holds at least until then (a create's 429 stops the run's
    creates to the run's end: no stampede). `cap`: it never holds longer than this many seconds
    from now (a read's hint is honoured up to 60 s: a finished response is kept for only about
    ten minutes)."""

    def __init__(self, *, lasts_until: float = 0.0, cap: float | None = None) -> None:
        self._lasts_until = lasts_until
        self._cap = cap
        self._until = 0.0
        self._lock = threading.Lock()

    def cooling(self) -> bool:
        return time.monotonic() < self._until

    def hold(self, seconds: float) -> None:
        """No call of this kind for `seconds` from now (bounded as the class says); a cool-down
        already running longer stays."""
        now = time.monotonic()
        if self._cap is not None:
            until = now + min(max(0.0, seconds), self._cap)
        else:
            until = max(self._lasts_until, now + seconds)
        with self._lock:
            self._until = max(self._until, until)
