"""A slot's payload split by language: each language's part as its track keeps it (pure)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from iipub.edition import compose, validate


@dataclass(frozen=True)
class Part:
    """A language's part of a slot's payload as its track keeps it: `{"<lang>": {...}}` as
    canonical JSON, and its SHA-256."""

    lang: str
    text: str
    sha256: str


def parts_of(result: validate.Shared) -> list[Part]:
    """Each language's part, serialised once (canonical: the same part, the same bytes)."""
    out = []
    for lang, part in result.parts.items():
        text = compose.canonical_json({lang: part}).decode("utf-8")
        out.append(Part(lang, text, hashlib.sha256(text.encode("utf-8")).hexdigest()))
    return out
