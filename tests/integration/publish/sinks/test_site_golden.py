"""The static site's bytes, held still: every page, feed and JSON file a set of deliveries leaves
(and the pages of a few edge cases rendered directly) is compared with the files under
tests/golden/site/, which were written by the site as it was before its pages moved to templates.
A change to a page or feed shows here as a byte difference; a deliberate one is recorded by
writing the golden files again (`IIPUB_TEST_WRITE_SITE_GOLDEN=1 .venv/bin/python -m pytest -n 0
tests/integration/publish/sinks/test_site_golden.py`) and reviewing the diff.

The inputs are chosen to reach every branch of the pages: two configured languages and an RTL,
a CJK and an unknown one; three products; model text with markup, quotes, ampersands, control and
bidi characters, emoji and combining marks; source URLs that must not become links; very long
text; editions without items or sources; more editions than an index and a feed list, across
months and a new year; deliveries out of order, a replaced edition, a rebuilt manifest; relative
links and an absolute base URL; and a site title that needs escaping."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from iipub.edition.compose import Artifact, artifact_from_document
from iipub.publish.sinks import EditionEvent, Published
from iipub.publish.sinks.site import Entry, Site, Withdrawal
from iipub.publish.sinks.static import StaticSink
from iipub.settings.config import Product, default_products

GOLDEN = Path(__file__).resolve().parents[3] / "golden" / "site"
WRITE = os.environ.get("IIPUB_TEST_WRITE_SITE_GOLDEN") == "1"

HOSTILE = ("<script>alert('x')</script> & \"quotes\" 'single' &amp; </p><img src=x onerror=alert(1)> "
           "\u202eevil\u202c \x00\x07\x1b ctl \x85 \u2028 sep é\u0301 🇪🇸 مرحبا «guillemets» ]]> --> <!--")
LONG = "A long summary that goes on & on, with <b>markup</b> and “quotes”. " * 100
URLS = [
    "https://www.reuters.com/world/a?b=1&c=2",
    "javascript:alert(1)",
    "data:text/html,<script>alert(1)</script>",
    "http://localhost/admin",
    "http://127.0.0.1:8080/",
    "http://10.1.2.3/x",
    "https://example.com/\"onmouseover=alert(1)",
    "https://exa mple.com/",
    "https://例え.jp/パス?q='x'",
    "HTTPS://WWW.APNEWS.COM/Path",
    "ftp://ftp.example.org/file",
    "//evil.example/x",
    "https://user:pass@example.org/",
    "",
    "https://www.bbc.co.uk/news/" + "x" * 300,
]
BRIEF_DAYS = [dt.date(2027, 1, 3) - dt.timedelta(days=k) for k in range(55)]  # 2026-11-10 .. 2027-01-03


def products() -> dict[str, Product]:
    out = dict(default_products())
    out["world-report"] = Product(name="world-report", languages=("ar", "zh", "en"),
                                  titles=(("en", "World <Report> & \"Co\" 'Ltd'"),))
    return out


def document(product: str, date: str, lang: str, title: str, summary: str,
             items: list[dict[str, Any]]) -> dict[str, Any]:
    sources: list[dict[str, str]] = []
    for item in items:
        for src in item["sources"]:
            if src["url"] not in {s["url"] for s in sources}:
                sources.append(dict(src))
    return {"product": product, "edition_date": date, "lang": lang, "title": title, "summary": summary,
            "items": items, "sources": sources}


def artifact(product: str, date: str, lang: str, title: str, summary: str, items: list[dict[str, Any]]) -> Artifact:
    return artifact_from_document(document(product, date, lang, title, summary, items))


def items_for(k: int, lang: str, count: int) -> list[dict[str, Any]]:
    """`count` items, their sources cycling through the URL list (an item may have none)."""
    out = []
    for i in range(count):
        n_sources = (k + i) % 3
        out.append({
            "headline": f"Headline {k}.{i} {lang}" + (f" {HOSTILE}" if (k + i) % 4 == 0 else ""),
            "summary": f"Item {k}.{i} in {lang}: what happened, & why." + (f" {HOSTILE}" if i == 1 else ""),
            "sources": [{"title": f"Source {k}.{i}.{j} <{lang}> & \"co\"", "url": URLS[(k * 3 + i + j) % len(URLS)]}
                        for j in range(n_sources)],
        })
    return out


def brief_title(k: int, day: dt.date, lang: str) -> str:
    if k % 5 == 0:  # says nothing the heading does not: the page shows the heading alone
        return f"Daily Brief for {day.isoformat()}" if lang == "en" else f"Resumen diario del {day:%d/%m/%Y}"
    if k % 7 == 0:
        return f"Edition {k} {HOSTILE}"
    return f"Edition {k}: markets & \"rates\" in {lang}"


def event(art: Artifact, published: str, job: str = "job-1") -> EditionEvent:
    return EditionEvent(event_id=f"evt-{art.product}-{art.edition_date}-{art.lang}-{art.sha256[:8]}", job_id=job,
                 product=art.product, edition_date=art.edition_date, lang=art.lang, sha256=art.sha256,
                 artifact=json.loads(art.body), published_at=published)


def published_at(k: int, day: dt.date) -> str:
    if k % 9 == 0:
        return f"{day.isoformat()}T08:30:00+02:00"  # an offset: the page shows UTC
    if k % 13 == 0:
        return f"{day.isoformat()}T05:59:59.987654+00:00"  # fractions of a second are dropped
    return f"{day.isoformat()}T06:{k % 60:02d}:03Z"


def brief_events() -> Iterator[EditionEvent]:
    """daily-brief in en and es over 55 days (more than an index's 30 and a feed's 50), the
    latest five delivered first, then the rest newest to oldest with es before en."""
    order = BRIEF_DAYS[:5] + BRIEF_DAYS[5:]
    for k, day in enumerate(order):
        for lang in (("es", "en") if k % 2 else ("en", "es")):
            summary = LONG if k == 3 else f"Summary {k} {lang}" + (f"\n{HOSTILE}" if k % 6 == 0 else "")
            art = artifact("daily-brief", day.isoformat(), lang, brief_title(k, day, lang), summary,
                           items_for(k, lang, k % 4))
            yield event(art, published_at(k, day))


def watch_events() -> Iterator[EditionEvent]:
    """revolution-watch: a date in Spanish only, an edition without items, a redundant title."""
    d1, d2, d3 = "2026-12-01", "2026-12-02", "2026-11-30"
    yield event(artifact("revolution-watch", d1, "en", "Revolution Watch for 1 December 2026", "Calm.",
                         items_for(1, "en", 2)), "2026-12-01T07:00:00Z")
    yield event(artifact("revolution-watch", d1, "es", "Observatorio: calma", "Calma.",
                         items_for(1, "es", 2)), "2026-12-01T07:00:00Z")
    yield event(artifact("revolution-watch", d2, "es", f"Sólo en español {HOSTILE}", HOSTILE, []),
                "2026-12-02T07:00:00Z")
    yield event(artifact("revolution-watch", d3, "en", "", "", [{"headline": "", "summary": "", "sources": []}]),
                "2026-11-30T23:59:59Z")


def world_events() -> Iterator[EditionEvent]:
    """world-report: Arabic (right to left), Chinese, English with a configured title that needs
    escaping, and languages the configuration does not list (French, and an unknown code)."""
    day = "2026-12-15"
    titles = (("ar", "تقرير اليوم: أخبار & \"آراء\""), ("zh", "今日报告 <重要>"), ("en", "Today & <tomorrow>"),
              ("fr", "Le rapport « du jour »"), ("xx", "Unknown tongue"))
    for lang, title in titles:
        yield event(artifact("world-report", day, lang, title, f"{lang} summary {HOSTILE}", items_for(2, lang, 2)),
                    "2026-12-15T12:00:00Z")
    yield event(artifact("world-report", "2026-11-15", "ar", "أخبار الشهر الماضي", "ملخص", items_for(3, "ar", 1)),
                "2026-11-15T12:00:00Z")


def publish(sink: StaticSink, evs: Iterator[EditionEvent] | list[EditionEvent]) -> None:
    for ev in evs:
        assert sink.publish(ev) == Published(), ev


def build_plain(root: Path, state: Path) -> None:
    """Relative links, the default site title; ends with a replaced edition and a manifest
    rebuilt from the public tree (one page lost: its edition's time is then a guess)."""
    sink = StaticSink(root, products=products(), state_dir=state, may_replace=lambda job: job == "republish")
    publish(sink, brief_events())
    publish(sink, watch_events())
    publish(sink, world_events())
    day = BRIEF_DAYS[2]
    replaced = artifact("daily-brief", day.isoformat(), "en", f"Corrected edition {HOSTILE}", "Corrected.",
                        items_for(7, "en", 3))
    publish(sink, [event(replaced, "2027-01-04T09:00:00Z", job="republish")])
    shutil.rmtree(state / "manifest")
    (root / "daily-brief" / "2026-12-10" / "es.html").unlink()
    late = artifact("revolution-watch", "2026-12-03", "en", "After the rebuild", "Late.", items_for(4, "en", 1))
    publish(StaticSink(root, products=products(), state_dir=state), [event(late, "2026-12-03T07:00:00Z")])


def build_based(root: Path, state: Path) -> None:
    """An absolute base URL (alternates, canonical links, feeds) and a site title to escape."""
    sink = StaticSink(root, site_title="Intel & \"Co\" <b>DailyNews</b> 'x'InternationalIntelligence.org",
                      base_url="https://ii.example/news/", products=products(), state_dir=state)
    for k, day in enumerate(BRIEF_DAYS[:3]):
        for lang in ("en", "es"):
            publish(sink, [event(artifact("daily-brief", day.isoformat(), lang, brief_title(k + 1, day, lang),
                                          f"Summary {HOSTILE}", items_for(k, lang, 3)), published_at(k, day))])
    publish(sink, list(world_events())[:1])


def withdrawn(ev: EditionEvent, revision: int, at: str, note: str | None) -> EditionEvent:
    return EditionEvent(event_id=f"wd-{ev.event_id}-{revision}", job_id=ev.job_id, product=ev.product,
                        edition_date=ev.edition_date, lang=ev.lang, sha256=ev.sha256, artifact=None,
                        published_at=ev.published_at, type="edition.withdrawn", revision=revision, changed_at=at,
                        public_note=note)


def corrected(ev: EditionEvent, art: Artifact, revision: int, at: str, note: str | None) -> EditionEvent:
    return EditionEvent(event_id=f"co-{ev.event_id}-{revision}", job_id=ev.job_id, product=ev.product,
                        edition_date=ev.edition_date, lang=ev.lang, sha256=art.sha256, artifact=json.loads(art.body),
                        published_at=ev.published_at, type="edition.corrected", revision=revision, supersedes=ev.sha256,
                        changed_at=at, public_note=note)


def taken_back_events() -> dict[tuple[str, str], EditionEvent]:
    """daily-brief in en and es over the six latest days, by (date, lang)."""
    out = {}
    for k, day in enumerate(BRIEF_DAYS[:6]):
        for lang in ("en", "es"):
            art = artifact("daily-brief", day.isoformat(), lang, brief_title(k + 1, day, lang), f"Summary {k} {lang}",
                           items_for(k, lang, 2))
            out[(day.isoformat(), lang)] = event(art, published_at(k + 1, day))
    return out


def build_taken_back(root: Path, state: Path) -> None:
    """Corrections and withdrawals: a language withdrawn (the other stays), a correction with a
    hostile public note, the latest edition withdrawn then corrected back (revision 3), a date
    withdrawn in both languages; then the first revisions delivered again (stale: nothing
    changes) and a manifest rebuilt from the public tree (withdrawals and corrections read back)."""
    sink = StaticSink(root, products=products(), state_dir=state)
    evs = taken_back_events()
    publish(sink, [evs[key] for key in sorted(evs)])
    d = [day.isoformat() for day in BRIEF_DAYS[:6]]  # newest first
    fixed = artifact("daily-brief", d[3], "en", f"Fixed {HOSTILE}", f"Corrected summary {HOSTILE}",
                     items_for(9, "en", 2))
    back = artifact("daily-brief", d[0], "en", "Back, corrected", "Corrected after its withdrawal.",
                    items_for(8, "en", 1))
    publish(sink, [
        withdrawn(evs[(d[2], "es")], 2, "2027-01-04T10:00:00Z", f"Retirada: {HOSTILE}"),
        corrected(evs[(d[3], "en")], fixed, 2, "2027-01-04T11:00:00Z", f"Figures fixed {HOSTILE}"),
        withdrawn(evs[(d[0], "en")], 2, "2027-01-04T12:00:00Z", None),
        corrected(evs[(d[0], "en")], back, 3, "2027-01-04T13:00:00Z", None),
        withdrawn(evs[(d[4], "en")], 2, "2027-01-04T14:00:00Z", "Both languages."),
        withdrawn(evs[(d[4], "es")], 2, "2027-01-04T14:00:00Z", None),
    ])
    before = tree(root)
    publish(sink, [evs[(d[2], "es")], evs[(d[3], "en")], evs[(d[0], "en")], evs[(d[4], "es")]])
    assert tree(root) == before, "a late redelivery of revision 1 changed the site"
    shutil.rmtree(state / "manifest")
    late = artifact("daily-brief", "2027-01-04", "en", "After the rebuild", "Late.", items_for(4, "en", 1))
    publish(StaticSink(root, products=products(), state_dir=state), [event(late, "2027-01-04T15:00:00Z")])
    sink = StaticSink(root, products=products(), state_dir=state)
    after = tree(root)
    publish(sink, [evs[(d[2], "es")], evs[(d[3], "en")]])
    assert tree(root) == after, "after a rebuild, a late redelivery of revision 1 changed the site"


def edge_pages() -> dict[str, str]:
    """Pages no delivery makes: empty lists, a lone edition, a base URL with quotes in it."""
    site = Site("Site & <Co>", "", products())
    quoted = Site("Quoted \"Site\"", "https://ii.example/a&b'c\"d/", products())
    lone = artifact("world-report", "2026-12-15", "en", HOSTILE, LONG, items_for(2, "en", 3))
    entry = Entry("2026-12-15", lone.title, lone.sha256, "2026-12-15T12:00:00Z")
    guessed = Entry("2026-12-15", lone.title, lone.sha256, "2026-12-15T00:00:00Z", guessed=True)
    bare = artifact("daily-brief", "2026-12-01", "es", "", "", [])
    bare_entry = Entry("2026-12-01", "", bare.sha256, "2026-12-01T06:00:00Z")
    gone = Withdrawal("2026-12-15", lone.sha256, 4, "2026-12-15T12:00:00Z", "2026-12-16T08:00:00Z", HOSTILE)
    fixed = Entry("2026-12-15", lone.title, lone.sha256, "2026-12-15T12:00:00Z", revision=5,
                  corrected="2026-12-17T08:00:00Z", note=LONG)
    return {
        "withdrawn-rtl.html": quoted.withdrawn_page("world-report", "ar", gone, ["ar", "zh"]),
        "withdrawn-no-note.html": site.withdrawn_page("daily-brief", "es", replace(gone, note=None), []),
        "corrected-edition.html": quoted.edition_page(lone, fixed, entry, None, ["en", "ar"]),
        "corrected-feed.atom": quoted.feed("world-report", "en", [(fixed, lone), (guessed, lone)]),
        "empty-feed.atom": site.feed("daily-brief", "en", []),
        "empty-index.html": site.index_page("daily-brief", "en", [], [], 0, []),
        "empty-month.html": site.month_page("daily-brief", "es", "2026-12", [], None, None, []),
        "empty-site-index.html": site.site_index([]),
        "lone-edition.html": site.edition_page(lone, entry, None, None, ["en"]),
        "lone-edition-quoted-base.html": quoted.edition_page(lone, guessed, None, None, ["en", "ar"]),
        "bare-edition.html": site.edition_page(bare, bare_entry, entry, None, ["es"]),
        "quoted-base-feed.atom": quoted.feed("world-report", "en", [(entry, lone), (guessed, lone)]),
        "quoted-base-index.html": quoted.index_page("world-report", "ar", [entry, guessed],
                                                    [("2026-12", 2), ("2025-01", 1)], 3, ["ar", "en"]),
        "quoted-base-site-index.html": quoted.site_index([("world-report", "ar", entry, 1),
                                                          ("world-report", "xx", guessed, 12345)]),
        "rtl-month.html": quoted.month_page("world-report", "ar", "2026-12", [guessed, entry], "2026-11", "2027-01",
                                            ["ar", "zh", "en"]),
    }


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def rendered(tmp_path: Path) -> dict[str, dict[str, bytes]]:
    cases: dict[str, dict[str, bytes]] = {}
    for name, build in (("plain", build_plain), ("based", build_based), ("taken-back", build_taken_back)):
        root = tmp_path / name / "public"
        root.mkdir(parents=True)
        build(root, tmp_path / name / "state")
        cases[name] = tree(root)
    cases["edges"] = {name: page.encode("utf-8") for name, page in edge_pages().items()}
    return cases


@pytest.mark.slow
def test_every_page_feed_and_json_file_is_byte_identical_to_the_golden_files(tmp_path: Path) -> None:
    cases = rendered(tmp_path)
    if WRITE:
        shutil.rmtree(GOLDEN, ignore_errors=True)
        for case, files in cases.items():
            for rel, data in files.items():
                (GOLDEN / case / rel).parent.mkdir(parents=True, exist_ok=True)
                (GOLDEN / case / rel).write_bytes(data)
    differ = []
    for case, files in cases.items():
        golden = tree(GOLDEN / case)
        assert sorted(files) == sorted(golden), f"{case}: other files than the golden ones"
        differ += [f"{case}/{rel}" for rel, data in files.items() if golden[rel] != data]
    assert not differ, f"{len(differ)} file(s) differ from tests/golden/site: {differ[:20]}"
    # The inputs reach what they are meant to (so the golden files cannot quietly lose a case).
    plain = cases["plain"]
    assert len([p for p in plain if p.startswith("daily-brief/") and p.endswith("/en.html")]) == 55
    feed = plain["daily-brief/en/feed.atom"].decode()
    assert feed.count("<entry>") == 50 and "Corrected edition" in feed
    assert plain["daily-brief/en/index.html"].decode().count('<li><a href="../20') == 30
    assert 'datetime="2026-12-10T00:00:00Z"' in plain["daily-brief/2026-12-10/es.html"].decode()  # guessed
    assert 'dir="rtl"' in plain["world-report/2026-12-15/ar.html"].decode()
    assert b"\xef\xbf\xbd" in plain["daily-brief/2027-01-03/en.html"]  # control characters replaced
    assert "&lt;script&gt;" in feed and "<script>" not in feed
    assert 'href="https://ii.example/news/daily-brief/en/feed.atom"' in cases["based"]["index.html"].decode()
    back = cases["taken-back"]
    assert json.loads(back["daily-brief/2027-01-01/es.json"])["withdrawn"] is True
    assert 'class="notice withdrawn"' in back["daily-brief/2027-01-01/es.html"].decode()
    assert "2027-01-01" not in back["daily-brief/es/index.html"].decode()
    assert 'hreflang="es"' not in back["daily-brief/2027-01-01/en.html"].decode()
    assert 'data-revision="2"' in back["daily-brief/2026-12-31/en.html"].decode()
    assert 'data-revision="3"' in back["daily-brief/2027-01-03/en.html"].decode()
    assert "2026-12-30" not in back["daily-brief/en/feed.atom"].decode()
    assert "notice corrected" in back["daily-brief/en/feed.atom"].decode()

