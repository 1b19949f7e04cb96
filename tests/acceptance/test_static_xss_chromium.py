"""Hostile provider text rendered by the static sink stays inert in a real browser."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from iipub.edition.compose import compose
from iipub.publish.sinks import EditionEvent, Published
from iipub.publish.sinks.static import StaticSink
from iipub.settings.config import Product
from iipub.settings.edition_schema import output_model

SCRIPT = "<script>document.title='pwned'</script>"
IMG = "<img src=x onerror=\"document.title='pwned'\">"


def _chromium() -> str | None:
    for name in ("/usr/bin/chromium", "chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


CHROMIUM = _chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")


def _dump_dom(page: Path, profile: Path) -> str:
    assert CHROMIUM is not None
    proc = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=90,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    dom = proc.stdout.decode("utf-8")
    assert "<html" in dom, proc.stderr.decode(errors="replace")[-2000:]
    return dom


@pytest.mark.slow  # a headless browser start: seconds
def test_hostile_text_is_inert_in_chromium(tmp_path: Path) -> None:
    product = Product(name="daily-brief", languages=("en", "es"), items=2, prompt="p")
    doc = {
        lang: {
            "title": f"Title {lang} {SCRIPT}",
            "summary": f"Summary {lang} {IMG}",
            "items": [
                {
                    "headline": f"Headline {lang} {SCRIPT}",
                    "summary": f"Item {lang} {IMG}",
                    "sources": [
                        {"title": "evil link", "url": "javascript:alert(1)"},
                        {"title": "good link", "url": f"https://www.reuters.com/{lang}"},
                    ],
                },
                {
                    "headline": f"Second {lang}",
                    "summary": f"Plain {lang}",
                    "sources": [{"title": "Reuters", "url": "https://www.reuters.com/2"}],
                },
            ],
        }
        for lang in ("en", "es")
    }
    edition = output_model(product.languages, product.items).model_validate(doc)
    art = compose(edition, product, dt.date(2025, 3, 7))["en"]
    ev = EditionEvent(
        event_id="evt-1",
        job_id="job-1",
        product=product.name,
        edition_date=art.edition_date,
        lang="en",
        sha256=art.sha256,
        artifact=json.loads(art.body),
        published_at="2025-03-07T06:00:00Z",
    )
    root = tmp_path / "site"
    assert StaticSink(root).publish(ev) == Published()

    pages = (root / "daily-brief" / "2025-03-07" / "en.html", root / "daily-brief" / "en" / "index.html",
             root / "daily-brief" / "en" / "2025-03.html", root / "index.html")
    for page in pages:
        dom = _dump_dom(page, tmp_path / "profile")
        lower = dom.lower()
        # The hostile markup is there as visible text, escaped in the serialised DOM.
        assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in dom
        # Nothing ran and nothing was parsed as markup.
        assert "<title>pwned</title>" not in lower
        assert "<script" not in lower
        assert "<img" not in lower
        assert 'href="javascript:' not in lower

    edition_dom = _dump_dom(root / "daily-brief" / "2025-03-07" / "en.html", tmp_path / "profile")
    assert (
        "<title>Title en &lt;script&gt;document.title='pwned'&lt;/script&gt; — Daily Brief — 7 March 2025 "
        "— InternationalIntelligence.org</title>"
        in edition_dom
    )
    assert "&lt;img src=x onerror=\"document.title='pwned'\"&gt;" in edition_dom
    assert 'href="https://www.reuters.com/en"' in edition_dom
    assert "evil link" in edition_dom  # shown as text, without its link
