"""What the real Responses API refuses in a create's parameters, with the error bodies it answers.

The simulator's own table (a double holds its own idea of the real API, not iipub's: a test then
catches iipub's table being wrong). Each rule is taken from public reports of real answers:

- GPT-5 family / o-series, `temperature` or `top_p` other than 1:
  400 `Unsupported value: 'temperature' does not support 0.2 with this model. Only the default (1)
  value is supported.` (`unsupported_value`, param `temperature`); some models answer
  `Unsupported parameter: 'temperature' is not supported with this model.` with `code: null`.
- a chat model given `reasoning.effort`: `Unsupported parameter: 'reasoning.effort' is not
  supported with this model.` (`unsupported_parameter`, param `reasoning.effort`).
- an effort the model does not take: `Unsupported value: 'reasoning.effort' does not support
  'none' with this model. Supported values are: 'minimal', 'low', 'medium', and 'high'.`
- `max_output_tokens` below 16: `Invalid 'max_output_tokens': integer below minimum value.`
  (`integer_below_min_value`); above the model's largest output (16,384 for gpt-4o, 32,768 for
  gpt-4.1, 100,000 for the o-series, 128,000 for the GPT-5 family): `integer_above_max_value`.
- `text.format` of type `json_schema` with `strict: true`: the root must be an object, every
  object must say `additionalProperties: false` and list every property in `required`, nested
  ones too (`invalid_json_schema`, param `text.format.schema`).
"""

from __future__ import annotations

from typing import Any

_REASONING = ("gpt-5", "o1", "o3", "o4")
_CHAT = ("gpt-5-chat",)
_XHIGH = ("none", "low", "medium", "high", "xhigh")
_EFFORTS = {"gpt-5.1": ("none", "low", "medium", "high"), "gpt-5.2": _XHIGH,
            "gpt-5.1-codex": ("low", "medium", "high"), "gpt-5.1-codex-max": ("low", "medium", "high", "xhigh"),
            "gpt-5.1-chat-latest": ("medium",), "gpt-5.2-chat-latest": ("medium",),
            "gpt-5.2-pro": ("medium", "high", "xhigh"), "gpt-5.4": _XHIGH, "gpt-5.5": _XHIGH, "gpt-5.6": _XHIGH,
            "gpt-5-pro": ("high",), "gpt-5": ("minimal", "low", "medium", "high"), "o": ("low", "medium", "high")}


def reasons(model: str) -> bool:
    """Whether the model is a reasoning model (GPT-5 family but its chat models, o-series)."""
    return _reasons(model)


def _reasons(model: str) -> bool:
    return model.startswith(_REASONING) and not model.startswith(_CHAT)


def _efforts(model: str) -> tuple[str, ...]:
    for prefix in sorted(_EFFORTS, key=len, reverse=True):
        if model.startswith(prefix):
            return _EFFORTS[prefix]
    return ()


_CEILINGS = {"gpt-5-pro": 272_000, "gpt-5-chat": 16_384, "gpt-5": 128_000, "o1": 100_000, "o3": 100_000,
             "o4": 100_000, "gpt-4.1": 32_768, "gpt-4o": 16_384}


def _output_ceiling(model: str) -> int | None:
    for prefix in sorted(_CEILINGS, key=len, reverse=True):
        if model.startswith(prefix):
            return _CEILINGS[prefix]
    return None


def _quoted(values: tuple[str, ...]) -> str:
    q = [f"'{v}'" for v in values]
    return q[0] if len(q) == 1 else ", ".join(q[:-1]) + f", and {q[-1]}"


def refusal(req: dict[str, Any], *, legacy_sampling_message: bool = False) -> tuple[str, str | None, str] | None:
    """(message, code, param) of the 400 the real API answers this create with, or None."""
    model = str(req.get("model") or "").lower()  # the API takes model names in any case
    if _reasons(model):
        for key in ("temperature", "top_p"):
            value = req.get(key)
            if value is not None and value != 1:
                if legacy_sampling_message:
                    return f"Unsupported parameter: '{key}' is not supported with this model.", None, key
                return ((f"Unsupported value: '{key}' does not support {value} with this model. Only the default "
                         f"(1) value is supported."), "unsupported_value", key)
    reasoning = req.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    if effort is not None:
        if not _reasons(model):
            return ("Unsupported parameter: 'reasoning.effort' is not supported with this model.",
                    "unsupported_parameter", "reasoning.effort")
        if effort not in _efforts(model):
            return ((f"Unsupported value: 'reasoning.effort' does not support '{effort}' with this model. "
                     f"Supported values are: {_quoted(_efforts(model))}."), "unsupported_value", "reasoning.effort")
    text = req.get("text")
    if isinstance(text, dict) and text.get("verbosity") is not None and not model.startswith("gpt-5"):
        return ("Unsupported parameter: 'text.verbosity' is not supported with this model.", "unsupported_parameter",
                "text.verbosity")
    cap = req.get("max_output_tokens")
    ceiling = _output_ceiling(model)
    if isinstance(cap, int) and not isinstance(cap, bool) and ceiling is not None and cap > ceiling:
        return ((f"Invalid 'max_output_tokens': integer above maximum value. Expected a value <= {ceiling}, but got "
                 f"{cap} instead."), "integer_above_max_value", "max_output_tokens")
    if isinstance(cap, int) and not isinstance(cap, bool) and cap < 16:
        return ((f"Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got "
                 f"{cap} instead."), "integer_below_min_value", "max_output_tokens")
    fmt = text.get("format") if isinstance(text, dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and fmt.get("strict"):
        problem = strict_schema_problem(fmt.get("schema"))
        if problem:
            return (f"Invalid schema for response_format '{fmt.get('name')}': {problem}", "invalid_json_schema",
                    "text.format.schema")
    return None


def strict_schema_problem(schema: Any) -> str | None:
    """Why a strict structured-output schema is refused (the rules of Structured Outputs), or None."""
    if not isinstance(schema, dict):
        return "schema must be a JSON Schema object."
    if schema.get("type") != "object":
        return f"schema must be a JSON Schema of 'type: \"object\"', got 'type: \"{schema.get('type')}\"'."
    return _walk(schema, "()")


def _walk(node: Any, context: str) -> str | None:
    if isinstance(node, list):
        for i, child in enumerate(node):
            problem = _walk(child, f"{context}, {i}")
            if problem:
                return problem
        return None
    if not isinstance(node, dict):
        return None
    types = node.get("type")
    is_object = types == "object" or (isinstance(types, list) and "object" in types) or "properties" in node
    if is_object:
        if node.get("additionalProperties") is not False:
            return f"In context={context}, 'additionalProperties' is required to be supplied and to be false."
        props = node.get("properties") or {}
        required = node.get("required") or []
        missing = [k for k in props if k not in required]
        if missing:
            return (f"In context={context}, 'required' is required to be supplied and to be an array including "
                    f"every key in properties. Missing '{missing[0]}'.")
        for key, child in props.items():
            problem = _walk(child, f"{context}, 'properties', '{key}'")
            if problem:
                return problem
    for key in ("items", "anyOf", "allOf", "oneOf"):
        if key in node:
            problem = _walk(node[key], f"{context}, '{key}'")
            if problem:
                return problem
    for name, child in (node.get("$defs") or {}).items() if isinstance(node.get("$defs"), dict) else ():
        problem = _walk(child, f"('$defs', '{name}')")
        if problem:
            return problem
    return None
