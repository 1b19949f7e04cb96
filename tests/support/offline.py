"""Settings for tests whose provider is the in-memory one (`iipub.provider.fake.FakeProvider`):
`tests.support.settings.make_settings` with a provider address nothing listens on, so a tick that built
the HTTP adapter by mistake fails at once (connection refused) instead of finding a simulator."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path
from typing import Any

from iipub.settings.config import Settings
from tests.support.settings import make_settings

OFFLINE_URL = "http://127.0.0.1:9/v1"  # the discard port: nothing answers


def offline_settings(db_url: str, root: Path, **sections: dict[str, Any]) -> Settings:
    """The `settings` fixture's values, for a tick given a FakeProvider (`provider=`)."""
    return make_settings(db_url, OFFLINE_URL, root, **sections)


def offline_cfg(db_url: str, root: Path) -> Settings:
    """The `cfg` fixture's values: one product, daily-brief (3 items, open since midnight), and
    no webhook sink."""
    settings = offline_settings(db_url, root)
    p = replace(settings.products["daily-brief"], items=3, prompt="Write the brief.", opens_at=dt.time(0, 0))
    return replace(settings, products={"daily-brief": p}, webhook_sink=None)
