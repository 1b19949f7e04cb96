"""`OpenAIAdapter`, the provider iipub runs with (`interface.Provider` over the OpenAI Responses
API): the only code that talks to it, with the official `openai` SDK, retries off.

Every call returns one value from a closed set of outcomes instead of raising (the exceptions
are caller bugs: a malformed response id, a delete that breaks the custody invariant), so the
per-state decisions can be pure functions of (job, outcome). The create mapping decides
whether money may have been spent; it is written out as a table in `_create_outcome`.
Nothing here retries: iipub owns every retry decision.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import structlog

if TYPE_CHECKING:  # the SDK and httpx are imported on first use: a tick that calls no provider
    import httpx  # (an idle cron run) never pays for them
    import openai

from iipub.core import tls
from iipub.core.closing import Closing
from iipub.core.errors import ConfigError, MissingApiKey
from iipub.provider.interface import check_delete_allowed, check_response_id, create_metadata, is_response_id
from iipub.provider.openai import retry_hints
from iipub.provider.openai.codes import (
    CAPACITY_CODE,
    CAPACITY_CODES,
    MODEL_ACCESS_CODE,
    PARAM_CODES,
    QUOTA_CODES,
    RATE_LIMIT_CODES,
    answer_messages,
    observed,
    same_scope,
    scope_of,
    stage_of,
)
from iipub.provider.outcomes import (
    Accepted,
    Ambiguous,
    CreateOutcome,
    CreateRequest,
    Deleted,
    DeleteOutcome,
    Missing,
    ModelLookup,
    Observed,
    ReadOutcome,
    RefusalKind,
    Refused,
    Rejected,
    Stage,
    Standing,
    Transient,
    Usage,
)
from iipub.settings.config import Product, ProviderSettings

log = structlog.get_logger("iipub.provider")

_WHY_MAX = 300  # provider error text is untrusted and can be long
DEFAULT_BASE_URL = "https://api.openai.com/v1"  # the SDK's, when OPENAI_BASE_URL is not set
# The most of one answer iipub reads: a response object carries the output text (a product's
# `max_output_bytes` is at most 16 MB) JSON-escaped, and little else.
MAX_ANSWER_BYTES = 64 * 1024 * 1024


def create_input(product: Product, edition_date: dt.date) -> str:
    return (
        f"Product: {product.name}. Edition date: {edition_date.isoformat()}. "
        f"Languages: {', '.join(product.languages)}. Items per language: {product.items}."
    )


def create_body(req: CreateRequest) -> dict[str, Any]:
    """The create's parameters (the SDK's `ResponseCreateParams`): the sampling and reasoning
    keys only when the product sets them (a model that refuses one was refused at load), and the
    per-call cost cap always."""
    p = req.product
    text: dict[str, Any] = {"format": _text_format(p)}
    if p.verbosity is not None:
        text["verbosity"] = p.verbosity
    body: dict[str, Any] = {
        "model": p.model,
        "instructions": p.prompt,
        "input": create_input(p, req.edition_date),
        "background": True,
        "store": True,
        "text": text,
        "max_output_tokens": p.output_token_cap(),
        "metadata": create_metadata(req),
        "service_tier": req.tier,
    }
    if p.temperature is not None:
        body["temperature"] = p.temperature
    if p.top_p is not None:
        body["top_p"] = p.top_p
    if p.reasoning_effort is not None:
        body["reasoning"] = {"effort": p.reasoning_effort}
    return body


class OpenAIAdapter(Closing):
    """The OpenAI Responses API as a `Provider` (`interface`): the official SDK for creates,
    plain requests for reads, no retries."""

    def __init__(self, settings: ProviderSettings, api_key: str, http_client: httpx.Client | None = None) -> None:
        if not api_key:
            raise MissingApiKey()
        self._settings = settings
        self.scope = scope_of(settings.organization, settings.project, api_key)
        self._owns_http = http_client is None
        self._http = http_client  # the first pool (or the one given, shared by every thread)
        self._api_key = api_key
        self._base = (settings.base_url or DEFAULT_BASE_URL).rstrip("/")
        self._headers = read_headers(settings, api_key)
        self._lock = threading.Lock()
        # Built pools, one per shard (`_pool`); the calling thread's shard, once it has one.
        self._shards: list[httpx.Client] = []
        self._sdks: dict[int, openai.OpenAI] = {}  # the SDK client over each pool, built by a create
        self._mine = threading.local()
        self._turn = 0  # the shard the next thread beyond `max_connections` shares
        self._closed = False
        self._root = self  # a view made by `until` shares its root's pools
        self._deadline: float | None = None
        self._configured: httpx.Timeout | None = None

    def reaches(self, created_under: str) -> bool:
        """A read here sees a response created under `created_under`: the same organization and
        project (and key, when no project was named)."""
        return same_scope(created_under, self.scope)

    def stage_of(self, status: str) -> Stage:
        return stage_of(status)

    def until(self, deadline: float) -> OpenAIAdapter:
        """This provider with every read, cancel and delete over by `deadline` (`time.monotonic()`):
        each call's timeouts are cut to what is left, and a call with nothing left is not sent
        (Transient). A webhook delivery's budget thus covers its provider reads. A create is never
        cut short (an unknown create outcome may cost money): a caller with a deadline does not create."""
        view = copy.copy(self)
        view._deadline = deadline
        view._owns_http = False
        return view

    def ready(self) -> None:
        """Build the calling thread's HTTP pool now, or say in one line why it cannot be built (a
        CA bundle that is not there, a proxy URL httpx refuses, ...). The sweep calls this before
        it leases work for the provider, so a broken environment fails the run before any job is
        touched."""
        try:
            self._pool  # noqa: B018 - built by the property
        except Exception as exc:
            raise ConfigError(f"cannot set up the provider's HTTP client: {_described(exc)}") from exc

    @property
    def _pool(self) -> httpx.Client:
        """The calling thread's HTTP pool, built at its first call: an idle tick imports no HTTP
        client (most of an idle cron run's CPU, 1,440 times a day).

        Threads do not share one pool: up to `max_connections` pools of one connection each,
        thread i on pool i mod `max_connections` (the same bound on connections). httpx's pool
        hands out connections under one lock, scanning every connection and waiting request, so
        64 threads on one pool spent more CPU there than on the rest of a poll. A client given
        to the constructor is the one pool, shared."""
        if self._root is not self:
            return self._root._pool
        http: httpx.Client | None = getattr(self._mine, "http", None)
        if http is not None:  # this thread's: every later call skips the lock
            return http
        with self._lock:
            if self._closed:  # a caller bug: nothing may build a pool that nothing would close
                raise RuntimeError("the provider was closed")
            http = self._shard()
        self._mine.http = http
        return http

    def _shard(self) -> httpx.Client:
        """The next thread's pool (under `_lock`): a new one while fewer than `max_connections`
        exist, else an existing one, in turn."""
        import httpx

        s = self._settings
        if not self._owns_http and self._http is not None:
            if not self._shards:
                _bound(self._http)
                self._shards.append(self._http)
            return self._http
        if len(self._shards) < s.max_connections:
            # One TLS context serves every pool and every provider of the process (building
            # one reads the CA bundle).
            http = _bound(httpx.Client(timeout=self._configured_timeout(), headers={"Accept-Encoding": "identity"},
                                       limits=httpx.Limits(max_connections=1), verify=tls.client_context()))
            self._shards.append(http)
            self._http = self._http or http
            return http
        self._turn = (self._turn + 1) % len(self._shards)
        return self._shards[self._turn]

    def _sdk(self) -> openai.OpenAI:
        """The official SDK over the calling thread's pool: the create path only (its request
        building and error classes decide whether money may have been spent). Imported and built
        at the first create, so a tick that only polls never loads it."""
        http = self._pool
        root = self._root
        with root._lock:
            sdk = root._sdks.get(id(http))
            if sdk is None:
                import openai

                s = self._settings
                # max_retries=0: the SDK would otherwise retry POST timeouts and 408/409/429/5xx
                # with no idempotency key, creating duplicate paid jobs. It still sends
                # x-stainless-retry-count (always "0" here), which lets the simulator prove no
                # retry happened.
                sdk = root._sdks[id(http)] = openai.OpenAI(
                    api_key=self._api_key, base_url=self._base, organization=s.organization, project=s.project,
                    max_retries=0, timeout=self._configured_timeout(), http_client=http)
        return sdk

    def close(self) -> None:
        if self._root is not self:
            return  # a view: its root owns the pools
        with self._lock:
            self._closed = True
            if self._owns_http:
                for http in self._shards:
                    http.close()

    # -- create: the money path -------------------------------------------------------------

    def create(self, req: CreateRequest) -> CreateOutcome:
        kwargs = create_body(req)
        try:
            client = self._sdk()
        except Exception as exc:  # the client could not even be built: not a byte was sent
            return _trouble("create", req.job_id, exc, Refused(None, f"not sent: {_described(exc)}",
                                                               kind=RefusalKind.UNSENT))
        if req.tier == "flex":  # flex is answered more slowly: its own (longer) read timeout
            import httpx

            s = self._settings
            client = client.with_options(timeout=httpx.Timeout(s.flex_timeout_seconds,
                                                               connect=s.connect_timeout_seconds))
        try:
            resp: Any = client.responses.create(**kwargs)
        except Exception as exc:
            return _trouble("create", req.job_id, exc, _create_outcome(exc, flex=req.tier == "flex",
                                                                       model=req.product.model))
        return _accepted_or_ambiguous(resp)

    # -- what the account may use (free of charge) ---------------------------------------------

    def look_up(self, model: str) -> ModelLookup:
        """`GET /v1/models/{model}` under this key, organization and project (the SDK's `Model`
        when the project may use it; OpenAI's 401, 403 or 404 otherwise). Nothing is billed."""
        import urllib.parse

        import httpx

        url = f"{self._base}/models/{urllib.parse.quote(model, safe='')}"
        try:
            http = self._pool
        except Exception as exc:  # the client cannot be built: nothing was sent
            return ModelLookup(model, Standing.UNANSWERED, f"not sent: {_described(exc)}")
        try:
            resp = http.request("GET", url, headers=self._headers, timeout=self._configured_timeout())
        except httpx.HTTPError as exc:
            return ModelLookup(model, Standing.UNANSWERED, f"transport failure: {_named(exc)}")
        answer = Answer(resp.status_code, resp.content, resp.headers)
        return model_lookup(model, answer)

    def requested_tokens(self, req: CreateRequest) -> int:
        return requested_tokens(create_body(req))

    # -- reads and cleanup (safe to repeat) ---------------------------------------------------

    def retrieve(self, response_id: str) -> ReadOutcome:
        return self._read("GET", response_id, "")

    def cancel(self, response_id: str) -> ReadOutcome:
        """Cancel a background response. Cancelling a finished one answers Rejected(400):
        retrieve it instead."""
        return self._read("POST", response_id, "/cancel")

    def _read(self, method: str, response_id: str, suffix: str) -> ReadOutcome:
        """A call answered with the response as it now stands (retrieve, cancel)."""
        answer = self._send("read", method, response_id, suffix)
        if not isinstance(answer, Answer):
            return answer
        observed = _observed(answer.body)
        if isinstance(observed, Observed) and observed.response_id != response_id:
            # Another response's body (a misrouting proxy or cache, a confused provider) is never
            # taken as this one's: its output may be another job's, or another installation's.
            why = f"asked for {response_id}, answered with {_clip(observed.response_id, 64)}: not taken"
            log.warning("provider_trouble", op="read", subject=response_id, status=answer.status,
                        outcome="Transient", why=why)
            return Transient(None, why)
        return observed

    def delete(self, response_id: str, *, has_custody: bool, kill_requested: bool = False) -> DeleteOutcome:
        # Deletion-safety invariant: nothing is sent without custody or a kill (`interface`).
        check_delete_allowed(response_id, has_custody=has_custody, kill_requested=kill_requested)
        answer = self._send("delete", "DELETE", response_id, "")
        return answer if not isinstance(answer, Answer) else Deleted(response_id)

    def _send(self, op: str, method: str, response_id: str, suffix: str) -> Answer | Missing | Transient | Rejected:
        """One request of the read path (retrieve, cancel, delete) with plain httpx: the same
        endpoint, key and headers the SDK would send, without importing it or building its
        request and response models (a poll is a GET and a JSON body, 1,000s of them a tick).
        These calls are safe to repeat, so a transport failure is only ever Transient; a 2xx is
        an Answer, any other status its outcome."""
        check_response_id(response_id)
        timeout = self._timeout()
        if timeout is None:
            return _NO_TIME_LEFT
        import httpx

        url = f"{self._base}/responses/{response_id}{suffix}"
        try:
            http = self._pool
            resp = http.request(method, url, headers=self._headers,
                                timeout=self._configured_timeout() if timeout is _CONFIGURED else timeout)
        except httpx.HTTPError as exc:  # the answer's bounds (`bounded_answers`) are ReadErrors too
            unreachable = isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))
            return _trouble(op, response_id, exc,
                            Transient(None, f"transport failure: {_named(exc)}", unreachable=unreachable))
        answer = Answer(resp.status_code, resp.content, resp.headers)
        return answer if 200 <= answer.status < 300 else _trouble_status(op, response_id, answer)

    def _configured_timeout(self) -> httpx.Timeout:
        """The settings' timeouts (built once: every poll passes them)."""
        if self._configured is None:
            import httpx

            s = self._settings
            self._configured = httpx.Timeout(s.timeout_seconds, connect=s.connect_timeout_seconds)
        return self._configured

    def _timeout(self) -> Any:
        """The timeouts for the next call: the configured ones (`_CONFIGURED`), those cut to what
        is left before the deadline, or None when too little is left to send anything."""
        if self._deadline is None:
            return _CONFIGURED
        left = self._deadline - time.monotonic()
        if left < _MIN_CALL_SECONDS:
            return None
        import httpx

        s = self._settings
        return httpx.Timeout(min(s.timeout_seconds, left), connect=min(s.connect_timeout_seconds, left))


