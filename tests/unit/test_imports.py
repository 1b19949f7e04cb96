"""An idle cron run pays only for what it uses: the provider SDK, the simulator's server and the
operator/report machinery are imported by the commands that need them, not by every start."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.support.cli import clean_env


def _loaded_after(code: str, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, timeout=60, env=env, cwd=cwd).stdout
    return set(out.strip().splitlines()[-1].split())  # the last line: what the command printed comes first


def test_the_cli_and_an_idle_tick_do_not_import_the_sdk_or_the_simulator_server() -> None:
    loaded = _loaded_after(
        "import iipub.cli, iipub.machine.sweep\n"
        "from iipub.settings.config import ProviderSettings\n"
        "from iipub.provider.openai.adapter import OpenAIAdapter\n"
        "OpenAIAdapter(ProviderSettings(), 'sk-test').close()  # constructed, never called\n"
    )
    heavy = {"openai", "iipub.provider.openai.simulator.server", "iipub.provider.openai.simulator.webhooks",
             "iipub.operate.executor",
             "iipub.observe.invariants", "iipub.observe.status_report", "iipub.observe.queries", "iipub.publish.relay",
             "iipub.webhooks.receiver"}
    assert not heavy & loaded, sorted(heavy & loaded)


@pytest.mark.slow
def test_reads_load_httpx_alone_and_the_sdk_loads_at_the_first_create() -> None:
    """A tick that only polls (a GET per job) never pays for the SDK's import; a create does."""
    start = ("import datetime as dt\n"
             "from iipub.settings.config import Product, ProviderSettings\n"
             "from iipub.provider.outcomes import CreateRequest\n"
             "from iipub.provider.openai.adapter import OpenAIAdapter\n"
             "s = ProviderSettings(base_url='http://127.0.0.1:9/v1', connect_timeout_seconds=0.2)\n"
             "p = OpenAIAdapter(s, 'sk-test')\n"
             "assert p.retrieve('resp_1').unreachable\n")
    read = _loaded_after(start + "p.cancel('resp_1'); p.delete('resp_1', has_custody=True)\np.close()\n")
    assert "httpx" in read and "openai" not in read and "pydantic" not in read
    create = _loaded_after(start + "print(p.create(CreateRequest('j', Product(name='daily-brief', prompt='x'), "
                                   "dt.date(2026, 1, 1), 1, 'f' * 64)))\np.close()\n")
    assert "openai" in create


def test_an_idle_reconcile_run_imports_no_sdk_no_http_client_and_no_validation_library(tmp_path: Path) -> None:
    """`iipub reconcile` with nothing due (1,440 runs a day) loads neither the openai SDK, httpx
    nor pydantic: the configuration checks itself (`iipub.core.strict`), the provider and the edition
    schema load at their first use, the per-state steps with the first leased job."""
    if dt.datetime.now(dt.UTC).time() >= dt.time(23, 58):
        pytest.skip("the product's window opens now: the run would have work")
    (tmp_path / "iipub.toml").write_text('[[products]]\nname = "daily-brief"\nopens_at = "23:59"\nprompt = "x"\n')
    env = {**clean_env(), "IIPUB_DATABASE_URL": f"sqlite:///{tmp_path / 'iipub.sqlite3'}",
           "IIPUB_CONFIG": str(tmp_path / "iipub.toml"), "OPENAI_API_KEY": "sk-idle",
           "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    code = ("from iipub.cli import main\n"
            "for args in (['db', 'migrate'], ['reconcile']):\n"
            "    try:\n"
            "        main(args)\n"
            "    except SystemExit as exc:\n"
            "        assert not exc.code, exc.code\n")
    loaded = _loaded_after(code, env=env, cwd=tmp_path)
    assert "iipub.machine.sweep" in loaded  # it did run the tick
    heavy = {"openai", "httpx", "pydantic", "iipub.settings.edition_schema", "iipub.observe.status_report",
             "iipub.observe.queries", "iipub.provider.openai.simulator.server", "iipub.machine.steps",
             "iipub.machine.decisions", "iipub.edition.validate", "iipub.store.outbox", "iipub.machine.settle"}
    assert not heavy & loaded, sorted(heavy & loaded)
