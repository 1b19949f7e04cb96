"""The shape of what the model must return, per product.

One pydantic model per language set: `{"<lang>": {"title", "summary", "items": [...]}}`.
Its JSON schema goes to the provider as a strict `json_schema` text format and into the
config fingerprint; validation parses the payload with the same model.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

# Hard bounds on untrusted text, enforced by the model itself.
from iipub.settings.edition_limits import (
    MAX_ITEMS,
    MAX_SOURCES_PER_ITEM,
    MAX_SUMMARY,
    MAX_TITLE,
    MAX_URL,
    SCHEMA_NAME,
)

__all__ = ["MAX_ITEMS", "MAX_SOURCES_PER_ITEM", "MAX_SUMMARY", "MAX_TITLE", "MAX_URL", "SCHEMA_NAME",
           "json_schema", "language_model", "output_model", "text_format"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class Source(_Strict):
    title: str = Field(min_length=1, max_length=MAX_TITLE)
    url: str = Field(min_length=1, max_length=MAX_URL)


class Item(_Strict):
    headline: str = Field(min_length=1, max_length=MAX_TITLE)
    summary: str = Field(min_length=1, max_length=MAX_SUMMARY)
    sources: list[Source] = Field(min_length=1, max_length=MAX_SOURCES_PER_ITEM)


class LanguageEdition(_Strict):
    title: str = Field(min_length=1, max_length=MAX_TITLE)
    summary: str = Field(min_length=1, max_length=MAX_SUMMARY)
    items: list[Item] = Field(min_length=1, max_length=MAX_ITEMS)


@functools.lru_cache(maxsize=32)
def language_model(items: int) -> type[BaseModel]:
    """One language's edition holding exactly `items` items (what a language track validates)."""
    return create_model(
        f"LanguageEdition{items}",
        __base__=LanguageEdition,
        items=(list[Item], Field(min_length=items, max_length=items)),
    )


@functools.lru_cache(maxsize=32)
def output_model(languages: tuple[str, ...], items: int) -> type[BaseModel]:
    """A model with one required edition per language, each holding exactly `items` items."""
    edition = language_model(items)
    fields: dict[str, Any] = dict.fromkeys(languages, (edition, ...))
    return create_model(
        "EditionOutput_" + "_".join(languages), __base__=_Strict, **fields
    )


def _strictify(node: Any) -> Any:
    """Make a pydantic JSON schema acceptable to strict structured outputs:
    every object closed and every property required; drop keywords the provider ignores."""
    if isinstance(node, dict):
        out = {k: _strictify(v) for k, v in node.items() if k not in ("title", "default", "properties", "$defs")}
        for mapping in ("properties", "$defs"):  # names here are data, not keywords
            if mapping in node:
                out[mapping] = {name: _strictify(sub) for name, sub in node[mapping].items()}
        if out.get("type") == "object" and "properties" in out:
            out["additionalProperties"] = False
            out["required"] = sorted(out["properties"])
        return out
    if isinstance(node, list):
        return [_strictify(v) for v in node]
    return node


@functools.lru_cache(maxsize=32)
def _json_schema_cached(languages: tuple[str, ...], items: int) -> str:
    return json.dumps(_strictify(output_model(languages, items).model_json_schema()), sort_keys=True)


def json_schema(languages: tuple[str, ...], items: int) -> dict[str, Any]:
    """The strict JSON schema sent as `text.format` (a fresh copy each call)."""
    schema: dict[str, Any] = json.loads(_json_schema_cached(languages, items))
    return schema


def text_format(languages: tuple[str, ...], items: int) -> dict[str, Any]:
    """The Responses API `text.format` parameter for a product's languages and item count."""
    return {
        "type": "json_schema",
        "name": SCHEMA_NAME,
        "schema": json_schema(languages, items),
        "strict": True,
    }
