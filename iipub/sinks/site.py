"""The static site's pages and feeds: pure functions of what they are given, so the same
editions always render to the same bytes.

Layout under the public root (every name is made of a validated product, date and language):

    index.html                          the site index: every product and language, latest edition
    <product>/<date>/<lang>.html        an edition (and <lang>.json, the artifact itself)
    <product>/<lang>/index.html         the product's latest editions and its archive by month
    <product>/<lang>/<YYYY-MM>.html     one month of editions
    <product>/<lang>/feed.atom          the latest editions as Atom 1.0

Dates, month names and language names come from CLDR through Babel (per locale patterns,
not hand tables); the few interface words are translated here for English and Spanish, with
English for any other language. Every text that came from the model or the configuration is
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
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape as xml_escape
from xml.sax.saxutils import quoteattr

from ..compose import Artifact
from ..config import Product, display_title
from ..validate import is_public_http_url
from .lru import Lru

if TYPE_CHECKING:
    from babel import Locale

# Bump when the pages' shape changes: a site rendered by another version is rendered again in full.
RENDER_VERSION = "site-2"
INDEX_ENTRIES = 30  # editions listed on a product's index page
FEED_ENTRIES = 50  # entries in a feed
SITE_INDEX = "index.html"
LANG_PATTERN = r"^[a-z]{2,3}(?:-[a-z0-9]{2,8})*$"  # language codes the sink accepts (in paths and URLs)
LANG_RE = re.compile(LANG_PATTERN)
DEFAULT_LANG = "en"

# Characters that are invalid in XML 1.0 or can disguise text (bidi overrides). Validation
# already refuses them; the sink replaces them anyway so no event can break a page or feed.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")
_CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
_PUBLISHED_RE = re.compile(rb'<time class="published" datetime="(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)">')
# CLDR locales for the site's language codes where the bare language is not the one wanted:
# `en` is CLDR's American English ("December 1, 2026", 12-hour clock); an international site
# writes "1 December 2026" and 06:00 (`en_GB`).
_LOCALES = {"en": "en_GB"}

_CSS = (
    ":root{color-scheme:light dark;--fg:#1b1c1e;--muted:#5d6168;--line:#e2e4e8;--accent:#0b57d0;--bg:#fff;"
    "--card:#f5f6f8}"
    "@media (prefers-color-scheme:dark){:root{--fg:#e6e8eb;--muted:#a0a5ad;--line:#353a41;--accent:#8ab4f8;"
    "--bg:#121417;--card:#1c1f24}}"
    "*{box-sizing:border-box}"
    "html{-webkit-text-size-adjust:100%;text-size-adjust:100%}"
    "body{margin:0;background:var(--bg);color:var(--fg);"
    "font:17px/1.6 Charter,'Bitstream Charter','Iowan Old Style',Georgia,'Noto Serif',serif}"
    "body>header,body>main,body>footer{max-width:44rem;margin:0 auto;padding:0 1.25rem}"
    "body.wide>header,body.wide>main,body.wide>footer{max-width:64rem}"
    ".ui,body>header,nav,.meta,.crumbs,footer,h1,h2,h3,.cards,ol.editions,.months"
    "{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'Noto Sans',sans-serif}"
    "a{color:var(--accent);text-underline-offset:.15em}"
    "body>header{display:flex;flex-wrap:wrap;align-items:center;justify-content:space-between;gap:.5rem 1rem;"
    "padding-top:.9rem;padding-bottom:.9rem;border-bottom:1px solid var(--line)}"
    ".brand{font-weight:650;font-size:1rem;color:var(--fg);text-decoration:none;letter-spacing:.01em}"
    "nav.langs ul{display:flex;flex-wrap:wrap;gap:.4rem;list-style:none;margin:0;padding:0}"
    "nav.langs a{display:inline-block;font-size:.85rem;line-height:1.2;padding:.3rem .75rem;"
    "border:1px solid var(--line);border-radius:999px;color:var(--fg);text-decoration:none}"
    "nav.langs a:hover{border-color:var(--muted)}"
    "nav.langs a[aria-current]{background:var(--fg);border-color:var(--fg);color:var(--bg)}"
    ".crumbs{margin:1.75rem 0 .3rem;font-size:.85rem;color:var(--muted)}"
    ".crumbs a{color:inherit}"
    "h1{font-size:2rem;line-height:1.2;font-weight:700;letter-spacing:-.015em;margin:.2rem 0 .5rem;"
    "overflow-wrap:break-word}"
    "main>h1:first-child{margin-top:1.75rem}"
    ".meta{margin:0 0 1.5rem;font-size:.85rem;color:var(--muted)}"
    "h2{font-size:1.3rem;line-height:1.3;margin:2rem 0 .6rem}"
    "h2.title{font-family:inherit;font-size:1.45rem;margin:1.5rem 0 .6rem}"
    ".lede{font-size:1.1rem}"
    ".text{white-space:pre-line}"
    "ol.items{list-style:none;margin:2rem 0 1rem;padding:0;counter-reset:item}"
    "ol.items>li{counter-increment:item;border-top:1px solid var(--line);padding:1.2rem 0}"
    "ol.items h3{font-size:1.1rem;line-height:1.35;font-weight:650;margin:0 0 .4rem}"
    "ol.items h3::before{content:counter(item) '. ';color:var(--muted);font-weight:500}"
    "ol.items p{margin:.3rem 0}"
    ".sources{display:flex;flex-wrap:wrap;gap:.2rem 1rem;list-style:none;margin:.5rem 0 0;padding:0;"
    "font:.85rem/1.5 system-ui,sans-serif;color:var(--muted)}"
    ".sources li::before{content:'↗ ';color:var(--muted)}"
    ".sources a{overflow-wrap:anywhere}"
    "nav.pager{display:flex;justify-content:space-between;gap:1rem;margin:1.5rem 0;padding:1rem 0;"
    "border-top:1px solid var(--line);font-size:.95rem}"
    "nav.pager a{text-decoration:none;max-width:48%}"
    "nav.pager .next{margin-left:auto;text-align:right}"
    "nav.pager small{display:block;color:var(--muted);font-size:.78rem;text-transform:uppercase;"
    "letter-spacing:.05em}"
    "ol.editions{list-style:none;margin:.5rem 0 1.5rem;padding:0}"
    "ol.editions li{display:flex;flex-wrap:wrap;gap:.1rem 1rem;padding:.6rem 0;border-bottom:1px solid var(--line)}"
    "ol.editions li>a{flex:0 0 11.5rem;font-weight:600}"
    ":lang(es) ol.editions li>a,:lang(pt) ol.editions li>a,:lang(fr) ol.editions li>a{flex-basis:16.5rem}"
    "ol.editions .title{flex:1 1 18rem;color:var(--muted)}"
    ".months{margin:0 0 1.5rem}"
    ".months h3{font-size:1rem;margin:1rem 0 .3rem}"
    ".months ul{display:flex;flex-wrap:wrap;gap:.3rem 1rem;list-style:none;margin:0;padding:0}"
    ".count{color:var(--muted);font-size:.85em}"
    ".cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(22rem,1fr));gap:1rem;list-style:none;"
    "margin:1.5rem 0;padding:0}"
    ".cards>li{background:var(--card);border:1px solid var(--line);border-radius:.8rem;padding:1rem 1.2rem}"
    ".cards h2{margin:0;font-size:1.2rem}"
    ".cards h2 a{color:var(--fg);text-decoration:none}"
    ".cards p{margin:.35rem 0}"
    ".cards .lang{font-size:.8rem;color:var(--muted);text-transform:uppercase;letter-spacing:.05em}"
    ".cards .title{font-family:Charter,Georgia,serif}"
    "footer{margin-top:2rem!important;padding-top:1rem!important;padding-bottom:2.5rem!important;"
    "border-top:1px solid var(--line);font-size:.85rem;color:var(--muted)}"
    "footer a{color:inherit}"
    "@media (max-width:40rem){body{font-size:16px}h1{font-size:1.55rem}h2.title{font-size:1.25rem}"
    "ol.editions li>a{flex-basis:100%}nav.pager a{max-width:50%}.cards{grid-template-columns:1fr}}"
)

# The interface's own words. Plural forms are keyed by CLDR plural category.
_WORDS: dict[str, dict[str, Any]] = {
    "en": {
        "languages": "Languages", "breadcrumbs": "Breadcrumbs", "published": "Published",
        "sources": "Sources", "editions_nav": "More editions", "prev": "Previous edition",
        "next": "Next edition", "prev_month": "Previous month", "next_month": "Next month",
        "latest": "Latest editions", "archive": "Archive by month", "feed": "Atom feed",
        "latest_edition": "Latest edition", "all_editions": "All editions",
        "months_nav": "More months",
        "editions": {"one": "{n} edition", "other": "{n} editions"},
    },
    "es": {
        "languages": "Idiomas", "breadcrumbs": "Ruta de navegación", "published": "Publicado el",
        "sources": "Fuentes", "editions_nav": "Más ediciones", "prev": "Edición anterior",
        "next": "Edición siguiente", "prev_month": "Mes anterior", "next_month": "Mes siguiente",
        "latest": "Últimas ediciones", "archive": "Archivo por meses", "feed": "Canal Atom",
        "latest_edition": "Última edición", "all_editions": "Todas las ediciones",
        "months_nav": "Más meses",
        "editions": {"one": "{n} edición", "other": "{n} ediciones"},
    },
    "fr": {
        "languages": "Langues", "breadcrumbs": "Fil d’Ariane", "published": "Publié le",
        "sources": "Sources", "editions_nav": "Autres éditions", "prev": "Édition précédente",
        "next": "Édition suivante", "prev_month": "Mois précédent", "next_month": "Mois suivant",
        "latest": "Dernières éditions", "archive": "Archives par mois", "feed": "Flux Atom",
        "latest_edition": "Dernière édition", "all_editions": "Toutes les éditions",
        "months_nav": "Autres mois",
        "editions": {"one": "{n} édition", "other": "{n} éditions"},
    },
    "de": {
        "languages": "Sprachen", "breadcrumbs": "Navigationspfad", "published": "Veröffentlicht am",
        "sources": "Quellen", "editions_nav": "Weitere Ausgaben", "prev": "Vorherige Ausgabe",
        "next": "Nächste Ausgabe", "prev_month": "Vorheriger Monat", "next_month": "Nächster Monat",
        "latest": "Neueste Ausgaben", "archive": "Archiv nach Monaten", "feed": "Atom-Feed",
        "latest_edition": "Neueste Ausgabe", "all_editions": "Alle Ausgaben",
        "months_nav": "Weitere Monate",
        "editions": {"one": "{n} Ausgabe", "other": "{n} Ausgaben"},
    },
    "pt": {
        "languages": "Idiomas", "breadcrumbs": "Navegação estrutural", "published": "Publicado em",
        "sources": "Fontes", "editions_nav": "Mais edições", "prev": "Edição anterior",
        "next": "Próxima edição", "prev_month": "Mês anterior", "next_month": "Próximo mês",
        "latest": "Últimas edições", "archive": "Arquivo por mês", "feed": "Feed Atom",
        "latest_edition": "Última edição", "all_editions": "Todas as edições",
        "months_nav": "Mais meses",
        "editions": {"one": "{n} edição", "other": "{n} edições"},
    },
    "it": {
        "languages": "Lingue", "breadcrumbs": "Percorso", "published": "Pubblicato il",
        "sources": "Fonti", "editions_nav": "Altre edizioni", "prev": "Edizione precedente",
        "next": "Edizione successiva", "prev_month": "Mese precedente", "next_month": "Mese successivo",
        "latest": "Ultime edizioni", "archive": "Archivio per mese", "feed": "Feed Atom",
        "latest_edition": "Ultima edizione", "all_editions": "Tutte le edizioni",
        "months_nav": "Altri mesi",
        "editions": {"one": "{n} edizione", "other": "{n} edizioni"},
    },
    "ru": {
        "languages": "Языки", "breadcrumbs": "Навигация", "published": "Опубликовано",
        "sources": "Источники", "editions_nav": "Другие выпуски", "prev": "Предыдущий выпуск",
        "next": "Следующий выпуск", "prev_month": "Предыдущий месяц", "next_month": "Следующий месяц",
        "latest": "Последние выпуски", "archive": "Архив по месяцам", "feed": "Лента Atom",
        "latest_edition": "Последний выпуск", "all_editions": "Все выпуски",
        "months_nav": "Другие месяцы",
        "editions": {"one": "{n} выпуск", "few": "{n} выпуска", "many": "{n} выпусков", "other": "{n} выпуска"},
    },
    "ar": {
        "languages": "اللغات", "breadcrumbs": "مسار التنقل", "published": "نُشر في",
        "sources": "المصادر", "editions_nav": "إصدارات أخرى", "prev": "الإصدار السابق",
        "next": "الإصدار التالي", "prev_month": "الشهر السابق", "next_month": "الشهر التالي",
        "latest": "أحدث الإصدارات", "archive": "الأرشيف حسب الشهر", "feed": "موجز Atom",
        "latest_edition": "أحدث إصدار", "all_editions": "كل الإصدارات",
        "months_nav": "أشهر أخرى",
        "editions": {"zero": "{n} إصدار", "one": "إصدار واحد", "two": "إصداران", "few": "{n} إصدارات",
                     "many": "{n} إصدارًا", "other": "{n} إصدار"},
    },
    "zh": {
        "languages": "语言", "breadcrumbs": "导航路径", "published": "发布于",
        "sources": "来源", "editions_nav": "更多期次", "prev": "上一期",
        "next": "下一期", "prev_month": "上个月", "next_month": "下个月",
        "latest": "最新期次", "archive": "按月归档", "feed": "Atom 订阅",
        "latest_edition": "最新一期", "all_editions": "全部期次",
        "months_nav": "更多月份",
        "editions": {"other": "{n} 期"},
    },
    "ja": {
        "languages": "言語", "breadcrumbs": "パンくずリスト", "published": "公開日時",
        "sources": "出典", "editions_nav": "ほかの号", "prev": "前の号",
        "next": "次の号", "prev_month": "前の月", "next_month": "次の月",
        "latest": "最新号", "archive": "月別アーカイブ", "feed": "Atom フィード",
        "latest_edition": "最新号", "all_editions": "すべての号",
        "months_nav": "ほかの月",
        "editions": {"other": "{n} 号"},
    },
}


@dataclass(frozen=True)
class Entry:
    """One published edition as the site lists it (the manifest's record of it)."""

    date: str  # YYYY-MM-DD
    title: str  # the edition's own title (model output)
    sha256: str  # of the artifact JSON
    published: str  # when it was first published: ISO 8601 UTC, seconds, `Z`
    guessed: bool = False  # publication time unknown when the manifest was rebuilt (midnight of the date)


# --- paths ------------------------------------------------------------------------------------


def edition_path(product: str, date: str, lang: str) -> str:
    return f"{product}/{date}/{lang}.html"


def json_path(product: str, date: str, lang: str) -> str:
    return f"{product}/{date}/{lang}.json"


def index_path(product: str, lang: str) -> str:
    return f"{product}/{lang}/index.html"


def month_path(product: str, lang: str, month: str) -> str:
    return f"{product}/{lang}/{month}.html"


def feed_path(product: str, lang: str) -> str:
    return f"{product}/{lang}/feed.atom"


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


# --- locale -----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _locale(lang: str) -> Locale:
    from babel import Locale, UnknownLocaleError  # only a relay that publishes pays for Babel's import

    try:
        return Locale.parse(_LOCALES.get(lang, lang.replace("-", "_")))
    except (UnknownLocaleError, ValueError):
        return Locale.parse(_LOCALES[DEFAULT_LANG])


def _known_locale(lang: str) -> bool:
    from babel import Locale, UnknownLocaleError

    try:
        Locale.parse(lang.replace("-", "_"))
    except (UnknownLocaleError, ValueError):
        return False
    return True


def _words(lang: str) -> dict[str, Any]:
    """The interface's words in `lang`: its base language's table (every language the
    configuration accepts, `config.KNOWN_LANGUAGES`, has one), English for any other."""
    return _WORDS.get(lang.split("-")[0], _WORDS[DEFAULT_LANG])


def _word(lang: str, key: str) -> str:
    value = _words(lang)[key]
    assert isinstance(value, str)
    return value


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


@functools.lru_cache(maxsize=4096)
def long_date(date: str, lang: str) -> str:
    """`1 December 2026`, `1 de diciembre de 2026`: CLDR's long date of the language."""
    from babel.dates import format_date

    return format_date(dt.date.fromisoformat(date), "long", locale=_locale(lang))


@functools.lru_cache(maxsize=1024)
def month_title(month: str, lang: str) -> str:
    """`December 2026`, `diciembre de 2026`: CLDR's year-and-month skeleton."""
    from babel.dates import format_skeleton

    return format_skeleton("yMMMM", dt.date.fromisoformat(f"{month}-01"), locale=_locale(lang))


@functools.lru_cache(maxsize=1024)
def month_name(month: str, lang: str) -> str:
    """`December`, `diciembre`: CLDR's stand-alone month name."""
    from babel.dates import format_date

    return format_date(dt.date.fromisoformat(f"{month}-01"), "LLLL", locale=_locale(lang))


def published_text(stamp: str, lang: str) -> str:
    """`1 December 2026, 06:00 UTC`: the locale's long date and short time, joined by its own
    date-time pattern (as Babel's `format_datetime` joins them)."""
    from babel.dates import format_date, format_time, get_datetime_format

    when = dt.datetime.fromisoformat(stamp).astimezone(dt.UTC)
    loc = _locale(lang)
    joined = (str(get_datetime_format("long", locale=loc)).replace("'", "")
              .replace("{0}", format_time(when.time(), "short", locale=loc))
              .replace("{1}", format_date(when.date(), "long", locale=loc)))
    return f"{joined} UTC"


@functools.lru_cache(maxsize=64)
def language_name(lang: str) -> str:
    """The language's name in itself (`English`, `Español`), or its code if CLDR does not know it."""
    if not _known_locale(lang):
        return lang
    name = _locale(lang).get_language_name(_locale(lang)) or lang
    return _cap(name)


@functools.lru_cache(maxsize=1024)
def _count(n: int, lang: str) -> str:
    forms = _words(lang)["editions"]
    form = forms.get(_locale(lang).plural_form(n), forms["other"])
    return str(form).format(n=_number(n, lang))


def _rtl(lang: str) -> bool:
    return _known_locale(lang) and _locale(lang).character_order == "right-to-left"


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
        direction = ' dir="rtl"' if _rtl(lang) else ""
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
        return (f'<footer><a href="{_h(feed)}" type="application/atom+xml">{_h(_word(lang, "feed"))}</a>'
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
        day = long_date(date, lang)
        own = own_title(art.title, name, product, date, lang)
        month = date[:7]
        pager = _pager(lang, "editions_nav", *(
            None if e is None else (_rel(here, edition_path(product, e.date, lang)), _word(lang, word),
                                    _time(e.date, long_date(e.date, lang)))
            for e, word in ((prev, "prev"), (nxt, "next"))
        ))
        body = (
            self._top(here, lang, [(code, edition_path(product, date, code)) for code in langs]) + "\n<main>\n"
            f'<nav class="crumbs" aria-label="{_h(_word(lang, "breadcrumbs"))}">'
            f'<a href="{_h(_rel(here, index_path(product, lang)))}">{_h(name)}</a> › '
            f'<a href="{_h(_rel(here, month_path(product, lang, month)))}">{_h(_cap(month_title(month, lang)))}</a>'
            "</nav>\n<article>\n"
            f"<h1>{_h(name)} — {_time(date, day)}</h1>\n"
            f'<p class="meta">{_h(_word(lang, "published"))} <time class="published" '
            f'datetime="{_h(entry.published)}">{_h(published_text(entry.published, lang))}</time></p>\n'
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
        heading = f"{name} — {month_title(month, lang)}"
        newest_first = sorted(entries, key=lambda e: e.date, reverse=True)
        rows = "\n".join(_edition_row(here, product, lang, name, e) for e in newest_first)
        pager = _pager(lang, "months_nav", *(
            None if m is None else (f"{m}.html", _word(lang, word), _h(_cap(month_title(m, lang))))
            for m, word in ((prev_month, "prev_month"), (next_month, "next_month"))
        ))
        body = (
            self._top(here, lang, [(code, month_path(product, code, month)) for code in langs]) + "\n<main>\n"
            f'<nav class="crumbs" aria-label="{_h(_word(lang, "breadcrumbs"))}">'
            f'<a href="index.html">{_h(name)}</a></nav>\n'
            f"<h1>{_h(heading)}</h1>\n"
            f'<p class="meta">{_h(_count(len(entries), lang))}</p>\n'
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
            f'<p class="meta">{_h(_count(total, lang))} · '
            f'<a href="feed.atom" type="application/atom+xml">{_h(_word(lang, "feed"))}</a></p>\n'
            f'<h2>{_h(_word(lang, "latest"))}</h2>\n<ol class="editions">\n{rows}\n</ol>\n'
            f'<h2>{_h(_word(lang, "archive"))}</h2>\n<div class="months">\n{archive}\n</div>\n</main>\n'
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
            direction = ' dir="rtl"' if _rtl(code) else ""
            own = own_title(latest.title, name, product, latest.date, code)
            cards.append(
                f'<li lang="{_h(code)}"{direction}>'
                f'<p class="lang">{_h(language_name(code))}</p>'
                f'<h2><a href="{_h(index_path(product, code))}">{_h(name)}</a></h2>'
                f'<p>{_h(_word(code, "latest_edition"))}: '
                f'<a href="{_h(edition_path(product, latest.date, code))}">'
                f"{_time(latest.date, long_date(latest.date, code))}</a></p>"
                + (f'<p class="title">{_h(own)}</p>' if own else "")
                + f'<p class="meta"><a href="{_h(index_path(product, code))}">{_h(_count(count, code))}</a> · '
                f'<a href="{_h(feed_path(product, code))}" type="application/atom+xml">'
                f'{_h(_word(code, "feed"))}</a></p></li>'
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
        title = own or f"{name} — {long_date(entry.date, lang)}"
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


@functools.lru_cache(maxsize=1024)
def _number(n: int, lang: str) -> str:
    from babel.numbers import format_decimal

    return format_decimal(n, locale=_locale(lang))


@functools.lru_cache(maxsize=4096)
def _year_block(lang: str, year: str, months: tuple[tuple[str, int], ...]) -> str:
    """One year of a product index's archive (cached: the index is rendered at every delivery,
    and only the current year's counts change)."""
    return (f"<h3>{_h(year)}</h3>\n<ul>"
            + "".join(f'<li><a href="{_h(month)}.html">{_h(month_name(month, lang))}</a> '
                      f'<span class="count">({_h(_number(count, lang))})</span></li>' for month, count in months)
            + "</ul>")


def _switcher(here: str, lang: str, switch: Sequence[tuple[str, str]]) -> str:
    """Links to this page in each language (`switch`: (lang, root-relative path)), when there are two or more."""
    if len(switch) < 2:
        return ""
    links = []
    for code, path in switch:
        current = ' aria-current="page"' if code == lang else ' rel="alternate"'
        links.append(f'<li><a href="{_h(_rel(here, path))}" hreflang="{_h(code)}" lang="{_h(code)}"{current}>'
                     f"{_h(language_name(code))}</a></li>")
    return f'<nav class="langs" aria-label="{_h(_word(lang, "languages"))}"><ul>{"".join(links)}</ul></nav>'


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
    return f'<nav class="pager" aria-label="{_h(_word(lang, label))}">{"".join(links)}</nav>\n'


def _edition_row(here: str, product: str, lang: str, name: str, e: Entry) -> str:
    return _row(_rel(here, edition_path(product, e.date, lang)), lang, e.date,
                own_title(e.title, name, product, e.date, lang))


@functools.lru_cache(maxsize=4096)
def _row(href: str, lang: str, date: str, title: str | None) -> str:
    return (f'<li><a href="{_h(href)}">{_time(date, long_date(date, lang))}</a>'
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
    told = set(_TOKEN.findall(" ".join((name, product, date, long_date(date, lang), month_title(date[:7], lang),
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
            f'<ul class="sources" aria-label="{_h(_word(lang, "sources"))}">{sources}</ul></li>'
        )
    return "\n".join(parts)
