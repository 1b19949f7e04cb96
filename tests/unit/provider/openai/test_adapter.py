"""Pins the HTTP outcome -> provider outcome table, the part of iipub that decides whether money
may have been spent. A mock transport is used here only, so each transport failure can be
produced exactly; the simulator tests cover the same paths over real sockets."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from iipub.core.errors import InvariantViolation, MissingApiKey
from iipub.provider.openai.adapter import OpenAIAdapter
from iipub.provider.outcomes import (
    Accepted,
    Ambiguous,
    CreateRequest,
    Deleted,
    Missing,
    Observed,
    RefusalKind,
    Refused,
    Rejected,
    Stage,
    Transient,
    Usage,
)
from iipub.settings import edition_schema
from iipub.settings.config import Product, ProviderSettings

BASE = "http://provider.test/v1"
# A chat model: it takes temperature (a GPT-5-family product could not set one: `models`).
PRODUCT = Product(name="daily-brief", prompt="Write the brief.", items=3, model="gpt-4.1", temperature=0.3)
REQ = CreateRequest("job-42", PRODUCT, dt.date(2025, 3, 1), 2, "f" * 64)
Handler = Callable[[httpx.Request], httpx.Response]


class Recorder:
    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.handler: Handler = lambda request: httpx.Response(500)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.handler(request)


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


@pytest.fixture
def provider(rec: Recorder) -> Iterator[OpenAIAdapter]:
    client = httpx.Client(transport=httpx.MockTransport(rec))
    with OpenAIAdapter(ProviderSettings(base_url=BASE), "sk-test", http_client=client) as p:
        yield p
    client.close()


def response_json(
    response_id: str = "resp_abc123",
    status: str = "completed",
    text: str | None = '{"en": {}}',
    **extra: Any,
) -> dict[str, Any]:
    output_items = []
    if text is not None:
        output_items.append(
            {
                "type": "message",
                "id": "msg_1",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    body = {
        "id": response_id,
        "object": "response",
        "created_at": 1740830400,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": "Write the brief.",
        "model": "gpt-5-mini",
        "output": output_items,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "metadata": {"iipub_job_id": "job-42"},
        "usage": {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 20,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 30,
        },
    }
    body.update(extra)
    return body


def answer(status: int, body: Any = None, headers: dict[str, str] | None = None) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        if isinstance(body, (bytes, str)):
            return httpx.Response(status, content=body, headers=headers or {"content-type": "application/json"})
        error = {"message": f"status {status}", "type": "x", "param": None, "code": None}
        payload = body if body is not None else {"error": error}
        return httpx.Response(status, json=payload, headers=headers)

    return handler


def fail_with(exc_type: type[httpx.TransportError], message: str = "boom") -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc_type(message, request=request)

    return handler


# -- create: the money mapping ------------------------------------------------------------------

CREATE_STATUS_TABLE: list[tuple[Handler, type, int | None]] = [
    (answer(200, response_json(status="queued")), Accepted, None),
    (answer(201, response_json(status="queued")), Accepted, None),
    (answer(200, response_json(response_id="chatcmpl-1")), Ambiguous, None),
    (answer(200, response_json(response_id="")), Ambiguous, None),
    (answer(200, response_json(response_id="resp_abc/../def ghi")), Ambiguous, None),  # not storable nor sendable
    (answer(200, response_json(response_id="resp_" + "a" * 200)), Ambiguous, None),  # longer than the column
    (answer(200, {}), Ambiguous, None),
    (answer(200, {"id": 17}), Ambiguous, None),
    (answer(200, b"{not json"), Ambiguous, None),
    (answer(200, b"accepted", {"content-type": "text/plain"}), Ambiguous, None),
    (answer(200, b"[]"), Ambiguous, None),
    (answer(429, headers={"retry-after": "2", "x-ratelimit-reset-requests": "2s"}), Refused, None),
    (answer(408), Ambiguous, None),
    (answer(409), Ambiguous, None),
    (answer(500), Ambiguous, None),
    (answer(502, b"<html>Bad Gateway</html>", {"content-type": "text/html"}), Ambiguous, None),
    (answer(503), Ambiguous, None),
    (answer(504), Ambiguous, None),
    (answer(400), Rejected, 400),
    (answer(401), Rejected, 401),
    (answer(403), Rejected, 403),
    (answer(404), Rejected, 404),
    (answer(422), Rejected, 422),
    (answer(413), Rejected, 413),
    (answer(302, headers={"location": "http://elsewhere.test/"}), Ambiguous, None),
]


@pytest.mark.parametrize(("handler", "kind", "status"), CREATE_STATUS_TABLE)
def test_create_status_mapping(
    provider: OpenAIAdapter, rec: Recorder, handler: Handler, kind: type, status: int | None
) -> None:
    rec.handler = handler
    outcome = provider.create(REQ)
    assert type(outcome) is kind, outcome
    if status is not None:
        assert isinstance(outcome, Rejected) and outcome.status == status
    # Never a retry inside the adapter, whatever happened.
    assert len(rec.requests) == 1
    assert rec.requests[0].headers["x-stainless-retry-count"] == "0"


@pytest.mark.parametrize(
    ("exc_type", "kind"),
    [
        (httpx.ConnectError, Refused),  # connection refused / DNS / TLS: no request byte sent
        (httpx.ConnectTimeout, Refused),
        (httpx.PoolTimeout, Refused),
        (httpx.ReadTimeout, Ambiguous),  # the request went out; the answer did not come back
        (httpx.WriteTimeout, Ambiguous),
        (httpx.ReadError, Ambiguous),  # connection reset by peer
        (httpx.WriteError, Ambiguous),
        (httpx.RemoteProtocolError, Ambiguous),  # server closed without answering
        (httpx.ProxyError, Ambiguous),
    ],
)
def test_create_transport_mapping(
    provider: OpenAIAdapter, rec: Recorder, exc_type: type[httpx.TransportError], kind: type
) -> None:
    rec.handler = fail_with(exc_type)
    outcome = provider.create(REQ)
    assert type(outcome) is kind, outcome
    assert not isinstance(outcome, Accepted)  # for mypy: implied by the line above
    assert exc_type.__name__ in outcome.why
    assert len(rec.requests) == 1


def test_create_accepted_carries_id_and_status(provider: OpenAIAdapter, rec: Recorder) -> None:
    rec.handler = answer(200, response_json(response_id="resp_xyz", status="queued"))
    assert provider.create(REQ) == Accepted("resp_xyz", "queued")


@pytest.mark.parametrize(
    ("headers", "delay"),
    [
        ({"retry-after": "2", "x-ratelimit-reset-requests": "2s"}, 2.0),
        # no type, no exhausted limit named: the sooner reset (a far-off tokens reset holds nothing)
        ({"x-ratelimit-reset-tokens": "6m0s", "x-ratelimit-reset-requests": "1s"}, 1.0),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after": "later"}, None),
        ({}, None),
    ],
)
def test_refused_carries_header_delay(
    provider: OpenAIAdapter, rec: Recorder, headers: dict[str, str], delay: float | None
) -> None:
    rec.handler = answer(429, headers=headers)
    outcome = provider.create(REQ)
    assert isinstance(outcome, Refused)
    assert outcome.retry_after == delay


def test_create_sends_the_documented_request(provider: OpenAIAdapter, rec: Recorder) -> None:
    rec.handler = answer(200, response_json(status="queued"))
    provider.create(REQ)
    (request,) = rec.requests
    assert request.method == "POST" and request.url == httpx.URL(BASE + "/responses")
    assert request.headers["authorization"] == "Bearer sk-test"
    body = json.loads(request.content)
    assert body["model"] == PRODUCT.model
    assert body["instructions"] == PRODUCT.prompt
    assert "daily-brief" in body["input"] and "2025-03-01" in body["input"] and "en, es" in body["input"]
    assert body["temperature"] == 0.3 and "top_p" not in body and "reasoning" not in body
    assert body["max_output_tokens"] == PRODUCT.output_token_cap()
    assert body["background"] is True and body["store"] is True
    assert body["text"] == {"format": edition_schema.text_format(PRODUCT.languages, PRODUCT.items)}
    assert body["metadata"] == {
        "iipub_job_id": "job-42",
        "iipub_slot": "daily-brief/2025-03-01",
        "iipub_attempt": "2",
        "iipub_fingerprint": "f" * 64,
    }


def test_a_default_product_sends_no_sampling_key_and_always_a_cost_cap(provider: OpenAIAdapter, rec: Recorder) -> None:
    """The shipped products are gpt-5-mini, which refuses temperature: none is sent, and
    max_output_tokens (sized from the product's output) is."""
    from iipub.settings.config import default_products

    rec.handler = answer(200, response_json(status="queued"))
    for product in default_products().values():
        provider.create(CreateRequest("job-1", product, dt.date(2025, 3, 1), 1, "f" * 64))
    for request, product in zip(rec.requests, default_products().values(), strict=True):
        body = json.loads(request.content)
        assert "temperature" not in body and "top_p" not in body and "reasoning" not in body
        assert "verbosity" not in body["text"]
        assert body["max_output_tokens"] == product.output_token_cap() >= 16_000


def test_reasoning_and_verbosity_are_sent_where_set(provider: OpenAIAdapter, rec: Recorder) -> None:
    rec.handler = answer(200, response_json(status="queued"))
    product = Product(name="daily-brief", prompt="p", items=3, reasoning_effort="low", verbosity="high",
                      max_output_tokens=9000)
    provider.create(CreateRequest("job-1", product, dt.date(2025, 3, 1), 1, "f" * 64))
    body = json.loads(rec.requests[0].content)
    assert body["reasoning"] == {"effort": "low"} and body["text"]["verbosity"] == "high"
    assert body["max_output_tokens"] == 9000 and "temperature" not in body


def test_metadata_values_are_truncated_to_the_api_limit(provider: OpenAIAdapter, rec: Recorder) -> None:
    rec.handler = answer(200, response_json(status="queued"))
    provider.create(CreateRequest("j" * 600, PRODUCT, dt.date(2025, 3, 1), 1, "f" * 64))
    meta = json.loads(rec.requests[0].content)["metadata"]
    assert len(meta) <= 16
    assert all(len(k) <= 64 and len(v) <= 512 for k, v in meta.items())
    assert meta["iipub_job_id"] == "j" * 512


# -- reads, cancel, delete ------------------------------------------------------------------------


def test_retrieve_observed(provider: OpenAIAdapter, rec: Recorder) -> None:
    rec.handler = answer(200, response_json(status="completed", text='{"en": 1}'))
    outcome = provider.retrieve("resp_abc123")
    assert outcome == Observed(
        response_id="resp_abc123",
        status="completed",
        output_text='{"en": 1}',
        usage=Usage(10, 20, 30),
        metadata={"iipub_job_id": "job-42"},
        cut_reason=None,
        error=None,
        created_at=1740830400.0,  # the provider's clock, for the dwell SLI
        stage=Stage.FINISHED,
    )
    assert rec.requests[0].method == "GET"
    assert rec.requests[0].url.path == "/v1/responses/resp_abc123"


@pytest.mark.parametrize("usage", [
    {"input_tokens": 10, "output_tokens": None, "total_tokens": 30},
    {"input_tokens": "10", "output_tokens": 20, "total_tokens": 30},
    {"input_tokens": -1, "output_tokens": 20, "total_tokens": 30},
    {"input_tokens": 10, "output_tokens": 10**12, "total_tokens": 30},
    {"input_tokens": True, "output_tokens": 20, "total_tokens": 30},
    {"output_tokens": 20},
    "lots",
    [1, 2, 3],
])
def test_a_malformed_usage_keeps_the_output_readable(provider: OpenAIAdapter, rec: Recorder, usage: Any) -> None:
    """A finished, paid response with token counts that are not counts is still taken into
    custody (its usage unknown), not read as an unreadable body until the poll budget parks it."""
    rec.handler = answer(200, response_json(status="completed", text='{"en": 1}', usage=usage))
    outcome = provider.retrieve("resp_abc123")
    assert isinstance(outcome, Observed), outcome
    assert outcome.output_text == '{"en": 1}' and outcome.usage is None


def test_retrieve_unfinished_has_no_output(provider: OpenAIAdapter, rec: Recorder) -> None:
    rec.handler = answer(200, response_json(status="in_progress", text=None, usage=None))
    outcome = provider.retrieve("resp_abc123")
    assert isinstance(outcome, Observed)
    assert outcome.status == "in_progress" and outcome.output_text is None and outcome.usage is None


def test_retrieve_failed_and_incomplete_details(provider: OpenAIAdapter, rec: Recorder) -> None:
    error = {"code": "server_error", "message": "it broke"}
    rec.handler = answer(200, response_json(status="failed", text=None, error=error))
    failed = provider.retrieve("resp_abc123")
    assert isinstance(failed, Observed) and failed.error == "it broke"
    details = {"reason": "max_output_tokens"}
    rec.handler = answer(200, response_json(status="incomplete", text='{"en"', incomplete_details=details))
    incomplete = provider.retrieve("resp_abc123")
    assert isinstance(incomplete, Observed)
    assert incomplete.at_cap and incomplete.finished and incomplete.output_text == '{"en"'


READ_TABLE: list[tuple[Handler, type, int | None]] = [
    (answer(404), Missing, None),
    (answer(429, headers={"retry-after": "3"}), Transient, None),
    (answer(408), Transient, None),
    (answer(500), Transient, None),
    (answer(502), Transient, None),
    (answer(503), Transient, None),
    (answer(400), Rejected, 400),
    (answer(401), Rejected, 401),
    (answer(403), Rejected, 403),
    (answer(200, b"{truncated"), Transient, None),
    (answer(200, b"ok", {"content-type": "text/plain"}), Transient, None),
    (answer(200, {"object": "response"}), Transient, None),
    (answer(200, response_json(output="lots")), Transient, None),  # usage="lots" is only unknown usage
    (fail_with(httpx.ConnectError), Transient, None),
    (fail_with(httpx.ReadTimeout), Transient, None),
    (fail_with(httpx.RemoteProtocolError), Transient, None),
]


@pytest.mark.parametrize(("handler", "kind", "status"), READ_TABLE)
def test_retrieve_and_cancel_mapping(
    provider: OpenAIAdapter, rec: Recorder, handler: Handler, kind: type, status: int | None
) -> None:
    rec.handler = handler
    for call in (provider.retrieve, provider.cancel):
        outcome = call("resp_abc123")
        assert type(outcome) is kind, (call.__name__, outcome)
        if status is not None:
            assert isinstance(outcome, Rejected) and outcome.status == status
    assert len(rec.requests) == 2  # one each, no retries


def test_transient_429_carries_delay(provider: OpenAIAdapter, rec: Recorder) -> None:
    rec.handler = answer(429, headers={"retry-after": "3", "x-ratelimit-reset-requests": "1s"})
    outcome = provider.retrieve("resp_abc123")
    assert isinstance(outcome, Transient) and outcome.retry_after == 3.0


def test_cancel_sends_post_to_cancel(provider: OpenAIAdapter, rec: Recorder) -> None:
    rec.handler = answer(200, response_json(status="cancelled", text=None))
    outcome = provider.cancel("resp_abc123")
    assert isinstance(outcome, Observed) and outcome.status == "cancelled"
    assert rec.requests[0].method == "POST" and rec.requests[0].url.path == "/v1/responses/resp_abc123/cancel"


@pytest.mark.parametrize(
    ("handler", "kind"),
    [
        (answer(200, {"id": "resp_abc123", "object": "response", "deleted": True}), Deleted),
        (answer(204, b""), Deleted),
        (answer(404), Missing),
        (answer(500), Transient),
        (answer(429), Transient),
        (answer(403), Rejected),
        (fail_with(httpx.ConnectError), Transient),
        (fail_with(httpx.ReadTimeout), Transient),
    ],
)
def test_delete_mapping(provider: OpenAIAdapter, rec: Recorder, handler: Handler, kind: type) -> None:
    rec.handler = handler
    outcome = provider.delete("resp_abc123", has_custody=True)
    assert type(outcome) is kind, outcome
    assert rec.requests[0].method == "DELETE" and rec.requests[0].url.path == "/v1/responses/resp_abc123"


def test_delete_without_custody_sends_nothing(provider: OpenAIAdapter, rec: Recorder) -> None:
    rec.handler = answer(200, {"id": "resp_abc123", "object": "response", "deleted": True})
    with pytest.raises(InvariantViolation):
        provider.delete("resp_abc123", has_custody=False)
    assert rec.requests == []
    # An operator kill is the one exception.
    assert provider.delete("resp_abc123", has_custody=False, kill_requested=True) == Deleted("resp_abc123")
    assert len(rec.requests) == 1


def test_provider_builds_its_own_client_with_settings() -> None:
    settings = ProviderSettings(base_url=BASE, timeout_seconds=12.0, connect_timeout_seconds=3.0, max_connections=4)
    with OpenAIAdapter(settings, "sk-test") as p:
        assert p._http is None  # nothing built until the first call
        sdk = p._sdk()
        assert sdk.max_retries == 0
        assert p._http is not None and p._http.timeout == httpx.Timeout(12.0, connect=3.0)
        assert sdk.timeout == httpx.Timeout(12.0, connect=3.0)
        assert str(sdk.base_url).rstrip("/") == BASE
    assert p._http.is_closed


def test_empty_api_key_is_refused() -> None:
    with pytest.raises(MissingApiKey):
        OpenAIAdapter(ProviderSettings(base_url=BASE), "")


@pytest.mark.parametrize("bad", ["", "resp_1/../admin", "resp 1", "resp_1?x=1"])
def test_malformed_response_ids_are_refused_before_sending(provider: OpenAIAdapter, rec: Recorder, bad: str) -> None:
    for call in (provider.retrieve, provider.cancel):
        with pytest.raises(ValueError, match="malformed response id"):
            call(bad)
    with pytest.raises(ValueError, match="malformed response id"):
        provider.delete(bad, has_custody=True)
    assert rec.requests == []


def test_reads_and_creates_carry_the_same_key_organization_and_project(rec: Recorder) -> None:
    """A poll is plain httpx, a create goes through the SDK: both name the same key, organization
    and project, so a response is read under the scope it was created in."""
    settings = ProviderSettings(base_url=BASE, organization="org-7", project="proj_9")
    client = httpx.Client(transport=httpx.MockTransport(rec))
    rec.handler = answer(200, response_json(status="in_progress", text=None))
    with OpenAIAdapter(settings, "sk-test", http_client=client) as p:
        assert isinstance(p.retrieve("resp_abc123"), Observed)
        rec.handler = answer(200, response_json(status="queued", text=None))
        assert isinstance(p.create(REQ), Accepted)
    client.close()
    read, create = rec.requests
    assert (read.method, str(read.url)) == ("GET", f"{BASE}/responses/resp_abc123")
    assert (create.method, str(create.url)) == ("POST", f"{BASE}/responses")
    for request in (read, create):
        assert request.headers["authorization"] == "Bearer sk-test"
        assert request.headers["openai-organization"] == "org-7"
        assert request.headers["openai-project"] == "proj_9"


def test_a_read_error_is_explained_as_the_provider_said_it(provider: OpenAIAdapter, rec: Recorder) -> None:
    """The journal's `why` of a failed read: the error's message and the request id, clipped."""
    rec.handler = answer(404, {"error": {"message": "No response with id 'resp_abc123' found.", "code": None}},
                         headers={"x-request-id": "req_1"})
    outcome = provider.retrieve("resp_abc123")
    assert outcome == Missing("HTTP 404: No response with id 'resp_abc123' found. (request req_1)")
    rec.handler = answer(502, b"<html>bad gateway</html>", headers={"content-type": "text/html"})
    outcome = provider.retrieve("resp_abc123")
    assert isinstance(outcome, Transient) and outcome.why == "HTTP 502: <html>bad gateway</html>"
    rec.handler = answer(503, b"", headers={"retry-after": "7"})
    outcome = provider.retrieve("resp_abc123")
    assert isinstance(outcome, Transient) and outcome.why == "HTTP 503: Error code: 503" and outcome.retry_after == 7.0


def test_an_answer_larger_than_the_bound_is_not_read(provider: OpenAIAdapter, rec: Recorder,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads stop reading past MAX_ANSWER_BYTES: a Transient, nothing kept; a create's answer
    that large is an unknown outcome (the request was sent), never a retry."""
    import iipub.provider.openai.adapter as provider_module

    monkeypatch.setattr(provider_module, "MAX_ANSWER_BYTES", 3000)  # the 64 MiB bound, made small
    rec.handler = lambda request: httpx.Response(200, content=iter([b"x" * 600] * 50))
    outcome = provider.retrieve("resp_abc123")
    assert isinstance(outcome, Transient)
    assert outcome.why == "transport failure: ReadError: answer larger than 3000 bytes: not read"
    rec.handler = answer(200, response_json(text="y" * 500))
    assert isinstance(provider.retrieve("resp_abc123"), Observed)  # under the bound: read as before
    rec.handler = lambda request: httpx.Response(200, content=iter([b"x" * 600] * 50))
    created = provider.create(REQ)
    assert isinstance(created, Ambiguous) and "answer larger than 3000 bytes" in created.why


def test_an_answer_that_trickles_past_the_read_time_is_not_read(rec: Recorder) -> None:
    """Each chunk in time is not enough: the whole answer has `timeout_seconds`."""
    import time

    def trickle() -> Iterator[bytes]:
        for _ in range(100):
            time.sleep(0.02)
            yield b" "

    rec.handler = lambda request: httpx.Response(200, content=trickle())
    client = httpx.Client(transport=httpx.MockTransport(rec))
    with OpenAIAdapter(ProviderSettings(base_url=BASE, timeout_seconds=0.2), "sk-test", http_client=client) as p:
        started = time.monotonic()
        outcome = p.retrieve("resp_abc123")
        took = time.monotonic() - started
    client.close()
    assert isinstance(outcome, Transient)
    assert outcome.why == "transport failure: ReadTimeout: answer not complete after 0.2 s: not read"
    assert took < 1.0


def test_a_provider_request_id_is_clipped_like_its_message(provider: OpenAIAdapter, rec: Recorder) -> None:
    """Untrusted text from the provider (a message, a request id) is clipped before the journal keeps it."""
    rec.handler = answer(404, headers={"x-request-id": "r" * 5000})
    outcome = provider.retrieve("resp_abc123")
    assert isinstance(outcome, Missing) and len(outcome.why) < 400 and outcome.why.endswith(f"(request {'r' * 63}…)")


def test_an_answer_about_another_response_is_never_taken_for_this_one(provider: OpenAIAdapter, rec: Recorder) -> None:
    rec.handler = answer(200, response_json(response_id="resp_someone_else"))
    for call in (provider.retrieve, provider.cancel):
        outcome = call("resp_abc123")
        assert outcome == Transient(None, "asked for resp_abc123, answered with resp_someone_else: not taken")


def test_a_compressed_answer_that_was_not_asked_for_is_not_read(provider: OpenAIAdapter, rec: Recorder) -> None:
    """Reads ask for `identity`; a gzip body sent anyway (a few KB that could inflate to gigabytes
    past the size bound, which counts arriving bytes) is not read: a read's Transient, a create's
    unknown outcome."""
    import gzip

    body = gzip.compress(json.dumps(response_json()).encode())
    rec.handler = lambda request: httpx.Response(200, content=iter([body]), headers={"content-encoding": "gzip"})
    outcome = provider.retrieve("resp_abc123")
    assert outcome == Transient(None, "transport failure: DecodingError: an answer encoded 'gzip', which was "
                                      "not asked for: not read")
    assert rec.requests[0].headers["accept-encoding"] == "identity"
    created = provider.create(REQ)
    assert isinstance(created, Ambiguous) and "encoded 'gzip'" in created.why


def test_the_pools_iipub_builds_ask_for_uncompressed_answers() -> None:
    """Reads and the SDK's creates go out on the same pools, which ask for `identity`."""
    with OpenAIAdapter(ProviderSettings(base_url=BASE), "sk-test") as p:
        http = p._pool
        assert http.headers["accept-encoding"] == "identity" and p._headers["Accept-Encoding"] == "identity"
        assert p._sdk()._client is http


# -- what the real API answers: refused parameters, flex refusals, output shapes ------------------


def _error(status: int, message: str, type_: str | None, param: str | None = None, code: str | None = None,
           **more: Any) -> Handler:
    error: dict[str, Any] = {"message": message, **more}
    if type_ is not None:
        error.update(type=type_, param=param, code=code)
    return answer(status, {"error": error})


@pytest.mark.parametrize(("handler", "param", "code"), [
    # The bodies projects quote from the real API.
    (_error(400, "Unsupported value: 'temperature' does not support 0.2 with this model. Only the default (1) "
            "value is supported.", "invalid_request_error", "temperature", "unsupported_value"),
     "temperature", "unsupported_value"),
    (_error(400, "Unsupported parameter: 'temperature' is not supported with this model.", "invalid_request_error",
            "temperature", None), "temperature", "invalid_request_error"),
    (_error(400, "Unsupported parameter: 'reasoning.effort' is not supported with this model.",
            "invalid_request_error", "reasoning.effort", "unsupported_parameter"), "reasoning.effort",
     "unsupported_parameter"),
    # `param` null, the name only in the message.
    (_error(400, "Unsupported parameter: 'reasoning_effort'. In the Responses API, this parameter has moved to "
            "'reasoning.effort'.", "invalid_request_error", None, "unsupported_parameter"), "reasoning_effort",
     "unsupported_parameter"),
    (_error(400, "Invalid 'max_output_tokens': integer below minimum value.", "invalid_request_error",
            "max_output_tokens", "integer_below_min_value"), "max_output_tokens", "integer_below_min_value"),
])
def test_a_refused_parameter_is_a_refusal_naming_it(provider: OpenAIAdapter, rec: Recorder, handler: Handler,
                                                    param: str, code: str) -> None:
    rec.handler = handler
    outcome = provider.create(REQ)
    assert isinstance(outcome, Refused) and outcome.param == param and outcome.code == code
    assert not outcome.capacity and outcome.retry_after is None


@pytest.mark.parametrize("handler", [
    _error(400, "We could not parse the JSON body of your request.", "invalid_request_error"),  # no parameter
    _error(400, "Something odd about 'temperature'.", "server_error", None, None),  # not a request error
    _error(401, "Incorrect API key provided.", "invalid_request_error", None, "invalid_api_key"),
    _error(404, "Not found.", "invalid_request_error", None, None),
])
def test_other_4xx_stay_rejected(provider: OpenAIAdapter, rec: Recorder, handler: Handler) -> None:
    rec.handler = handler
    assert isinstance(provider.create(REQ), Rejected)


# What the real API answers a project or key without access to a model (public reports of real answers).
@pytest.mark.parametrize(("handler", "status", "model"), [
    (_error(403, "Project `proj_abc` does not have access to model `gpt-4o-mini`", "invalid_request_error", None,
            "model_not_found"), 403, "gpt-4o-mini"),
    (_error(404, "The model `gpt-9` does not exist or you do not have access to it.", "invalid_request_error",
            None, "model_not_found"), 404, "gpt-9"),
    (_error(404, "The model does not exist.", "invalid_request_error", "model", "model_not_found"), 404,
     PRODUCT.model),  # no name in the message: the request's
])
def test_no_access_to_the_model_is_an_access_refusal_naming_it(provider: OpenAIAdapter, rec: Recorder,
                                                               handler: Handler, status: int, model: str) -> None:
    rec.handler = handler
    outcome = provider.create(REQ)
    assert isinstance(outcome, Refused) and outcome.kind is RefusalKind.ACCESS
    assert outcome.model == model and outcome.status == status and outcome.retry_after is None


@pytest.mark.parametrize(("message", "limit", "requested"), [
    (("Request too large for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Requested 36055. "
      "The input or output tokens must be reduced in order to run successfully."), 30000, 36055),
    ("Request too large for gpt-5 on tokens per min (TPM). The input or output tokens must be reduced.", None, None),
])
def test_a_request_over_the_tokens_per_minute_limit_is_too_large(provider: OpenAIAdapter, rec: Recorder, message: str,
                                                                 limit: int | None, requested: int | None) -> None:
    rec.handler = _error(429, message, "tokens", None, "rate_limit_exceeded")
    outcome = provider.create(REQ)
    assert isinstance(outcome, Refused) and outcome.kind is RefusalKind.TOO_LARGE
    assert (outcome.limit, outcome.requested, outcome.status) == (limit, requested, 429)


@pytest.mark.parametrize(("handler", "kind"), [
    (_error(429, "You exceeded your current quota.", "insufficient_quota", None, "insufficient_quota"),
     RefusalKind.QUOTA),
    (_error(429, "Rate limit reached for requests.", "requests", None, "rate_limit_exceeded"), RefusalKind.RATE),
])
def test_a_default_tier_429_is_quota_or_rate(provider: OpenAIAdapter, rec: Recorder, handler: Handler,
                                             kind: RefusalKind) -> None:
    rec.handler = handler
    outcome = provider.create(REQ)
    assert isinstance(outcome, Refused) and outcome.kind is kind and not outcome.capacity


FLEX = CreateRequest("job-42", PRODUCT, dt.date(2025, 3, 1), 2, "f" * 64, tier="flex")


@pytest.mark.parametrize(("handler", "capacity", "code"), [
    (_error(429, "Resource Unavailable: no flex capacity.", "resource_unavailable", None, "resource_unavailable"),
     True, "resource_unavailable"),
    (_error(429, "Resource Unavailable", None), True, "resource_unavailable"),  # a message alone
    (_error(429, "The flex tier is at capacity. Please retry later.", "server_error"), True, "resource_unavailable"),
    (answer(429, b"", {"content-type": "text/plain"}), True, "resource_unavailable"),  # no body at all
    (_error(429, "Rate limit reached for requests.", "requests", None, "rate_limit_exceeded",),
     False, "rate_limit_exceeded"),
    (_error(429, "Rate limit reached for gpt-5-mini on tokens per min.", "tokens", None, None), False, "tokens"),
    (_error(429, "You exceeded your current quota.", "insufficient_quota", None, "insufficient_quota"),
     False, "insufficient_quota"),
])
def test_a_flex_429_is_capacity_unless_it_names_quota_or_rate_limit(provider: OpenAIAdapter, rec: Recorder,
                                                                    handler: Handler, capacity: bool,
                                                                    code: str) -> None:
    rec.handler = handler
    outcome = provider.create(FLEX)
    assert isinstance(outcome, Refused) and outcome.capacity is capacity and outcome.code == code
    rec.handler = handler
    assert not provider.create(REQ).capacity  # type: ignore[union-attr]  # never at the default tier


def _message(content: list[dict[str, Any]], phase: str | None = None, **more: Any) -> dict[str, Any]:
    item = {"type": "message", "id": "msg_x", "status": "completed", "role": "assistant", "content": content, **more}
    if phase:
        item["phase"] = phase
    return item


def _text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


@pytest.mark.parametrize(("output", "text", "refusal"), [
    ([{"type": "reasoning", "id": "rs_1", "summary": []}, _message([_text('{"en": 1}')])], '{"en": 1}', None),
    ([_message([_text("Let me draft it.")], "commentary"), _message([_text('{"en": 1}')], "final_answer")],
     '{"en": 1}', None),
    ([_message([_text('{"en"'), _text(": 1"), _text("}")])], '{"en": 1}', None),
    ([_message([{"type": "refusal", "refusal": "I can't help with that."}])], None, "I can't help with that."),
    ([_message([{"type": "refusal", "refusal": "No.\x1b[2J\n\tNever."}])], None, "No. [2J Never."),
    ([_message([_text('{"en": 1}')], "final_answer"), _message([_text("Done.")], "commentary")], '{"en": 1}', None),
])
def test_output_is_read_as_the_real_api_writes_it(provider: OpenAIAdapter, rec: Recorder, output: list[dict[str, Any]],
                                                 text: str | None, refusal: str | None) -> None:
    rec.handler = answer(200, response_json(text=None, output=output))
    observed = provider.retrieve("resp_abc123")
    assert isinstance(observed, Observed)
    assert (observed.output_text or None) == text and observed.refusal == refusal
