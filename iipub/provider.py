"""The only code that talks to the provider: the official `openai` SDK, retries off.

Every call returns one value from a closed set of outcomes instead of raising (the exceptions
are caller bugs: a malformed response id, a delete that breaks the custody invariant), so the
per-state decisions can be pure functions of (job, outcome). The create mapping decides
whether money may have been spent; it is written out as a table in `_create_outcome`.
Nothing here retries: iipub owns every retry decision.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import structlog

if TYPE_CHECKING:  # the SDK and httpx are imported on first use: a tick that calls no provider
    import httpx  # (an idle cron run) never pays for them
    import openai

from . import backoff, tls
from .closing import Closing
from .config import Product, ProviderSettings
from .errors import ConfigError, InvariantViolation, MissingApiKey
from .outcomes import (
    CAPACITY_CODE,
    CAPACITY_CODES,
    QUOTA_CODES,
    Accepted,
    Ambiguous,
    CreateOutcome,
    CreateRequest,
    Deleted,
    DeleteOutcome,
    Missing,
    Observed,
    ReadOutcome,
    Refused,
    Rejected,
    Transient,
    Usage,
)

log = structlog.get_logger("iipub.provider")

# Responses API metadata limits.
METADATA_MAX_KEYS = 16
METADATA_MAX_KEY_CHARS = 64
METADATA_MAX_VALUE_CHARS = 512
_WHY_MAX = 300  # provider error text is untrusted and can be long
_RESPONSE_ID = re.compile(r"[A-Za-z0-9_-]{1,256}")


def create_input(product: Product, edition_date: dt.date) -> str:
    return (
        f"Product: {product.name}. Edition date: {edition_date.isoformat()}. "
        f"Languages: {', '.join(product.languages)}. Items per language: {product.items}."
    )


def create_metadata(req: CreateRequest) -> dict[str, str]:
    """The metadata that ties a paid response back to its job, within the API's limits."""
    meta = {
        "iipub_job_id": req.job_id,
        "iipub_slot": f"{req.product.name}/{req.edition_date.isoformat()}",
        "iipub_attempt": str(req.attempt),
        "iipub_fingerprint": req.fingerprint,
    }
    if req.installation:
        meta["iipub_installation"] = req.installation  # whose response this is (`owners`)
    assert len(meta) <= METADATA_MAX_KEYS
    assert all(len(k) <= METADATA_MAX_KEY_CHARS for k in meta)
    return {k: v[:METADATA_MAX_VALUE_CHARS] for k, v in meta.items()}


