"""The static site's pages and feeds: pure functions of what they are given, so the same
editions always render to the same bytes.

Layout under the public root (every name is made of a validated product, date and language):

    index.html                          the site index: every product and language, latest edition
    <product>/<date>/<lang>.html        an edition (and <lang>.json, the artifact itself)
    <product>/<lang>/index.html         the product's latest editions and its archive by month
    <product>/<lang>/<YYYY-MM>.html     one month of editions
    <product>/<lang>/feed.atom          the latest editions as Atom 1.0

This module decides what each page says: its links (relative, or absolute under `base_url`), its
languages, which title an edition shows, which source URLs may be links. How a page is written is
in the templates, package data under `templates/` (one per page, `page.html` and `series.html` the
frames they share, `parts.html` the fragments, `feed.atom` and `entry.atom`, the stylesheet
`site.css`), loaded once per process by `templating`, which also escapes: every text from the model
or the configuration is escaped once, where a template prints it. Dates, month names, language
names and the interface's words come from `l10n`.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import html
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from iipub.edition.compose import Artifact
from iipub.edition.paths import edition_path, feed_path, index_path, json_path, month_path
from iipub.edition.validate import is_public_http_url
from iipub.publish.sinks import l10n, templating
from iipub.publish.sinks.l10n import DEFAULT_LANG
from iipub.publish.sinks.lru import Lru
from iipub.settings.config import Product, display_title

# Bump when the pages' shape changes in code (a template change is seen by `templating.digest`):
# a site rendered by another version is rendered again in full.
RENDER_VERSION = "site-2"
INDEX_ENTRIES = 30  # editions listed on a product's index page
FEED_ENTRIES = 50  # entries in a feed
SITE_INDEX = "index.html"
LANG_PATTERN = r"^[a-z]{2,3}(?:-[a-z0-9]{2,8})*$"  # language codes the sink accepts (in paths and URLs)
LANG_RE = re.compile(LANG_PATTERN)

_PUBLISHED_RE = re.compile(rb'<time class="published" datetime="(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)">')


@dataclass(frozen=True)
class Entry:
    """One published edition as the site lists it (the manifest's record of it)."""

    date: str  # YYYY-MM-DD
    title: str  # the edition's own title (model output)
    sha256: str  # of the artifact JSON
    published: str  # when it was first published: ISO 8601 UTC, seconds, `Z`
    guessed: bool = False  # publication time unknown when the manifest was rebuilt (midnight of the date)
    revision: int = 1  # the edition's revision (only grows: an older one delivered late changes nothing)
    corrected: str | None = None  # when an operator's correction replaced it (ISO 8601 UTC), None if never
    note: str | None = None  # the correction's public note


@dataclass(frozen=True)
class Withdrawal:
    """An edition an operator withdrew: its page is a notice, no list or feed names it."""

    date: str  # YYYY-MM-DD
    sha256: str  # of the artifact withdrawn
    revision: int
    published: str  # when the edition was first published
    withdrawn: str  # when it was withdrawn: ISO 8601 UTC, seconds, `Z`
    note: str | None = None  # the operator's public note (shown; the internal reason never is)


# --- what the templates are given -------------------------------------------------------------


class Link(NamedTuple):
    """The language switcher's link to this page in `lang`."""

    lang: str
    href: str
    name: str  # the language's name in itself


class PagerLink(NamedTuple):
    href: str
    word: str  # "Previous edition", "Next month"
    date: str | None  # the target edition's date (shown as a <time>), None for a month
    text: str  # the target's name


class MonthLink(NamedTuple):
    month: str  # YYYY-MM (the page's file name)
    name: str
    editions: str  # the number, in the page's language


class Card(NamedTuple):
    """A product in one language on the site index."""

    lang: str
    rtl: bool
    language: str
    words: Mapping[str, Any]
    name: str
    index_href: str
    edition_href: str
    feed_href: str
    date: str
    day: str
    own: str | None
    editions: str  # "12 editions"


class Correction(NamedTuple):
    """The notice a corrected edition's page and feed entry carry."""

    revision: int
    at: str  # ISO 8601 UTC
    word: str  # "Corrected on"
    text: str  # the time, in the page's language
    note: str | None


class PageSource(NamedTuple):
    title: str
    href: str | None  # the URL when it is public http(s), else None: the title is shown as inert text


class PageItem(NamedTuple):
    headline: str
    summary: str
    sources: tuple[PageSource, ...]


# --- paths (iipub.edition.paths) -------------------------------------------------------------


def _rel(here: str, target: str) -> str:
    """`target` relative to the page at `here` (both relative to the root)."""
    base = here.split("/")[:-1]
    parts = target.split("/")
    common = 0
    while common < len(base) and common < len(parts) - 1 and base[common] == parts[common]:
        common += 1
    return "../" * (len(base) - common) + "/".join(parts[common:])


def published_in_page(page: bytes) -> str | None:
    """The publication time an edition page records (for rebuilding the manifest from disk)."""
    m = _PUBLISHED_RE.search(page)
    return m.group(1).decode("ascii") if m else None


_CORRECTED_RE = re.compile(
    rb'<p class="notice corrected" data-revision="(\d+)">[^<]*<time class="corrected" '
    rb'datetime="(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)">[^<]*</time>'
    rb'(?: \xe2\x80\x94 <span class="note">([^<]*)</span>)?</p>')
_STAMP_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")


def correction_in_page(page: bytes) -> tuple[int, str, str | None] | None:
    """The correction an edition page shows (revision, time, public note), for rebuilding the
    manifest from disk; None for a page as first published."""
    m = _CORRECTED_RE.search(page)
    if m is None:
        return None
    note = html.unescape(m.group(3).decode("utf-8")) if m.group(3) is not None else None
    return int(m.group(1)), m.group(2).decode("ascii"), note


def withdrawn_json(product: str, lang: str, w: Withdrawal) -> bytes:
    """What `<product>/<date>/<lang>.json` says once the edition is withdrawn (the site's own
    record of it, read back when the manifest is rebuilt)."""
    doc: dict[str, Any] = {"withdrawn": True, "product": product, "edition_date": w.date, "lang": lang,
                           "revision": w.revision, "sha256": w.sha256, "published_at": w.published,
                           "withdrawn_at": w.withdrawn, "public_note": w.note}
    return json.dumps(doc, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8")


def withdrawal_from_json(body: bytes, product: str, date: str, lang: str) -> Withdrawal | None:
    """The withdrawal a `<lang>.json` records (`withdrawn_json`), or None for anything else."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not (isinstance(doc, dict) and doc.get("withdrawn") is True and doc.get("product") == product
            and doc.get("edition_date") == date and doc.get("lang") == lang):
        return None
    revision, sha, first, at, note = (doc.get(k) for k in ("revision", "sha256", "published_at", "withdrawn_at",
                                                           "public_note"))
    if not (type(revision) is int and revision >= 1 and isinstance(sha, str) and _SHA_RE.fullmatch(sha)
            and isinstance(first, str) and _STAMP_RE.fullmatch(first) and isinstance(at, str)
            and _STAMP_RE.fullmatch(at) and (note is None or isinstance(note, str))):
        return None
    return Withdrawal(date, sha, revision, first, at, note)


def midnight(date: str) -> str:
    return f"{date}T00:00:00Z"


# --- the site ---------------------------------------------------------------------------------


class Site:
    """What every page shares: the site's title and base URL, the products' display titles
    and language order (from the configuration; display only)."""

    def __init__(self, site_title: str = "InternationalIntelligence.org", base_url: str = "",
                 products: Mapping[str, Product] | None = None) -> None:
        self.site_title = site_title
        self.base_url = base_url.rstrip("/")
        self.products = dict(products or {})
        self._brand = tuple(_CAMEL.split(site_title))
        # Rendered feed entries by (product, lang, date, sha256, published): a feed is rendered
        # again at each new edition, and 49 of its 50 entries are the same as last time.
        self._entries: Lru[tuple[str, str, str, str, str, str, str], str] = Lru(1024)

    def fingerprint(self) -> str:
        """Everything the pages depend on besides the editions: a change re-renders the whole site."""
        from babel import __version__ as babel_version

        doc = {
            "render": RENDER_VERSION,
            "templates": templating.digest(),
            "babel": babel_version,
            "site_title": self.site_title,
            "base_url": self.base_url,
            "products": {
                name: {"languages": list(p.languages), "titles": {lang: p.title(lang) for lang in p.languages}}
                for name, p in sorted(self.products.items())
            },
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    # -- configuration ----------------------------------------------------------------

    def title(self, product: str, lang: str) -> str:
        p = self.products.get(product)
        return p.title(lang) if p is not None else display_title(product, lang)

    def order_langs(self, product: str, langs: Iterable[str]) -> list[str]:
        """The configured language order first, then any other language alphabetically."""
        have = set(langs)
        p = self.products.get(product)
        first = [lang for lang in (p.languages if p else ()) if lang in have]
        return first + sorted(have - set(first))

    def order_products(self, products: Iterable[str]) -> list[str]:
        have = set(products)
        first = [name for name in self.products if name in have]
        return first + sorted(have - set(first))

    def site_lang(self) -> str:
        for p in self.products.values():
            if p.languages:
                return p.languages[0]
        return DEFAULT_LANG

    def _url(self, here: str, target: str) -> str:
        """An absolute URL when `base_url` is set (alternates, canonical links, feeds), else relative."""
        return f"{self.base_url}/{target}" if self.base_url else _rel(here, target)

    # -- shared parts -----------------------------------------------------------------

    def _frame(self, here: str, lang: str, *, alternates: Sequence[tuple[str, str]] = (),
               feeds: Sequence[tuple[str, str, str]] = (), switch: Sequence[tuple[str, str]] = (),
               wide: bool = False) -> dict[str, Any]:
        """What page.html and series.html need. `alternates`: (hreflang, root-relative path) of
        this page in every language, the x-default last; `feeds`: (title, hreflang, root-relative
        path); `switch`: (lang, root-relative path) of this page in each language."""
        return {
            "lang": lang,
            "rtl": l10n.rtl(lang),
            "words": l10n.words(lang),
            "site_title": self.site_title,
            "brand": self._brand,
            "home": _rel(here, SITE_INDEX),
            "canonical": self._url(here, here) if self.base_url else None,
            "alternates": [(code, self._url(here, path)) for code, path in alternates],
            "feeds": [(title, code, self._url(here, path)) for title, code, path in feeds],
            "switch": [Link(code, _rel(here, path), l10n.language_name(code)) for code, path in switch],
            "wide": wide,
        }

    def _alternates(self, langs: Sequence[str], path_of: Callable[[str], str]) -> list[tuple[str, str]]:
        if len(langs) < 2:
            return []
        return [(code, path_of(code)) for code in langs] + [("x-default", path_of(langs[0]))]

    # -- pages ------------------------------------------------------------------------

    def edition_page(self, art: Artifact, entry: Entry, prev: Entry | None, nxt: Entry | None,
                     langs: Sequence[str]) -> str:
        """`<product>/<date>/<lang>.html`. `langs`: the languages this date is published in, in order."""
        product, date, lang = art.product, art.edition_date, art.lang
        here = edition_path(product, date, lang)
        name = self.title(product, lang)
        month = date[:7]

        def neighbour(e: Entry | None, word: str) -> PagerLink | None:
            return None if e is None else PagerLink(_rel(here, edition_path(product, e.date, lang)),
                                                    l10n.word(lang, word), e.date, l10n.long_date(e.date, lang))

        return _page(
            "edition.html",
            self._frame(here, lang, alternates=self._alternates(langs, lambda code: edition_path(product, date, code)),
                        feeds=[(name, lang, feed_path(product, lang))],
                        switch=[(code, edition_path(product, date, code)) for code in langs]),
            name=name, date=date, day=l10n.long_date(date, lang), own=own_title(art.title, name, product, date, lang),
            index_href=_rel(here, index_path(product, lang)), month_href=_rel(here, month_path(product, lang, month)),
            month=l10n.cap(l10n.month_title(month, lang)), published=entry.published,
            published_text=l10n.published_text(entry.published, lang), summary=art.summary,
            correction=self._correction(entry, lang),
            items=items_html(art, lang), prev=neighbour(prev, "prev"), next=neighbour(nxt, "next"),
            feed_href=_rel(here, feed_path(product, lang)), json_href=_rel(here, json_path(product, date, lang)),
        )

    def _correction(self, entry: Entry, lang: str) -> Correction | None:
        if entry.corrected is None:
            return None
        return Correction(entry.revision, entry.corrected, l10n.notice_word(lang, "corrected"),
                          l10n.published_text(entry.corrected, lang), entry.note)

    def withdrawn_page(self, product: str, lang: str, w: Withdrawal, langs: Sequence[str]) -> str:
        """`<product>/<date>/<lang>.html` of a withdrawn edition: the notice that replaces it (the
        date and the public note; nothing of the edition's own text). `langs`: the languages the
        date is still published in, for the switcher."""
        date = w.date
        here = edition_path(product, date, lang)
        name = self.title(product, lang)
        switch = [(code, edition_path(product, date, code)) for code in langs if code != lang]
        return _page(
            "withdrawn.html",
            self._frame(here, lang, feeds=[(name, lang, feed_path(product, lang))],
                        switch=[(lang, here), *switch] if switch else []),
            name=name, date=date, day=l10n.long_date(date, lang),
            notice_title=l10n.notice_word(lang, "withdrawn_title"),
            notice=l10n.notice_word(lang, "withdrawn"), withdrawn=w.withdrawn,
            withdrawn_text=l10n.published_text(w.withdrawn, lang), note=w.note, revision=w.revision,
            index_href=_rel(here, index_path(product, lang)), feed_href=_rel(here, feed_path(product, lang)),
            json_href=_rel(here, json_path(product, date, lang)),
        )

    def month_page(self, product: str, lang: str, month: str, entries: Sequence[Entry], prev_month: str | None,
                   next_month: str | None, langs: Sequence[str]) -> str:
        """`<product>/<lang>/<YYYY-MM>.html`: the month's editions, newest first like every other
        list of editions (`entries` may come in either order). `langs`: the languages with
        editions this month, in order."""
        here = month_path(product, lang, month)
        name = self.title(product, lang)
        newest_first = sorted(entries, key=lambda e: e.date, reverse=True)

        def near(m: str | None, word: str) -> PagerLink | None:
            return None if m is None else PagerLink(f"{m}.html", l10n.word(lang, word), None,
                                                    l10n.cap(l10n.month_title(m, lang)))

        return _page(
            "month.html",
            self._frame(here, lang, alternates=self._alternates(langs, lambda code: month_path(product, code, month)),
                        feeds=[(name, lang, feed_path(product, lang))],
                        switch=[(code, month_path(product, code, month)) for code in langs]),
            name=name, month=l10n.month_title(month, lang), count=l10n.count(len(entries), lang),
            rows=[_row(here, product, lang, name, e) for e in newest_first],
            prev=near(prev_month, "prev_month"), next=near(next_month, "next_month"),
            feed_href=_rel(here, feed_path(product, lang)),
        )

    def index_page(self, product: str, lang: str, recent: Sequence[Entry], months: Sequence[tuple[str, int]],
                   total: int, langs: Sequence[str]) -> str:
        """`<product>/<lang>/index.html`: the latest editions, newest first, and every month.
        `months`: (YYYY-MM, editions) newest first; `langs`: the product's languages, in order."""
        here = index_path(product, lang)
        name = self.title(product, lang)
        years: dict[str, list[MonthLink]] = {}
        for month, count in months:
            years.setdefault(month[:4], []).append(
                MonthLink(month, l10n.month_name(month, lang), l10n.number(count, lang)))
        return _page(
            "product_index.html",
            self._frame(here, lang, alternates=self._alternates(langs, lambda code: index_path(product, code)),
                        feeds=[(name, lang, feed_path(product, lang))],
                        switch=[(code, index_path(product, code)) for code in langs]),
            name=name, count=l10n.count(total, lang), rows=[_row(here, product, lang, name, e) for e in recent],
            archive=list(years.items()), feed_href=_rel(here, feed_path(product, lang)),
        )

    def site_index(self, series: Sequence[tuple[str, str, Entry, int]]) -> str:
        """`index.html`: one card per product and language: (product, lang, latest, editions)."""
        cards = []
        for product, code, latest, count in series:
            name = self.title(product, code)
            cards.append(Card(
                lang=code, rtl=l10n.rtl(code), language=l10n.language_name(code), words=l10n.words(code), name=name,
                index_href=index_path(product, code), edition_href=edition_path(product, latest.date, code),
                feed_href=feed_path(product, code), date=latest.date, day=l10n.long_date(latest.date, code),
                own=own_title(latest.title, name, product, latest.date, code), editions=l10n.count(count, code),
            ))
        feeds = [(self.title(p, code), code, feed_path(p, code)) for p, code, _, _ in series]
        return _page("site_index.html", self._frame(SITE_INDEX, self.site_lang(), feeds=feeds, wide=True),
                     cards=cards)

    def feed(self, product: str, lang: str, entries: Sequence[tuple[Entry, Artifact]]) -> str:
        """`<product>/<lang>/feed.atom`, newest entry first; `updated` is each edition's first
        publication time (never the time of rendering), so rendering again changes nothing."""
        here = feed_path(product, lang)
        return templating.xml_templates().get_template("feed.atom").render(
            product=product, lang=lang, name=self.title(product, lang), site_title=self.site_title,
            updated=max((e.corrected or e.published for e, _ in entries), default="1970-01-01T00:00:00Z"),
            self_href=self._url(here, here), index_href=self._url(here, index_path(product, lang)),
            entries=[self._feed_entry(product, lang, entry, art) for entry, art in entries],
        )

    def _feed_entry(self, product: str, lang: str, entry: Entry, art: Artifact) -> str:
        key = (product, lang, entry.date, art.sha256, entry.published, entry.corrected or "", entry.note or "")
        cached = self._entries.get(key)
        if cached is not None:
            return cached
        name = self.title(product, lang)
        correction = self._correction(entry, lang)
        content = _parts().feed_content(art.summary, items_html(art, lang), correction)
        time = feed_time(entry)
        text: str = _atom_parts().entry(
            product=product, lang=lang, date=entry.date, own=own_title(art.title, name, product, entry.date, lang),
            name=name, day=l10n.long_date(entry.date, lang), time=time,
            href=self._url(feed_path(product, lang), edition_path(product, entry.date, lang)),
            summary=art.summary, content=str(content),  # text: the feed escapes the HTML once more
            updated=feed_time(entry, entry.corrected) if entry.corrected else time,
        )
        self._entries.put(key, text)
        return text


# --- templates ----------------------------------------------------------------------------------


def _page(template: str, frame: Mapping[str, Any], **context: Any) -> str:
    return templating.html_templates().get_template(template).render(frame, **context)


@functools.cache
def _parts() -> Any:
    """parts.html's macros (each returns escaped HTML, kept as such when a template prints it)."""
    return templating.html_templates().get_template("parts.html").module


@functools.cache
def _atom_parts() -> Any:
    return templating.xml_templates().get_template("entry.atom").module


def _row(here: str, product: str, lang: str, name: str, e: Entry) -> str:
    return _row_html(_rel(here, edition_path(product, e.date, lang)), e.date, l10n.long_date(e.date, lang),
                     own_title(e.title, name, product, e.date, lang))


@functools.lru_cache(maxsize=4096)
def _row_html(href: str, date: str, day: str, title: str | None) -> str:
    """An edition in a list of editions, escaped HTML (kept: a product's index and months are
    rendered again at every delivery, and their rows seldom change)."""
    row: str = _parts().row(href, date, day, title)
    return row


# Words that only join a product's name to a date ("Daily Brief for 1 December", "Resumen
# diario del 1 de diciembre"): a title made of these, the name and the date says nothing new.
_JOINERS = frozenset({
    "for", "of", "on", "the", "edition", "issue", "de", "del", "la", "el", "edición", "du", "le", "vom", "von",
    "am", "ausgabe", "do", "da", "di", "edizione", "edição", "édition", "y", "and",
})
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


@functools.lru_cache(maxsize=4096)
def own_title(title: str, name: str, product: str, date: str, lang: str) -> str | None:
    """The edition's own title, or None when it only repeats what the heading already says (the
    product's name or slug and the date, in any of its spellings: `daily-brief for 2026-12-01`
    under `Daily Brief — 1 December 2026`); cards, archive rows, feeds and the browser tab then
    show the heading alone."""
    told = set(_TOKEN.findall(" ".join((name, product, date, l10n.long_date(date, lang),
                                        l10n.month_title(date[:7], lang),
                                        dt.date.fromisoformat(date).strftime("%d %B %b %Y %m"))).casefold()))
    words = _TOKEN.findall(title.casefold())
    return title if any(w not in told and w not in _JOINERS for w in words) else None


def feed_time(entry: Entry, stamp: str | None = None) -> str:
    """An entry's Atom time: its publication time (or `stamp`: its correction's), with a fractional
    second taken from the edition date, so editions published within the same second (a backfill)
    still have distinct times, ordered as their dates are. Fixed by the entry alone: rendering
    again yields the same bytes."""
    when = stamp if stamp is not None else entry.published
    fraction = dt.date.fromisoformat(entry.date).toordinal() % 1_000_000
    return when.replace("Z", f".{fraction:06d}Z") if when.endswith("Z") else when


# Where a run-together name may break (`International|Intelligence.org`): parts.html's `brand`.
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")

_public_url = functools.lru_cache(maxsize=4096)(is_public_http_url)


def _source(source: Mapping[str, str]) -> PageSource:
    # Only http(s) links to public hosts become links; anything else is shown as inert text.
    return PageSource(source["title"], source["url"] if _public_url(source["url"]) else None)


_ITEMS: Lru[tuple[str, str], str] = Lru(512)


def items_html(art: Artifact, lang: str) -> str:
    """The edition's items as `<li>`s, escaped HTML (kept by the artifact's hash: an edition is
    rendered again as its neighbours arrive, and its feed entry with it)."""
    key = (art.sha256, lang)
    cached = _ITEMS.get(key)
    if cached is not None:
        return cached
    items = [PageItem(item["headline"], item["summary"], tuple(_source(s) for s in item["sources"]))
             for item in art.items]
    text: str = _parts().items(items, l10n.word(lang, "sources"))
    _ITEMS.put(key, text)
    return text
