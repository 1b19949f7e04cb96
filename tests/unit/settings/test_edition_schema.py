"""The output contract per product: exactly the product's languages, exactly its item count, the
bounds of `edition_limits`, and a JSON schema strict structured outputs accept (every object
closed, every property required)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from iipub.settings import edition_limits, edition_schema


def edition(items: int = 2, title: str = "Title") -> dict[str, Any]:
    return {"title": title, "summary": "Summary", "items": [
        {"headline": f"H{i}", "summary": f"S{i}", "sources": [{"title": "Reuters", "url": "https://reuters.com/x"}]}
        for i in range(items)]}


def test_an_edition_of_every_language_with_the_items_asked_for_is_valid() -> None:
    model = edition_schema.output_model(("en", "es"), 2)
    model.model_validate({"en": edition(), "es": edition()})


@pytest.mark.parametrize("doc", [
    {"en": edition()},  # a language missing
    {"en": edition(), "es": edition(), "fr": edition()},  # one more
    {"en": edition(3), "es": edition()},  # another item count
    {"en": edition(title=""), "es": edition()},  # empty text
    {"en": edition(title="x" * (edition_limits.MAX_TITLE + 1)), "es": edition()},  # past the bound
    {"en": {**edition(), "extra": 1}, "es": edition()},  # a field the contract does not know
])
def test_anything_else_is_refused(doc: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        edition_schema.output_model(("en", "es"), 2).model_validate(doc)


def test_the_schema_sent_is_strict_and_named() -> None:
    fmt = edition_schema.text_format(("en",), 1)
    assert (fmt["type"], fmt["name"], fmt["strict"]) == ("json_schema", edition_limits.SCHEMA_NAME, True)

    def objects(node: Any) -> list[dict[str, Any]]:
        if isinstance(node, dict):
            here = [node] if node.get("type") == "object" and "properties" in node else []
            return here + [o for v in node.values() for o in objects(v)]
        return [o for v in node for o in objects(v)] if isinstance(node, list) else []

    found = objects(fmt["schema"])
    assert found and all(o["additionalProperties"] is False and o["required"] == sorted(o["properties"])
                         for o in found)
    assert "title" not in fmt["schema"]  # keywords the provider ignores are dropped


def test_each_call_gets_its_own_copy_of_the_schema() -> None:
    first = edition_schema.json_schema(("en",), 1)
    first["mutated"] = True
    assert "mutated" not in edition_schema.json_schema(("en",), 1)
