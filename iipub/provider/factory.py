"""The one place a provider is built from the settings (`[provider] kind`): every command that
calls a provider (the sweep, the webhook receiver, the operator's commands) asks `build`, and
`status` asks `scope` and `reaches` without building one. The settings are loaded through it
(`load_settings`), so each product's keys are checked against its provider's model table.
Nothing here loads a provider's libraries before a provider of that kind is asked for: an idle
run imports no HTTP client.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from iipub.provider.interface import Provider, SavedResponseReader, WebhookVerifier
from iipub.settings import loading
from iipub.settings.config import ModelTable, Settings

OPENAI, FAKE = "openai", "fake"  # the kinds of `[provider] kind`


def model_table(kind: str) -> ModelTable | None:
    """Which request keys the models of a provider kind take (None: the provider decides)."""
    if kind == FAKE:
        return None
    from iipub.provider.openai import capabilities as models

    return models.TABLE


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """The deployment's settings (`settings.loading.load_settings`), each product's keys checked
    against its provider's model table: a key the model refuses is one `ConfigError` line."""
    return loading.load_settings(env, models=model_table)


def settings_from_dict(data: Mapping[str, Any], base_dir: Path = Path("."), **options: Any) -> Settings:
    """`settings.loading.settings_from_dict`, each product's keys checked as `load_settings` checks them."""
    return loading.settings_from_dict(data, base_dir, models=model_table, **options)


def build(settings: Settings) -> Provider:
    """The provider the settings name, ready to be asked (its client is built at its first call).
    Raises `MissingApiKey` or `ConfigError` in one line when the settings cannot make one."""
    if settings.provider.kind == FAKE:
        from iipub.provider import fake

        return fake.installed()
    from iipub.provider.openai.adapter import OpenAIAdapter

    return OpenAIAdapter(settings.provider, settings.require_api_key())


def webhook_verifier(settings: Settings) -> WebhookVerifier:
    """The verifier of the provider's webhook deliveries (`OPENAI_WEBHOOK_SECRET`; the fake sends
    none: its deliveries in tests are signed as OpenAI signs them)."""
    from iipub.provider.openai.webhook_signature import Verifier

    return Verifier(settings.require_provider_webhook_secret())


def saved_response_reader(settings: Settings) -> SavedResponseReader:
    """How a response saved from the settings' provider reads (`iipub jobs import-payload`); the
    fake's responses are saved as OpenAI's are."""
    from iipub.provider.openai import documents

    return documents.read_saved


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
