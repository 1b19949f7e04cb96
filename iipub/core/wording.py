"""Words in the one-line reports monitoring reads: counts that agree with their noun, and free
text shortened at a word boundary (never in the middle of a word)."""

from __future__ import annotations

import re

ELLIPSIS = "…"

# A terminal escape sequence as a whole (CSI `ESC [ … final`, OSC `ESC ] … BEL|ST`, or ESC and
# one character; the same with the 8-bit CSI/OSC introducers): removed, not just its ESC, so no
# `[31m` is left behind.
_ESCAPES = re.compile(r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?|(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
                      r"|\x1b[@-_]?")


def printable(text: str | None, width: int | None = None) -> str:
    """Text from an operator or the provider made safe for one line of a terminal or a monitor:
    escape sequences removed; every other character a terminal or a reader would act on
    (newline, carriage return, the rest of C0 and C1, bidi overrides and isolates, other format
    characters) becomes a space; runs of white space become one; cut to `width` characters
    (marked with an ellipsis)."""
    if not text:
        return ""
    text = _ESCAPES.sub("", text)
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    if width is not None and len(text) > width:
        return text[: max(width - 1, 0)] + ELLIPSIS
    return text


def terminal_safe(text: str) -> str:
    """A report of several lines made safe for a terminal: each line as `printable` makes it
    (the newlines between lines are the report's own)."""
    return "\n".join(_ESCAPES.sub("", line).translate(_NON_PRINTING) for line in text.split("\n"))


class _NonPrinting(dict[int, str]):
    """str.translate table: any character that is not printable (tab aside) becomes a space."""

    def __missing__(self, code: int) -> str:
        ch = chr(code)
        value = ch if ch.isprintable() or ch == "\t" else " "
        self[code] = value
        return value


_NON_PRINTING = _NonPrinting()


def plural(n: int, singular: str, plural_form: str | None = None) -> str:
    """`1 orphan response`, `2 orphan responses` (the noun's plural is `singular + "s"` unless given)."""
    return f"{n} {singular if n == 1 else (plural_form or singular + 's')}"


def clip_words(text: str, width: int) -> str:
    """`text` on one line in at most `width` characters, cut after the last whole word that fits
    and marked with an ellipsis. A single word longer than `width` is cut (there is no boundary).
    Control characters and escape sequences never pass (`printable`)."""
    text = printable(text)
    if len(text) <= width:
        return text
    room = text[: max(width - len(ELLIPSIS), 1)]
    cut = room.rstrip()
    if text[len(room)] != " " and " " in room:  # the cut falls inside a word: drop that word
        cut = room[: room.rindex(" ")].rstrip()
    return cut.rstrip(",;:") + ELLIPSIS
