"""`SimulatorOptions.latency_seconds`: a real delay before every /v1 answer (benchmarks),
none on the control endpoints."""

from __future__ import annotations

import time

import httpx
import pytest

from iipub.core.errors import ConfigError
from iipub.provider.openai.simulator import Simulator, SimulatorOptions


def test_latency_delays_api_requests_but_not_control_endpoints() -> None:
    with Simulator(SimulatorOptions(latency_seconds=0.3)) as sim, httpx.Client(timeout=5) as client:
        headers = {"authorization": "Bearer sk-test"}
        started = time.monotonic()
        created = client.post(f"{sim.url}/responses", headers=headers, json={"model": "m", "background": True})
        assert created.status_code == 200
        missing = client.get(f"{sim.url}/responses/resp_unknown", headers=headers)
        assert missing.status_code == 404
        assert time.monotonic() - started >= 0.6
        started = time.monotonic()
        assert client.get(f"{sim.origin}/_sim/health").status_code == 200
        assert time.monotonic() - started < 0.25


def test_negative_latency_is_refused() -> None:
    with pytest.raises(ConfigError):
        Simulator(SimulatorOptions(latency_seconds=-1))
