from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any

import pytest

from iipub.edition.compose import Artifact, artifact_from_json, canonical_json, compose
from iipub.settings.config import Product
from iipub.settings.edition_schema import output_model

PRODUCT = Product(name="daily-brief", languages=("en", "es"), items=3, prompt="p")
DAY = dt.date(2025, 3, 7)


def payload() -> dict[str, Any]:
    def edition(lang: str, word: str) -> dict[str, Any]:
        return {
            "title": f"{word} — {lang}",
            "summary": f"Resumen «{lang}»\nline two",
            "items": [
                {
                    "headline": f"{word} headline {i}",
                    "summary": f"{word} summary {i}",
                    "sources": [
                        {"title": "Reuters", "url": "https://www.reuters.com/shared"},  # repeated across items
                        {"title": f"Outlet {i}", "url": f"https://news{i}.org/{lang}"},
                    ],
                }
                for i in range(3)
            ],
        }

    return {"en": edition("en", "World"), "es": edition("es", "Mundo")}


def edition_model() -> Any:
    return output_model(PRODUCT.languages, PRODUCT.items).model_validate(payload())


def test_compose_is_deterministic() -> None:
    first = compose(edition_model(), PRODUCT, DAY)
    second = compose(edition_model(), PRODUCT, DAY)
    assert list(first) == ["en", "es"]
    for lang in first:
        assert first[lang].body == second[lang].body
        assert first[lang] == second[lang]


def test_body_is_canonical_json_of_the_document_and_sha256_matches() -> None:
    art = compose(edition_model(), PRODUCT, DAY)["es"]
    assert art.sha256 == hashlib.sha256(art.body).hexdigest()
    doc = json.loads(art.body)
    assert set(doc) == {"product", "edition_date", "lang", "title", "summary", "items", "sources"}
    assert art.body == json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert art.body == canonical_json(art.document())
    assert "«es»".encode() in art.body  # not \u-escaped
    assert (doc["product"], doc["edition_date"], doc["lang"]) == ("daily-brief", "2025-03-07", "es")


def test_each_language_is_an_independent_artifact() -> None:
    arts = compose(edition_model(), PRODUCT, DAY)
    en, es = arts["en"], arts["es"]
    assert (en.lang, es.lang) == ("en", "es")
    assert en.title == "World — en" and es.title == "Mundo — es"
    assert [i["headline"] for i in en.items] == ["World headline 0", "World headline 1", "World headline 2"]
    assert [i["headline"] for i in es.items] == ["Mundo headline 0", "Mundo headline 1", "Mundo headline 2"]
    assert b"Mundo" not in en.body and b"World" not in es.body
    assert en.sha256 != es.sha256
    assert en.edition_date == es.edition_date == "2025-03-07"


def test_sources_are_deduplicated_in_order() -> None:
    art = compose(edition_model(), PRODUCT, DAY)["en"]
    assert [s["url"] for s in art.sources] == [
        "https://www.reuters.com/shared",
        "https://news0.org/en",
        "https://news1.org/en",
        "https://news2.org/en",
    ]
    assert art.items[1]["sources"][0] == {"title": "Reuters", "url": "https://www.reuters.com/shared"}


def test_round_trip() -> None:
    for art in compose(edition_model(), PRODUCT, DAY).values():
        back = artifact_from_json(art.body)
        assert isinstance(back, Artifact)
        assert back == art
        assert back.body == art.body and back.sha256 == art.sha256


def test_document_copy_cannot_change_the_artifact() -> None:
    art = compose(edition_model(), PRODUCT, DAY)["en"]
    doc = art.document()
    doc["items"][0]["headline"] = "changed"
    assert art.items[0]["headline"] == "World headline 0"
    assert artifact_from_json(art.body) == art


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"product": "daily-brief"}',
        b'{"product":"p","edition_date":"7 March","lang":"en","title":"t","summary":"s","items":[],"sources":[]}',
        b'{"product":"p","edition_date":"2025-03-07","lang":"en","title":"t","summary":"s","items":[{}],"sources":[]}',
        (
            b'{"product":"p","edition_date":"2025-03-07","lang":"en","title":"t","summary":"s","items":[],'
            b'"sources":[{"title":"x","url":"https://a.org/"}]}'
        ),
    ],
)
def test_artifact_from_json_rejects_malformed(body: bytes) -> None:
    with pytest.raises(ValueError, match=r"^artifact "):
        artifact_from_json(body)