class Answer(NamedTuple):
    """A read-path HTTP answer, whatever its status."""

    status: int
    body: bytes
    headers: Mapping[str, str]


def _bound(http: httpx.Client) -> httpx.Client:
    """Every answer on `http` (reads and creates alike) is bounded in size and time."""
    if bounded_answers not in http.event_hooks["response"]:
        http.event_hooks["response"].append(bounded_answers)
    return http


def bounded_answers(response: httpx.Response) -> None:
    """A response hook (run once the headers are in, before the body is read): the body is read
    through a stream that stops past MAX_ANSWER_BYTES or once the request's read timeout has
    passed since the headers, for the whole body and not per chunk. A provider that trickles a
    body forever, or sends one without end, then costs one call (an httpx ReadError, which a
    read maps to Transient and a create to Ambiguous), not a thread or the host's memory."""
    read = (response.request.extensions.get("timeout") or {}).get("read")
    encoding = response.headers.get("content-encoding", "").strip().lower()
    # Every request asks for the body as it is (`Accept-Encoding: identity`): the size bound
    # counts the bytes that arrive, so a compressed body (a few KB that inflate to gigabytes)
    # the provider sends anyway is not read.
    refused = encoding not in ("", "identity")
    response.stream = _bounded_stream_class()(response.stream, response.request, read,
                                              f"an answer encoded {_clip(encoding, 32)!r}" if refused else None)


