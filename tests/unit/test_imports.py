"""An idle cron run pays only for what it uses: the provider SDK, the simulator's server and the
operator/report machinery are imported by the commands that need them, not by every start."""

from __future__ import annotations

import subprocess
import sys


def _loaded_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return set(out.split())


def test_the_cli_and_an_idle_tick_do_not_import_the_sdk_or_the_simulator_server() -> None:
    loaded = _loaded_after(
        "import iipub.cli, iipub.reconcile\n"
        "from iipub.config import ProviderSettings\n"
        "from iipub.provider import Provider\n"
        "Provider(ProviderSettings(), 'sk-test').close()  # constructed, never called\n"
    )
    heavy = {"openai", "iipub.simulator.server", "iipub.simulator.webhooks", "iipub.actions", "iipub.invariants",
             "iipub.status", "iipub.relay", "iipub.webhook"}
    assert not heavy & loaded, sorted(heavy & loaded)


def test_the_provider_builds_its_sdk_client_at_the_first_call() -> None:
    loaded = _loaded_after(
        "from iipub.config import ProviderSettings\n"
        "from iipub.provider import Provider\n"
        "p = Provider(ProviderSettings(base_url='http://127.0.0.1:9/v1', connect_timeout_seconds=0.2), 'sk-test')\n"
        "p.retrieve('resp_1')\n"
        "p.close()\n"
    )
    assert "openai" in loaded
