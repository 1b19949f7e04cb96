"""Admission control across processes: the accepted-but-unfinished provider jobs in the database
(every process's, as `iipub jobs list` counts them) plus this run's admissions not yet committed
stay under `[reconcile] max_in_flight`."""

from __future__ import annotations

import threading

from iipub.machine.run.counters import Counters
from iipub.store.job_store import Store


class Admission:
    def __init__(self, store: Store, max_in_flight: int, counters: Counters) -> None:
        self._store = store
        self._max_in_flight = max_in_flight
        self._counters = counters
        self._admitting = 0  # creates admitted by this run whose CREATE_IN_FLIGHT is not committed yet
        self._lock = threading.Lock()

    def admit(self) -> bool:
        """Room for one more create? Counted under the lock, so this process never overshoots;
        two processes can only race within the milliseconds between a count and the other's
        commit. Every True must be followed by `admitted()`."""
        with self._lock:
            if self._store.count_in_flight() + self._admitting >= self._max_in_flight:
                self._counters.count("held_back")
                return False
            self._admitting += 1
            self._counters.count("creates")
            return True

    def admitted(self) -> None:
        """The admitted create's CREATE_IN_FLIGHT write is committed (or failed): the database
        counts it from now on."""
        with self._lock:
            self._admitting -= 1