@functools.cache
def _bounded_stream_class() -> Callable[[Any, httpx.Request, float | None, str | None], httpx.SyncByteStream]:
    import httpx

    class Bounded(httpx.SyncByteStream):
        def __init__(self, inner: Any, request: httpx.Request, seconds: float | None, refused: str | None) -> None:
            self._inner = inner
            self._request = request
            self._seconds = seconds
            self._ends = None if seconds is None else time.monotonic() + seconds
            self._refused = refused

        def __iter__(self) -> Iterator[bytes]:
            if self._refused is not None:
                raise httpx.DecodingError(f"{self._refused}, which was not asked for: not read",
                                          request=self._request)
            size = 0
            for chunk in self._inner:
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise httpx.ReadError(f"answer larger than {MAX_ANSWER_BYTES} bytes: not read",
                                          request=self._request)
                if self._ends is not None and time.monotonic() > self._ends:
                    raise httpx.ReadTimeout(f"answer not complete after {self._seconds:g} s: not read",
                                            request=self._request)
                yield chunk

        def close(self) -> None:
            self._inner.close()

    return Bounded


def read_headers(settings: ProviderSettings, api_key: str) -> dict[str, str]:
    """The headers of every read-path request: the key, and the organization and project the
    SDK would send for creates (so a response is read under the same scope it was created in)."""
    from iipub import __version__

    headers = {"Authorization": f"Bearer {api_key}", "Accept": "application/json", "Accept-Encoding": "identity",
               "User-Agent": f"iipub/{__version__}"}
    if settings.organization:
        headers["OpenAI-Organization"] = settings.organization
    if settings.project:
        headers["OpenAI-Project"] = settings.project
    return headers


