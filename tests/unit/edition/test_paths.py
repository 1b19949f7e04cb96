"""Where an edition's files live under a static root: the static sink writes there and the
restore fence reads there, so both must say the same path."""

from __future__ import annotations

from iipub.edition import paths


def test_each_file_of_an_edition_has_one_place() -> None:
    assert paths.edition_path("daily-brief", "2026-12-01", "en") == "daily-brief/2026-12-01/en.html"
    assert paths.json_path("daily-brief", "2026-12-01", "es") == "daily-brief/2026-12-01/es.json"
    assert paths.index_path("daily-brief", "en") == "daily-brief/en/index.html"
    assert paths.month_path("daily-brief", "en", "2026-12") == "daily-brief/en/2026-12.html"
    assert paths.feed_path("world-report", "ar") == "world-report/ar/feed.atom"


def test_an_edition_and_its_json_sit_side_by_side() -> None:
    html, doc = paths.edition_path("p", "2026-12-01", "en"), paths.json_path("p", "2026-12-01", "en")
    assert html.rsplit(".", 1)[0] == doc.rsplit(".", 1)[0]
