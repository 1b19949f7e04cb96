"""The static site's pages and feeds: pure functions of what they are given, so the same
editions always render to the same bytes.

Layout under the public root (every name is made of a validated product, date and language):

    index.html                          the site index: every product and language, latest edition
    <product>/<date>/<lang>.html        an edition (and <lang>.json, the artifact itself)
    <product>/<lang>/index.html         the product's latest editions and its archive by month
    <product>/<lang>/<YYYY-MM>.html     one month of editions
    <product>/<lang>/feed.atom          the latest editions as Atom 1.0

Dates, month names, language names and the interface's words come from `l10n`; the
stylesheet is package data (`site.css`). Every text that came from the model or the configuration is
escaped once, where it is inserted (stdlib `html.escape` / `xml.sax.saxutils`).
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
from importlib import resources
from xml.sax.saxutils import escape as xml_escape
from xml.sax.saxutils import quoteattr

from iipub.edition.compose import Artifact
from iipub.edition.paths import edition_path, feed_path, index_path, json_path, month_path
from iipub.edition.validate import is_public_http_url
from iipub.publish.sinks import l10n
from iipub.publish.sinks.l10n import DEFAULT_LANG
from iipub.publish.sinks.lru import Lru
from iipub.settings.config import Product, display_title

# Bump when the pages' shape changes: a site rendered by another version is rendered again in full.
RENDER_VERSION = "site-2"
INDEX_ENTRIES = 30  # editions listed on a product's index page
FEED_ENTRIES = 50  # entries in a feed
SITE_INDEX = "index.html"
LANG_PATTERN = r"^[a-z]{2,3}(?:-[a-z0-9]{2,8})*$"  # language codes the sink accepts (in paths and URLs)
LANG_RE = re.compile(LANG_PATTERN)

# Characters that are invalid in XML 1.0 or can disguise text (bidi overrides). Validation
# already refuses them; the sink replaces them anyway so no event can break a page or feed.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")
_CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
_PUBLISHED_RE = re.compile(rb'<time class="published" datetime="(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)">')
# The stylesheet every page carries inline (the CSP allows no other): package data, one rule
# fragment a line, joined without separators (the bytes pages always had).
_CSS = "".join(line.strip() for line in
               (resources.files(__package__) / "site.css").read_text(encoding="utf-8").splitlines())

@dataclass(frozen=True)
class Entry:
    """One published edition as the site lists it (the manifest's record of it)."""

    date: str  # YYYY-MM-DD
    title: str  # the edition's own title (model output)
    sha256: str  # of the artifact JSON
    published: str  # when it was first published: ISO 8601 UTC, seconds, `Z`
    guessed: bool = False  # publication time unknown when the manifest was rebuilt (midnight of the date)


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


def midnight(date: str) -> str:
    return f"{date}T00:00:00Z"


# --- escaping ---------------------------------------------------------------------------------


def _clean(text: str) -> str:
    return _UNSAFE.sub("\ufffd", text)


def _h(text: str) -> str:
    return html.escape(_clean(text), quote=True)


def _x(text: str) -> str:
    return xml_escape(_clean(text))


def _xa(text: str) -> str:
    return quoteattr(_clean(text))


# --- the site ---------------------------------------------------------------------------------


class Site:
    """What every page shares: the site's title and base URL, the products' display titles
    and language order (from the configuration; display only)."""

    def __init__(self, site_title: str = "InternationalIntelligence.org", base_url: str = "",
                 products: Mapping[str, Product] | None = None) -> None:
        self.site_title = site_title
        self.base_url = base_url.rstrip("/")
        self.products = dict(products or {})
        # Rendered feed entries by (product, lang, date, sha256, published): a feed is rendered
        # again at each new edition, and 49 of its 50 entries are the same as last time.
        self._entries: Lru[tuple[str, str, str, str, str], str] = Lru(1024)

    def fingerprint(self) -> str:
        """Everything the pages depend on besides the editions: a change re-renders the whole site."""
        from babel import __version__ as babel_version

        doc = {
            "render": RENDER_VERSION,
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

    def _page(self, *, here: str, lang: str, title: str, body: str, alternates: Sequence[tuple[str, str]] = (),
              feeds: Sequence[tuple[str, str, str]] = (), wide: bool = False) -> str:
        """`alternates`: (hreflang, root-relative path) of this page in every language, the
        x-default last; `feeds`: (title, hreflang, root-relative path)."""
        direction = ' dir="rtl"' if l10n.rtl(lang) else ""
        head = [
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
            f"<title>{_h(title)}</title>",
        ]
        if self.base_url:
            head.append(f'<link rel="canonical" href="{_h(self._url(here, here))}">')
        head += [f'<link rel="alternate" hreflang="{_h(code)}" href="{_h(self._url(here, path))}">'
                 for code, path in alternates]
        head += [f'<link rel="alternate" type="application/atom+xml" title="{_h(ftitle)}" hreflang="{_h(code)}" '
                 f'href="{_h(self._url(here, path))}">' for ftitle, code, path in feeds]
        head.append(f"<style>{_CSS}</style>")
        cls = ' class="wide"' if wide else ""
        return (
            "<!doctype html>\n"
            f'<html lang="{_h(lang)}"{direction}>\n<head>\n' + "\n".join(head) + "\n</head>\n"
            f"<body{cls}>\n{body}\n</body>\n</html>\n"
        )

    def _top(self, here: str, lang: str, switch: Sequence[tuple[str, str]]) -> str:
        """The header: the site's name (to the site index) and the language switcher."""
        return (f'<header><a class="brand" href="{_h(_rel(here, SITE_INDEX))}">{_breakable(self.site_title)}</a>'
                f"{_switcher(here, lang, switch)}</header>")

    def _footer(self, here: str, product: str, lang: str, extra: str = "") -> str:
        feed = _rel(here, feed_path(product, lang))
        return (f'<footer><a href="{_h(feed)}" type="application/atom+xml">{_h(l10n.word(lang, "feed"))}</a>'
                f'{extra} · <a href="{_h(_rel(here, SITE_INDEX))}">{_h(self.site_title)}</a></footer>')

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
        day = l10n.long_date(date, lang)
        own = own_title(art.title, name, product, date, lang)
        month = date[:7]
        pager = _pager(lang, "editions_nav", *(
            None if e is None else (_rel(here, edition_path(product, e.date, lang)), l10n.word(lang, word),
                                    _time(e.date, l10n.long_date(e.date, lang)))
            for e, word in ((prev, "prev"), (nxt, "next"))
        ))
        body = (
            self._top(here, lang, [(code, edition_path(product, date, code)) for code in langs]) + "\n<main>\n"
            f'<nav class="crumbs" aria-label="{_h(l10n.word(lang, "breadcrumbs"))}">'
            f'<a href="{_h(_rel(here, index_path(product, lang)))}">{_h(name)}</a> › '
            f'<a href="{_h(_rel(here, month_path(product, lang, month)))}">'
            f'{_h(l10n.cap(l10n.month_title(month, lang)))}</a>'
            "</nav>\n<article>\n"
            f"<h1>{_h(name)} — {_time(date, day)}</h1>\n"
            f'<p class="meta">{_h(l10n.word(lang, "published"))} <time class="published" '
            f'datetime="{_h(entry.published)}">{_h(l10n.published_text(entry.published, lang))}</time></p>\n'
            + (f'<h2 class="title">{_h(own)}</h2>\n' if own else "") +
            f'<p class="lede text">{_h(art.summary)}</p>\n'
            f'<ol class="items">\n{items_html(art, lang)}\n</ol>\n</article>\n{pager}</main>\n'
            + self._footer(here, product, lang,
                           f' · <a href="{_h(_rel(here, json_path(product, date, lang)))}" '
                           'type="application/json">JSON</a>')
        )
        return self._page(
            here=here, lang=lang, title=f"{own + ' — ' if own else ''}{name} — {day} — {self.site_title}", body=body,
            alternates=self._alternates(langs, lambda code: edition_path(product, date, code)),
            feeds=[(name, lang, feed_path(product, lang))],
        )

    def month_page(self, product: str, lang: str, month: str, entries: Sequence[Entry], prev_month: str | None,
                   next_month: str | None, langs: Sequence[str]) -> str:
        """`<product>/<lang>/<YYYY-MM>.html`: the month's editions, newest first like every other
        list of editions (`entries` may come in either order). `langs`: the languages with
        editions this month, in order."""
        here = month_path(product, lang, month)
        name = self.title(product, lang)
        heading = f"{name} — {l10n.month_title(month, lang)}"
        newest_first = sorted(entries, key=lambda e: e.date, reverse=True)
        rows = "\n".join(_edition_row(here, product, lang, name, e) for e in newest_first)
        pager = _pager(lang, "months_nav", *(
            None if m is None else (f"{m}.html", l10n.word(lang, word), _h(l10n.cap(l10n.month_title(m, lang))))
            for m, word in ((prev_month, "prev_month"), (next_month, "next_month"))
        ))
        body = (
            self._top(here, lang, [(code, month_path(product, code, month)) for code in langs]) + "\n<main>\n"
            f'<nav class="crumbs" aria-label="{_h(l10n.word(lang, "breadcrumbs"))}">'
            f'<a href="index.html">{_h(name)}</a></nav>\n'
            f"<h1>{_h(heading)}</h1>\n"
            f'<p class="meta">{_h(l10n.count(len(entries), lang))}</p>\n'
            f'<ol class="editions">\n{rows}\n</ol>\n{pager}</main>\n' + self._footer(here, product, lang)
        )
        return self._page(
            here=here, lang=lang, title=f"{heading} — {self.site_title}", body=body,
            alternates=self._alternates(langs, lambda code: month_path(product, code, month)),
            feeds=[(name, lang, feed_path(product, lang))],
        )

    def index_page(self, product: str, lang: str, recent: Sequence[Entry], months: Sequence[tuple[str, int]],
                   total: int, langs: Sequence[str]) -> str:
        """`<product>/<lang>/index.html`: the latest editions, newest first, and every month.
        `months`: (YYYY-MM, editions) newest first; `langs`: the product's languages, in order."""
        here = index_path(product, lang)
        name = self.title(product, lang)
        rows = "\n".join(_edition_row(here, product, lang, name, e) for e in recent)
        years: dict[str, list[tuple[str, int]]] = {}
        for month, count in months:
            years.setdefault(month[:4], []).append((month, count))
        archive = "\n".join(_year_block(lang, year, tuple(ms)) for year, ms in years.items())
        body = (
            self._top(here, lang, [(code, index_path(product, code)) for code in langs]) + "\n<main>\n"
            f"<h1>{_h(name)}</h1>\n"
            f'<p class="meta">{_h(l10n.count(total, lang))} · '
            f'<a href="feed.atom" type="application/atom+xml">{_h(l10n.word(lang, "feed"))}</a></p>\n'
            f'<h2>{_h(l10n.word(lang, "latest"))}</h2>\n<ol class="editions">\n{rows}\n</ol>\n'
            f'<h2>{_h(l10n.word(lang, "archive"))}</h2>\n<div class="months">\n{archive}\n</div>\n</main>\n'
            + self._footer(here, product, lang)
        )
        return self._page(
            here=here, lang=lang, title=f"{name} — {self.site_title}", body=body,
            alternates=self._alternates(langs, lambda code: index_path(product, code)),
            feeds=[(name, lang, feed_path(product, lang))],
        )

    def site_index(self, series: Sequence[tuple[str, str, Entry, int]]) -> str:
        """`index.html`: one card per product and language: (product, lang, latest, editions)."""
        here = SITE_INDEX
        lang = self.site_lang()
        cards = []
        for product, code, latest, count in series:
            name = self.title(product, code)
            direction = ' dir="rtl"' if l10n.rtl(code) else ""
            own = own_title(latest.title, name, product, latest.date, code)
            cards.append(
                f'<li lang="{_h(code)}"{direction}>'
                f'<p class="lang">{_h(l10n.language_name(code))}</p>'
                f'<h2><a href="{_h(index_path(product, code))}">{_h(name)}</a></h2>'
                f'<p>{_h(l10n.word(code, "latest_edition"))}: '
                f'<a href="{_h(edition_path(product, latest.date, code))}">'
                f"{_time(latest.date, l10n.long_date(latest.date, code))}</a></p>"
                + (f'<p class="title">{_h(own)}</p>' if own else "")
                + f'<p class="meta"><a href="{_h(index_path(product, code))}">{_h(l10n.count(count, code))}</a> · '
                f'<a href="{_h(feed_path(product, code))}" type="application/atom+xml">'
                f'{_h(l10n.word(code, "feed"))}</a></p></li>'
            )
        body = (
            "<main>\n"
            f"<h1>{_breakable(self.site_title)}</h1>\n"
            f'<ul class="cards">\n' + "\n".join(cards) + "\n</ul>\n</main>\n"
            f"<footer>{_h(self.site_title)}</footer>"
        )
        feeds = [(self.title(p, code), code, feed_path(p, code)) for p, code, _, _ in series]
        return self._page(here=here, lang=lang, title=self.site_title, body=body, feeds=feeds, wide=True)

    def feed(self, product: str, lang: str, entries: Sequence[tuple[Entry, Artifact]]) -> str:
        """`<product>/<lang>/feed.atom`, newest entry first; `updated` is each edition's first
        publication time (never the time of rendering), so rendering again changes nothing."""
        here = feed_path(product, lang)
        name = self.title(product, lang)
        parts = [self._feed_entry(product, lang, entry, art) for entry, art in entries]
        updated = max((e.published for e, _ in entries), default="1970-01-01T00:00:00Z")
        return (
            '<?xml version="1.0" encoding="utf-8"?>\n'
            f'<feed xmlns="http://www.w3.org/2005/Atom" xml:lang={_xa(lang)}>\n'
            f"  <id>{_x(f'urn:iipub:{product}:{lang}')}</id>\n"
            f"  <title>{_x(f'{name} — {self.site_title}')}</title>\n"
            f"  <updated>{_x(updated)}</updated>\n"
            f"  <author><name>{_x(self.site_title)}</name></author>\n"
            f'  <link rel="self" type="application/atom+xml" href={_xa(self._url(here, here))}/>\n'
            f'  <link rel="alternate" type="text/html" href={_xa(self._url(here, index_path(product, lang)))}/>\n'
            + "".join(parts)
            + "</feed>\n"
        )


    def _feed_entry(self, product: str, lang: str, entry: Entry, art: Artifact) -> str:
        key = (product, lang, entry.date, art.sha256, entry.published)
        cached = self._entries.get(key)
        if cached is not None:
            return cached
        href = self._url(feed_path(product, lang), edition_path(product, entry.date, lang))
        content = f'<p>{_h(art.summary)}</p><ol>{items_html(art, lang)}</ol>'
        name = self.title(product, lang)
        own = own_title(art.title, name, product, entry.date, lang)
        title = own or f"{name} — {l10n.long_date(entry.date, lang)}"
        when = feed_time(entry)
        text = (
            "  <entry>\n"
            f"    <id>{_x(f'urn:iipub:{product}:{lang}:{entry.date}')}</id>\n"
            f"    <title>{_x(title)}</title>\n"
            f"    <published>{_x(when)}</published>\n"
            f"    <updated>{_x(when)}</updated>\n"
            f'    <link rel="alternate" type="text/html" href={_xa(href)}/>\n'
            f'    <summary type="text">{_x(art.summary)}</summary>\n'
            f'    <content type="html">{_x(content)}</content>\n'
            "  </entry>\n"
        )
        self._entries.put(key, text)
        return text


# --- fragments --------------------------------------------------------------------------------


def _time(date: str, text: str) -> str:
    return f'<time datetime="{_h(date)}">{_h(text)}</time>'


@functools.lru_cache(maxsize=4096)
def _year_block(lang: str, year: str, months: tuple[tuple[str, int], ...]) -> str:
    """One year of a product index's archive (cached: the index is rendered at every delivery,
    and only the current year's counts change)."""
    return (f"<h3>{_h(year)}</h3>\n<ul>"
            + "".join(f'<li><a href="{_h(month)}.html">{_h(l10n.month_name(month, lang))}</a> '
                      f'<span class="count">({_h(l10n.number(count, lang))})</span></li>' for month, count in months)
            + "</ul>")


def _switcher(here: str, lang: str, switch: Sequence[tuple[str, str]]) -> str:
    """Links to this page in each language (`switch`: (lang, root-relative path)), when there are two or more."""
    if len(switch) < 2:
        return ""
    links = []
    for code, path in switch:
        current = ' aria-current="page"' if code == lang else ' rel="alternate"'
        links.append(f'<li><a href="{_h(_rel(here, path))}" hreflang="{_h(code)}" lang="{_h(code)}"{current}>'
                     f"{_h(l10n.language_name(code))}</a></li>")
    return f'<nav class="langs" aria-label="{_h(l10n.word(lang, "languages"))}"><ul>{"".join(links)}</ul></nav>'


def _pager(lang: str, label: str, *links_in: tuple[str, str, str] | None) -> str:
    """Previous/next links, each (href, label, HTML of the target's name) or None."""
    links = []
    for rel, link in zip(("prev", "next"), links_in, strict=True):
        if link is not None:
            href, word, inner = link
            arrow = ("← " + word) if rel == "prev" else (word + " →")
            links.append(f'<a class="{rel}" rel="{rel}" href="{_h(href)}"><small>{_h(arrow)}</small>{inner}</a>')
    if not links:
        return ""
    return f'<nav class="pager" aria-label="{_h(l10n.word(lang, label))}">{"".join(links)}</nav>\n'


def _edition_row(here: str, product: str, lang: str, name: str, e: Entry) -> str:
    return _row(_rel(here, edition_path(product, e.date, lang)), lang, e.date,
                own_title(e.title, name, product, e.date, lang))


@functools.lru_cache(maxsize=4096)
def _row(href: str, lang: str, date: str, title: str | None) -> str:
    return (f'<li><a href="{_h(href)}">{_time(date, l10n.long_date(date, lang))}</a>'
            + (f'<span class="title">{_h(title)}</span>' if title else "") + "</li>")


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


def feed_time(entry: Entry) -> str:
    """An entry's Atom time: its publication time, with a fractional second taken from the edition
    date, so editions published within the same second (a backfill) still have distinct times,
    ordered as their dates are. Fixed by the entry alone: rendering again yields the same bytes."""
    fraction = dt.date.fromisoformat(entry.date).toordinal() % 1_000_000
    return entry.published.replace("Z", f".{fraction:06d}Z") if entry.published.endswith("Z") else entry.published


_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")


def _breakable(text: str) -> str:
    """Escaped text with a line-break opportunity (`<wbr>`) between the words of a run-together
    name: `International<wbr>Intelligence.org` breaks there on a phone, not at the dot."""
    return "<wbr>".join(_h(part) for part in _CAMEL.split(text))


_public_url = functools.lru_cache(maxsize=4096)(is_public_http_url)


def _source_html(source: Mapping[str, str]) -> str:
    # Only http(s) links to public hosts become links; anything else is shown as inert text.
    if _public_url(source["url"]):
        return f'<a href="{_h(source["url"])}" rel="noopener nofollow">{_h(source["title"])}</a>'
    return f'<span class="source">{_h(source["title"])}</span>'


_ITEMS: Lru[tuple[str, str], str] = Lru(512)


def items_html(art: Artifact, lang: str) -> str:
    """The edition's items as `<li>`s (kept by the artifact's hash: an edition is rendered again
    as its neighbours arrive, and its feed entry with it)."""
    key = (art.sha256, lang)
    cached = _ITEMS.get(key)
    if cached is not None:
        return cached
    text = _items_html(art, lang)
    _ITEMS.put(key, text)
    return text


def _items_html(art: Artifact, lang: str) -> str:
    parts = []
    for item in art.items:
        sources = "".join(f"<li>{_source_html(s)}</li>" for s in item["sources"])
        parts.append(
            f'<li><h3>{_h(item["headline"])}</h3><p class="text">{_h(item["summary"])}</p>'
            f'<ul class="sources" aria-label="{_h(l10n.word(lang, "sources"))}">{sources}</ul></li>'
        )
    return "\n".join(parts)
