"""Every invalid configuration value gets one line per problem naming `[section] key`, exit 78
(EX_CONFIG), before any database or provider is touched; no TOML document makes `iipub` print a
traceback."""

from __future__ import annotations

import contextlib
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iipub.core.errors import ConfigError
from iipub.provider.factory import load_settings
from tests.support.cli import clean_env, error_messages, run_cli

PRODUCT = '[[products]]\nname = "daily-brief"\nprompt = "Write it."\n'

# (TOML, the words the error line must carry)
CATALOGUE = [
    ("[reconcile]\npoll_interval_seconds = inf\n", "[reconcile] poll_interval_seconds"),
    ("[reconcile]\npoll_interval_seconds = 3600\n", "[reconcile] poll_interval_seconds"),
    ("[provider]\ntimeout_seconds = -1\n", "[provider] timeout_seconds"),
    ("[provider]\nconnect_timeout_seconds = -5\n", "[provider] connect_timeout_seconds"),
    ("[reconcile]\nlease_seconds = nan\n", "[reconcile] lease_seconds"),
    ('[sinks]\nstatic = "x"\n', "[sinks.static] must be a table"),
    ('[sinks]\nwebhook = 3\n', "[sinks.webhook] must be a table"),
    (PRODUCT + "priority = 99999999999999999\n", "priority"),
    ("[provider]\nmax_connections = 0\n", "[provider] max_connections"),
    ("[reconcile]\nconcurrency = 0\n", "[reconcile] concurrency"),
    ("[status]\nwindow_hours = -1\n", "[status] window_hours"),
    ("[relay]\nprune_after_days = -3\n", "[relay] prune_after_days"),
    ('[[products]]\nname = "daily-brief"\nprompt = "p"\nmodel = ""\n', "model"),
    ('[[products]]\nname = "daily-brief"\nprompt = "p"\nopens_at = "05:00+05:00"\n', "opens_at must be HH:MM"),
    ('[[products]]\nname = "daily-brief"\nprompt = "p"\nopens_at = 5\n', "opens_at must be HH:MM"),
    ("[budgets]\nmax_generation_attempts = 0\n", "[budgets] max_generation_attempts"),
    ("[budgets]\nmax_poll_attempts = true\n", "[budgets] max_poll_attempts"),
    ('[reconcile]\ntick_seconds = "50"\n', "[reconcile] tick_seconds"),
    ("[status]\ndispatch_slo_target = 1.5\n", "[status] dispatch_slo_target"),
    ("[status]\noutbox_lag_warn_seconds = 100\noutbox_lag_crit_seconds = 50\n", "outbox_lag_crit_seconds"),
    ("[reconcile]\nbackoff_base_seconds = 100\nbackoff_cap_seconds = 10\n", "backoff_cap_seconds"),
    (PRODUCT + "temperature = 3\n", "temperature"),
    (PRODUCT + "items = 0\n", "items"),
    (PRODUCT + "max_output_bytes = -1\n", "max_output_bytes"),
    ('[sinks.static]\nroot = ""\n', "[sinks.static] root"),
    ('[sinks.static]\nenabled = "no"\n', "[sinks.static] enabled"),
    ('[sinks.webhook]\nurl = "https://cms.example/x"\nsecret_env = "not an env name"\n', "secret_env"),
    ("[provider]\nloss_confirm_reads = 0\n", "[provider] loss_confirm_reads"),
    ("[provider]\nbreaker_cooldown_seconds = 7200\n", "breaker_cooldown_cap_seconds"),
    # A final newline is not the end of a name: it would reach paths, URLs and provider metadata.
    ('[[products]]\nname = "daily-brief\\n"\nprompt = "p"\n', "name must be lower-case letters"),
    ('[[products]]\nname = "daily-brief"\nprompt = "p"\nmodel = "gpt-5-mini\\n"\n', "model: string should match"),
    ('[sinks.webhook]\nurl = "https://cms.example/x"\nsecret_env = "HOOK\\n"\n', "secret_env: string should match"),
    # Money controls.
    (PRODUCT + 'service_tier = "fast"\n', "service_tier"),
    (PRODUCT + "flex_until_minutes = -1\n", "flex_until_minutes"),
    (PRODUCT + "estimated_tokens = 0\n", "estimated_tokens"),
    (PRODUCT + "max_tokens_per_day = 0\n", "max_tokens_per_day"),
    ("[budgets]\nmax_tokens_per_day = -5\n", "[budgets] max_tokens_per_day"),
    ("[status]\nunreachable_after_ticks = 0\n", "[status] unreachable_after_ticks"),
    ("[provider]\nflex_timeout_seconds = 0\n", "[provider] flex_timeout_seconds"),
    ('[pricing.models."gpt-5-mini"]\ninput_per_million = 1\n', "output_per_million"),
    ('[pricing.models."gpt-5-mini"]\ninput_per_million = -1\noutput_per_million = 2\n', "input_per_million"),
    ('[pricing]\ncurrency = "US dollars"\n', "[pricing] currency"),
    (PRODUCT + 'service_tier = "flex"\n[provider]\nflex_timeout_seconds = 120\n', "flex_timeout_seconds"),
    # What the model takes (`iipub.provider.openai.capabilities`): the real API would refuse each of these creates.
    (PRODUCT + 'model = "gpt-5-mini"\ntemperature = 0.2\n', "temperature is refused by gpt-5-mini"),
    (PRODUCT + 'model = "o3"\ntop_p = 0.5\n', "top_p is refused by o3"),
    (PRODUCT + 'model = "gpt-4.1"\nreasoning_effort = "low"\n', "reasoning_effort 'low' is refused by gpt-4.1"),
    (PRODUCT + 'model = "gpt-5-mini"\nreasoning_effort = "none"\n', "reasoning_effort 'none' is refused"),
    (PRODUCT + 'model = "o4-mini"\nverbosity = "low"\n', "verbosity is refused by o4-mini"),
    (PRODUCT + 'reasoning_effort = "extreme"\n', "reasoning_effort"),
    (PRODUCT + 'verbosity = "loud"\n', "verbosity"),
    (PRODUCT + "top_p = 2\n", "top_p"),
    (PRODUCT + "max_output_tokens = 5\n", "max_output_tokens"),
    (PRODUCT + 'model = "gpt-4.1"\nmax_output_tokens = 40000\n', "max_output_tokens 40000 is more than gpt-4.1 takes"),
    ('[models."gpt-5*"]\nmax_output_tokens = true\n', "max_output_tokens must be a whole number"),
    ('[models."gpt-5*"]\nsampling = "yes"\n', "sampling must be true or false"),
    ('[models."gpt-5*"]\nreasoning_efforts = ["turbo"]\n', "reasoning_efforts must be a list"),
    ('[models."gpt 5"]\nsampling = true\n', "a model name, or a prefix ending in *"),
    ('[models."gpt-5*"]\ncolour = true\n', "unknown key(s) colour"),
]


