from __future__ import annotations

from pathlib import Path

import pytest

from iipub.core.errors import ConfigError, MissingApiKey
from iipub.provider.factory import load_settings, settings_from_dict


def test_defaults_have_both_products_and_safe_budgets() -> None:
    s = load_settings({})
    assert set(s.products) == {"daily-brief", "revolution-watch"}
    assert s.products["daily-brief"].languages == ("en", "es")
    assert s.budgets.max_generation_attempts == 3 and s.budgets.max_poll_attempts == 30
    assert s.reconcile.lease_seconds == 60 and s.reconcile.tick_seconds == 50
    assert s.database_url.startswith("sqlite:///")


def test_37_missing_api_key_is_a_configuration_error() -> None:
    with pytest.raises(MissingApiKey):
        load_settings({}).require_api_key()
    assert load_settings({"OPENAI_API_KEY": "sk-x"}).require_api_key() == "sk-x"


def test_fingerprint_changes_with_prompt_model_temperature() -> None:
    base = settings_from_dict({}).products["daily-brief"]
    from dataclasses import replace

    fps = {base.fingerprint(), replace(base, prompt="x").fingerprint(), replace(base, model="m").fingerprint(),
           replace(base, temperature=0.9).fingerprint(), replace(base, items=3).fingerprint()}
    assert len(fps) == 5
    assert base.fingerprint() == settings_from_dict({}).products["daily-brief"].fingerprint()


def test_toml_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "p.md").write_text("Write the brief.")
    cfg = tmp_path / "iipub.toml"
    cfg.write_text(
        '[budgets]\nmax_generation_attempts = 2\n[reconcile]\nconcurrency = 4\n'
        '[[products]]\nname = "daily-brief"\nlanguages = ["en", "es"]\nopens_at = "04:30"\n'
        'prompt_file = "p.md"\nitems = 3\nallowed_domains = ["reuters.com"]\n'
        '[sinks.static]\nroot = "site"\n'
    )
    s = load_settings({"IIPUB_CONFIG": str(cfg)})
    assert s.budgets.max_generation_attempts == 2 and s.reconcile.concurrency == 4
    p = s.product("daily-brief")
    assert p.prompt == "Write the brief." and p.items == 3 and p.opens_at.hour == 4
    assert s.static_sink is not None and s.static_sink.root == tmp_path / "site"
    assert list(s.products) == ["daily-brief"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[budgets\n", "not valid TOML"),
        ("[budgets]\nmax_generation_attempts = 'three'\n", "max_generation_attempts: input should be a valid integer"),
        ("[nonsense]\nx = 1\n", "unknown key"),
        ("[reconcile]\nlease_seconds = 10\n", "lease_seconds"),
        ('[[products]]\nname = "x"\nprompt = "p"\nlanguages = ["en", "xx"]\n', "unknown language"),
        ('[[products]]\nname = "x"\nprompt = "p"\nlanguages = ["en", "en"]\n', "distinct"),
        ('[[products]]\nname = "Bad Name"\nprompt = "p"\n', "name must be"),
        ('[[products]]\nname = "x"\nprompt = "p"\nopens_at = "25:00"\n', "opens_at"),
        ('[sinks.webhook]\nurl = "ftp://x"\n', "http(s)"),
    ],
)
def test_bad_config_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_settings({"IIPUB_CONFIG": str(cfg)})


def test_47_product_with_unauthorised_tools_is_rejected_at_load(tmp_path: Path) -> None:
    cfg = tmp_path / "tools.toml"
    cfg.write_text('[[products]]\nname = "daily-brief"\nprompt = "p"\ntools = ["web_search"]\n')
    with pytest.raises(ConfigError, match=r"tools not authorised.*web_search"):
        load_settings({"IIPUB_CONFIG": str(cfg)})


def test_missing_and_corrupt_config_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings({"IIPUB_CONFIG": str(tmp_path / "nope.toml")})
    corrupt = tmp_path / "c.toml"
    corrupt.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError):
        load_settings({"IIPUB_CONFIG": str(corrupt)})


def test_the_environment_is_read_when_the_settings_are_built_never_afterwards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`config_file` reads the environment once; the built settings (pure `config` values) keep
    what it said, however the process environment changes later."""
    built = settings_from_dict({}, env={"XDG_STATE_HOME": str(tmp_path / "at-load")})
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "later"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-later")
    assert built.ledger_path() == tmp_path / "at-load" / "iipub" / "spend-ledger.jsonl"
    assert built.api_key is None
    loaded = load_settings({"XDG_STATE_HOME": str(tmp_path / "loaded"), "OPENAI_API_KEY": "sk-at-load"})
    assert loaded.ledger_path() == tmp_path / "loaded" / "iipub" / "spend-ledger.jsonl"
    assert loaded.require_api_key() == "sk-at-load"


def test_the_provider_organization_and_project_come_from_the_environment_over_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "iipub.toml"
    cfg.write_text('[provider]\norganization = "org-file"\nproject = "proj-file"\n')
    from_file = load_settings({"IIPUB_CONFIG": str(cfg)}).provider
    assert (from_file.organization, from_file.project) == ("org-file", "proj-file")
    env = {"IIPUB_CONFIG": str(cfg), "OPENAI_ORG_ID": "org-env", "OPENAI_PROJECT_ID": "proj-env"}
    from_env = load_settings(env).provider
    assert (from_env.organization, from_env.project) == ("org-env", "proj-env")
    assert (load_settings({}).provider.organization, load_settings({}).provider.project) == (None, None)


@pytest.mark.parametrize("value", ["5", "true", '""', "[1]"])
def test_a_database_url_in_the_file_that_is_not_a_url_in_quotes_is_refused(tmp_path: Path, value: str) -> None:
    cfg = tmp_path / "iipub.toml"
    cfg.write_text(f"database_url = {value}\n")
    with pytest.raises(ConfigError, match=r"database_url in .* must be a database URL in quotes"):
        load_settings({"IIPUB_CONFIG": str(cfg)})


@pytest.mark.parametrize("entry", ["https://reuters.com", "www.reuters.com/", "*.reuters.com", "", "x y",
                                   "reuters.com:443"])
def test_an_allowed_domain_that_no_url_could_match_is_refused_at_load(entry: str) -> None:
    """Each such entry matches no source, so every paid edition would fail validation."""
    with pytest.raises(ConfigError, match="allowed_domains entries must be bare domain names"):
        settings_from_dict({"products": [{"name": "brief", "prompt": "Write.",
                                          "allowed_domains": ["bbc.co.uk", entry]}]})


def test_allowed_domains_take_names_subdomains_and_idn() -> None:
    domains = ["reuters.com", "www.bbc.co.uk", "faß.de", "example.org."]
    s = settings_from_dict({"products": [{"name": "brief", "prompt": "Write.", "allowed_domains": domains}]})
    assert s.products["brief"].allowed_domains == ("reuters.com", "www.bbc.co.uk", "faß.de", "example.org.")
