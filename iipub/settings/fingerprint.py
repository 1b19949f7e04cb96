"""The config fingerprint: which deployed rules a generation was made under.

A job records the fingerprint of its product when its window opens and when it dispatches; every
step after the create compares it with the product deployed now, and a difference parks the job
as `config_drift`. So the fingerprint must change exactly when what shapes the generation changes,
and never because a library was upgraded: it hashes a canonical document iipub writes itself
(version 2), not a library's rendering of the schema.

Version 3 adds the keys a create sends only when they are set (`top_p`, `reasoning_effort`,
`verbosity`; `temperature` became one of them, null when unset). Version 2 hashed `temperature`
always, its default 0.2. Version 1 hashed pydantic's `model_json_schema()` output. Jobs recorded
under either keep matching (`matches`): an older value is computed from the product as that
version saw it, an unset temperature as the old default, and only while none of the keys the old
versions did not know is set (a job made without them was not made under this configuration). The
upgrade thus parks no job in flight as `config_drift`.

`max_output_tokens` and the service tier are not in it: they bound what a create may cost, and
raising a cap must not park the jobs already running (the create hold keys on them: `holds`).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Hashable
from typing import Any, Protocol

from iipub.settings import edition_limits


class FingerprintedProduct(Hashable, Protocol):
    """What the fingerprint reads of a product (`config.Product`, which calls this module: the
    dependency runs one way, from the configuration to its fingerprint)."""

    @property
    def model(self) -> str: ...
    @property
    def prompt(self) -> str: ...
    @property
    def temperature(self) -> float | None: ...
    @property
    def top_p(self) -> float | None: ...
    @property
    def reasoning_effort(self) -> str | None: ...
    @property
    def verbosity(self) -> str | None: ...
    @property
    def tools(self) -> tuple[str, ...]: ...
    @property
    def languages(self) -> tuple[str, ...]: ...
    @property
    def items(self) -> int: ...

    def output_schema(self) -> dict[str, Any]: ...

VERSION = 3
LEGACY_DEFAULT_TEMPERATURE = 0.2  # what versions 1 and 2 hashed (and sent) when none was configured


def document(product: FingerprintedProduct) -> dict[str, Any]:
    """Everything that shapes a generation, as plain JSON values in a fixed layout. Display-only
    settings (titles, priority), money (the output cap, the tier) and the checks applied after
    the fact are not in it."""
    return {
        **_v2_document(product, product.temperature),
        "fingerprint_version": VERSION,
        "top_p": product.top_p,
        "reasoning_effort": product.reasoning_effort,
        "verbosity": product.verbosity,
    }


def _v2_document(product: FingerprintedProduct, temperature: float | None) -> dict[str, Any]:
    return {
        "fingerprint_version": 2,
        "model": product.model,
        "prompt": product.prompt,
        "temperature": temperature,
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
def current(product: FingerprintedProduct) -> str:
    # Cached: a product is frozen, and every step after the create checks its job against it.
    return _digest(document(product))


def _legacy_temperature(product: FingerprintedProduct) -> float | None:
    """The temperature versions 1 and 2 hashed for this product, or None when they cannot
    describe it (a key they did not know is set)."""
    if product.top_p is not None or product.reasoning_effort is not None or product.verbosity is not None:
        return None
    return LEGACY_DEFAULT_TEMPERATURE if product.temperature is None else product.temperature


@functools.lru_cache(maxsize=64)
def legacy_v2(product: FingerprintedProduct) -> str | None:
    temperature = _legacy_temperature(product)
    return None if temperature is None else _digest(_v2_document(product, temperature))


@functools.lru_cache(maxsize=64)
def legacy_v1(product: FingerprintedProduct) -> str | None:
    """The version-1 value: pydantic's rendering of the output schema inside the document."""
    temperature = _legacy_temperature(product)
    if temperature is None:
        return None
    return hashlib.sha256(json.dumps({
        "model": product.model,
        "prompt": product.prompt,
        "temperature": temperature,
        "schema": product.output_schema(),
        "items": product.items,
        "languages": list(product.languages),
    }, sort_keys=True).encode()).hexdigest()


def matches(product: FingerprintedProduct, recorded: str) -> bool:
    """Whether a recorded fingerprint names the product as deployed now (any version)."""
    return recorded == current(product) or recorded == legacy_v2(product) or recorded == legacy_v1(product)