_T = TypeVar("_T")
_CONFIGURED = object()  # no deadline: the client's configured timeouts
_MIN_CALL_SECONDS = 0.2  # less than this left before a deadline: the call is not sent
_NO_TIME_LEFT = Transient(None, "not sent: the request budget is spent")


def _text_format(product: Product) -> dict[str, Any]:
    from iipub.settings import edition_schema  # pydantic: only when a create is made

    return edition_schema.text_format(product.languages, product.items)


def _trouble(op: str, subject: str, exc: Exception, outcome: _T) -> _T:
    """Every failed provider call is a warning in the log with its HTTP status and message (the
    journal keeps the decision; the log keeps what the provider said)."""
    status = getattr(exc, "status_code", None)
    why = getattr(outcome, "why", None) or _described(exc)
    log.warning("provider_trouble", op=op, subject=subject, status=status, outcome=type(outcome).__name__, why=why)
    return outcome


def _create_outcome(exc: Exception, *, flex: bool = False, model: str | None = None) -> Refused | Ambiguous | Rejected:
    """THE MONEY MAPPING for a create that did not return a 2xx body.

    | what happened                                          | outcome    | why                      |
    |--------------------------------------------------------|------------|--------------------------|
    | 2xx with an id starting `resp_`  (see _accepted_...)   | Accepted   | job exists, will charge  |
    | 2xx, no usable id / body unparsable (_accepted_...)    | Ambiguous  | may exist, id unknown    |
    | 429 naming a quota or billing code                     | Refused    | quota: not run           |
    | 429 to a flex create, neither quota nor rate limit     | Refused    | no flex capacity: not run|
    | 429 "Request too large … (TPM): Limit N, Requested M"  | Refused    | too large: not run       |
    | 429 otherwise                                          | Refused    | rate-limited: not run    |
    | 400 invalid_request_error naming a parameter           | Refused    | refused before it ran    |
    | 403 / 404 `model_not_found`                            | Refused    | no access to the model   |
    | connect error / connect timeout / pool timeout         | Refused    | no request byte was sent |
    | read / write timeout, reset, protocol error, other I/O | Ambiguous  | request may have arrived |
    | 408, 409                                               | Ambiguous  | may have been processed  |
    | 5xx (500, 502, 503, ...)                               | Ambiguous  | may have been processed  |
    | other 4xx (400, 401, 403, 404, 422, ...)               | Rejected   | not processed; fix first |
    | anything else (3xx, unexpected exception)              | Ambiguous  | cannot prove no charge   |
    """
    import openai

    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        why = _status_why(exc)
        if status == 429:
            code = _error_code(exc) or "rate_limited"
            # The hint that concerns this refusal: its own retry-after, else the reset of the
            # limit its type names (requests or tokens), bounded (`retry_hints.rate_limit_delay`).
            hinted = retry_hints.rate_limit_delay(exc.response.headers, getattr(exc, "type", None))
            if flex and _capacity_refusal(exc, code):
                return Refused(hinted, why, CAPACITY_CODE, kind=RefusalKind.CAPACITY, status=status)
            return _refused_429(exc, why, code, hinted)
        if status in (408, 409) or status >= 500:
            return Ambiguous(why)
        if status == 400:
            param = _refused_param(exc)
            if param is not None:
                return Refused(None, why, _error_code(exc), kind=RefusalKind.PARAMETER, param=param, status=status)
        if status in (403, 404) and _error_code(exc) == MODEL_ACCESS_CODE:
            return Refused(None, why, MODEL_ACCESS_CODE, kind=RefusalKind.ACCESS, model=_model_named(exc) or model,
                           status=status)
        if 400 <= status < 500:
            return Rejected(status, why)
        return Ambiguous(why)
    if isinstance(exc, openai.APIConnectionError):
        if _never_sent(exc):
            return Refused(None, f"connection not established: {_cause_name(exc)}", kind=RefusalKind.UNSENT,
                           unreachable=True)
        return Ambiguous(f"transport failure after the request may have been sent: {_cause_name(exc)}")
    return Ambiguous(f"unexpected error during create: {_described(exc)}")


