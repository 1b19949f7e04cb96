"""A run's deadline: its moment, SIGTERM, and the create window counted from the run's start."""

from __future__ import annotations

import time

from iipub.machine.run.deadline import STOP, Deadline

# -- the deadline ------------------------------------------------------------------------------


def test_a_deadline_passes_at_its_moment() -> None:
    ends = Deadline(time.monotonic() + 0.05)
    assert not ends.passed()
    time.sleep(0.06)
    assert ends.passed()


def test_sigterm_passes_every_deadline_at_once() -> None:
    ends = Deadline(time.monotonic() + 3600)
    STOP.set()
    try:
        assert ends.passed()
    finally:
        STOP.clear()
    assert not ends.passed()


def test_the_create_window_counts_from_the_runs_start() -> None:
    now = time.monotonic()
    assert Deadline(now + 50, started=now - 20).too_late_for(18)  # 20 s in, the window was 18 s
    assert not Deadline(now + 50, started=now - 10).too_late_for(18)
    assert not Deadline(now + 50, started=now - 10_000).too_late_for(None)  # no wrapper: no window
