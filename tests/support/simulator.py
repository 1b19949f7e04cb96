"""The provider simulator over real HTTP on loopback: the lifecycles the tests use and a
simulator started with them (the `sim` fixture of tests/conftest.py uses `simulator`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from iipub.core.errors import ConfigError
from iipub.provider.openai.simulator import Simulator, SimulatorOptions
from iipub.provider.openai.simulator import server as simulator_server

# The lifecycles (SimulatorOptions fields) the tests start simulators with.
# FAST: a response finishes within a tick or two (the `sim` fixture's default).
FAST: dict[str, Any] = {"queued_seconds": 0.2, "in_progress_seconds": 0.3, "slow_seconds": 8}
# The in-memory provider's lifecycle in the `settings` fixture's default (seconds waiting, seconds
# running): FAST's, so a test reads the same states on either provider.
FAKE_LIFECYCLE = (FAST["queued_seconds"], FAST["in_progress_seconds"])
# MINUTE: responses stay in progress for a simulated minute: a test decides when one finishes by
# advancing the simulator's clock.
MINUTE: dict[str, Any] = {"queued_seconds": 0.5, "in_progress_seconds": 60, "slow_seconds": 4}


@contextmanager
def simulator(**options: Any) -> Iterator[Simulator]:
    """The simulator over real HTTP on loopback for the duration of the block: the FAST
    lifecycle, with `options` (any SimulatorOptions field: lifecycle, faults, webhooks, seed)
    in its place."""
    with Simulator(SimulatorOptions(**{**FAST, **options})) as sim:
        yield sim


def simulator_options_seen(monkeypatch: pytest.MonkeyPatch) -> list[SimulatorOptions]:
    """The options `iipub simulator` builds, collected instead of starting a simulator: each
    attempt to start one fails with ConfigError("stop here"), so the command exits 2. (What the
    command builds is the subject; a started one would serve until it is signalled.)"""
    seen: list[SimulatorOptions] = []

    def refuse(options: SimulatorOptions, **kwargs: Any) -> Simulator:
        seen.append(options)
        raise ConfigError("stop here")

    monkeypatch.setattr(simulator_server, "Simulator", refuse)
    return seen