def _accepted_or_ambiguous(resp: Any) -> Accepted | Ambiguous:
    # With non-strict parsing the SDK hands back whatever it could: a model missing fields,
    # or plain text when the body is not JSON. Only a real `resp_` id proves acceptance.
    from openai.types.responses import Response

    if not isinstance(resp, Response):
        return Ambiguous(f"2xx with an unparsable body ({type(resp).__name__})")
    response_id = getattr(resp, "id", None)
    if not isinstance(response_id, str) or not is_response_id(response_id) or not response_id.startswith("resp_"):
        # Not an id this installation can store and read back (a path, a space, 50 MB): the create
        # may have been accepted under some id, so its outcome is unknown.
        return Ambiguous(f"2xx without a usable response id: {_clip(repr(response_id))}")
    status = getattr(resp, "status", None)
    tier = getattr(resp, "service_tier", None)  # the tier it runs at
    return Accepted(response_id, status if isinstance(status, str) else "unknown",
                    _clip(tier, 16) if isinstance(tier, str) and tier else None)


def _capacity_refusal(exc: openai.APIStatusError, code: str) -> bool:
    """A 429 to a flex create that is flex's "Resource Unavailable", not the account's rate limit
    or quota. OpenAI documents the status and title only, so any 429 whose code, type and message
    name neither a quota nor a rate limit is a capacity refusal, whatever else its body says."""
    kinds = {str(getattr(exc, "code", None) or ""), str(getattr(exc, "type", None) or ""), code} - {""}
    if kinds & QUOTA_CODES:
        return False
    message = _status_why(exc).lower()
    if kinds & CAPACITY_CODES or "resource unavailable" in message or "resource_unavailable" in message:
        return True
    return not (kinds & RATE_LIMIT_CODES) and "rate limit" not in message and "quota" not in message


