"""The simulator held to the installed openai SDK's types (no vendored spec): every answer it
gives over HTTP (create, retrieve in each status, cancel, delete, each error body, each webhook
event) validates with the SDK's pydantic models and carries no field the SDK does not know,
nested ones included; iipub's create body is checked against `ResponseCreateParams`."""

from __future__ import annotations

import collections.abc
import datetime as dt
import json
import types
import typing
from collections.abc import Iterator
from typing import Any

import httpx
import pydantic
import pytest
import typing_extensions
from openai.types import Model
from openai.types.responses import Response, response_create_params
from openai.types.shared import ErrorObject
from openai.types.webhooks import (
    ResponseCancelledWebhookEvent,
    ResponseCompletedWebhookEvent,
    ResponseFailedWebhookEvent,
    ResponseIncompleteWebhookEvent,
)

from iipub.provider.openai.adapter import create_body
from iipub.provider.openai.simulator import Simulator, SimulatorOptions
from iipub.provider.openai.simulator.faults import FaultRule
from iipub.provider.outcomes import CreateRequest
from iipub.settings.config import Product, default_products
from tests.support.loopback import SECRET, receiver, wait_for

KEY = {"Authorization": "Bearer sk-conformance"}
PRODUCT = Product(name="daily-brief", prompt="Write the brief.", items=2)
pytestmark = pytest.mark.simulator(queued_seconds=10, in_progress_seconds=10)
WEBHOOK_EVENTS: dict[str, type[pydantic.BaseModel]] = {
    "response.completed": ResponseCompletedWebhookEvent, "response.failed": ResponseFailedWebhookEvent,
    "response.incomplete": ResponseIncompleteWebhookEvent, "response.cancelled": ResponseCancelledWebhookEvent,
}


def unknown_fields(model: Any, path: str = "") -> list[str]:
    """Every key of a validated SDK model (recursively) that the model does not declare: pydantic
    keeps such keys as extras, so a field the real API never sends would otherwise pass."""
    found: list[str] = []
    if isinstance(model, pydantic.BaseModel):
        found += [f"{path}.{k}" for k in (model.model_extra or {})]
        for name in type(model).model_fields:
            found += unknown_fields(getattr(model, name), f"{path}.{name}")
    elif isinstance(model, (list, tuple)):
        for i, item in enumerate(model):
            found += unknown_fields(item, f"{path}[{i}]")
    elif isinstance(model, dict):
        for k, v in model.items():
            found += unknown_fields(v, f"{path}.{k}")
    return found


def conforms(body: dict[str, Any]) -> Response:
    response = Response.model_validate(body)
    assert unknown_fields(response) == [], unknown_fields(response)
    return response


def conforming_error(answer: httpx.Response) -> ErrorObject:
    body = answer.json()
    assert set(body) == {"error"}, body
    error = ErrorObject.model_validate(body["error"])
    assert unknown_fields(error) == [] and set(body["error"]) <= set(ErrorObject.model_fields), body
    return error


@pytest.fixture
def api(sim: Simulator) -> Iterator[tuple[Simulator, httpx.Client]]:
    """The simulator (queued 10 s, in progress 10 s: this module's `simulator` marker) and a client of it."""
    with httpx.Client(base_url=sim.url, headers=KEY, timeout=10) as client:
        yield sim, client


def create(client: httpx.Client, **over: Any) -> httpx.Response:
    req = CreateRequest("job-1", PRODUCT, dt.date(2026, 12, 3), 1, PRODUCT.fingerprint())
    return client.post("/responses", json={**create_body(req), **over})


def test_create_and_retrieve_in_each_status_conform(api: tuple[Simulator, httpx.Client]) -> None:
    sim, client = api
    answer = create(client)
    assert answer.status_code == 200
    assert conforms(answer.json()).status == "queued"
    rid = answer.json()["id"]
    sim.advance(11)
    assert conforms(client.get(f"/responses/{rid}").json()).status == "in_progress"
    sim.advance(10)
    done = conforms(client.get(f"/responses/{rid}").json())
    assert done.status == "completed" and json.loads(done.output_text).keys() == {"en", "es"}
    for fault, status in (("incomplete", "incomplete"), ("content_filter", "incomplete"), ("fail", "failed"),
                          ("fail_unknown_code", "failed")):
        sim.add_faults([FaultRule("create", fault, times=1)])
        rid = create(client).json()["id"]
        sim.advance(25)
        body = client.get(f"/responses/{rid}").json()
        if fault == "fail_unknown_code":  # a code the SDK's literal does not list: the real API may add codes
            body["error"]["code"] = "server_error"
        assert conforms(body).status == status


