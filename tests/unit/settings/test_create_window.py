"""No create starts that cannot finish before the cron wrapper kills the run: the create window
is derived from the wrapper's budget and the provider's timeouts, a configuration in which no
create fits is refused at load in one line, and crontab.example, the runbook and the defaults agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from iipub.core.errors import ConfigError
from iipub.provider.factory import settings_from_dict
from iipub.settings.config import CREATE_RECORD_SECONDS, CREATE_STARTUP_SECONDS, ReconcileSettings

ROOT = Path(__file__).resolve().parents[3]


def test_the_default_window_leaves_the_create_its_whole_timeout_before_the_wrapper_stops_the_run() -> None:
    s = settings_from_dict({})
    p = s.provider
    assert s.create_window() == 58 - CREATE_STARTUP_SECONDS - (p.connect_timeout_seconds + p.timeout_seconds) \
        - CREATE_RECORD_SECONDS == 18
    assert s.create_window(flex=True) == 58 - 3 - (p.connect_timeout_seconds + p.flex_timeout_seconds) - 2
    assert settings_from_dict({"reconcile": {"wrapper_seconds": 0}}).create_window() is None


@pytest.mark.parametrize(("raw", "words"), [
    ({"reconcile": {"wrapper_seconds": 30}}, "connect_timeout_seconds + timeout_seconds"),
    ({"reconcile": {"lease_seconds": 120}, "provider": {"timeout_seconds": 60}}, "wrapper_seconds (58)"),
])
def test_a_wrapper_no_create_fits_in_is_refused_at_load_in_one_line(raw: dict[str, object], words: str) -> None:
    with pytest.raises(ConfigError) as err:
        settings_from_dict(raw)
    assert words in str(err.value) and "\n" not in str(err.value).strip()


def test_crontab_example_runbook_and_defaults_agree_on_the_wrapper() -> None:
    line = next(line for line in (ROOT / "crontab.example").read_text().splitlines()
                if line.startswith("*") and " reconcile " in line)
    found = re.search(r"timeout -k (\d+) (\d+) ", line)
    assert found is not None, line
    assert float(found.group(2)) == ReconcileSettings().wrapper_seconds == 58
    runbook = (ROOT / "runbook.md").read_text()
    assert f"timeout -k {found.group(1)} {found.group(2)}" in runbook and "wrapper_seconds" in runbook
    assert "first 18 s of a run" in runbook