# "Request too large for gpt-4o in organization org-… on tokens per min (TPM): Limit 30000,
# Requested 36055. The input or output tokens must be reduced in order to run successfully."
_TOO_LARGE = re.compile(r"request too large\b.*?\btokens per min", re.IGNORECASE | re.DOTALL)
_LIMIT = re.compile(r"\bLimit (\d{1,12})\b")
_REQUESTED = re.compile(r"\bRequested ~?(\d{1,12})\b")
# "Project `proj_…` does not have access to model `gpt-4o`"; "The model `gpt-9` does not exist …"
_MODEL_NAMED = re.compile(r"model [`'\"]([A-Za-z0-9][A-Za-z0-9._:\-]{0,127})[`'\"]")


def _refused_429(exc: openai.APIStatusError, why: str, code: str, hinted: float | None) -> Refused:
    """A 429 not for flex capacity: quota, a request too large for the tokens-per-minute limit, or
    the account's rate limit."""
    kinds = {str(getattr(exc, "code", None) or ""), str(getattr(exc, "type", None) or ""), code} - {""}
    if kinds & QUOTA_CODES:
        return Refused(hinted, why, code, kind=RefusalKind.QUOTA, status=429)
    message = _status_why(exc)
    if _TOO_LARGE.search(message):
        limit, requested = _LIMIT.search(message), _REQUESTED.search(message)
        return Refused(hinted, why, code, kind=RefusalKind.TOO_LARGE, status=429,
                       limit=int(limit.group(1)) if limit else None,
                       requested=int(requested.group(1)) if requested else None)
    return Refused(hinted, why, code, kind=RefusalKind.RATE, status=429)


def _model_named(exc: openai.APIStatusError) -> str | None:
    found = _MODEL_NAMED.search(exc.message or "")
    if found is None and isinstance(exc.body, dict):
        found = _MODEL_NAMED.search(str(exc.body.get("message") or ""))
    return found.group(1) if found else None


_QUOTED_PARAM = re.compile(r"'([A-Za-z_][A-Za-z0-9_.\[\]]{0,127})'")


def _refused_param(exc: openai.APIStatusError) -> str | None:
    """The parameter a 400 invalid_request_error refuses (its `param`, else the name its message
    quotes when its code is one of a refused parameter), or None: another 400."""
    if getattr(exc, "type", None) != "invalid_request_error":
        return None
    param = getattr(exc, "param", None)
    if isinstance(param, str) and param.strip():
        return _clip(param, 128)
    if _error_code(exc) in PARAM_CODES:
        body = exc.body
        found = _QUOTED_PARAM.search(str(body.get("message") or "") if isinstance(body, dict) else "")
        if found:
            return found.group(1)
    return None


def _never_sent(exc: openai.APIConnectionError) -> bool:
    # httpx raises these only while obtaining a connection, before any request byte is written.
    import httpx

    return isinstance(exc.__cause__, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))


