"""The static site as a reader sees it: an edition's title is shown only when it adds to the
heading, month pages run newest first, a backfill's feed entries have distinct times, the site
name breaks between its words, and every accepted language has its own interface words."""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from iipub.edition.compose import compose
from iipub.publish.sinks import EditionEvent, Published, l10n
from iipub.publish.sinks import site as site_mod
from iipub.publish.sinks.static import StaticSink
from iipub.settings.config import KNOWN_LANGUAGES, Product, default_products
from iipub.settings.edition_schema import output_model

PRODUCTS = default_products()
DAY = dt.date(2026, 12, 1)


def _events(product: Product, day: dt.date, title: str, published: str) -> dict[str, EditionEvent]:
    doc = {lang: {"title": title.format(product=product.name, date=day.isoformat(), lang=lang),
                  "summary": "What happened.",
                  "items": [{"headline": f"Headline {i}", "summary": "Text.",
                             "sources": [{"title": "Wire", "url": f"https://www.reuters.com/{day}/{i}"}]}
                            for i in range(product.items)]}
           for lang in product.languages}
    edition = output_model(product.languages, product.items).model_validate(doc)
    return {lang: EditionEvent(event_id=f"evt-{product.name}-{day}-{lang}", job_id="job-1", product=product.name,
                        edition_date=art.edition_date, lang=lang, sha256=art.sha256,
                        artifact=json.loads(art.body), published_at=published)
            for lang, art in compose(edition, product, day).items()}


def _publish_event(sink: StaticSink, *evs: EditionEvent) -> None:
    for ev in evs:
        assert sink.publish(ev) == Published(), ev


def _text(root: Path, rel: str) -> str:
    return (root / rel).read_text(encoding="utf-8")


BRIEF = replace(PRODUCTS["daily-brief"], items=2)


def test_a_title_that_repeats_the_heading_is_not_shown_again(tmp_path: Path) -> None:
    sink = StaticSink(tmp_path, products={"daily-brief": BRIEF})
    _publish_event(sink, *_events(BRIEF, DAY, "{product} for {date}", "2026-12-01T06:10:00Z").values())
    page = _text(tmp_path, "daily-brief/2026-12-01/en.html")
    assert "<h1>Daily Brief — <time" in page
    assert "daily-brief for 2026-12-01" not in page and 'class="title"' not in page
    assert "<title>Daily Brief — 1 December 2026 — InternationalIntelligence.org</title>" in page
    for rel in ("index.html", "daily-brief/en/index.html", "daily-brief/en/2026-12.html", "daily-brief/en/feed.atom"):
        assert "daily-brief for" not in _text(tmp_path, rel), rel
    assert "<title>Daily Brief — 1 December 2026</title>" in _text(tmp_path, "daily-brief/en/feed.atom")
    # a title with something of its own is shown everywhere
    _publish_event(sink, *_events(BRIEF, DAY + dt.timedelta(days=1), "Ceasefire holds in {lang}",
                            "2026-12-02T06:10:00Z").values())
    assert '<h2 class="title">Ceasefire holds in en</h2>' in _text(tmp_path, "daily-brief/2026-12-02/en.html")
    for rel in ("index.html", "daily-brief/en/index.html", "daily-brief/en/2026-12.html", "daily-brief/en/feed.atom"):
        assert "Ceasefire holds in en" in _text(tmp_path, rel), rel


def test_own_title_judges_words_not_spelling() -> None:
    name = "Daily Brief"
    for redundant in ("daily-brief for 2026-12-01", "Daily Brief — 1 December 2026", "Daily Brief: December 1, 2026",
                      "The Daily Brief edition of 01/12/2026", "DAILY BRIEF 2026-12-01"):
        assert site_mod.own_title(redundant, name, "daily-brief", "2026-12-01", "en") is None, redundant
    assert site_mod.own_title("Resumen diario del 1 de diciembre de 2026", "Resumen diario", "daily-brief",
                              "2026-12-01", "es") is None
    for own in ("Daily Brief: ceasefire holds", "Markets fall on 1 December"):
        assert site_mod.own_title(own, name, "daily-brief", "2026-12-01", "en") == own
    assert site_mod.own_title("Brief", name, "daily-brief", "2026-12-01", "en") is None


