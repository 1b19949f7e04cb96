"""When a run stops taking work: its own end (the sweep's tick budget, a webhook delivery's
request budget) or SIGTERM from the cron wrapper (`STOP`). Clock arithmetic only: no I/O."""

from __future__ import annotations

import threading
import time

# Set by SIGTERM (cron's `timeout`): stop taking work, finish what is in hand, release leases.
STOP = threading.Event()


class Deadline:
    """One run's end, on `time.monotonic()`; `started` is when the run began (the create window
    counts from it)."""

    def __init__(self, at: float, started: float | None = None) -> None:
        self.at = at
        self.started = time.monotonic() if started is None else started

    def passed(self) -> bool:
        return STOP.is_set() or time.monotonic() >= self.at

    def too_late_for(self, window: float | None) -> bool:
        """More than `window` seconds since the run started (None: no window, never too late).
        A create past its window (`Settings.create_window`) could not be answered and recorded
        before the cron wrapper stops the run: it waits for the next run."""
        return window is not None and time.monotonic() > self.started + window