@pytest.mark.parametrize(("toml", "needle"), CATALOGUE, ids=[n for _, n in CATALOGUE])
def test_each_invalid_value_is_one_line_per_problem_and_exit_78(tmp_path: Path, toml: str, needle: str) -> None:
    cfg = tmp_path / "iipub.toml"
    cfg.write_text(toml, encoding="utf-8")
    env = {**clean_env(), "IIPUB_CONFIG": str(cfg), "IIPUB_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
           "OPENAI_API_KEY": "sk-test"}
    result = run_cli("reconcile", env=env, cwd=tmp_path)
    assert result.returncode == 78, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert lines and error_messages(result.stderr), result.stderr
    assert any(needle in line for line in lines), result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "db.sqlite3").exists()  # nothing was opened, let alone written


def test_a_prompt_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "p.md").write_bytes(b"\xff\xfe not utf-8 \xc3\x28")
    cfg = tmp_path / "iipub.toml"
    cfg.write_text('[[products]]\nname = "daily-brief"\nprompt_file = "p.md"\n')
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        load_settings({"IIPUB_CONFIG": str(cfg)})


def test_several_problems_are_reported_as_several_lines(tmp_path: Path) -> None:
    cfg = tmp_path / "iipub.toml"
    cfg.write_text("[reconcile]\nconcurrency = 0\nbatch_size = -1\n")
    with pytest.raises(ConfigError) as info:
        load_settings({"IIPUB_CONFIG": str(cfg)})
    lines = str(info.value).splitlines()
    assert len(lines) == 2 and all(line.startswith("[reconcile] ") for line in lines)


_scalars = st.one_of(st.integers(), st.floats(), st.text(max_size=20), st.booleans(),
                     st.lists(st.integers(), max_size=3))
_keys = st.sampled_from(["lease_seconds", "tick_seconds", "concurrency", "timeout_seconds", "max_connections",
                         "poll_interval_seconds", "priority", "items", "opens_at", "root", "model", "languages",
                         "window_hours", "prune_after_days", "url", "x"])
_sections = st.sampled_from(["reconcile", "provider", "relay", "status", "budgets", "sinks.static",
                             "sinks.webhook", "products", "nonsense"])


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return {float("inf"): "inf", float("-inf"): "-inf"}.get(value, "nan" if value != value else repr(value))
    if isinstance(value, str):
        return '"' + value.encode("unicode_escape").decode("ascii").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return str(value)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(_sections, _keys, _scalars), min_size=1, max_size=4))
def test_no_toml_document_makes_the_loader_crash(tmp_path: Path, entries: list[tuple[str, str, object]]) -> None:
    lines: list[str] = []
    for section, key, value in entries:
        header = "[[products]]\nname = \"daily-brief\"\nprompt = \"p\"" if section == "products" else f"[{section}]"
        lines += [header, f"{key} = {_toml_value(value)}"]
    text = "\n".join(lines) + "\n"
    cfg = tmp_path / "fuzz.toml"
    cfg.write_text(text, encoding="utf-8")
    with contextlib.suppress(tomllib.TOMLDecodeError):
        tomllib.loads(text)
    error: ConfigError | None = None
    try:
        load_settings({"IIPUB_CONFIG": str(cfg)})
    except ConfigError as exc:
        error = exc
    assert error is None or str(error).strip(), text  # a message, never an empty error
