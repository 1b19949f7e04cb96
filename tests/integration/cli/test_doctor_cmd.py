"""`iipub doctor` over real HTTP against `iipub simulator`: one line per check, exit 0 only when
all pass, `--json`; the key (placeholder, unusable in a header, refused), the organization and
project, each product's model through `GET /v1/models/{model}`, its parameters and flex, its
create's size against [provider] tokens_per_minute, the webhook secret's format. Nothing is
created: the simulator counts no create."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iipub.provider.openai.simulator import Simulator
from iipub.provider.openai.simulator.faults import FaultRule
from tests.support.cli import run_cli
from tests.support.settings import sim_env
from tests.support.simulator import simulator

PRODUCTS = ('[[products]]\nname = "daily-brief"\nprompt = "Write the brief."\nmodel = "gpt-5-mini"\n'
            '[[products]]\nname = "watch"\nprompt = "Watch."\nmodel = "gpt-4.1"\nitems = 3\n')


def env_for(cli_env: dict[str, str], sim: Simulator, tmp_path: Path, config: str,
            tokens_per_minute: int | None = None) -> dict[str, str]:
    """`sim_env`, its [provider] section with the organization's tokens-per-minute limit."""
    env = sim_env(cli_env, sim, tmp_path, config)
    path = Path(env["IIPUB_CONFIG"])
    text = path.read_text().replace("lease_seconds = 10\n", "lease_seconds = 60\n")  # a flex create's time
    if tokens_per_minute is not None:
        text = text.replace("[provider]\n", f"[provider]\ntokens_per_minute = {tokens_per_minute}\n")
    path.write_text(text)
    return env


def doctor(env: dict[str, str], *extra: str) -> tuple[int, list[str], str]:
    result = run_cli("doctor", *extra, env=env)
    return result.returncode, result.stdout.splitlines(), result.stderr


def failed(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("FAIL")]


def test_a_healthy_account_passes_every_check_and_pays_for_nothing(cli_env: dict[str, str], sim: Simulator,
                                                                   tmp_path: Path) -> None:
    env = env_for(cli_env, sim, tmp_path, PRODUCTS, tokens_per_minute=2_000_000)
    code, lines, _ = doctor(env)
    assert code == 0, lines
    assert failed(lines) == []
    assert lines[0] == "ok   key (OPENAI_API_KEY): a short key accepted by the API"
    assert "ok   model (product daily-brief): gpt-5-mini: exists, and the key's project may use it" in lines
    assert any(line.startswith("ok   request size (product watch): a create asks about") for line in lines)
    assert lines[-1].startswith("all ") and lines[-1].endswith("checks pass: nothing was paid for")
    stats = sim.stats()
    assert stats["requests"]["model"] == 2 and stats["requests"]["create"] == 0 and stats["creates_total"] == 0


def test_each_fault_is_named_on_its_own_line_and_the_exit_is_not_zero(cli_env: dict[str, str],
                                                                      tmp_path: Path) -> None:
    with simulator(no_access_models=("gpt-4.1",), unknown_models=("gpt-9",)) as sim:
        config = (PRODUCTS + '[[products]]\nname = "gone"\nprompt = "p"\nmodel = "gpt-9"\n'
                  '[[products]]\nname = "flexed"\nprompt = "p"\nmodel = "gpt-4o"\nservice_tier = "flex"\n')
        env = env_for(cli_env, sim, tmp_path, config, tokens_per_minute=30_000)
        code, lines, stderr = doctor(env)
        assert code == 1, stderr
        bad = failed(lines)
        watch = [line for line in bad if line.startswith("FAIL model (product watch)")]
        assert ("FAIL model (product watch): gpt-4.1: the key's project has no access to it (HTTP 403: Project "
                "`proj_default` does not have access to model `gpt-4.1`") in watch[0]
        assert "allow the model in the project's limits" in watch[0]
        assert any(line.startswith("FAIL model (product gone): gpt-9: no such model for this account") for line in bad)
        assert any(line.startswith("FAIL flex (product flexed): gpt-4o is not offered at the flex tier")
                   for line in bad)
        # daily-brief's default cap (37,600 tokens) is over a 30,000 tokens-per-minute limit
        too_large = [line for line in bad if line.startswith("FAIL request size (product daily-brief)")]
        assert too_large and "more than the tokens-per-minute limit 30,000" in too_large[0]
        assert "lower max_output_tokens, ask for fewer items or languages" in too_large[0]
        # gone's model is unknown to the table too: its default cap (37,600) is over the limit as well
        assert sorted(line.split(":")[0] for line in bad) == [
            "FAIL flex (product flexed)", "FAIL model (product gone)", "FAIL model (product watch)",
            "FAIL request size (product daily-brief)", "FAIL request size (product gone)"]
        assert "5 checks of " in lines[-1]
        assert "5 checks of" in stderr
        assert sim.stats()["creates_total"] == 0


