"""`provider.factory`: the one place a provider is built from the settings (`[provider] kind`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from iipub.core.errors import ConfigError, MissingApiKey
from iipub.provider import factory, fake
from iipub.provider.fake import FakeProvider
from iipub.provider.openai.adapter import OpenAIAdapter
from iipub.provider.openai.webhook_signature import Verifier
from iipub.settings.config import ProviderSettings, Settings

PRODUCT = {"name": "daily-brief", "prompt": "Write the brief.", "model": "gpt-5-mini"}


SECRET = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY"


def _settings(kind: str = "openai", api_key: str | None = None, secret: str | None = None) -> Settings:
    return replace(Settings(), provider=ProviderSettings(kind=kind, base_url="http://127.0.0.1:9/v1"), api_key=api_key,
                   provider_webhook_secret=secret)


def test_the_openai_kind_builds_the_adapter_and_needs_its_key() -> None:
    with pytest.raises(MissingApiKey):
        factory.build(_settings())
    provider = factory.build(_settings(api_key="sk-test"))
    assert isinstance(provider, OpenAIAdapter)
    provider.close()


def test_the_fake_kind_builds_a_view_of_the_installed_fake_that_outlives_each_command() -> None:
    installed = FakeProvider()
    fake.install(installed)
    try:
        first = factory.build(_settings("fake"))
        assert isinstance(first, FakeProvider)
        first.close()  # a command's close leaves the installed provider open for the next one
        second = factory.build(_settings("fake"))
        assert isinstance(second.retrieve("resp_unknown"), object) and installed.count("retrieve") == 1
    finally:
        fake.install(None)


def test_the_scope_is_known_without_building_the_provider() -> None:
    s = _settings(api_key="sk-test")
    provider = factory.build(s)
    assert factory.scope(s) == provider.scope
    assert factory.reaches(s, provider.scope) and provider.reaches(factory.scope(s))
    provider.close()
    other = replace(s, api_key="sk-other")
    assert not factory.reaches(s, factory.scope(other))  # no project named: the key is the scope
    assert factory.scope(_settings("fake")) == fake.FAKE_SCOPE


def test_a_product_key_the_model_refuses_is_one_line_at_load_for_the_openai_kind_only() -> None:
    doc = {"products": [{**PRODUCT, "temperature": 0.2}]}
    with pytest.raises(ConfigError) as info:
        factory.settings_from_dict(doc)
    (line,) = str(info.value).splitlines()
    assert line.startswith("product 'daily-brief': temperature is refused by gpt-5-mini")
    relaxed = factory.settings_from_dict({**doc, "provider": {"kind": "fake"}})  # the fake takes any key
    assert relaxed.products["daily-brief"].temperature == 0.2
    assert factory.model_table("fake") is None and factory.model_table("openai") is not None


def test_the_webhook_verifier_needs_the_secret() -> None:
    with pytest.raises(ConfigError):
        factory.webhook_verifier(_settings())
    verifier = factory.webhook_verifier(_settings(secret=SECRET))
    assert isinstance(verifier, Verifier)
    body, headers = verifier.test_delivery()
    assert verifier.verify(body, headers).kind == "test"
