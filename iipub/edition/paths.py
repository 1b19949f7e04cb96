"""Where an edition's files live under a static root, relative to it: the static sink writes
them there, and the restore fence reads what was published from there."""

from __future__ import annotations


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
