"""The model-capability table: which request keys each model takes, checked at load; an
operator's `[models."…"]` entry extends or corrects it; the shipped defaults and the README's
example send what the real API accepts."""

from __future__ import annotations

import datetime as dt
import re
import tomllib
import typing
from pathlib import Path

import pytest
from openai.types.responses import response_create_params
from openai.types.shared import reasoning_effort

from iipub.core.errors import ConfigError
from iipub.provider.factory import settings_from_dict
from iipub.provider.openai import capabilities as models
from iipub.provider.openai.adapter import create_body
from iipub.provider.outcomes import CreateRequest

ROOT = Path(__file__).resolve().parents[4]
PRODUCT = {"name": "daily-brief", "prompt": "Write it."}


@pytest.mark.parametrize(("model", "pattern"), [
    ("gpt-5-mini", "gpt-5*"), ("gpt-5", "gpt-5*"), ("gpt-5.1", "gpt-5.1*"), ("gpt-5-chat-latest", "gpt-5-chat*"),
    ("o3", "o3*"), ("o4-mini", "o4*"), ("gpt-4.1-mini", "gpt-4.1*"),
])
def test_the_longest_pattern_governs(model: str, pattern: str) -> None:
    found = models.rule_for(model)
    assert found is not None and found[0] == pattern


def test_a_model_nobody_knows_is_not_checked() -> None:
    assert models.rule_for("my-own-model") is None
    assert models.refused_keys("my-own-model", temperature=0.3, top_p=None, reasoning_effort="max",
                               verbosity="low") == []


def test_the_effort_values_are_the_sdks() -> None:
    """A value the SDK's type does not name is never accepted (nor offered by the table)."""
    allowed = set(typing.get_args(typing.get_args(reasoning_effort.ReasoningEffort)[0]))
    assert set(models.REASONING_EFFORTS) == allowed
    for rule in models.BUILTIN.values():
        assert set(rule.reasoning_efforts) <= allowed


def test_a_sampling_key_for_a_gpt5_model_is_refused_at_load_in_one_line() -> None:
    with pytest.raises(ConfigError) as info:
        settings_from_dict({"products": [{**PRODUCT, "model": "gpt-5-mini", "temperature": 0.2}]})
    (line,) = str(info.value).splitlines()
    assert line.startswith("product 'daily-brief': temperature is refused by gpt-5-mini")
    assert '[models."gpt-5*"] sampling = true' in line


def test_an_operator_entry_extends_the_table() -> None:
    """A model the built-in table gets wrong (or a fine-tune of it) is declared in the file."""
    doc = {"models": {"gpt-5-mini": {"sampling": True}},
           "products": [{**PRODUCT, "model": "gpt-5-mini", "temperature": 0.2}]}
    s = settings_from_dict(doc)
    assert s.products["daily-brief"].temperature == 0.2
    assert s.models["gpt-5-mini"] == models.ModelRule(sampling=True)
    # ... and a family entry narrows what an unknown model takes.
    with pytest.raises(ConfigError, match="verbosity is refused by ft:mine-1"):
        settings_from_dict({"models": {"ft:mine*": {"sampling": True}},
                            "products": [{**PRODUCT, "model": "ft:mine-1", "verbosity": "low"}]})


def _readme_settings(tmp_path: Path) -> dict[str, typing.Any]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```toml\n(.*?)```", text, re.DOTALL)
    return tomllib.loads(block)


def test_the_readme_example_and_the_built_in_products_send_what_the_api_takes(tmp_path: Path) -> None:
    doc = _readme_settings(tmp_path)
    doc.pop("sinks", None)  # paths of a real host: not what this test is about
    doc.pop("ledger", None)
    doc.pop("monitoring", None)
    doc["reconcile"].pop("legacy_decisions_file", None)
    readme = settings_from_dict(doc, tmp_path, env={})
    builtin = settings_from_dict({}, tmp_path, env={})
    params = set(typing.get_type_hints(response_create_params.ResponseCreateParamsBase))
    for product in [*readme.products.values(), *builtin.products.values()]:
        body = create_body(CreateRequest("job-1", product, dt.date(2026, 12, 3), 1, product.fingerprint()))
        assert "temperature" not in body and "top_p" not in body, product.name
        assert body["max_output_tokens"] == product.output_token_cap()
        assert set(body) <= params
        assert models.refused_keys(product.model, temperature=body.get("temperature"), top_p=body.get("top_p"),
                                   reasoning_effort=(body.get("reasoning") or {}).get("effort"),
                                   verbosity=body["text"].get("verbosity")) == []


