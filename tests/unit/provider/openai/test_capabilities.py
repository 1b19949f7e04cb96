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