def _trouble_status(op: str, subject: str, answer: Answer) -> Missing | Transient | Rejected:
    outcome = _read_status_outcome(answer)
    log.warning("provider_trouble", op=op, subject=subject, status=answer.status,
                outcome=type(outcome).__name__, why=outcome.why)
    return outcome


def _read_status_outcome(answer: Answer) -> Missing | Transient | Rejected:
    """Reads, cancels and deletes can be repeated, so only 'gone' and 'never works' are final."""
    status = answer.status
    why = _answer_why(answer)
    if status == 404:
        return Missing(why)
    if status in (408, 409, 425, 429) or status >= 500:
        return Transient(retry_hints.rate_limit_delay(answer.headers, _answer_type(answer)), why)
    if 400 <= status < 500:
        return Rejected(status, why)
    return Transient(None, why)  # 1xx/3xx: not an answer to act on; asking again is harmless


def requested_tokens(body: Mapping[str, Any]) -> int:
    """What OpenAI counts a create as against the tokens-per-minute limit: its input (instructions,
    input and the output schema, estimated at four characters a token) and `max_output_tokens`."""
    text = json.dumps([body.get("instructions"), body.get("input"), body.get("text")], ensure_ascii=False)
    cap = body.get("max_output_tokens")
    return len(text) // 4 + (cap if isinstance(cap, int) and not isinstance(cap, bool) else 0)


# 401 codes that say the organization or project header does not go with the key.
_SCOPE_CODES = frozenset({"mismatched_organization", "mismatched_project", "invalid_organization",
                          "invalid_project"})


def model_lookup(model: str, answer: Answer) -> ModelLookup:
    """A models-endpoint answer in iipub's words (`outcomes.Standing`)."""
    status = answer.status
    if 200 <= status < 300:
        try:
            body = json.loads(answer.body)
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("object") == "model" and isinstance(body.get("id"), str):
            return ModelLookup(model, Standing.AVAILABLE, "", status)
        return ModelLookup(model, Standing.UNANSWERED, "2xx without a model object", status)
    why, code = _answer_why(answer), _answer_code(answer)
    if status == 401:
        kind = Standing.SCOPE_REFUSED if code in _SCOPE_CODES else Standing.KEY_REFUSED
        return ModelLookup(model, kind, why, status)
    if status == 403:
        no_access = code == "model_not_found" or "does not have access to model" in why
        return ModelLookup(model, Standing.NO_ACCESS if no_access else Standing.ACCOUNT_REFUSED, why, status)
    if status == 404:
        return ModelLookup(model, Standing.UNKNOWN, why, status)
    return ModelLookup(model, Standing.UNANSWERED, why, status)


def _answer_code(answer: Answer) -> str | None:
    """The error `code` of a non-2xx answer's JSON body, or None."""
    try:
        body = json.loads(answer.body)
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else None


def _answer_type(answer: Answer) -> str | None:
    """The error `type` of a non-2xx answer's JSON body (`requests`, `tokens`, …), or None."""
    try:
        body = json.loads(answer.body)
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return kind if isinstance(kind, str) else None


def _answer_why(answer: Answer) -> str:
    """A non-2xx answer as the journal shows it: `HTTP 404: <the provider's error message>
    (request <id>)`, the message read as the SDK reads it (the JSON body's `error.message`, else
    the body, else the status)."""
    text = answer.body.decode("utf-8", "replace").strip()
    message = text or f"Error code: {answer.status}"
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error", body)
        message = f"Error code: {answer.status} - {body}"
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            message = error["message"]
    request_id = answer.headers.get("x-request-id")
    suffix = f" (request {_clip(request_id, 64)})" if request_id else ""
    return f"HTTP {answer.status}: {_clip(message)}{suffix}"


def _observed(content: bytes) -> Observed | Transient:
    """A 2xx read's body, as the provider's response object (JSON) says it."""
    try:
        doc = json.loads(content)
    except ValueError as exc:  # not JSON (or not UTF-8): asking again is harmless
        return Transient(None, f"unreadable answer: {_described(exc)}")
    try:
        return _to_observed(doc)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # JSON of another shape
        return Transient(None, f"unreadable 2xx body: {_described(exc)}")


# Token counts past this are not a count (the largest context is about a million tokens).
_MAX_TOKENS = 10**9


