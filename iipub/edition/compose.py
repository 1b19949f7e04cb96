"""Turn a validated edition into one self-contained artifact per language.

Pure and deterministic: the same edition, product and date always give the same bytes, so
the artifact hash stored on the job identifies exactly what the sinks publish.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from iipub.settings.config import Product

if TYPE_CHECKING:
    from pydantic import BaseModel

DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")  # an edition date as text
_DOC_KEYS = frozenset({"product", "edition_date", "lang", "title", "summary", "items", "sources"})


def canonical_json(doc: Any) -> bytes:
    """The one serialisation that is hashed, stored and delivered."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True)
class Artifact:
    lang: str
    product: str
    edition_date: str  # YYYY-MM-DD
    title: str
    summary: str
    items: tuple[dict[str, Any], ...]  # {"headline", "summary", "sources": [{"title", "url"}]}
    sources: tuple[dict[str, str], ...]  # every item source, first occurrence of each URL
    body: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.body).hexdigest()

    def document(self) -> dict[str, Any]:
        """The artifact document (a fresh copy; `body` is its canonical JSON)."""
        return _document(self.product, self.edition_date, self.lang, self.title, self.summary, self.items)


def compose(edition: BaseModel, product: Product, edition_date: dt.date) -> dict[str, Artifact]:
    """One artifact per product language, in the product's language order."""
    out: dict[str, Artifact] = {}
    for lang in product.languages:
        part = getattr(edition, lang, None)
        if part is None:
            raise ValueError(f"edition has no {lang!r} part")
        out[lang] = compose_language(part, product, lang, edition_date)
    return out


def compose_language(part: Any, product: Product, lang: str, edition_date: dt.date) -> Artifact:
    """The artifact of one language's validated part (what a language track composes)."""
    items = [
        {
            "headline": item.headline,
            "summary": item.summary,
            "sources": [{"title": s.title, "url": s.url} for s in item.sources],
        }
        for item in part.items
    ]
    return _artifact(product.name, edition_date.isoformat(), lang, part.title, part.summary, items)


def artifact_from_json(body: bytes) -> Artifact:
    """Rebuild an artifact from its JSON document; raises ValueError if it is not one."""
    try:
        doc = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"artifact is not JSON: {exc}") from None
    return artifact_from_document(doc)


def artifact_from_document(doc: Any) -> Artifact:
    """Rebuild an artifact from its document (a dict); raises ValueError if it is not one."""
    if not isinstance(doc, Mapping):
        raise ValueError("artifact document must be an object")
    missing = _DOC_KEYS - set(doc)
    if missing:
        raise ValueError(f"artifact document lacks {', '.join(sorted(missing))}")
    for key in ("product", "edition_date", "lang", "title", "summary"):
        if not isinstance(doc[key], str):
            raise ValueError(f"artifact {key} must be a string")
    if not DATE_RE.fullmatch(doc["edition_date"]):
        raise ValueError("artifact edition_date must be YYYY-MM-DD")
    items = doc["items"]
    if not isinstance(items, list):
        raise ValueError("artifact items must be a list")
    clean: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise ValueError(f"artifact items[{i}] must be an object")
        headline, summary, sources = item.get("headline"), item.get("summary"), item.get("sources")
        if not isinstance(headline, str) or not isinstance(summary, str) or not isinstance(sources, list):
            raise ValueError(f"artifact items[{i}] needs headline, summary and sources")
        srcs = []
        for j, src in enumerate(sources):
            if (
                not isinstance(src, Mapping)
                or not isinstance(src.get("title"), str)
                or not isinstance(src.get("url"), str)
            ):
                raise ValueError(f"artifact items[{i}].sources[{j}] needs title and url strings")
            srcs.append({"title": src["title"], "url": src["url"]})
        clean.append({"headline": headline, "summary": summary, "sources": srcs})
    art = _artifact(doc["product"], doc["edition_date"], doc["lang"], doc["title"], doc["summary"], clean)
    if art.document()["sources"] != doc["sources"]:
        raise ValueError("artifact sources do not match its items")
    return art


def _artifact(
    product: str, date: str, lang: str, title: str, summary: str, items: Iterable[Mapping[str, Any]]
) -> Artifact:
    doc = _document(product, date, lang, title, summary, items)
    return Artifact(
        lang=lang,
        product=product,
        edition_date=date,
        title=title,
        summary=summary,
        items=tuple(doc["items"]),
        sources=tuple(doc["sources"]),
        body=canonical_json(doc),
    )


def _document(
    product: str, date: str, lang: str, title: str, summary: str, items: Iterable[Mapping[str, Any]]
) -> dict[str, Any]:
    # Deep copies, so a caller mutating the document cannot change a frozen artifact.
    item_list = [
        {
            "headline": it["headline"],
            "summary": it["summary"],
            "sources": [{"title": s["title"], "url": s["url"]} for s in it["sources"]],
        }
        for it in items
    ]
    return {
        "product": product,
        "edition_date": date,
        "lang": lang,
        "title": title,
        "summary": summary,
        "items": item_list,
        "sources": _dedupe_sources(item_list),
    }


def _dedupe_sources(items: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    seen: set[str] = set()
    out: list[dict[str, str]] = []
    for item in items:
        for src in item["sources"]:
            if src["url"] not in seen:
                seen.add(src["url"])
                out.append({"title": src["title"], "url": src["url"]})
    return out
