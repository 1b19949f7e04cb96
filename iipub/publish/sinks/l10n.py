"""The static site's words, dates and language names per language: CLDR through Babel (per
locale patterns, not hand tables) and the interface's few words, translated for every language
the configuration accepts (`config.KNOWN_LANGUAGES`), English for any other. Babel is imported
only when a page is rendered."""

from __future__ import annotations

import datetime as dt
import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from babel import Locale

DEFAULT_LANG = "en"

# CLDR locales for the site's language codes where the bare language is not the one wanted:
# `en` is CLDR's American English ("December 1, 2026", 12-hour clock); an international site
# writes "1 December 2026" and 06:00 (`en_GB`).
_LOCALES = {"en": "en_GB"}


# The interface's own words. Plural forms are keyed by CLDR plural category.
WORDS: dict[str, dict[str, Any]] = {
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


@functools.lru_cache(maxsize=64)
def locale_of(lang: str) -> Locale:
    from babel import Locale, UnknownLocaleError  # only a relay that publishes pays for Babel's import

    try:
        return Locale.parse(_LOCALES.get(lang, lang.replace("-", "_")))
    except (UnknownLocaleError, ValueError):
        return Locale.parse(_LOCALES[DEFAULT_LANG])


def known_locale(lang: str) -> bool:
    from babel import Locale, UnknownLocaleError

    try:
        Locale.parse(lang.replace("-", "_"))
    except (UnknownLocaleError, ValueError):
        return False
    return True


# The words of a correction or a withdrawal (rare pages: English for a language without its own).
NOTICE_WORDS: dict[str, dict[str, str]] = {
    "en": {"withdrawn_title": "Edition withdrawn", "withdrawn": "This edition was withdrawn on",
           "corrected": "Corrected on", "correction": "Correction"},
    "es": {"withdrawn_title": "Edición retirada", "withdrawn": "Esta edición se retiró el",
           "corrected": "Corregido el", "correction": "Corrección"},
    "fr": {"withdrawn_title": "Édition retirée", "withdrawn": "Cette édition a été retirée le",
           "corrected": "Corrigé le", "correction": "Correction"},
    "de": {"withdrawn_title": "Ausgabe zurückgezogen", "withdrawn": "Diese Ausgabe wurde zurückgezogen am",
           "corrected": "Korrigiert am", "correction": "Korrektur"},
}


def notice_word(lang: str, key: str) -> str:
    return NOTICE_WORDS.get(lang.split("-")[0], NOTICE_WORDS[DEFAULT_LANG])[key]


def words(lang: str) -> dict[str, Any]:
    """The interface's words in `lang`: its base language's table (every language the
    configuration accepts, `config.KNOWN_LANGUAGES`, has one), English for any other."""
    return WORDS.get(lang.split("-")[0], WORDS[DEFAULT_LANG])


def word(lang: str, key: str) -> str:
    value = words(lang)[key]
    assert isinstance(value, str)
    return value


def cap(text: str) -> str:
    return text[:1].upper() + text[1:]


@functools.lru_cache(maxsize=4096)
def long_date(date: str, lang: str) -> str:
    """`1 December 2026`, `1 de diciembre de 2026`: CLDR's long date of the language."""
    from babel.dates import format_date

    return format_date(dt.date.fromisoformat(date), "long", locale=locale_of(lang))


@functools.lru_cache(maxsize=1024)
def month_title(month: str, lang: str) -> str:
    """`December 2026`, `diciembre de 2026`: CLDR's year-and-month skeleton."""
    from babel.dates import format_skeleton

    return format_skeleton("yMMMM", dt.date.fromisoformat(f"{month}-01"), locale=locale_of(lang))


@functools.lru_cache(maxsize=1024)
def month_name(month: str, lang: str) -> str:
    """`December`, `diciembre`: CLDR's stand-alone month name."""
    from babel.dates import format_date

    return format_date(dt.date.fromisoformat(f"{month}-01"), "LLLL", locale=locale_of(lang))


def published_text(stamp: str, lang: str) -> str:
    """`1 December 2026, 06:00 UTC`: the locale's long date and short time, joined by its own
    date-time pattern (as Babel's `format_datetime` joins them)."""
    from babel.dates import format_date, format_time, get_datetime_format

    when = dt.datetime.fromisoformat(stamp).astimezone(dt.UTC)
    loc = locale_of(lang)
    joined = (str(get_datetime_format("long", locale=loc)).replace("'", "")
              .replace("{0}", format_time(when.time(), "short", locale=loc))
              .replace("{1}", format_date(when.date(), "long", locale=loc)))
    return f"{joined} UTC"


@functools.lru_cache(maxsize=64)
def language_name(lang: str) -> str:
    """The language's name in itself (`English`, `Español`), or its code if CLDR does not know it."""
    if not known_locale(lang):
        return lang
    name = locale_of(lang).get_language_name(locale_of(lang)) or lang
    return cap(name)


@functools.lru_cache(maxsize=1024)
def count(n: int, lang: str) -> str:
    forms = words(lang)["editions"]
    form = forms.get(locale_of(lang).plural_form(n), forms["other"])
    return str(form).format(n=number(n, lang))


def rtl(lang: str) -> bool:
    return known_locale(lang) and locale_of(lang).character_order == "right-to-left"


@functools.lru_cache(maxsize=1024)
def number(n: int, lang: str) -> str:
    from babel.numbers import format_decimal

    return format_decimal(n, locale=locale_of(lang))