def _usage(u: Any) -> Usage | None:
    """The provider's token counts, or None (unknown) when they are missing or not counts: a
    malformed `usage` must not keep a finished, paid output out of custody (spend then counts
    the create's estimate)."""
    if not isinstance(u, dict):
        return None
    counts: list[int] = []
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        c = u.get(key)
        if not isinstance(c, int) or isinstance(c, bool) or not 0 <= c <= _MAX_TOKENS:
            return None
        counts.append(c)
    return Usage(*counts)


def _to_observed(doc: Any) -> Observed | Transient:
    if not isinstance(doc, dict):
        return Transient(None, f"2xx with an unparsable body ({type(doc).__name__})")
    response_id, status = doc.get("id"), doc.get("status")
    if not isinstance(response_id, str) or not isinstance(status, str):
        return Transient(None, "2xx without an id or status")
    items = doc.get("output") or []
    if not isinstance(items, list):
        raise TypeError("output is not a list")
    messages = answer_messages(items)
    refusal = _refusal_text(messages)
    usage = _usage(doc.get("usage"))
    incomplete = doc.get("incomplete_details")
    cut_reason = incomplete.get("reason") if isinstance(incomplete, dict) else None
    error = doc.get("error")
    error_code = _clip(str(error.get("code") or ""), 64) or None if isinstance(error, dict) else None
    return observed(
        response_id, status, _output_text(messages) if messages else None, usage,
        metadata={str(k): str(v) for k, v in (doc.get("metadata") or {}).items()},
        incomplete_reason=cut_reason,
        error=_clip(str(error.get("message") or "")) or None if isinstance(error, dict) else None,
        error_code=error_code,
        completed_at=_epoch(doc.get("completed_at")),
        created_at=_epoch(doc.get("created_at")),
        tier=_clip(doc["service_tier"], 16) if isinstance(doc.get("service_tier"), str) else None,
        refusal=refusal,
    )


def _epoch(value: Any) -> float | None:
    """A plausible Unix time from the provider (2020..2100), else None: it only feeds a metric."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 1_577_836_800 <= value <= 4_102_444_800 else None


def _output_text(messages: list[dict[str, Any]]) -> str:
    """The text of every `output_text` part of the answer's messages, joined in order."""
    texts = []
    for message in messages:
        for part in message.get("content") or []:
            if isinstance(part, dict) and part.get("type") == "output_text":
                text = part.get("text")
                if not isinstance(text, str):
                    raise TypeError("output_text part without text")
                texts.append(text)
    return "".join(texts)


_REFUSAL_MAX = 4000  # the refusal's text is kept in the journal and shown by `jobs show`


def _refusal_text(messages: list[dict[str, Any]]) -> str | None:
    """The text of the answer's refusal parts (`{"type": "refusal", "refusal": "…"}`), or None."""
    texts = [str(part.get("refusal") or "") for message in messages for part in message.get("content") or []
             if isinstance(part, dict) and part.get("type") == "refusal"]
    if not texts:
        return None
    # Untrusted text shown in `jobs show` and the journal: one line, no control characters.
    text = " ".join("".join(c if c.isprintable() else " " for c in " ".join(texts)).split())
    text = text or "(the refusal carried no text)"
    return text if len(text) <= _REFUSAL_MAX else text[: _REFUSAL_MAX - 1] + "…"


def _error_code(exc: openai.APIStatusError) -> str | None:
    """The provider's error code (`insufficient_quota`, `rate_limit_exceeded`, …), or its type."""
    for value in (getattr(exc, "code", None), getattr(exc, "type", None)):
        if isinstance(value, str) and value:
            return _clip(value, 64)
    return None


def _status_why(exc: openai.APIStatusError) -> str:
    message = exc.message
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        message = body["message"]
    request_id = exc.request_id
    suffix = f" (request {_clip(request_id, 64)})" if request_id else ""
    return f"HTTP {exc.status_code}: {_clip(message)}{suffix}"


def _cause_name(exc: BaseException) -> str:
    return _named(exc.__cause__) if exc.__cause__ is not None else type(exc).__name__


def _named(exc: BaseException) -> str:
    detail = _clip(str(exc), 120)
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def _described(exc: BaseException) -> str:
    """An error as the journal and the log show it: its class and its (clipped, untrusted) text."""
    return f"{type(exc).__name__}: {_clip(str(exc))}"


def _clip(text: str, limit: int = _WHY_MAX) -> str:
    # Provider text reaches an operator's terminal (status, jobs show): one line, no control
    # characters (escape sequences, NUL, bidi overrides).
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