class Provider(Closing):
    """The Responses API, reduced to the four calls iipub makes."""

    def __init__(self, settings: ProviderSettings, api_key: str, http_client: httpx.Client | None = None) -> None:
        if not api_key:
            raise MissingApiKey()
        self._settings = settings
        self._owns_http = http_client is None
        self._http = http_client
        self._api_key = api_key
        self._sdk: openai.OpenAI | None = None
        self._sdk_lock = threading.Lock()
        # Built pools, one per shard (`_client`); the calling thread's shard, once it has one.
        self._shards: list[tuple[httpx.Client, openai.OpenAI]] = []
        self._mine = threading.local()
        self._turn = 0  # the shard the next thread beyond `max_connections` shares
        self._tls: Any = None
        self._closed = False
        self._root = self  # a view made by `until` shares its root's client
        self._deadline: float | None = None

    def until(self, deadline: float) -> Provider:
        """This provider with every read, cancel and delete over by `deadline` (`time.monotonic()`):
        each call's timeouts are cut to what is left, and a call with nothing left is not sent
        (Transient). A webhook delivery's budget thus covers its provider reads. A create is never
        cut short (an unknown create outcome may cost money): a caller with a deadline does not create."""
        view = copy.copy(self)
        view._deadline = deadline
        view._owns_http = False
        return view

    def ready(self) -> None:
        """Build the SDK client and its HTTP pool now, or say in one line why they cannot be
        built (a CA bundle that is not there, a proxy URL httpx refuses, ...). The sweep calls
        this before it leases work for the provider, so a broken environment fails the run
        before any job is touched, as it did when the client was built up front."""
        try:
            self._client  # noqa: B018 - built by the property
        except Exception as exc:
            raise ConfigError(f"cannot set up the provider's HTTP client: {_described(exc)}") from exc

    @property
    def _client(self) -> openai.OpenAI:
        """The calling thread's SDK client and HTTP pool, built at its first call: an idle tick
        imports neither the SDK nor httpx (most of an idle cron run's CPU, 1,440 times a day).

        Threads do not share one pool: up to `max_connections` pools of one connection each,
        thread i on pool i mod `max_connections` (the same bound on connections). httpx's pool
        hands out connections under one lock, scanning every connection and waiting request, so
        64 threads on one pool spent more CPU there than on the rest of a poll. A client given
        to the constructor is the one pool, shared."""
        if self._root is not self:
            return self._root._client
        sdk: openai.OpenAI | None = getattr(self._mine, "sdk", None)
        if sdk is not None:  # this thread's: every later call skips the lock
            return sdk
        with self._sdk_lock:
            if self._closed:  # a caller bug: nothing may build a pool that nothing would close
                raise RuntimeError("the provider was closed")
            sdk = self._shard()
        self._mine.sdk = sdk
        return sdk

    def _shard(self) -> openai.OpenAI:
        """The next thread's client (under `_sdk_lock`): a new pool while fewer than
        `max_connections` exist, else an existing one, in turn."""
        import httpx
        import openai

        s = self._settings
        if self._sdk is None:
            timeout = httpx.Timeout(s.timeout_seconds, connect=s.connect_timeout_seconds)
            if self._http is None:
                # One TLS context serves every pool and every provider of the process
                # (building one reads the CA bundle).
                self._tls = tls.client_context()
                self._http = httpx.Client(timeout=timeout, limits=httpx.Limits(max_connections=1), verify=self._tls)
            # max_retries=0: the SDK would otherwise retry POST timeouts and 408/409/429/5xx
            # with no idempotency key, creating duplicate paid jobs. It still sends
            # x-stainless-retry-count (always "0" here), which lets the simulator prove no
            # retry happened.
            self._sdk = openai.OpenAI(api_key=self._api_key, base_url=s.base_url, max_retries=0,
                                      timeout=timeout, http_client=self._http)
            self._shards.append((self._http, self._sdk))
        elif self._owns_http and len(self._shards) < s.max_connections:
            http = httpx.Client(timeout=self._shards[0][0].timeout,
                                limits=httpx.Limits(max_connections=1), verify=self._tls)
            self._shards.append((http, self._sdk.with_options(http_client=http)))
        else:
            self._turn = (self._turn + 1) % len(self._shards)
            return self._shards[self._turn][1]
        return self._shards[-1][1]

    def close(self) -> None:
        if self._root is not self:
            return  # a view: its root owns the client
        with self._sdk_lock:
            self._closed = True
            if self._owns_http:
                for http in [h for h, _ in self._shards] or ([self._http] if self._http else []):
                    http.close()

    # -- create: the money path -------------------------------------------------------------

    def create(self, req: CreateRequest) -> CreateOutcome:
        p = req.product
        kwargs: dict[str, Any] = {
            "model": p.model,
            "instructions": p.prompt,
            "input": create_input(p, req.edition_date),
            "temperature": p.temperature,
            "background": True,
            "store": True,
            "text": {"format": _text_format(p)},
            "metadata": create_metadata(req),
            "service_tier": req.service_tier,
        }
        try:
            client = self._client
        except Exception as exc:  # the client could not even be built: not a byte was sent
            return _trouble("create", req.job_id, exc, Refused(None, f"not sent: {_described(exc)}"))
        if req.service_tier == "flex":  # flex is answered more slowly: its own (longer) read timeout
            import httpx

            s = self._settings
            client = client.with_options(timeout=httpx.Timeout(s.flex_timeout_seconds,
                                                               connect=s.connect_timeout_seconds))
        try:
            resp: Any = client.responses.create(**kwargs)
        except Exception as exc:
            return _trouble("create", req.job_id, exc, _create_outcome(exc, flex=req.service_tier == "flex"))
        return _accepted_or_ambiguous(resp)

    # -- reads and cleanup (safe to repeat) ---------------------------------------------------

    def retrieve(self, response_id: str) -> ReadOutcome:
        # The SDK's own request path (auth, base URL, its error classes), but the body is read
        # as JSON once and mapped here: building its full response model cost more CPU than
        # the rest of a poll.
        return self._read(response_id, lambda options: self._client.get(
            f"/responses/{response_id}", cast_to=_raw(), options=options))

    def cancel(self, response_id: str) -> ReadOutcome:
        """Cancel a background response. Cancelling a finished one answers Rejected(400):
        retrieve it instead."""
        return self._read(response_id, lambda options: self._client.post(
            f"/responses/{response_id}/cancel", cast_to=_raw(), options=options))

    def _read(self, response_id: str, call: Callable[[Any], Any]) -> ReadOutcome:
        """A call answered with the response as it now stands (retrieve, cancel)."""
        _check_id(response_id)
        timeout = self._timeout()
        if timeout is None:
            return _NO_TIME_LEFT
        try:
            resp: Any = call({} if timeout is _CONFIGURED else {"timeout": timeout})
        except _read_errors() as exc:
            return _trouble("read", response_id, exc, _read_outcome(exc))
        return _observed(resp)

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

    def delete(self, response_id: str, *, has_custody: bool, kill_requested: bool = False) -> DeleteOutcome:
        # Deletion-safety invariant: the remote copy is the only copy until we hold the payload,
        # so it may only go earlier if an operator killed the job.
        _check_id(response_id)
        if not (has_custody or kill_requested):
            _refuse_delete(response_id)
        timeout = self._timeout()
        if timeout is None:
            return _NO_TIME_LEFT
        try:
            if timeout is _CONFIGURED:
                self._client.responses.delete(response_id)
            else:
                self._client.responses.delete(response_id, timeout=timeout)
        except _read_errors() as exc:
            outcome = _trouble("delete", response_id, exc, _read_outcome(exc))
            assert not isinstance(outcome, Observed)
            return outcome
        return Deleted(response_id)


