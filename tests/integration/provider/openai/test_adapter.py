"""The real adapter and the official SDK against the simulator, over real loopback HTTP."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import openai
import pytest
from click.testing import CliRunner
from openai.types.responses import Response, ResponseFormatTextJSONSchemaConfigParam
from pydantic import ValidationError

from iipub.cli.simulator_cmd import simulator_command
from iipub.core.errors import ConfigError, InvariantViolation
from iipub.provider.openai.adapter import OpenAIAdapter
from iipub.provider.openai.simulator import Simulator, SimulatorOptions, content, is_loopback, parse_fault_spec
from iipub.provider.outcomes import (
    Accepted,
    Ambiguous,
    CreateRequest,
    Deleted,
    Missing,
    Observed,
    Refused,
    Rejected,
    Transient,
)
from iipub.settings import edition_schema
from iipub.settings.config import Product, ProviderSettings

ROOT = Path(__file__).resolve().parents[4]
PRODUCT = Product(name="daily-brief", prompt="Write the brief.", items=4)
DAY = dt.date(2025, 3, 1)
QUEUED = 10.0
RUNNING = 10.0
RETENTION = 600.0
pytestmark = pytest.mark.simulator(queued_seconds=QUEUED, in_progress_seconds=RUNNING, retention_seconds=RETENTION,
                                   slow_seconds=2.0, seed=1)


def request(job_id: str = "job-1", product: Product = PRODUCT) -> CreateRequest:
    return CreateRequest(job_id, product, DAY, 1, product.fingerprint())


@pytest.fixture
def provider(sim: Simulator) -> Iterator[OpenAIAdapter]:
    settings = ProviderSettings(base_url=sim.url, timeout_seconds=1.0, connect_timeout_seconds=1.0)
    with OpenAIAdapter(settings, "sk-test") as p:
        yield p


@pytest.fixture
def strict_sdk(sim: Simulator) -> Iterator[openai.OpenAI]:
    """The SDK with response validation on: any shape it dislikes raises."""
    client = openai.OpenAI(api_key="sk-test", base_url=sim.url, max_retries=0, _strict_response_validation=True)
    yield client
    client.close()


def accepted(provider: OpenAIAdapter, job_id: str = "job-1", product: Product = PRODUCT) -> str:
    outcome = provider.create(request(job_id, product))
    assert isinstance(outcome, Accepted), outcome
    return outcome.response_id


def finished(sim: Simulator, provider: OpenAIAdapter, response_id: str) -> Observed:
    sim.advance(QUEUED + RUNNING)
    outcome = provider.retrieve(response_id)
    assert isinstance(outcome, Observed), outcome
    return outcome


# -- lifecycle and wire shapes ---------------------------------------------------------------------


def test_lifecycle_queued_in_progress_completed(sim: Simulator, provider: OpenAIAdapter) -> None:
    outcome = provider.create(request())
    assert isinstance(outcome, Accepted) and outcome.status == "queued"
    assert outcome.response_id.startswith("resp_")
    rid = outcome.response_id
    seen = []
    for step in (0, QUEUED, RUNNING):
        sim.advance(step)
        observed = provider.retrieve(rid)
        assert isinstance(observed, Observed)
        seen.append((observed.status, observed.output_text is None, observed.usage is None))
    assert isinstance(observed, Observed)  # for mypy: the loop's last read, checked in the loop
    assert seen == [("queued", True, True), ("in_progress", True, True), ("completed", False, False)]
    assert observed.metadata == {
        "iipub_job_id": "job-1",
        "iipub_slot": "daily-brief/2025-03-01",
        "iipub_attempt": "1",
        "iipub_fingerprint": PRODUCT.fingerprint(),
    }
    assert observed.usage is not None
    assert observed.usage.total_tokens == observed.usage.input_tokens + observed.usage.output_tokens
    assert observed.output_text is not None
    edition = edition_schema.output_model(PRODUCT.languages, PRODUCT.items).model_validate_json(observed.output_text)
    en, es = edition.en, edition.es  # type: ignore[attr-defined]
    assert len(en.items) == len(es.items) == 4
    assert en.items[0].headline != es.items[0].headline
    urls = [s.url for lang in (en, es) for item in lang.items for s in item.sources]
    assert all(u.startswith(("https://www.reuters.com/", "https://apnews.com/")) for u in urls)
    stats = sim.stats()
    assert stats["creates_total"] == 1 and stats["retrieves_by_response"] == {rid: 3}


def test_output_follows_the_schema_it_was_given(sim: Simulator, provider: OpenAIAdapter) -> None:
    trio = Product(name="revolution-watch", prompt="Watch.", items=2, languages=("fr", "de", "ja"))
    observed = finished(sim, provider, accepted(provider, product=trio))
    doc = json.loads(observed.output_text or "")
    assert sorted(doc) == ["de", "fr", "ja"]
    edition_schema.output_model(trio.languages, trio.items).model_validate(doc)
    assert len({doc[lang]["title"] for lang in doc}) == 3


def test_same_request_same_text(sim: Simulator, provider: OpenAIAdapter) -> None:
    a = accepted(provider, "job-a")
    b = accepted(provider, "job-b")
    sim.advance(QUEUED + RUNNING)
    ta, tb = (provider.retrieve(r) for r in (a, b))
    assert isinstance(ta, Observed) and isinstance(tb, Observed)
    assert ta.output_text == tb.output_text  # same slot and model


def test_strict_sdk_parses_every_status(sim: Simulator, strict_sdk: openai.OpenAI) -> None:
    sim.add_faults([{"op": "create", "fault": "fail", "job_id": "job-failed"}])
    sim.add_faults([{"op": "create", "fault": "incomplete", "job_id": "job-incomplete"}])
    # text_format builds the json_schema `text.format` object as a plain dict.
    fmt = cast(ResponseFormatTextJSONSchemaConfigParam, edition_schema.text_format(PRODUCT.languages, PRODUCT.items))

    def create(job_id: str) -> Response:
        return strict_sdk.responses.create(
            model="gpt-5-mini", instructions="x", input="y", background=True, store=True,
            text={"format": fmt}, metadata={"iipub_job_id": job_id},
        )

    created = {job: create(job) for job in ("job-ok", "job-failed", "job-incomplete", "job-cancelled")}
    statuses = {created["job-ok"].status}
    statuses.add(strict_sdk.responses.retrieve(created["job-ok"].id).status)
    sim.advance(QUEUED)
    statuses.add(strict_sdk.responses.retrieve(created["job-ok"].id).status)
    cancelled = strict_sdk.responses.cancel(created["job-cancelled"].id)
    statuses.add(cancelled.status)
    sim.advance(RUNNING)
    final = {job: strict_sdk.responses.retrieve(r.id) for job, r in created.items()}
    statuses.update(r.status for r in final.values())
    assert statuses == {"queued", "in_progress", "completed", "failed", "incomplete", "cancelled"}
    assert final["job-ok"].output_text and final["job-ok"].usage is not None
    assert final["job-failed"].error is not None and final["job-failed"].output == []
    assert final["job-incomplete"].incomplete_details is not None
    assert final["job-incomplete"].incomplete_details.reason == "max_output_tokens"
    assert final["job-cancelled"].output == []
    assert final["job-ok"].metadata == {"iipub_job_id": "job-ok"}
    # The SDK types delete() as returning None; the test checks at run time that the simulator's
    # answer parses to exactly that, so the call's value is used on purpose.
    assert strict_sdk.responses.delete(created["job-ok"].id) is None  # type: ignore[func-returns-value]
    with pytest.raises(openai.NotFoundError) as err:
        strict_sdk.responses.retrieve(created["job-ok"].id)
    assert err.value.code is None and "not found" in err.value.message


def test_raw_bodies_validate_against_the_sdk_model(sim: Simulator, provider: OpenAIAdapter) -> None:
    rid = accepted(provider)
    with httpx.Client(base_url=sim.url, headers={"authorization": "Bearer x"}) as http:
        for step in (0, QUEUED, RUNNING):
            sim.advance(step)
            r = http.get(f"/responses/{rid}")
            assert r.status_code == 200 and r.headers["content-type"] == "application/json"
            Response.model_validate(r.json())  # every required field present and well-typed
        deleted = http.delete(f"/responses/{rid}")
        assert deleted.json() == {"id": rid, "object": "response", "deleted": True}
        missing = http.get(f"/responses/{rid}")
        assert missing.status_code == 404
        assert set(missing.json()["error"]) == {"message", "type", "param", "code"}
        no_auth = httpx.get(f"{sim.url}/responses/{rid}")
        assert no_auth.status_code == 401 and no_auth.json()["error"]["code"] == "invalid_api_key"


# -- the create money paths -----------------------------------------------------------------------


def test_accept_then_drop_is_ambiguous_and_created_once(sim: Simulator, provider: OpenAIAdapter) -> None:
    sim.add_faults([{"op": "create", "fault": "drop_after_accept"}])
    outcome = provider.create(request("job-drop"))
    assert isinstance(outcome, Ambiguous), outcome
    stats = sim.stats()
    assert stats["requests"]["create"] == 1
    assert stats["creates_total"] == 1  # it WAS created: paying again would double-spend
    assert stats["creates_by_job"] == {"job-drop": 1}
    assert stats["max_retry_count_seen"] == 0
    assert stats["create_metadata"][0]["iipub_job_id"] == "job-drop"


def test_rate_limit_is_refused_with_header_delay(sim: Simulator, provider: OpenAIAdapter) -> None:
    sim.add_faults([{"op": "create", "fault": "rate_limit"}])
    outcome = provider.create(request())
    assert isinstance(outcome, Refused), outcome
    assert outcome.retry_after == 2.0
    assert sim.stats()["creates_total"] == 0
    assert isinstance(provider.create(request()), Accepted)  # the rule fired once
    assert sim.stats()["requests"]["create"] == 2


def test_connection_refused_is_refused() -> None:
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = ProviderSettings(base_url=f"http://127.0.0.1:{port}/v1", timeout_seconds=1.0,
                                connect_timeout_seconds=1.0)
    with OpenAIAdapter(settings, "sk-test") as p:
        outcome = p.create(request())
    assert isinstance(outcome, Refused) and "ConnectError" in outcome.why


def test_server_error_on_create_is_ambiguous(sim: Simulator, provider: OpenAIAdapter) -> None:
    sim.add_faults([{"op": "create", "fault": "server_error"}])
    outcome = provider.create(request())
    assert isinstance(outcome, Ambiguous) and "500" in outcome.why
    stats = sim.stats()
    assert stats["requests"]["create"] == 1 and stats["max_retry_count_seen"] == 0


@pytest.mark.slow
def test_slow_create_beyond_timeout_is_ambiguous(sim: Simulator, provider: OpenAIAdapter) -> None:
    sim.add_faults([{"op": "create", "fault": "slow"}])
    started = time.monotonic()
    outcome = provider.create(request("job-slow"))
    assert isinstance(outcome, Ambiguous) and "ReadTimeout" in outcome.why
    assert time.monotonic() - started < 2.0
    stats = sim.stats()
    assert stats["creates_by_job"] == {"job-slow": 1} and stats["requests"]["create"] == 1


def test_unauthorized_is_rejected(sim: Simulator, provider: OpenAIAdapter) -> None:
    sim.add_faults([{"op": "create", "fault": "unauthorized"}])
    outcome = provider.create(request())
    assert isinstance(outcome, Rejected) and outcome.status == 401
    assert "Incorrect API key" in outcome.why
    assert sim.stats()["creates_total"] == 0


def test_metadata_over_the_limit_is_rejected_by_the_simulator(sim: Simulator) -> None:
    body = {"model": "m", "input": "x", "background": True, "metadata": {f"k{i}": "v" for i in range(17)}}
    r = httpx.post(f"{sim.url}/responses", json=body, headers={"authorization": "Bearer x"})
    assert r.status_code == 400 and "metadata" in r.json()["error"]["message"]
    assert sim.stats()["creates_total"] == 0


def test_per_run_faults_with_probability() -> None:
    options = SimulatorOptions(faults=(parse_fault_spec("rate_limit@create:0.5"),), seed=3)
    with Simulator(options) as s, OpenAIAdapter(ProviderSettings(base_url=s.url), "sk-test") as p:
        outcomes = [p.create(request(f"job-{i}")) for i in range(20)]
        refused = sum(isinstance(o, Refused) for o in outcomes)
        accepted_n = sum(isinstance(o, Accepted) for o in outcomes)
        assert 0 < refused < 20 and refused + accepted_n == 20
        assert s.stats()["creates_total"] == accepted_n


def test_job_scoped_rule_only_hits_that_job(sim: Simulator, provider: OpenAIAdapter) -> None:
    sim.add_faults([{"op": "create", "fault": "server_error", "job_id": "job-b", "times": 2}])
    assert isinstance(provider.create(request("job-a")), Accepted)
    assert isinstance(provider.create(request("job-b")), Ambiguous)
    assert isinstance(provider.create(request("job-b")), Ambiguous)
    assert isinstance(provider.create(request("job-b")), Accepted)
    assert sim.stats()["creates_by_job"] == {"job-a": 1, "job-b": 1}


# -- reads, cancel, delete --------------------------------------------------------------------------


def test_not_found_before_expiry(sim: Simulator, provider: OpenAIAdapter) -> None:
    rid = accepted(provider, "job-nf")
    sim.add_faults([{"op": "retrieve", "fault": "not_found", "job_id": "job-nf"}])
    assert isinstance(provider.retrieve(rid), Missing)
    assert isinstance(provider.retrieve(rid), Observed)


@pytest.mark.slow
def test_retrieve_faults_are_transient(sim: Simulator, provider: OpenAIAdapter) -> None:
    rid = accepted(provider)
    faults = ("rate_limit", "server_error", "drop_after_accept", "slow")
    sim.add_faults([{"op": "retrieve", "fault": name} for name in faults])
    kinds = [type(provider.retrieve(rid)).__name__ for _ in range(5)]
    assert kinds == ["Transient", "Transient", "Transient", "Transient", "Observed"]


def test_a_stored_response_outlives_the_polling_window(sim: Simulator, provider: OpenAIAdapter) -> None:
    """iipub creates with `store: true`: the real API keeps such a response (30 days), not ~10 min."""
    rid = accepted(provider)
    assert finished(sim, provider, rid).status == "completed"
    sim.advance(RETENTION * 10)
    assert isinstance(provider.retrieve(rid), Observed)
    with httpx.Client(base_url=sim.url, headers={"authorization": "Bearer sk-test", "OpenAI-Project": "proj_b"}) \
            as http:
        assert http.get(f"/responses/{rid}").status_code == 404  # another project: another scope
    sim.backend.key_projects["sk-elsewhere"] = "proj_b"
    with httpx.Client(base_url=sim.url, headers={"authorization": "Bearer sk-elsewhere"}) as http:
        assert http.get(f"/responses/{rid}").status_code == 404  # a key of another project
    with httpx.Client(base_url=sim.url, headers={"authorization": "Bearer sk-other-of-the-project"}) as http:
        assert http.get(f"/responses/{rid}").status_code == 200  # another key of the same project


def test_expiry_after_retention_in_a_zero_data_retention_project() -> None:
    options = SimulatorOptions(queued_seconds=QUEUED, in_progress_seconds=RUNNING, retention_seconds=RETENTION,
                               zdr=True)
    with Simulator(options) as sim, OpenAIAdapter(ProviderSettings(base_url=sim.url), "sk-test") as provider:
        rid = accepted(provider)
        assert finished(sim, provider, rid).status == "completed"
        sim.advance(RETENTION - 1)
        assert isinstance(provider.retrieve(rid), Observed)
        sim.advance(2)
        assert isinstance(provider.retrieve(rid), Missing)
        assert sim.stats()["responses_live"] == 0


def test_unfinished_responses_do_not_expire(sim: Simulator, provider: OpenAIAdapter) -> None:
    slow_sim = Simulator(SimulatorOptions(queued_seconds=5000, retention_seconds=10))
    with slow_sim, OpenAIAdapter(ProviderSettings(base_url=slow_sim.url), "sk-test") as p:
        rid = accepted(p)
        slow_sim.advance(1000)
        observed = p.retrieve(rid)
        assert isinstance(observed, Observed) and observed.status == "queued"


def test_cancel_unfinished_and_finished(sim: Simulator, provider: OpenAIAdapter) -> None:
    rid = accepted(provider, "job-c")
    cancelled = provider.cancel(rid)
    assert isinstance(cancelled, Observed) and cancelled.status == "cancelled" and cancelled.output_text is None
    assert isinstance(provider.cancel(rid), Observed)  # idempotent
    done = accepted(provider, "job-d")
    finished(sim, provider, done)
    refused = provider.cancel(done)
    assert isinstance(refused, Rejected) and refused.status == 400
    assert isinstance(provider.retrieve(done), Observed)
    assert isinstance(provider.cancel("resp_unknown"), Missing)
    stats = sim.stats()
    assert stats["cancels"] == 1 and stats["requests"]["cancel"] == 4


def test_cancel_race_completes(sim: Simulator, provider: OpenAIAdapter) -> None:
    rid = accepted(provider, "job-race")
    sim.advance(QUEUED)
    sim.add_faults([{"op": "cancel", "fault": "cancel_race"}])
    raced = provider.cancel(rid)
    assert isinstance(raced, Observed) and raced.status == "completed" and raced.output_text
    after = provider.retrieve(rid)
    assert isinstance(after, Observed) and after.status == "completed"
    assert sim.stats()["cancels"] == 0


def test_delete_then_retrieve_is_not_found(sim: Simulator, provider: OpenAIAdapter) -> None:
    rid = accepted(provider)
    finished(sim, provider, rid)
    assert provider.delete(rid, has_custody=True) == Deleted(rid)
    assert isinstance(provider.retrieve(rid), Missing)
    assert isinstance(provider.delete(rid, has_custody=True), Missing)
    stats = sim.stats()
    assert stats["deletes"] == 1 and stats["deleted_ids"] == [rid] and stats["requests"]["delete"] == 2


def test_delete_without_custody_never_reaches_the_wire(sim: Simulator, provider: OpenAIAdapter) -> None:
    rid = accepted(provider)
    with pytest.raises(InvariantViolation):
        provider.delete(rid, has_custody=False)
    assert sim.stats()["requests"]["delete"] == 0
    assert isinstance(provider.retrieve(rid), Observed)


# -- content faults --------------------------------------------------------------------------------


def faulty_text(sim: Simulator, provider: OpenAIAdapter, fault: str) -> str:
    sim.add_faults([{"op": "create", "fault": fault, "job_id": f"job-{fault}"}])
    observed = finished(sim, provider, accepted(provider, f"job-{fault}"))
    assert observed.status == "completed" and observed.output_text is not None
    return observed.output_text


@pytest.mark.parametrize("fault", ["malformed_output", "schema_break", "oversized_output"])
def test_content_faults_fail_validation(sim: Simulator, provider: OpenAIAdapter, fault: str) -> None:
    text = faulty_text(sim, provider, fault)
    with pytest.raises(ValidationError):
        edition_schema.output_model(PRODUCT.languages, PRODUCT.items).model_validate_json(text)
    if fault == "oversized_output":
        assert len(text.encode()) > 1_000_000


def test_hallucinated_urls(sim: Simulator, provider: OpenAIAdapter) -> None:
    doc = json.loads(faulty_text(sim, provider, "hallucinated_urls"))
    urls = {s["url"] for lang in doc.values() for item in lang["items"] for s in item["sources"]}
    assert set(content.BAD_URLS) <= urls


def test_script_injection(sim: Simulator, provider: OpenAIAdapter) -> None:
    doc = json.loads(faulty_text(sim, provider, "script_injection"))
    assert all("<script>alert(1)</script>" in lang["items"][0]["headline"] for lang in doc.values())
    assert all(lang["items"][0]["sources"][0]["url"] == "javascript:alert(1)" for lang in doc.values())


def test_same_text(sim: Simulator, provider: OpenAIAdapter) -> None:
    doc = json.loads(faulty_text(sim, provider, "same_text"))
    assert doc["en"] == doc["es"]


# -- control and binding -----------------------------------------------------------------------------


def test_control_endpoints_over_http(sim: Simulator, provider: OpenAIAdapter) -> None:
    origin = sim.url.removesuffix("/v1")
    with httpx.Client(base_url=origin) as http:
        added = http.post("/_sim/faults", json=[{"op": "create", "fault": "rate_limit"}])
        assert added.status_code == 200 and added.json()["added"] == 1
        assert http.post("/_sim/faults", json={"fault": "nope"}).status_code == 400
        assert http.post("/_sim/faults", json={"fault": "cancel_race", "op": "create"}).status_code == 400
        assert isinstance(provider.create(request()), Refused)
        http.post("/_sim/faults", json={"op": "create", "fault": "server_error", "times": 5})
        assert http.delete("/_sim/faults").json() == {"cleared": True}
        rid = accepted(provider)
        assert http.post("/_sim/advance", json={"seconds": QUEUED + RUNNING}).status_code == 200
        assert http.post("/_sim/advance", json={"seconds": -1}).status_code == 400
        observed = provider.retrieve(rid)
        assert isinstance(observed, Observed) and observed.status == "completed"
        stats = http.get("/_sim/stats").json()
        assert stats["creates_total"] == 1 and stats["requests"]["create"] == 2
        assert stats["faults_fired"] == {"rate_limit": 1}
        assert http.post("/_sim/reset").json() == {"reset": True}
        assert http.get("/_sim/stats").json()["creates_total"] == 0
    assert isinstance(provider.retrieve(rid), Missing)


def test_refuses_non_loopback_bind() -> None:
    with pytest.raises(ConfigError):
        Simulator(host="0.0.0.0")
    with pytest.raises(ConfigError):
        Simulator(host="192.0.2.10")
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::")


def test_fault_specs() -> None:
    rule = parse_fault_spec("slow@retrieve:0.25")
    assert (rule.op, rule.fault, rule.probability, rule.times) == ("retrieve", "slow", 0.25, None)
    assert parse_fault_spec("not_found").op == "retrieve"
    assert parse_fault_spec("malformed_output").op == "create"
    for bad in ("explode", "fail@retrieve", "slow:2", "slow:x", "slow@nowhere", "cancel_race@create"):
        with pytest.raises(ConfigError):
            parse_fault_spec(bad)


def test_cli_help() -> None:
    result = CliRunner().invoke(simulator_command, ["--help"])
    assert result.exit_code == 0
    for text in ("--port-file", "--fault", "--allow-non-loopback", "drop_after_accept", "cancel_race"):
        assert text in result.output


def test_cli_rejects_bad_fault_and_non_loopback() -> None:
    assert CliRunner().invoke(simulator_command, ["--fault", "explode"]).exit_code == 2
    assert CliRunner().invoke(simulator_command, ["--host", "0.0.0.0", "--port", "0"]).exit_code == 2


@pytest.mark.slow
def test_cli_serves_until_sigterm(tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "IIPUB_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    code = "from iipub.cli.simulator_cmd import simulator_command; simulator_command()"
    args = ["--port", "0", "--port-file", str(port_file), "--queued-seconds", "0", "--in-progress-seconds", "0"]
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    )
    try:
        deadline = time.monotonic() + 10
        while not port_file.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "simulator did not start"
            time.sleep(0.02)
        port = int(port_file.read_text())
        url = f"http://127.0.0.1:{port}/v1"
        with OpenAIAdapter(ProviderSettings(base_url=url), "sk-test") as p:
            rid = accepted(p)
            observed = p.retrieve(rid)
            assert isinstance(observed, Observed) and observed.status == "completed"
        stats: dict[str, Any] = httpx.get(f"http://127.0.0.1:{port}/_sim/stats").json()
        assert stats["creates_total"] == 1
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert out.splitlines()[0] == f"iipub simulator listening on {url}"
    assert "POST /v1/responses -> 200" in err


def test_threads_poll_through_pools_of_their_own_within_max_connections(sim: Simulator) -> None:
    """Each thread gets a one-connection pool of its own until `max_connections` pools exist;
    later threads share those in turn: never more connections than configured."""
    import threading

    settings = ProviderSettings(base_url=sim.url, timeout_seconds=30.0, connect_timeout_seconds=10.0, max_connections=4)
    with OpenAIAdapter(settings, "sk-test") as p:
        created = p.create(request())  # this thread's pool
        assert isinstance(created, Accepted)
        seen: list[object] = []
        lock = threading.Lock()

        def poll() -> None:
            for _ in range(3):
                try:
                    outcome: object = p.retrieve(created.response_id)
                except Exception as exc:
                    outcome = exc
                with lock:
                    seen.append(outcome)

        threads = [threading.Thread(target=poll) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert [o for o in seen if not isinstance(o, Observed)] == [] and len(seen) == 9
        assert len(p._shards) == 4
        assert all(http._transport._pool._max_connections == 1 for http in p._shards)  # type: ignore[attr-defined]
        assert sim.stats()["requests"]["retrieve"] == 9
        # Threads beyond max_connections share the pools there are.
        later: list[object] = []
        extra = [threading.Thread(target=lambda: later.append(p._pool)) for _ in range(3)]
        for t in extra:
            t.start()
        for t in extra:
            t.join(timeout=10)
        assert len(p._shards) == 4 and len(later) == 3
        assert {id(c) for c in later} <= {id(http) for http in p._shards}
    assert all(http.is_closed for http in p._shards)


def test_a_provider_that_trickles_its_answer_costs_one_poll_not_a_thread() -> None:
    """Over a real socket: headers at once, then a byte every 50 ms of a body that would take
    minutes. The poll gives up after the read's time (`timeout_seconds`) and is a Transient."""
    import threading

    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
            for _ in range(200):  # at most 10 s
                if stop.wait(0.05):
                    return
                try:
                    conn.sendall(b" ")
                except OSError:
                    return

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    settings = ProviderSettings(base_url=f"http://127.0.0.1:{port}/v1", timeout_seconds=0.5)
    try:
        with OpenAIAdapter(settings, "sk-test") as p:
            started = time.monotonic()
            outcome = p.retrieve("resp_trickle")
            took = time.monotonic() - started
    finally:
        stop.set()
        listener.close()
        server.join(timeout=5)
    assert outcome == Transient(None, "transport failure: ReadTimeout: answer not complete after 0.5 s: not read")
    assert 0.4 < took < 2.0
