"""Words in the one-line reports monitoring reads: counts that agree with their noun, and free
text shortened at a word boundary (never in the middle of a word)."""

from __future__ import annotations

ELLIPSIS = "…"


def plural(n: int, singular: str, plural_form: str | None = None) -> str:
    """`1 orphan response`, `2 orphan responses` (the noun's plural is `singular + "s"` unless given)."""
    return f"{n} {singular if n == 1 else (plural_form or singular + 's')}"


def clip_words(text: str, width: int) -> str:
    """`text` on one line in at most `width` characters, cut after the last whole word that fits
    and marked with an ellipsis. A single word longer than `width` is cut (there is no boundary)."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    room = text[: max(width - len(ELLIPSIS), 1)]
    cut = room.rstrip()
    if text[len(room)] != " " and " " in room:  # the cut falls inside a word: drop that word
        cut = room[: room.rindex(" ")].rstrip()
    return cut.rstrip(",;:") + ELLIPSIS
