"""The WSGI address PRODUCT.md names, `iipub.webhook:application`, is the receiver's application."""

from __future__ import annotations

import importlib

from iipub.webhooks import receiver


def test_the_published_address_is_the_receivers_application() -> None:
    module = importlib.import_module("iipub.webhook")
    assert module.application is receiver.application
    assert module.__all__ == ["application"]