@pytest.mark.parametrize("shape", ["output_reasoning", "output_phases", "output_parts", "output_refusal"])
def test_every_output_shape_conforms(api: tuple[Simulator, httpx.Client], shape: str) -> None:
    sim, client = api
    sim.add_faults([FaultRule("create", shape, times=1)])
    rid = create(client).json()["id"]
    sim.advance(25)
    response = conforms(client.get(f"/responses/{rid}").json())
    kinds = [item.type for item in response.output]
    # gpt-5-mini reasons: its reasoning item comes first, whatever the shape.
    assert kinds == {"output_reasoning": ["reasoning", "message"], "output_phases": ["reasoning", "message", "message"],
                     "output_parts": ["reasoning", "message"], "output_refusal": ["reasoning", "message"]}[shape]


def test_cancel_and_delete_conform(api: tuple[Simulator, httpx.Client]) -> None:
    _, client = api
    rid = create(client).json()["id"]
    cancelled = client.post(f"/responses/{rid}/cancel")
    assert cancelled.status_code == 200 and conforms(cancelled.json()).status == "cancelled"
    deleted = client.delete(f"/responses/{rid}")
    # The SDK reads no body from a delete (`responses.delete` returns None): the keys are the API's.
    assert deleted.status_code == 200 and deleted.json() == {"id": rid, "object": "response", "deleted": True}
    assert conforming_error(client.get(f"/responses/{rid}")).type == "invalid_request_error"


@pytest.mark.parametrize("fault", ["rate_limit", "rate_limit_long", "server_error", "unauthorized", "quota_exhausted",
                                   "service_unavailable", "no_model_access", "model_not_found", "request_too_large",
                                   "rate_limit_requests", "rate_limit_tokens", "unsupported_country"])
def test_every_error_body_conforms(api: tuple[Simulator, httpx.Client], fault: str) -> None:
    sim, client = api
    sim.add_faults([FaultRule("create", fault, times=1)])
    answer = create(client)
    assert answer.status_code >= 400
    conforming_error(answer)


def test_the_models_endpoint_answers_the_sdks_model(api: tuple[Simulator, httpx.Client]) -> None:
    """`GET /v1/models/{model}` (what `iipub doctor` asks, free of charge): the SDK's `Model` for a
    model the project may use; the 403 or 404 OpenAI answers for one it may not or that does not exist."""
    sim, client = api
    answer = client.get("/models/gpt-5-mini")
    model = Model.model_validate(answer.json())
    assert answer.status_code == 200 and unknown_fields(model) == [] and model.id == "gpt-5-mini"
    assert model.object == "model" and set(answer.json()) == set(Model.model_fields)
    no_access = "Project `proj_default` does not have access to model `gpt-5-mini`"
    unknown = "The model `gpt-5-mini` does not exist or you do not have access to it."
    for fault, status, words in (("no_model_access", 403, no_access), ("model_not_found", 404, unknown)):
        sim.add_faults([FaultRule("model", fault, times=1)])
        refused = client.get("/models/gpt-5-mini")
        error = conforming_error(refused)
        assert refused.status_code == status and error.code == "model_not_found" and error.message == words
    assert sim.stats()["requests"]["model"] == 3 and sim.stats()["creates_total"] == 0


def test_the_accounts_limits_answer_with_openais_bodies() -> None:
    """The account's options: a model the project may not use, a model that does not exist, a
    create over the organization's tokens-per-minute limit; nothing is created."""
    options = SimulatorOptions(no_access_models=("gpt-4.1",), unknown_models=("gpt-9",), tokens_per_minute=30_000)
    with Simulator(options) as sim, httpx.Client(base_url=sim.url, headers=KEY, timeout=10) as client:
        forbidden = create(client, model="GPT-4.1")
        assert forbidden.status_code == 403
        assert conforming_error(forbidden).message == "Project `proj_default` does not have access to model `GPT-4.1`"
        assert client.get("/models/gpt-4.1").status_code == 403
        assert conforming_error(create(client, model="gpt-9")).code == "model_not_found"
        assert client.get("/models/gpt-9").status_code == 404
        too_large = create(client, max_output_tokens=37_600)
        error = conforming_error(too_large)
        assert too_large.status_code == 429 and error.type == "tokens" and error.code == "rate_limit_exceeded"
        assert error.message.startswith("Request too large for gpt-5-mini in organization org_default on tokens per "
                                        "min (TPM): Limit 30000, Requested ")
        assert create(client, max_output_tokens=20_000).status_code == 200
        assert sim.stats()["creates_total"] == 1


@pytest.mark.parametrize("fault", ["flex_unavailable", "flex_unavailable_bare", "flex_unavailable_overloaded"])
def test_flex_refusals_are_429s_the_sdk_can_read(api: tuple[Simulator, httpx.Client], fault: str) -> None:
    sim, client = api
    sim.add_faults([FaultRule("create", fault, times=1)])
    answer = create(client, service_tier="flex")
    assert answer.status_code == 429
    error = answer.json()["error"]
    assert set(error) <= set(ErrorObject.model_fields) and "Resource Unavailable" in error["message"]


