"""The hard bounds on an edition's untrusted text, shared by the schema (which enforces them) and
the configuration (which bounds a product's `items` by them)."""

from __future__ import annotations

import pytest

from iipub.core.errors import ConfigError
from iipub.settings import edition_limits
from iipub.settings.loading import settings_from_dict


def test_the_bounds_are_what_a_page_can_hold() -> None:
    assert (edition_limits.MAX_TITLE, edition_limits.MAX_SUMMARY, edition_limits.MAX_URL) == (300, 4000, 2048)
    assert (edition_limits.MAX_SOURCES_PER_ITEM, edition_limits.MAX_ITEMS) == (8, 100)


def test_a_product_may_not_ask_for_more_items_than_an_edition_holds() -> None:
    product = {"name": "daily-brief", "languages": ["en"], "prompt": "p", "opens_at": "00:00"}
    settings_from_dict({"products": [{**product, "items": edition_limits.MAX_ITEMS}]})
    with pytest.raises(ConfigError, match="items"):
        settings_from_dict({"products": [{**product, "items": edition_limits.MAX_ITEMS + 1}]})
