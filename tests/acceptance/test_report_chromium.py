"""`iipub report`'s page in a real browser: three days of real cron minutes (the integration
test's `three_days`), loaded in headless Chromium in the light and the dark scheme: a screenshot,
no console error, nothing fetched but the page, and every text at least AA contrast (4.5:1)
against its background, computed from the browser's own computed styles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.provider.openai.simulator import parse_fault_spec
from tests.integration.observe.test_history import three_days  # noqa: F401  (a fixture)
from tests.support.browser import browser, chromium, load
from tests.support.cli import run_cli

pytestmark = pytest.mark.skipif(chromium() is None, reason="chromium is not installed (apt-get install chromium)")


def _assert_clean(page: Path, tmp_path: Path, name: str, texts: int) -> None:
    with browser(tmp_path / f"profile-{name}") as b:
        for scheme in ("light", "dark"):
            shot = tmp_path / f"{name}-{scheme}.png"
            loaded = load(b, page, scheme, shot)
            assert loaded.title == "iipub report"
            assert loaded.errors == [], (scheme, loaded.errors)
            assert loaded.requests == [page.as_uri()], loaded.requests  # no script, style, font or image
            assert loaded.contrast["checked"] >= texts, loaded.contrast
            assert loaded.contrast["failures"] == [], (scheme, loaded.contrast["failures"])
            assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 10_000


@pytest.mark.slow  # a headless browser start and three days of cron minutes: seconds
@pytest.mark.simulator(faults=(parse_fault_spec("fail_refused@create*1"),))
def test_the_report_reads_well_in_chromium(engine: sa.Engine, three_days: Any,  # noqa: F811
                                           tmp_path: Path) -> None:
    env, _ = three_days
    page = tmp_path / "report.html"
    run_cli("report", "--days", "14", "--html", str(page), env=env, cwd=tmp_path, check=True)
    assert "<svg" in page.read_text(encoding="utf-8")
    _assert_clean(page, tmp_path, "history", 200)  # axis labels, keys, tables


@pytest.mark.slow
def test_the_empty_report_reads_well_in_chromium(engine: sa.Engine, cli_env: dict[str, str], tmp_path: Path) -> None:
    page = tmp_path / "empty.html"
    run_cli("report", "--html", str(page), env=cli_env, cwd=tmp_path, check=True)
    _assert_clean(page, tmp_path, "empty", 3)  # the heading, the range, the sentence
