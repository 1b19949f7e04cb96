"""`jobs show` prints each event's detail on one bounded, escaped line."""

from __future__ import annotations

from iipub.cli.jobs_cmd import DETAIL_WIDTH, _brief


def test_detail_is_one_escaped_line_clipped_to_width() -> None:
    text = _brief({"why": "\x1b[31mred\x1b[0m\nnext line " + "x" * 500})
    assert "\n" not in text and "\x1b" not in text and "\\u001b" in text
    assert len(text) == DETAIL_WIDTH and text.endswith("…")


def test_short_and_empty_details() -> None:
    assert _brief({"backfill": False}) == '{"backfill": false}'
    assert _brief({}) == "" and _brief(None) == ""
