"""Creates held back while another worker's (or process's) health probe of the provider is out
(a half-open breaker lets one create through, `breaker.admit`): the sweep goes back to them once
the probe's outcome is recorded on the gate row."""

from __future__ import annotations

import threading
import time

from iipub.machine.run.deadline import STOP, Deadline
from iipub.money.gate import CreateGate
from iipub.settings.config import ProviderSettings


class ProbeWaiters:
    def __init__(self, create_gate: CreateGate, deadline: Deadline, provider: ProviderSettings) -> None:
        self._gate = create_gate
        self._deadline = deadline
        self._provider = provider
        self._waiting: set[str] = set()
        self._lock = threading.Lock()

    def add(self, job_id: str) -> None:
        with self._lock:
            self._waiting.add(job_id)

    def take(self) -> set[str]:
        """The jobs that waited (and no more waiting)."""
        with self._lock:
            waiting, self._waiting = self._waiting, set()
            return waiting

    def wait_for_outcome(self) -> None:
        """Until the probe create has an outcome, bounded by one create's timeout and the run's
        deadline."""
        p = self._provider
        until = min(self._deadline.at, time.monotonic() + p.connect_timeout_seconds + p.timeout_seconds + 1)
        while time.monotonic() < until and not STOP.is_set():
            g, now = self._gate.state()
            if g.probe_owner is None or g.probe_expiry is None or g.probe_expiry <= now or g.is_open:
                return
            STOP.wait(0.2)
