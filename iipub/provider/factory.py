"""The one place a provider is built from the settings (`[provider] kind`): every command that
calls a provider (the sweep, the webhook receiver, the operator's commands) asks `build`, and
`status` asks `scope` and `reaches` without building one. Nothing here loads a provider's
libraries before a provider of that kind is asked for: an idle run imports no HTTP client.
"""

from __future__ import annotations

from iipub.provider.interface import Provider
from iipub.settings.config import Settings

OPENAI, FAKE = "openai", "fake"  # the kinds of `[provider] kind`


def build(settings: Settings) -> Provider:
    """The provider the settings name, ready to be asked (its client is built at its first call).
    Raises `MissingApiKey` or `ConfigError` in one line when the settings cannot make one."""
    if settings.provider.kind == FAKE:
        from iipub.provider import fake

        return fake.installed()
    from iipub.provider.openai.adapter import OpenAIAdapter

    return OpenAIAdapter(settings.provider, settings.require_api_key())


def scope(settings: Settings) -> str:
    """The scope the settings' provider creates and reads under (`Provider.scope`), without building it."""
    if settings.provider.kind == FAKE:
        from iipub.provider import fake

        return fake.FAKE_SCOPE
    from iipub.provider.openai import codes

    p = settings.provider
    return codes.scope_of(p.organization, p.project, settings.api_key)


def reaches(settings: Settings, created_under: str) -> bool:
    """Whether reads under the settings' scope see a response created under `created_under`."""
    if settings.provider.kind == FAKE:
        return created_under == scope(settings)
    from iipub.provider.openai import codes

    return codes.same_scope(created_under, scope(settings))
