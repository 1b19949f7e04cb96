"""The simulator's read, create, content and time-window faults, seen through the official SDK
over real loopback HTTP: what the client receives, and what the simulator did (or did not) do."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from click.testing import CliRunner
from openai.types.responses import Response

from iipub.cli import simulator_cmd
from iipub.core.errors import ConfigError
from iipub.provider.openai.simulator import Simulator, SimulatorOptions, content
from iipub.provider.openai.simulator.faults import (
    DESCRIPTIONS,
    FAULTS,
    FaultRule,
    parse_fault_spec,
    parse_outage_spec,
    rule_from_dict,
)
from tests.support.simulator import simulator_options_seen

QUEUED = 10.0
RUNNING = 10.0
pytestmark = pytest.mark.simulator(queued_seconds=QUEUED, in_progress_seconds=RUNNING, seed=1)


@pytest.fixture
def sdk(sim: Simulator) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(base_url=sim.url, api_key="sk-test", max_retries=0)
    yield client
    client.close()


def create(sdk: openai.OpenAI, job_id: str = "job-1") -> Response:
    return sdk.responses.create(
        model="gpt-5-mini", instructions="x", input="y", background=True, store=True,
        metadata={"iipub_job_id": job_id, "iipub_slot": "brief/2025-03-01"},
    )


def fired(sim: Simulator) -> dict[str, int]:
    result: dict[str, int] = sim.stats()["faults_fired"]
    return result


def test_every_fault_is_described() -> None:
    assert set(DESCRIPTIONS) == set(FAULTS)
    for name in ("report_cancelled", "report_failed", "unknown_status", "quota_exhausted", "service_unavailable",
                 "fail_refused", "fail_policy", "fail_unknown_code", "cancelled_then_completed"):
        assert name in FAULTS


# -- read faults: one answer lies, the response is unchanged ----------------------------------------


def test_report_cancelled_then_the_truth(sim: Simulator, sdk: openai.OpenAI) -> None:
    rid = create(sdk).id
    sim.advance(QUEUED + RUNNING)
    sim.add_faults([{"fault": "report_cancelled"}])  # op defaults to retrieve, fires once
    lie = sdk.responses.retrieve(rid)
    assert (lie.status, lie.output, lie.usage, lie.error, lie.completed_at) == ("cancelled", [], None, None, None)
    truth = sdk.responses.retrieve(rid)
    assert truth.status == "completed" and truth.output_text and truth.usage is not None
    assert fired(sim) == {"report_cancelled": 1}
    assert sim.stats()["retrieves_by_response"] == {rid: 2}


def test_report_failed_then_the_truth(sim: Simulator, sdk: openai.OpenAI) -> None:
    rid = create(sdk).id
    sim.advance(QUEUED)
    sim.add_faults([{"fault": "report_failed", "op": "retrieve"}])
    lie = sdk.responses.retrieve(rid)
    assert lie.status == "failed" and lie.output == []
    assert lie.error is not None and lie.error.code == "server_error" and lie.error.message
    assert sdk.responses.retrieve(rid).status == "in_progress"  # nothing was failed for real
    sim.advance(RUNNING)
    assert sdk.responses.retrieve(rid).status == "completed"
    assert fired(sim) == {"report_failed": 1}


def test_unknown_status_parses_without_raising(sim: Simulator, sdk: openai.OpenAI) -> None:
    rid = create(sdk).id
    sim.add_faults([{"fault": "unknown_status", "times": 2}])
    lie = sdk.responses.retrieve(rid)  # non-strict parsing keeps the undocumented string
    assert lie.status == "paused" and lie.output == [] and lie.usage is None  # type: ignore[comparison-overlap]
    strict = openai.OpenAI(base_url=sim.url, api_key="sk-test", max_retries=0, _strict_response_validation=True)
    with strict, pytest.raises(openai.APIResponseValidationError):
        strict.responses.retrieve(rid)  # a strict client would refuse it
    assert sdk.responses.retrieve(rid).status == "queued"
    assert fired(sim) == {"unknown_status": 2}


def test_read_faults_only_apply_to_retrieve() -> None:
    for name in ("report_cancelled", "report_failed", "unknown_status"):
        assert rule_from_dict({"fault": name}, default_times=1).op == "retrieve"
        with pytest.raises(ConfigError):
            rule_from_dict({"fault": name, "op": "create"}, default_times=1)


def test_read_fault_does_not_hide_a_missing_response(sim: Simulator, sdk: openai.OpenAI) -> None:
    sim.add_faults([{"fault": "report_cancelled"}])
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve("resp_unknown")
    assert fired(sim) == {}  # the rule is still waiting for a response that exists
    rid = create(sdk).id
    assert sdk.responses.retrieve(rid).status == "cancelled"


# -- create faults: nothing created, nothing counted --------------------------------------------------


def test_quota_exhausted_is_a_429_without_retry_after(sim: Simulator, sdk: openai.OpenAI) -> None:
    sim.add_faults([{"fault": "quota_exhausted"}])
    with pytest.raises(openai.RateLimitError) as err:
        create(sdk)
    e = err.value
    assert e.status_code == 429 and e.code == "insufficient_quota" and e.type == "insufficient_quota"
    assert e.body == {
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "type": "insufficient_quota", "param": None, "code": "insufficient_quota",
    }
    assert json.loads(e.response.text) == {"error": e.body}
    assert "retry-after" not in e.response.headers and "retry-after-ms" not in e.response.headers
    assert not any(h.startswith("x-ratelimit") for h in e.response.headers)
    stats = sim.stats()
    assert stats["creates_total"] == 0 and stats["requests"]["create"] == 1 and stats["responses_live"] == 0
    assert stats["faults_fired"] == {"quota_exhausted": 1}
    create(sdk)
    assert sim.stats()["creates_total"] == 1
    with pytest.raises(ConfigError):
        rule_from_dict({"fault": "quota_exhausted", "op": "retrieve"}, default_times=1)


def test_service_unavailable_is_a_503(sim: Simulator, sdk: openai.OpenAI) -> None:
    sim.add_faults([{"fault": "service_unavailable"}])
    with pytest.raises(openai.InternalServerError) as err:
        create(sdk)
    assert err.value.status_code == 503 and err.value.code is None and err.value.type == "server_error"
    assert err.value.body == {"message": "The server is overloaded or not ready yet.", "type": "server_error",
                              "param": None, "code": None}
    assert sim.stats()["creates_total"] == 0
    rid = create(sdk).id
    sim.add_faults([{"fault": "service_unavailable", "op": op} for op in ("retrieve", "cancel", "delete")])
    for call in (sdk.responses.retrieve, sdk.responses.cancel, sdk.responses.delete):
        with pytest.raises(openai.InternalServerError) as err:
            call(rid)
        assert err.value.status_code == 503
    stats = sim.stats()
    assert stats["cancels"] == 0 and stats["deletes"] == 0 and stats["responses_live"] == 1
    assert stats["faults_fired"] == {"service_unavailable": 4}
    assert sdk.responses.retrieve(rid).status == "queued"


# -- content faults: bound at create ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "code"),
    [("fail", "server_error"), ("fail_refused", "invalid_prompt"), ("fail_policy", "bio_policy"),
     ("fail_unknown_code", "mystery_error")],
)
def test_failing_content_faults_end_with_their_code(sim: Simulator, sdk: openai.OpenAI, fault: str, code: str) -> None:
    sim.add_faults([{"fault": fault, "job_id": "job-f"}])
    rid = create(sdk, "job-f").id
    other = create(sdk, "job-ok").id
    assert sdk.responses.retrieve(rid).status == "queued"
    sim.advance(QUEUED + RUNNING)
    failed = sdk.responses.retrieve(rid)
    assert failed.status == "failed" and failed.output == [] and failed.completed_at is None
    assert failed.error is not None and failed.error.code == code and failed.error.message
    assert sdk.responses.retrieve(rid).status == "failed"  # it stays failed
    assert sdk.responses.retrieve(other).status == "completed"
    assert fired(sim) == {fault: 1}
    assert sim.stats()["creates_total"] == 2  # a failed response was still created (and paid)


def test_refused_prompt_refuses_every_time() -> None:
    options = SimulatorOptions(queued_seconds=0, in_progress_seconds=0, faults=(parse_fault_spec("fail_refused"),))
    with Simulator(options) as s, openai.OpenAI(base_url=s.url, api_key="sk-test", max_retries=0) as sdk:
        codes = []
        for _ in range(3):
            r = sdk.responses.retrieve(create(sdk).id)
            codes.append((r.status, r.error.code if r.error else None))
        assert codes == [("failed", "invalid_prompt")] * 3
        assert s.stats()["creates_total"] == 3


def test_cancelled_then_completed(sim: Simulator, sdk: openai.OpenAI) -> None:
    sim.add_faults([{"fault": "cancelled_then_completed", "job_id": "job-race"}])
    rid = create(sdk, "job-race").id
    control = create(sdk, "job-control").id
    assert sdk.responses.retrieve(rid).status == "queued"  # reads before it finished tell the truth
    sim.advance(QUEUED)
    assert sdk.responses.retrieve(rid).status == "in_progress"
    sim.advance(RUNNING)
    first = sdk.responses.retrieve(rid)
    assert (first.status, first.output, first.usage) == ("cancelled", [], None)
    later = [sdk.responses.retrieve(rid) for _ in range(2)]
    assert [r.status for r in later] == ["completed", "completed"]
    expected = sdk.responses.retrieve(control).output_text
    assert expected and all(r.output_text == expected and r.usage is not None for r in later)
    assert fired(sim) == {"cancelled_then_completed": 1}
    assert sim.stats()["cancels"] == 0


def test_cancelled_then_completed_leaves_a_real_cancel_alone(sim: Simulator, sdk: openai.OpenAI) -> None:
    sim.add_faults([{"fault": "cancelled_then_completed"}])
    rid = create(sdk).id
    assert sdk.responses.cancel(rid).status == "cancelled"
    sim.advance(QUEUED + RUNNING)
    assert [sdk.responses.retrieve(rid).status for _ in range(2)] == ["cancelled", "cancelled"]


# -- time windows -------------------------------------------------------------------------------------


def test_outage_window_refuses_creates_until_it_ends() -> None:
    with Simulator(SimulatorOptions(faults=(parse_outage_spec("10:20"),))) as s:
        client = openai.OpenAI(base_url=s.url, api_key="sk-test", max_retries=0)
        with client:
            create(client)  # before the outage
            s.advance(10)
            for _ in range(3):
                with pytest.raises(openai.InternalServerError) as err:
                    create(client)
                assert err.value.status_code == 503
            s.advance(10)  # now >= until_seconds: the outage is over
            create(client)
            stats = s.stats()
            assert stats["creates_total"] == 2 and stats["requests"]["create"] == 5
            assert stats["faults_fired"] == {"service_unavailable": 3}
            rule = s.backend.faults.snapshot()[0]
            assert (rule["after_seconds"], rule["until_seconds"], rule["times"]) == (10.0, 20.0, None)


def test_a_rule_waiting_for_its_window_is_not_used_up(sim: Simulator, sdk: openai.OpenAI) -> None:
    sim.add_faults([{"fault": "server_error", "op": "create", "after_seconds": 5}])  # fires once, from t=5
    create(sdk)
    create(sdk)
    sim.advance(5)
    with pytest.raises(openai.InternalServerError):
        create(sdk)
    create(sdk)
    assert sim.stats()["creates_total"] == 3 and fired(sim) == {"server_error": 1}


def test_windowed_read_fault(sim: Simulator, sdk: openai.OpenAI) -> None:
    sim.add_faults([FaultRule(op="retrieve", fault="report_failed", until_seconds=QUEUED)])
    rid = create(sdk).id
    assert [sdk.responses.retrieve(rid).status for _ in range(2)] == ["failed", "failed"]
    sim.advance(QUEUED)
    assert sdk.responses.retrieve(rid).status == "in_progress"
    assert fired(sim) == {"report_failed": 2}


def test_window_over_the_control_endpoint(sim: Simulator) -> None:
    with httpx.Client(base_url=sim.origin) as http:
        ok = http.post("/_sim/faults", json={"fault": "rate_limit", "after_seconds": 1, "until_seconds": 2.5})
        assert ok.status_code == 200
        assert ok.json()["faults"] == [
            {"op": "create", "fault": "rate_limit", "job_id": None, "times": 1, "probability": 1.0,
             "after_seconds": 1.0, "until_seconds": 2.5}
        ]
        for bad in ({"after_seconds": -1}, {"until_seconds": "5"}, {"after_seconds": True},
                    {"after_seconds": 5, "until_seconds": 5}, {"after_seconds": 6, "until_seconds": 5},
                    {"until_seconds": float("nan")}):
            r = http.post("/_sim/faults", content=json.dumps({"fault": "rate_limit", **bad}))
            assert r.status_code == 400, bad


@pytest.mark.parametrize(
    "bad",
    [{"after_seconds": -0.1}, {"until_seconds": -1}, {"after_seconds": "1"}, {"until_seconds": False},
     {"after_seconds": 3, "until_seconds": 3}, {"after_seconds": 4, "until_seconds": 3},
     {"until_seconds": float("inf")}],
)
def test_rule_from_dict_validates_windows(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        rule_from_dict({"fault": "slow", **bad}, default_times=None)


# -- CLI specs ------------------------------------------------------------------------------------------


def test_fault_specs_new_and_old_forms() -> None:
    def shape(spec: str) -> tuple[Any, ...]:
        r = parse_fault_spec(spec)
        return (r.fault, r.op, r.probability, r.times, r.after_seconds, r.until_seconds)

    assert shape("slow@retrieve:0.25") == ("slow", "retrieve", 0.25, None, None, None)
    assert shape("not_found") == ("not_found", "retrieve", 1.0, None, None, None)
    assert shape("server_error@create*3") == ("server_error", "create", 1.0, 3, None, None)
    assert shape("rate_limit:0.5*2") == ("rate_limit", "create", 0.5, 2, None, None)
    assert shape("report_cancelled") == ("report_cancelled", "retrieve", 1.0, None, None, None)
    assert shape("service_unavailable@delete") == ("service_unavailable", "delete", 1.0, None, None, None)
    assert shape("rate_limit@create~30..90") == ("rate_limit", "create", 1.0, None, 30.0, 90.0)
    assert shape("quota_exhausted:0.1*5~60..") == ("quota_exhausted", "create", 0.1, 5, 60.0, None)
    assert shape(" unknown_status~..2.5 ") == ("unknown_status", "retrieve", 1.0, None, None, 2.5)
    outage = parse_outage_spec("30:90.5")
    assert (outage.fault, outage.op, outage.times, outage.after_seconds, outage.until_seconds) == (
        "service_unavailable", "create", None, 30.0, 90.5)


@pytest.mark.parametrize(
    "bad",
    ["slow*0", "slow*-1", "slow*x", "slow*", "slow*1.5", "slow*2:0.5", "slow~5", "slow~a..b", "slow~9..3",
     "slow~3..3", "slow~-1..3", "quota_exhausted@retrieve", "report_failed@create", "fail_policy@retrieve",
     "explode*2", "slow:2*1"],
)
def test_bad_fault_specs(bad: str) -> None:
    with pytest.raises(ConfigError):
        parse_fault_spec(bad)


@pytest.mark.parametrize("bad", ["10", "20:10", "5:5", "a:b", ":5", "5:", "-1:5", "1:2:3"])
def test_bad_outage_specs(bad: str) -> None:
    with pytest.raises(ConfigError):
        parse_outage_spec(bad)


def test_cli_wires_faults_and_outages(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = simulator_options_seen(monkeypatch)
    args = ["--fault", "server_error@create*2", "--outage", "10:20", "--outage", "30:40", "--port", "0"]
    result = CliRunner().invoke(simulator_cmd.simulator_command, args)
    assert result.exit_code == 2 and "stop here" in result.output
    rules = [(r.fault, r.op, r.times, r.after_seconds, r.until_seconds) for r in seen[0].faults]
    assert rules == [("server_error", "create", 2, None, None), ("service_unavailable", "create", None, 10.0, 20.0),
                     ("service_unavailable", "create", None, 30.0, 40.0)]


def test_cli_rejects_bad_specs_and_documents_them() -> None:
    runner = CliRunner()
    assert runner.invoke(simulator_cmd.simulator_command, ["--outage", "20:10"]).exit_code == 2
    assert runner.invoke(simulator_cmd.simulator_command, ["--fault", "slow*0"]).exit_code == 2
    help_text = runner.invoke(simulator_cmd.simulator_command, ["--help"]).output
    for text in ("--outage", "*TIMES", "~START..END", "quota_exhausted", "cancelled_then_completed"):
        assert text in help_text


def test_cli_corrupts_one_language(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = simulator_options_seen(monkeypatch)
    result = CliRunner().invoke(simulator_cmd.simulator_command, ["--corrupt-lang", "es", "--port", "0"])
    assert result.exit_code == 2 and "stop here" in result.output
    assert (seen[0].corrupt_lang, seen[0].corrupt_domain) == ("es", None)
    refused = CliRunner().invoke(simulator_cmd.simulator_command, ["--corrupt-domain", "www.efe.com"])
    assert refused.exit_code == 2 and "--corrupt-domain needs --corrupt-lang" in refused.output


@pytest.mark.parametrize("how", ["option", "fault"])
def test_one_language_corrupted_the_others_intact(how: str) -> None:
    from iipub.edition.validate import language, shared
    from iipub.settings.config import Product

    product = Product(name="daily-brief", prompt="p", items=3)
    faults = frozenset({"corrupt_language"}) if how == "fault" else frozenset()
    text = content.generate(product.output_schema(), model="m", slot="daily-brief/2026-11-20", seed=1, faults=faults,
                            corrupt_lang="es" if how == "option" else None)
    parts = shared(text, product)
    assert parts.ok  # the shared checks pass: the fork happens
    assert language(parts.parts["en"], product, "en").ok
    es = language(parts.parts["es"], product, "es")
    assert not es.ok and all(r.startswith("bad_url: es.items[") for r in es.reasons), es.reasons


def test_cli_wires_the_real_api_options(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = simulator_options_seen(monkeypatch)
    args = ["--output-shape", "realistic", "--output-shape", "output_refusal", "--zdr", "--stored-retention-seconds",
            "3600", "--key-project", "sk-new=proj_b", "--port", "0"]
    result = CliRunner().invoke(simulator_cmd.simulator_command, args)
    assert result.exit_code == 2 and "stop here" in result.output
    o = seen[0]
    assert o.output_shapes == ("output_reasoning", "output_phases", "output_parts", "output_refusal")
    assert o.zdr and o.stored_retention_seconds == 3600 and o.key_projects == (("sk-new", "proj_b"),)
    bad = CliRunner().invoke(simulator_cmd.simulator_command, ["--key-project", "no-project"])
    assert bad.exit_code == 2 and "KEY=PROJECT" in bad.output


def test_flex_refusals_of_every_shape_are_faults_of_flex_creates_only() -> None:
    with Simulator(SimulatorOptions()) as sim, \
            httpx.Client(base_url=sim.url, headers={"authorization": "Bearer sk-test"}) as http:
        for shape in ("flex_unavailable_bare", "flex_unavailable_overloaded"):
            sim.add_faults([{"fault": shape}])
            body = {"model": "gpt-5-mini", "input": "x", "background": True, "store": True}
            assert http.post("/responses", json=body).status_code == 200  # default tier: untouched
            answer = http.post("/responses", json={**body, "service_tier": "flex"})
            assert answer.status_code == 429 and "Resource Unavailable" in answer.json()["error"]["message"]
        assert sim.stats()["flex_refused"] == 2