def test_the_default_cap_is_held_to_what_the_model_takes() -> None:
    s = settings_from_dict({"products": [{**PRODUCT, "model": "gpt-4o"}, {"name": "watch", "prompt": "p"}]})
    assert s.products["daily-brief"].output_token_cap() == 16_384  # sized 37,600 by default: too much for gpt-4o
    assert s.products["watch"].output_token_cap() == 37_600 and s.products["watch"].max_output_tokens is None
    lowered = settings_from_dict({"models": {"gpt-5-mini": {"sampling": False, "max_output_tokens": 20_000}},
                                  "products": [PRODUCT]})
    assert lowered.products["daily-brief"].output_token_cap() == 20_000


# The families the table must know (what each takes, what each refuses), as OpenAI documents them.
_CURRENT = [
    ("gpt-5.4", ("none", "low", "medium", "high", "xhigh"), ("minimal",)),
    ("gpt-5.5", ("none", "low", "medium", "high", "xhigh"), ("minimal",)),
    ("gpt-5.6-mini", ("none", "low", "medium", "high", "xhigh"), ("minimal",)),
    ("gpt-5.1-codex-max", ("low", "medium", "high", "xhigh"), ("none",)),
    ("gpt-5.1-codex", ("low", "medium", "high"), ("none", "xhigh")),
    ("gpt-5.1-chat-latest", ("medium",), ("low", "high", "none")),
    ("gpt-5.2-chat-latest", ("medium",), ("low", "high", "xhigh")),
    ("gpt-5.2-pro", ("medium", "high", "xhigh"), ("low", "none")),
]


@pytest.mark.parametrize(("model", "takes", "refuses"), _CURRENT)
def test_the_table_is_current_for_the_new_families(model: str, takes: tuple[str, ...],
                                                   refuses: tuple[str, ...]) -> None:
    """A valid configuration loads (gpt-5.5 with xhigh), an invalid one is refused at load in one
    line (gpt-5.5 with minimal), and the simulator's own idea of the API agrees."""
    from iipub.provider.openai.simulator import params

    for effort in takes:
        s = settings_from_dict({"products": [{**PRODUCT, "model": model, "reasoning_effort": effort}]})
        assert s.products["daily-brief"].reasoning_effort == effort
        assert params.refusal({"model": model, "reasoning": {"effort": effort}}) is None
    for effort in refuses:
        with pytest.raises(ConfigError, match=re.escape(f"reasoning_effort '{effort}' is refused by {model}")):
            settings_from_dict({"products": [{**PRODUCT, "model": model, "reasoning_effort": effort}]})
        assert params.refusal({"model": model, "reasoning": {"effort": effort}}) is not None


def test_models_are_matched_case_insensitively() -> None:
    found = models.rule_for("GPT-5.5")
    assert found is not None and found[0] == "gpt-5.5*"
    with pytest.raises(ConfigError, match=re.escape("reasoning_effort 'minimal' is refused by GPT-5.5")):
        settings_from_dict({"products": [{**PRODUCT, "model": "GPT-5.5", "reasoning_effort": "minimal"}]})
    # an operator's entry, in any case, governs the model in any case
    s = settings_from_dict({"models": {"My-Model": {"sampling": True}},
                            "products": [{**PRODUCT, "model": "my-model", "temperature": 0.3}]})
    assert s.products["daily-brief"].temperature == 0.3


def test_every_built_in_row_names_its_source_and_date() -> None:
    for pattern, rule in models.BUILTIN.items():
        assert rule.source and rule.source != "configuration", pattern
        assert rule.checked is not None and dt.date.fromisoformat(rule.checked).year >= 2026, pattern
    assert settings_from_dict({"models": {"mine": {"sampling": True}}}).models["mine"].source == "configuration"


def test_an_unknown_model_loads_with_one_warning(capsys: pytest.CaptureFixture[str]) -> None:
    import structlog

    with structlog.testing.capture_logs() as logs:
        s = settings_from_dict({"products": [{**PRODUCT, "model": "acme-9", "reasoning_effort": "max"},
                                             {"name": "watch", "prompt": "p", "model": "acme-9"}]})
    assert s.products["daily-brief"].model == "acme-9"
    warned = [entry for entry in logs if entry["event"] == "model_unknown"]
    assert [w["model"] for w in warned] == ["acme-9"]  # once, for two products
    assert warned[0]["log_level"] == "warning" and '[models."acme-9"]' in warned[0]["message"]
