"""Settings for in-process ticks (`make_settings`) and config files for the command line
(`sim_env`) against the simulator: short timeouts, immediate polls, and this test's own static
root and spend ledger."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path
from typing import Any

from iipub.provider.factory import settings_from_dict
from iipub.provider.openai.simulator import Simulator
from iipub.settings.config import Settings, WebhookSinkSettings
from tests.support.loopback import SECRET


def ledger_file_of(tmp_path: Path) -> Path:
    """A test's spend ledger: where a command run without a config file finds it too (the
    default under `$XDG_STATE_HOME`, which tests/conftest.py points into the test's directory)."""
    return tmp_path / "xdg-state" / "iipub" / "spend-ledger.jsonl"


def make_settings(db_url: str, sim_url: str | None, root: Path, **sections: dict[str, Any]) -> Settings:
    """Settings for in-process ticks: short timeouts, immediate polls, a static root in tmp."""
    data: dict[str, Any] = {
        "reconcile": {"poll_interval_seconds": 0, "lease_seconds": 15, "tick_seconds": 30, "concurrency": 8,
                      "backoff_base_seconds": 1, "backoff_cap_seconds": 60},
        # Suspected losses are read again on the next tick, not half a minute later.
        "provider": {"timeout_seconds": 4, "connect_timeout_seconds": 1, "loss_confirm_seconds": 0},
        "relay": {"backoff_base_seconds": 1, "backoff_cap_seconds": 60},
        "sinks": {"static": {"root": str(root)}},
        "ledger": {"path": str(ledger_file_of(root.parent))},  # this test's own, never the account's
        # In-process ticks (`reconcile.run`, `relay.run`) record no heartbeat: only the cron
        # commands do. Tests of heartbeats turn the check on (tests/integration/observe/test_heartbeat.py).
        "monitoring": {"heartbeat_after_seconds": 0},
    }
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    base = settings_from_dict(data)
    return replace(base, database_url=db_url, api_key="sk-test",
                   provider=replace(base.provider, base_url=sim_url))


def without_auto_schedule(settings: Settings) -> Settings:
    """`settings` whose ticks make no slots ([reconcile] auto_schedule = false): the slots a test
    made are the only ones."""
    return replace(settings, reconcile=replace(settings.reconcile, auto_schedule=False))


def open_at_midnight(settings: Settings) -> Settings:
    """Every product opening at midnight, so today's slots are due whenever the test runs."""
    products = {name: replace(p, opens_at=dt.time(0, 0)) for name, p in settings.products.items()}
    return replace(settings, products=products)


# A config file's one product whose slot opens at midnight UTC: today's slot is due whatever the
# hour a test runs (the default products open at 05:00 and 06:00).
MIDNIGHT_PRODUCT_TOML = ('[[products]]\nname = "daily-brief"\nprompt = "Write the brief."\nopens_at = "00:00"\n'
                         "items = 3\n")


# daily-brief in English and Spanish, open from midnight UTC (a slot that forks into two tracks).
TWO_LANGUAGE_PRODUCT_TOML = ('[[products]]\nname = "daily-brief"\nlanguages = ["en", "es"]\nopens_at = "00:00"\n'
                             'prompt = "Write the brief."\nitems = 3\n')


def with_cms(settings: Settings, url: str) -> Settings:
    """`settings` with a CMS webhook sink at `url` (two-second requests)."""
    return replace(settings, webhook_sink=WebhookSinkSettings(url=url, timeout_seconds=2))


def cms_env(cli_env: dict[str, str], sim: Simulator, tmp_path: Path, url: str,
            products: str = TWO_LANGUAGE_PRODUCT_TOML) -> dict[str, str]:
    """`sim_env` of a command line whose configuration has `products` and a CMS webhook sink at
    `url` (signed with the test receiver's secret)."""
    env = sim_env(cli_env, sim, tmp_path, products + f'[sinks.webhook]\nurl = "{url}"\ntimeout_seconds = 2\n')
    return {**env, "IIPUB_WEBHOOK_SECRET": SECRET}


def sim_env(cli_env: dict[str, str], sim: Simulator, tmp_path: Path, config: str = "", *,
            auto_schedule: bool = True) -> dict[str, str]:
    """Environment for `iipub reconcile` / `relay` (in process or as a child) against `sim`,
    with a config file in `tmp_path` (`config` appended to it). `auto_schedule=False`: the
    ticks make no slots ([reconcile] auto_schedule), so the test's slots are the only ones."""
    cfg = tmp_path / "iipub.toml"
    cfg.write_text(
        "[reconcile]\npoll_interval_seconds = 0\nlease_seconds = 10\ntick_seconds = 20\n"
        + ("" if auto_schedule else "auto_schedule = false\n") +
        "[provider]\ntimeout_seconds = 2\nconnect_timeout_seconds = 1\nloss_confirm_seconds = 0\n"
        f"[sinks.static]\nroot = \"{tmp_path / 'public'}\"\n"
        f"[ledger]\npath = \"{ledger_file_of(tmp_path)}\"\n" + config
    )
    return {**cli_env, "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": sim.url, "IIPUB_CONFIG": str(cfg)}