@pytest.mark.parametrize(("key", "words"), [
    ("sk-CHANGE-ME", "OPENAI_API_KEY is the placeholder sk-CHANGE-ME that `iipub init` writes"),
    ("sk-bad key", "OPENAI_API_KEY cannot be sent in an HTTP header"),
])
def test_an_unusable_key_is_named_and_nothing_is_sent(cli_env: dict[str, str], sim: Simulator, tmp_path: Path,
                                                      key: str, words: str) -> None:
    env = {**env_for(cli_env, sim, tmp_path, PRODUCTS), "OPENAI_API_KEY": key}
    code, lines, _ = doctor(env)
    assert code == 1
    assert lines[0].startswith(f"FAIL key (OPENAI_API_KEY): {words}")
    assert "FAIL model (product daily-brief): gpt-5-mini not checked: the key cannot be used" in lines
    assert sum(sim.stats()["requests"].values()) == 0


def test_a_refused_key_and_a_refused_country(cli_env: dict[str, str], sim: Simulator, tmp_path: Path) -> None:
    env = env_for(cli_env, sim, tmp_path, PRODUCTS)
    sim.add_faults([FaultRule("model", "unauthorized", times=2)])
    code, lines, _ = doctor(env)
    assert code == 1
    assert lines[0].startswith("FAIL key (OPENAI_API_KEY): the API refuses the key a short key (HTTP 401: Incorrect "
                               "API key provided.")
    sim.add_faults([FaultRule("model", "unsupported_country", times=2)])
    code, lines, _ = doctor(env)
    assert code == 1
    scope = [line for line in lines if line.startswith("FAIL organization/project")]
    assert scope and "Country, region, or territory not supported" in scope[0]


def test_organization_and_project_ids_are_checked(cli_env: dict[str, str], sim: Simulator, tmp_path: Path) -> None:
    env = {**env_for(cli_env, sim, tmp_path, PRODUCTS), "OPENAI_ORG_ID": "acme", "OPENAI_PROJECT_ID": "proj_abc"}
    code, lines, _ = doctor(env)
    assert code == 1
    assert ("FAIL organization/project (organization acme, project proj_abc): OPENAI_ORG_ID 'acme' is not an "
            "organization id (they start with 'org-')") in lines[1]
    env["OPENAI_ORG_ID"] = "org-acme"
    code, lines, _ = doctor(env)
    assert code == 0, failed(lines)
    assert lines[1] == ("ok   organization/project (organization org-acme, project proj_abc): organization org-acme, "
                        "project proj_abc: accepted with the key")


def test_parameters_the_model_refuses_and_the_webhook_secret(cli_env: dict[str, str], sim: Simulator,
                                                             tmp_path: Path) -> None:
    # gpt-5.5 with xhigh loads (the table is current); a model nobody knows passes with a note
    config = ('[[products]]\nname = "deep"\nprompt = "p"\nmodel = "gpt-5.5"\nreasoning_effort = "xhigh"\n'
              '[[products]]\nname = "own"\nprompt = "p"\nmodel = "acme-large"\n')
    env = {**sim_env(cli_env, sim, tmp_path, config), "OPENAI_WEBHOOK_SECRET": "whsec_notbase64!"}
    code, lines, _ = doctor(env, "--json")
    assert code == 1
    doc = json.loads("\n".join(lines))
    by = {(c["check"], c["subject"]): c for c in doc["checks"]}
    assert by[("parameters", "product deep")]["passed"] is True
    assert "checked 2026-" in by[("parameters", "product deep")]["text"]
    assert by[("parameters", "product own")]["passed"] is True
    assert "not in the capability table" in by[("parameters", "product own")]["text"]
    assert by[("webhook secret", "OPENAI_WEBHOOK_SECRET")]["passed"] is False
    assert doc["ok"] is False and [c["check"] for c in doc["checks"] if not c["passed"]] == ["webhook secret"]
