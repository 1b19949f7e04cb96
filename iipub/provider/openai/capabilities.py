"""Which request keys each model takes, pure: the model-capability table the configuration is
checked against at load, so a create the real API would refuse for a parameter never goes out.

The Responses API refuses, per model family, keys it accepts for others:
- the GPT-5 family and the o-series (reasoning models) refuse `temperature` and `top_p` other
  than the default (400 invalid_request_error, `unsupported_value` or `unsupported_parameter`,
  `param` naming the key); they take `reasoning.effort` (each model only some values);
- `text.verbosity` is a GPT-5-family key;
- the chat models (gpt-4.1, gpt-4o, gpt-5-chat) take the sampling keys and refuse
  `reasoning.effort` (`unsupported_parameter`).

The table is data: each entry says where its values come from and when they were last checked
(`source`, `checked`), so a stale row is visible (`iipub doctor` prints both). It is matched by the
longest pattern, case-insensitively (the API takes `GPT-5.5` as `gpt-5.5`): an exact model name,
or a prefix ending in `*`. A model no pattern matches is allowed and not checked: loading the
configuration warns once per such model (`unknown_models`), and the API decides (a refusal of a
parameter holds that product's creates only, `holds`). An operator extends or corrects the table
in the configuration:

    [models."gpt-5-mini"]          # or a family: [models."ft:gpt-4.1*"]
    sampling = false               # temperature / top_p accepted
    reasoning_efforts = ["low", "medium", "high"]   # [] : reasoning.effort not taken
    verbosity = true               # text.verbosity accepted
    max_output_tokens = 128000     # the most a create may ask for (a product's cap is held to it)
    flex = true                    # the flex service tier is offered (`iipub doctor` checks it)

A configured entry replaces the built-in one of the same pattern and, like it, is matched by
length (`gpt-5-mini` beats `gpt-5*`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from iipub.settings.config import REASONING_EFFORTS, VERBOSITIES, ModelRule, Product

__all__ = ["BUILTIN", "REASONING_EFFORTS", "TABLE", "VERBOSITIES", "ModelRule", "output_ceiling", "refused_keys",
           "rule_for", "unknown_models"]

# Where the built-in rows come from: OpenAI's model pages ("Reasoning effort" per model) and the
# Responses API reference, and the refusals the API gives (400 unsupported_value naming
# `reasoning.effort`). A row is re-checked when a model family ships; `checked` says when.
_DOCS = "OpenAI model pages (reasoning.effort per model) and the Responses API reference"
_ANSWERS = "OpenAI's 400 unsupported_value answers for reasoning.effort, as reported publicly"
_CHECKED = "2026-12-06"


def _rule(efforts: tuple[str, ...] = (), *, sampling: bool = False, verbosity: bool = True,
          max_output_tokens: int | None = 128_000, flex: bool = True, source: str = _DOCS,
          checked: str = _CHECKED) -> ModelRule:
    return ModelRule(sampling=sampling, reasoning_efforts=efforts, verbosity=verbosity,
                     max_output_tokens=max_output_tokens, flex=flex, source=source, checked=checked)


_NONE_TO_XHIGH = ("none", "low", "medium", "high", "xhigh")
_O_SERIES = _rule(("low", "medium", "high"), verbosity=False, max_output_tokens=100_000)

BUILTIN: Mapping[str, ModelRule] = {
    "gpt-5*": _rule(("minimal", "low", "medium", "high")),
    "gpt-5-pro*": _rule(("high",), max_output_tokens=272_000, flex=False),
    "gpt-5-codex*": _rule(("low", "medium", "high")),
    "gpt-5.1*": _rule(("none", "low", "medium", "high")),
    # The codex models refuse `none`; the max one also takes `xhigh`.
    "gpt-5.1-codex*": _rule(("low", "medium", "high"), source=_ANSWERS),
    "gpt-5.1-codex-max*": _rule(("low", "medium", "high", "xhigh")),
    # The chat-latest models take the default effort only.
    "gpt-5.1-chat-latest": _rule(("medium",), max_output_tokens=16_384, flex=False, source=_ANSWERS),
    "gpt-5.2*": _rule(_NONE_TO_XHIGH),
    "gpt-5.2-chat-latest": _rule(("medium",), max_output_tokens=16_384, flex=False, source=_ANSWERS),
    "gpt-5.2-pro*": _rule(("medium", "high", "xhigh"), flex=False),
    # gpt-5.4 and later: `none` to `xhigh`, and `minimal` is refused.
    "gpt-5.4*": _rule(_NONE_TO_XHIGH),
    "gpt-5.5*": _rule(_NONE_TO_XHIGH),
    "gpt-5.6*": _rule(_NONE_TO_XHIGH),
    "gpt-5-chat*": _rule(sampling=True, verbosity=False, max_output_tokens=16_384, flex=False),
    "o1*": _rule(("low", "medium", "high"), verbosity=False, max_output_tokens=100_000, flex=False),
    "o3*": _O_SERIES,
    "o4*": _O_SERIES,
    "gpt-4.1*": _rule(sampling=True, verbosity=False, max_output_tokens=32_768, flex=False),
    "gpt-4o*": _rule(sampling=True, verbosity=False, max_output_tokens=16_384, flex=False),
}


def matches(pattern: str, model: str) -> bool:
    """Whether `pattern` names `model`; model names are matched case-insensitively."""
    pattern, model = pattern.lower(), model.lower()
    return model.startswith(pattern[:-1]) if pattern.endswith("*") else model == pattern


def rule_for(model: str, configured: Mapping[str, ModelRule] | None = None) -> tuple[str, ModelRule] | None:
    """The (pattern, rule) that governs `model`: the longest matching pattern of the built-in
    table with the configured entries laid over it; None for a model neither knows."""
    table = {p.lower(): rule for p, rule in (*BUILTIN.items(), *(configured or {}).items())}
    found = [(len(p.rstrip("*")) + (0 if p.endswith("*") else 1), p) for p in table if matches(p, model)]
    if not found:
        return None
    pattern = max(found)[1]
    return pattern, table[pattern]


def unknown_models(products_models: Iterable[str], configured: Mapping[str, ModelRule] | None = None) -> list[str]:
    """The models (each once, in order) that no entry of the table names: allowed, unchecked."""
    seen: list[str] = []
    for model in products_models:
        if model not in seen and rule_for(model, configured) is None:
            seen.append(model)
    return seen


def output_ceiling(model: str, configured: Mapping[str, ModelRule] | None = None) -> int | None:
    """The most `max_output_tokens` the model takes, when the table knows it."""
    governing = rule_for(model, configured)
    return governing[1].max_output_tokens if governing is not None else None


def refused_keys(model: str, *, temperature: float | None, top_p: float | None, reasoning_effort: str | None,
                 verbosity: str | None, configured: Mapping[str, ModelRule] | None = None,
                 max_output_tokens: int | None = None) -> list[str]:
    """Why the real API would refuse these keys for `model`, one phrase per key (empty: none)."""
    governing = rule_for(model, configured)
    if governing is None:
        return []
    pattern, rule = governing
    where = f'[models."{pattern}"]'
    problems = []
    for key, value in (("temperature", temperature), ("top_p", top_p)):
        if value is not None and not rule.sampling:
            problems.append(f"{key} is refused by {model} (GPT-5 family and o-series models take only the default; "
                            f"remove it, or set {where} sampling = true if this model takes it)")
    if reasoning_effort is not None and reasoning_effort not in rule.reasoning_efforts:
        taken = ", ".join(rule.reasoning_efforts) or "none: the model does not reason"
        problems.append(f"reasoning_effort {reasoning_effort!r} is refused by {model} (it takes: {taken}; "
                        f"see {where} reasoning_efforts)")
    if verbosity is not None and not rule.verbosity:
        problems.append(f"verbosity is refused by {model} (a GPT-5-family key; see {where} verbosity)")
    ceiling = rule.max_output_tokens
    if max_output_tokens is not None and ceiling is not None and max_output_tokens > ceiling:
        problems.append(f"max_output_tokens {max_output_tokens} is more than {model} takes ({rule.max_output_tokens}; "
                        f"see {where} max_output_tokens)")
    return problems


class _Table:
    """The table as the configuration is checked against it at load (`settings.config.ModelTable`)."""

    def refused_keys(self, p: Product, configured: Mapping[str, ModelRule]) -> list[str]:
        return refused_keys(p.model, temperature=p.temperature, top_p=p.top_p, reasoning_effort=p.reasoning_effort,
                            verbosity=p.verbosity, configured=configured, max_output_tokens=p.max_output_tokens)

    def output_ceiling(self, model: str, configured: Mapping[str, ModelRule]) -> int | None:
        return output_ceiling(model, configured)

    def rule(self, model: str, configured: Mapping[str, ModelRule]) -> tuple[str, ModelRule] | None:
        return rule_for(model, configured)


TABLE = _Table()