_T = TypeVar("_T")
_CONFIGURED = object()  # no deadline: the client's configured timeouts
_MIN_CALL_SECONDS = 0.2  # less than this left before a deadline: the call is not sent
_NO_TIME_LEFT = Transient(None, "not sent: the request budget is spent")


def _text_format(product: Product) -> dict[str, Any]:
    from . import edition_schema  # pydantic: only when a create is made

    return edition_schema.text_format(product.languages, product.items)


def _raw() -> type[httpx.Response]:
    """`cast_to` for a body read as JSON here, not through the SDK's model."""
    import httpx

    return httpx.Response


def _trouble(op: str, subject: str, exc: Exception, outcome: _T) -> _T:
    """Every failed provider call is a warning in the log with its HTTP status and message (the
    journal keeps the decision; the log keeps what the provider said)."""
    status = getattr(exc, "status_code", None)
    why = getattr(outcome, "why", None) or _described(exc)
    log.warning("provider_trouble", op=op, subject=subject, status=status, outcome=type(outcome).__name__, why=why)
    return outcome


def _check_id(response_id: str) -> None:
    # A bad id is a caller bug; sent anyway it would come back as a Transient forever.
    if not isinstance(response_id, str) or not _RESPONSE_ID.fullmatch(response_id):
        raise ValueError(f"malformed response id {response_id!r}")


def _refuse_delete(response_id: str) -> NoReturn:
    raise InvariantViolation(
        f"refusing to delete {response_id}: its output is not in local custody and no kill was requested",
        response_id=response_id,
    )


def _create_outcome(exc: Exception, *, flex: bool = False) -> Refused | Ambiguous | Rejected:
    """THE MONEY MAPPING for a create that did not return a 2xx body.

    | what happened                                          | outcome    | why                      |
    |--------------------------------------------------------|------------|--------------------------|
    | 2xx with an id starting `resp_`  (see _accepted_...)   | Accepted   | job exists, will charge  |
    | 2xx, no usable id / body unparsable (_accepted_...)    | Ambiguous  | may exist, id unknown    |
    | 429                                                    | Refused    | rate-limited: not run    |
    | 429 resource unavailable to a flex create              | Refused    | no flex capacity: not run|
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
            if flex and _capacity_refusal(exc, code):
                return Refused(backoff.delay_from_headers(exc.response.headers), why, CAPACITY_CODE, capacity=True)
            return Refused(backoff.delay_from_headers(exc.response.headers), why, code)
        if status in (408, 409) or status >= 500:
            return Ambiguous(why)
        if 400 <= status < 500:
            return Rejected(status, why)
        return Ambiguous(why)
    if isinstance(exc, openai.APIConnectionError):
        if _never_sent(exc):
            return Refused(None, f"connection not established: {_cause_name(exc)}", unreachable=True)
        return Ambiguous(f"transport failure after the request may have been sent: {_cause_name(exc)}")
    return Ambiguous(f"unexpected error during create: {_described(exc)}")


def _accepted_or_ambiguous(resp: Any) -> Accepted | Ambiguous:
    # With non-strict parsing the SDK hands back whatever it could: a model missing fields,
    # or plain text when the body is not JSON. Only a real `resp_` id proves acceptance.
    from openai.types.responses import Response

    if not isinstance(resp, Response):
        return Ambiguous(f"2xx with an unparsable body ({type(resp).__name__})")
    response_id = getattr(resp, "id", None)
    if not isinstance(response_id, str) or not response_id.startswith("resp_"):
        return Ambiguous(f"2xx without a usable response id: {_clip(repr(response_id))}")
    status = getattr(resp, "status", None)
    tier = getattr(resp, "service_tier", None)
    return Accepted(response_id, status if isinstance(status, str) else "unknown",
                    _clip(tier, 16) if isinstance(tier, str) and tier else None)


def _capacity_refusal(exc: openai.APIStatusError, code: str) -> bool:
    """A 429 that is flex's "Resource Unavailable", not the account's rate limit or quota."""
    if code in QUOTA_CODES:
        return False
    kinds = {str(getattr(exc, "code", None) or ""), str(getattr(exc, "type", None) or ""), code}
    return bool(kinds & CAPACITY_CODES) or "resource unavailable" in _status_why(exc).lower()


def _never_sent(exc: openai.APIConnectionError) -> bool:
    # httpx raises these only while obtaining a connection, before any request byte is written.
    import httpx

    return isinstance(exc.__cause__, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))


def _read_errors() -> tuple[type[Exception], ...]:
    """What a read, cancel or delete may fail with and still be an answer: the SDK's errors,
    transport errors, and a body that is not JSON. Anything else is a bug and propagates."""
    import httpx
    import openai

    return (openai.APIError, httpx.HTTPError, ValueError)


def _read_outcome(exc: Exception) -> Missing | Transient | Rejected:
    """Reads, cancels and deletes can be repeated, so only 'gone' and 'never works' are final."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        why = _status_why(exc)
        if status == 404:
            return Missing(why)
        if status in (408, 409, 425, 429) or status >= 500:
            return Transient(backoff.delay_from_headers(exc.response.headers), why)
        if 400 <= status < 500:
            return Rejected(status, why)
        return Transient(None, why)
    if isinstance(exc, openai.APIConnectionError):
        return Transient(None, f"transport failure: {_cause_name(exc)}", unreachable=_never_sent(exc))
    # JSON decode errors and the like: the body could not be read; asking again is harmless.
    return Transient(None, f"unreadable answer: {_described(exc)}")


