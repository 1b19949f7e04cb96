"""A payload split by language as its tracks keep it: one canonical part per language, its
SHA-256 over exactly the bytes kept, the same part always the same bytes."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from iipub.edition import parts, validate
from iipub.settings.config import Product

PRODUCT = Product(name="daily-brief", languages=("en", "es"), items=1, prompt="p")


def edition(lang: str) -> dict[str, Any]:
    return {"title": f"Title {lang}", "summary": f"Summary {lang}", "items": [
        {"headline": f"Headline {lang}", "summary": f"Item {lang}",
         "sources": [{"title": "Reuters", "url": f"https://www.reuters.com/{lang}"}]}]}


def test_each_language_is_kept_as_its_own_canonical_part() -> None:
    shared = validate.shared(json.dumps({"es": edition("es"), "en": edition("en")}), PRODUCT)
    assert shared.ok, shared.reasons
    found = {p.lang: p for p in parts.parts_of(shared)}
    assert set(found) == {"en", "es"}
    en = found["en"]
    assert json.loads(en.text) == {"en": edition("en")}
    assert en.sha256 == hashlib.sha256(en.text.encode("utf-8")).hexdigest()
    assert ": " not in en.text  # canonical: no spaces a second serialisation could vary


def test_the_same_part_is_the_same_bytes_whatever_the_key_order() -> None:
    shuffled = {"en": dict(reversed(list(edition("en").items()))), "es": edition("es")}
    first = parts.parts_of(validate.shared(json.dumps({"en": edition("en"), "es": edition("es")}), PRODUCT))
    again = parts.parts_of(validate.shared(json.dumps(shuffled), PRODUCT))
    assert {p.lang: p.sha256 for p in first} == {p.lang: p.sha256 for p in again}
