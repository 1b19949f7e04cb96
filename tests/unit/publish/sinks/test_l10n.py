"""The site's words and dates per language: CLDR's long dates and month titles, plural forms,
language names in themselves, the right-to-left scripts, and English for what is unknown."""

from __future__ import annotations

from iipub.publish.sinks import l10n


def test_dates_are_the_languages_own() -> None:
    assert l10n.long_date("2026-12-01", "en") == "1 December 2026"
    assert l10n.long_date("2026-12-01", "es") == "1 de diciembre de 2026"
    assert l10n.month_title("2026-12", "en") == "December 2026"
    assert l10n.month_name("2026-12", "es") == "diciembre"
    assert l10n.published_text("2026-12-01T06:00:00+00:00", "en") == "1 December 2026, 06:00 UTC"


def test_language_names_plurals_and_direction() -> None:
    assert (l10n.language_name("en"), l10n.language_name("es")) == ("English", "Español")
    assert l10n.language_name("zz") == "zz"  # unknown to CLDR: its code
    assert l10n.rtl("ar") and not l10n.rtl("en") and not l10n.rtl("zz")
    assert l10n.count(1, "en") != l10n.count(2, "en") and "2" in l10n.count(2, "en")
    assert l10n.number(12345, "en") == "12,345" and l10n.number(12345, "es") != "12,345"


def test_an_unknown_language_gets_the_english_words() -> None:
    assert l10n.words("zz") == l10n.words("en")
    assert l10n.words("es-MX") == l10n.words("es")
    assert l10n.word("en", "published") == "Published"
    assert l10n.cap("édition") == "Édition"