def test_month_pages_run_newest_first_like_the_index(tmp_path: Path) -> None:
    sink = StaticSink(tmp_path, products={"daily-brief": BRIEF})
    for day in (3, 1, 2):
        date = DAY.replace(day=day)
        _publish_event(sink, *_events(BRIEF, date, "Story {date}", f"{date}T06:10:00Z").values())
    month = _text(tmp_path, "daily-brief/en/2026-12.html")
    index = _text(tmp_path, "daily-brief/en/index.html")
    order = ["2026-12-03/en.html", "2026-12-02/en.html", "2026-12-01/en.html"]
    for page in (month, index):
        positions = [page.index(href) for href in order]
        assert positions == sorted(positions), page


def test_a_backfills_feed_entries_have_distinct_ordered_times(tmp_path: Path) -> None:
    import feedparser

    sink = StaticSink(tmp_path, products={"daily-brief": BRIEF})
    dates = [DAY - dt.timedelta(days=n) for n in range(35)]
    for date in dates:  # a backfill: 35 editions published within one second
        _publish_event(sink, *_events(BRIEF, date, "{product} for {date}", "2026-12-01T09:00:00Z").values())
    feed = feedparser.parse((tmp_path / "daily-brief/en/feed.atom").read_bytes())
    assert feed.bozo == 0 and len(feed.entries) == 35
    times = [e.updated for e in feed.entries]
    assert len(set(times)) == 35 and times == sorted(times, reverse=True)  # newest edition first, distinct
    assert all(t.startswith("2026-12-01T09:00:00.") for t in times)
    before = (tmp_path / "daily-brief/en/feed.atom").read_bytes()
    _publish_event(StaticSink(tmp_path, products={"daily-brief": BRIEF}), _events(BRIEF, DAY, "{product} for {date}",
                                                                            "2026-12-01T09:00:00Z")["en"])
    assert (tmp_path / "daily-brief/en/feed.atom").read_bytes() == before  # the same bytes again


def test_the_site_name_breaks_between_its_words(tmp_path: Path) -> None:
    sink = StaticSink(tmp_path, products={"daily-brief": BRIEF})
    _publish_event(sink, *_events(BRIEF, DAY, "Story", "2026-12-01T06:10:00Z").values())
    index = _text(tmp_path, "index.html")
    assert "<h1>International<wbr>Intelligence.org</h1>" in index
    assert '>International<wbr>Intelligence.org</a>' in _text(tmp_path, "daily-brief/2026-12-01/en.html")
    assert "<title>InternationalIntelligence.org</title>" in index  # text, not markup, where no break is wanted
    h1_rule = re.search(r"[}>]h1\{([^}]*)\}", index)  # the h1 breaks a word only where it must
    assert h1_rule and "overflow-wrap:break-word" in h1_rule.group(1) and "anywhere" not in h1_rule.group(1)


def test_every_accepted_language_has_its_own_interface_words(tmp_path: Path) -> None:
    english = l10n.words("en")
    for lang in sorted(KNOWN_LANGUAGES):
        words: dict[str, Any] = l10n.words(lang)
        assert set(words) == set(english), lang
        if lang != "en":
            assert words["published"] != english["published"] and words["latest"] != english["latest"], lang
        for n in (0, 1, 2, 3, 5, 11, 21, 100):
            assert str(_count(n, lang)), (lang, n)
    product = replace(BRIEF, name="world-report", languages=("fr", "de"))
    sink = StaticSink(tmp_path, products={"world-report": product})
    _publish_event(sink, *_events(product, DAY, "Story {lang}", "2026-12-01T06:10:00Z").values())
    fr = _text(tmp_path, "world-report/2026-12-01/fr.html")
    de = _text(tmp_path, "world-report/2026-12-01/de.html")
    assert "Publié le" in fr and "1 décembre 2026" in fr and "Published" not in fr and "Sources" in fr
    assert "Veröffentlicht am" in de and "1. Dezember 2026" in de and "Published" not in de
    assert "1 édition" in _text(tmp_path, "world-report/fr/index.html")


def _count(n: int, lang: str) -> str:
    return l10n.count(n, lang)
