"""The config fingerprint: which deployed rules a generation was made under.

A job records the fingerprint of its product when its window opens and when it dispatches; every
step after the create compares it with the product deployed now, and a difference parks the job
as `config_drift`. So the fingerprint must change exactly when what shapes the generation changes,
and never because a library was upgraded: it hashes a canonical document iipub writes itself
(version 2), not a library's rendering of the schema.

Version 1 hashed pydantic's `model_json_schema()` output. Jobs recorded under it keep matching:
`matches` accepts a version-1 value computed from the same product (only when the version-2 value
differs, so the schema machinery loads only for such a job).
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import TYPE_CHECKING, Any

from . import edition_limits

if TYPE_CHECKING:
    from .config import Product

VERSION = 2


def document(product: Product) -> dict[str, Any]:
    """Everything that shapes a generation, as plain JSON values in a fixed layout. Display-only
    settings (titles, priority) and the checks applied after the fact are not in it."""
    return {
        "fingerprint_version": VERSION,
        "model": product.model,
        "prompt": product.prompt,
        "temperature": product.temperature,
        "tools": list(product.tools),
        "languages": list(product.languages),
        "items": product.items,
        "schema": {
            "name": edition_limits.SCHEMA_NAME,
            "edition": ["title", "summary", "items"],
            "item": ["headline", "summary", "sources"],
            "source": ["title", "url"],
            "limits": {
                "title": edition_limits.MAX_TITLE,
                "summary": edition_limits.MAX_SUMMARY,
                "url": edition_limits.MAX_URL,
                "sources_per_item": edition_limits.MAX_SOURCES_PER_ITEM,
            },
        },
    }


def _digest(doc: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@functools.lru_cache(maxsize=64)
def current(product: Product) -> str:
    # Cached: a product is frozen, and every step after the create checks its job against it.
    return _digest(document(product))


@functools.lru_cache(maxsize=64)
def legacy_v1(product: Product) -> str:
    """The version-1 value: pydantic's rendering of the output schema inside the document."""
    return hashlib.sha256(json.dumps({
        "model": product.model,
        "prompt": product.prompt,
        "temperature": product.temperature,
        "schema": product.output_schema(),
        "items": product.items,
        "languages": list(product.languages),
    }, sort_keys=True).encode()).hexdigest()


def matches(product: Product, recorded: str) -> bool:
    """Whether a recorded fingerprint names the product as deployed now (either version)."""
    return recorded == current(product) or recorded == legacy_v1(product)