def _observed(resp: httpx.Response) -> Observed | Transient:
    """A 2xx read's body, as the provider's response object (JSON) says it."""
    try:
        doc = json.loads(resp.content)
    except ValueError as exc:  # not JSON (or not UTF-8): asking again is harmless
        return Transient(None, f"unreadable answer: {_described(exc)}")
    try:
        return _to_observed(doc)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # JSON of another shape
        return Transient(None, f"unreadable 2xx body: {_described(exc)}")


def _to_observed(doc: Any) -> Observed | Transient:
    if not isinstance(doc, dict):
        return Transient(None, f"2xx with an unparsable body ({type(doc).__name__})")
    response_id, status = doc.get("id"), doc.get("status")
    if not isinstance(response_id, str) or not isinstance(status, str):
        return Transient(None, "2xx without an id or status")
    items = doc.get("output") or []
    messages = [item for item in items if isinstance(item, dict) and item.get("type") == "message"]
    usage = None
    if doc.get("usage") is not None:
        u = doc["usage"]
        usage = Usage(int(u["input_tokens"]), int(u["output_tokens"]), int(u["total_tokens"]))
    incomplete = doc.get("incomplete_details")
    error = doc.get("error")
    return Observed(
        response_id=response_id,
        status=status,
        output_text=_output_text(messages) if messages else None,
        usage=usage,
        metadata={str(k): str(v) for k, v in (doc.get("metadata") or {}).items()},
        incomplete_reason=incomplete.get("reason") if isinstance(incomplete, dict) else None,
        error=_clip(str(error.get("message") or "")) or None if isinstance(error, dict) else None,
        error_code=_clip(str(error.get("code") or ""), 64) or None if isinstance(error, dict) else None,
        completed_at=_epoch(doc.get("completed_at")),
        created_at=_epoch(doc.get("created_at")),
        service_tier=_clip(doc["service_tier"], 16) if isinstance(doc.get("service_tier"), str) else None,
    )


def _epoch(value: Any) -> float | None:
    """A plausible Unix time from the provider (2020..2100), else None: it only feeds a metric."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 1_577_836_800 <= value <= 4_102_444_800 else None


def _output_text(messages: list[dict[str, Any]]) -> str:
    """What the SDK's `Response.output_text` gives: the `output_text` parts of every message."""
    texts = []
    for message in messages:
        for part in message.get("content") or []:
            if isinstance(part, dict) and part.get("type") == "output_text":
                text = part.get("text")
                if not isinstance(text, str):
                    raise TypeError("output_text part without text")
                texts.append(text)
    return "".join(texts)


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
    suffix = f" (request {request_id})" if request_id else ""
    return f"HTTP {exc.status_code}: {_clip(message)}{suffix}"


def _cause_name(exc: BaseException) -> str:
    cause = exc.__cause__
    if cause is None:
        return type(exc).__name__
    detail = _clip(str(cause), 120)
    return f"{type(cause).__name__}: {detail}" if detail else type(cause).__name__


def _described(exc: BaseException) -> str:
    """An error as the journal and the log show it: its class and its (clipped, untrusted) text."""
    return f"{type(exc).__name__}: {_clip(str(exc))}"


def _clip(text: str, limit: int = _WHY_MAX) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