@pytest.mark.parametrize(("over", "param"), [
    ({"model": "gpt-5-mini", "temperature": 0.2}, "temperature"),
    ({"model": "o3", "top_p": 0.5}, "top_p"),
    ({"model": "gpt-4.1", "reasoning": {"effort": "low"}}, "reasoning.effort"),
    ({"model": "gpt-5-mini", "reasoning": {"effort": "none"}}, "reasoning.effort"),
    ({"model": "gpt-5-mini", "max_output_tokens": 5}, "max_output_tokens"),
    ({"model": "gpt-4o", "max_output_tokens": 40_000}, "max_output_tokens"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "strict": True,
                          "schema": {"type": "array", "items": {"type": "string"}}}}}, "text.format.schema"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "strict": True,
                          "schema": {"type": "object", "properties": {"a": {"type": "string"}},
                                     "required": [], "additionalProperties": False}}}}, "text.format.schema"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "strict": True, "schema": {
        "type": "object", "required": ["a"], "additionalProperties": False,
        "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]}}}}}},
     "text.format.schema"),
])
def test_what_the_real_api_refuses_is_refused_with_its_body(api: tuple[Simulator, httpx.Client],
                                                            over: dict[str, Any], param: str) -> None:
    sim, client = api
    answer = create(client, **over)
    assert answer.status_code == 400
    error = conforming_error(answer)
    assert error.type == "invalid_request_error" and error.param == param
    assert sim.stats()["creates_total"] == 0 and sim.stats()["param_refused"] == 1


def test_every_webhook_event_conforms() -> None:
    with receiver() as rec, Simulator(SimulatorOptions(queued_seconds=0.1, in_progress_seconds=0.1,
                                                       webhook_url=rec.url, webhook_secret=SECRET)) as sim, \
            httpx.Client(base_url=sim.url, headers=KEY, timeout=10) as client:
        for fault in ("fail", "incomplete", None):
            if fault:
                sim.add_faults([FaultRule("create", fault, times=1)])
            create(client)
        slow = create(client)  # cancelled before it finishes
        client.post(f"/responses/{slow.json()['id']}/cancel")
        wait_for(lambda: len(rec.requests) >= 4)
        seen = set()
        for request in rec.requests:
            body = json.loads(request["body"])
            event = WEBHOOK_EVENTS[body["type"]].model_validate(body)
            assert unknown_fields(event) == [], body
            seen.add(body["type"])
        assert seen == set(WEBHOOK_EVENTS)


def _accepts(hint: Any, value: Any) -> bool:
    """Whether `value` is of the TypedDict field type `hint`: unions, literals, nested TypedDicts
    (every key known, every value accepted), lists, dicts and plain types."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(arg, value) for arg in args)
    if origin is typing.Literal:
        return value in args
    if origin in (typing.Required, typing.NotRequired, typing.Annotated):
        return _accepts(args[0], value)
    if hint is type(None):
        return value is None
    if typing_extensions.is_typeddict(hint):
        fields = typing.get_type_hints(hint, include_extras=True)
        return isinstance(value, dict) and set(value) <= set(fields) and all(
            _accepts(fields[k], v) for k, v in value.items())
    if origin in (list, collections.abc.Iterable, collections.abc.Sequence):
        return isinstance(value, list) and all(_accepts(args[0], v) for v in value) if args else True
    if origin in (dict, collections.abc.Mapping) or hint in (dict, object):
        return isinstance(value, dict) if hint is not object else True
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint in (str, int, bool):
        return isinstance(value, hint) and not (hint is int and isinstance(value, bool))
    return True  # a type this check does not model (an SDK-internal alias): the simulator's own rules cover it


@pytest.mark.parametrize("product", [*default_products().values(),
                                     Product(name="daily-brief", prompt="p", items=3, reasoning_effort="low",
                                             verbosity="low", max_output_tokens=20_000),
                                     Product(name="daily-brief", prompt="p", model="gpt-4.1", temperature=0.3,
                                             top_p=0.9)], ids=lambda p: f"{p.name}-{p.model}")
def test_iipubs_create_body_is_a_create_params(product: Product) -> None:
    body = create_body(CreateRequest("job-1", product, dt.date(2026, 12, 3), 1, product.fingerprint()))
    hints = typing.get_type_hints(response_create_params.ResponseCreateParamsBase, include_extras=True)
    assert set(body) <= set(hints), set(body) - set(hints)
    for key, value in body.items():
        assert _accepts(hints[key], value), (key, value, hints[key])
    assert not _accepts(hints["text"], {**body["text"], "colour": "blue"})  # the check can fail
    assert not _accepts(hints["reasoning"], {"effort": "extreme"})
