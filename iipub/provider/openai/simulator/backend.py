"""The simulated provider's state and rules, without any I/O.

Each API operation takes the parsed request and returns a `Reply`: the status, the JSON body,
the headers, and how the HTTP layer must deliver it (normally, late, or not at all). Time is
the simulator's own clock, so lifecycle and expiry can be tested by advancing it.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from iipub.provider.openai.simulator import content, params
from iipub.provider.openai.simulator import faults as f
from iipub.provider.openai.simulator.faults import FaultBook, FaultRule

FINISHED = ("completed", "failed", "incomplete", "cancelled")
_METADATA_MAX_KEYS = 16
_METADATA_MAX_KEY = 64
_METADATA_MAX_VALUE = 512


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    delivery: str = "normal"  # "normal" | "slow" | "drop"


class Clock:
    """Simulated seconds: real monotonic time scaled, plus whatever tests have advanced."""

    def __init__(self, time_scale: float = 1.0) -> None:
        self._scale = time_scale
        self._mono0 = time.monotonic()
        self._wall0 = time.time()
        self._offset = 0.0
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return (time.monotonic() - self._mono0) * self._scale + self._offset

    def advance(self, seconds: float) -> float:
        with self._lock:
            self._offset += seconds
        return self.now()

    def epoch(self, t: float) -> float:
        """Unix time of simulated instant `t` (for `created_at`)."""
        return self._wall0 + t


@dataclass
class Stored:
    id: str
    job_id: str | None
    created: float
    request: dict[str, Any]
    faults: frozenset[str]
    queued_s: float
    in_progress_s: float
    message_id: str = field(default_factory=lambda: "msg_" + secrets.token_hex(24))
    service_tier: str = "default"  # the tier it runs at (flex when the create asked for it)
    forced: tuple[str, float] | None = None  # (status, when) set by cancel
    race_reported: bool = False  # cancelled_then_completed: the lying read has happened
    announced: bool = False  # its finish has been handed to the webhook sender
    scope: tuple[str, str, str] = ("", "", "")  # (organization, project, key) it was created under
    corrupt_lang: str | None = None  # this language's part fails validation (`content.corrupt`)
    corrupt_domain: str | None = None
    _text: str | None = None

    @property
    def error_code(self) -> str:
        """The `error.code` of a failed end (the first failing content fault decides)."""
        return next((code for name, code in f.FAIL_CODES.items() if name in self.faults), "server_error")

    @property
    def natural_end(self) -> str:
        if not self.faults.isdisjoint(f.FAIL_CODES):
            return "failed"
        if f.INCOMPLETE in self.faults or f.CONTENT_FILTER in self.faults:
            return "incomplete"
        return "completed"

    def status_at(self, now: float) -> tuple[str, float | None]:
        """(status, finished_at) at simulated time `now`."""
        if self.forced is not None:
            return self.forced
        if not self.request.get("background"):
            return self.natural_end, self.created
        elapsed = now - self.created
        if elapsed < self.queued_s:
            return "queued", None
        if elapsed < self.queued_s + self.in_progress_s:
            return "in_progress", None
        return self.natural_end, self.created + self.queued_s + self.in_progress_s

    def full_text(self, seed: int | None) -> str:
        if self._text is None:
            fmt = (self.request.get("text") or {}).get("format") or {}
            self._text = content.generate(
                fmt.get("schema") if isinstance(fmt, dict) else None,
                model=str(self.request.get("model")),
                slot=(self.request.get("metadata") or {}).get("iipub_slot"),
                seed=seed,
                faults=self.faults,
                corrupt_lang=self.corrupt_lang,
                corrupt_domain=self.corrupt_domain,
            )
        return self._text


@dataclass(frozen=True)
class Finished:
    """A background response's true end, as the webhook sender announces it."""

    response_id: str
    job_id: str | None
    status: str
    finished_at: int  # unix time of the finish on the simulated clock (the event's created_at)


@dataclass
class Stats:
    creates_total: int = 0
    creates_by_job: Counter[str] = field(default_factory=Counter)
    requests: Counter[str] = field(default_factory=Counter)
    retrieves_by_response: Counter[str] = field(default_factory=Counter)
    # Every retrieve, cancel and delete request by response id, answered or not (404s included),
    # by operation and by caller (the API key's last characters: two installations use two keys).
    calls_by_response: dict[str, Counter[str]] = field(default_factory=dict)
    callers_by_response: dict[str, Counter[str]] = field(default_factory=dict)
    deletes: int = 0
    cancels: int = 0
    deleted_ids: list[str] = field(default_factory=list)
    max_retry_count_seen: int = 0
    create_metadata: list[dict[str, str]] = field(default_factory=list)
    faults_fired: Counter[str] = field(default_factory=Counter)
    creates_by_tier: Counter[str] = field(default_factory=Counter)  # creates made, by the tier they run at
    flex_refused: int = 0  # flex creates answered 429 resource unavailable (nothing created)
    param_refused: int = 0  # creates answered 400 for a parameter the model refuses (nothing created)
    # Every create request's parameters as received (names and the values that matter to a test),
    # refused or not: what iipub sent, checked against what the real API takes.
    create_params: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "creates_total": self.creates_total,
            "creates_by_job": dict(self.creates_by_job),
            "requests": {op: self.requests.get(op, 0) for op in f.OPS} | dict(self.requests),
            "retrieves_by_response": dict(self.retrieves_by_response),
            "calls_by_response": {rid: dict(ops) for rid, ops in self.calls_by_response.items()},
            "callers_by_response": {rid: dict(who) for rid, who in self.callers_by_response.items()},
            "deletes": self.deletes,
            "cancels": self.cancels,
            "deleted_ids": list(self.deleted_ids),
            "max_retry_count_seen": self.max_retry_count_seen,
            "create_metadata": [dict(m) for m in self.create_metadata],
            "faults_fired": dict(self.faults_fired),
            "creates_by_tier": dict(self.creates_by_tier),
            "flex_refused": self.flex_refused,
            "param_refused": self.param_refused,
            "create_params": [dict(p) for p in self.create_params],
        }


class Backend:
    def __init__(
        self,
        *,
        queued_seconds: float,
        in_progress_seconds: float,
        retention_seconds: float,
        time_scale: float,
        seed: int | None,
        run_faults: tuple[FaultRule, ...],
        announce: bool = False,
        flex_slowdown: float = 3.0,
        corrupt_lang: str | None = None,
        corrupt_domain: str | None = None,
        output_shapes: frozenset[str] = frozenset(),
        stored_retention_seconds: float = 30 * 86_400.0,
        zdr: bool = False,
        key_projects: Mapping[str, str] | None = None,
        no_access_models: tuple[str, ...] = (),
        unknown_models: tuple[str, ...] = (),
        tokens_per_minute: int | None = None,
    ) -> None:
        # The account: models its projects may not use (403 on a create and on the models
        # endpoint), models that do not exist (404), and the organization's tokens-per-minute
        # limit (a create asking more than it, input and max_output_tokens together, is 429
        # "Request too large", every time). Model names are compared case-insensitively.
        self.no_access_models = frozenset(m.lower() for m in no_access_models)
        self.unknown_models = frozenset(m.lower() for m in unknown_models)
        self.tokens_per_minute = tokens_per_minute
        # Which project each API key belongs to (a key not listed: the default project); a
        # request naming OpenAI-Project / OpenAI-Organization acts there instead.
        self.key_projects = dict(key_projects or {})
        # Retention: a response created with `store: true` is kept `stored_retention_seconds` (the
        # real API: 30 days); with `store: false`, or in a zero-data-retention project (`zdr`), it is
        # gone `retention_seconds` (~10 minutes) after it finishes.
        self.stored_retention_seconds = stored_retention_seconds
        self.zdr = zdr
        # Output shapes (`faults.OUTPUT_SHAPES`) every response of the run is written in.
        self.output_shapes = output_shapes
        self.flex_slowdown = flex_slowdown  # flex responses take this many times longer
        # Responses created from now on corrupt this language only (a test may change it mid-run).
        self.corrupt_lang = corrupt_lang
        self.corrupt_domain = corrupt_domain
        self.queued_seconds = queued_seconds
        self.in_progress_seconds = in_progress_seconds
        self.retention_seconds = retention_seconds
        self.seed = seed
        self.clock = Clock(time_scale)
        self.faults = FaultBook(run_faults, seed, now=self.clock.now)
        self._run_faults = run_faults
        self._lock = threading.RLock()
        self._responses: dict[str, Stored] = {}
        self._stats = Stats()
        self._swept_at = 0.0
        # Background responses whose finish is still to be announced (only tracked when a
        # webhook sender reads them: without one they would pile up). A deleted or purged
        # response that had finished stays here until announced, as the real API still sends it.
        self._announce = announce
        self._unannounced: dict[str, Stored] = {}

    # -- bookkeeping ------------------------------------------------------------------------

    def record_request(self, op: str, retry_count: str | None) -> None:
        with self._lock:
            self._stats.requests[op] += 1
            if retry_count is not None and retry_count.strip().isdigit():
                self._stats.max_retry_count_seen = max(self._stats.max_retry_count_seen, int(retry_count))

    def record_call(self, op: str, response_id: str, api_key: str) -> None:
        """A request about one response (retrieve, cancel, delete), whoever it came from."""
        with self._lock:
            self._stats.calls_by_response.setdefault(response_id, Counter())[op] += 1
            self._stats.callers_by_response.setdefault(response_id, Counter())[caller(api_key)] += 1

    def stats(self) -> dict[str, Any]:
        with self._lock:
            self._sweep()
            return self._stats.to_dict() | {"responses_live": len(self._responses)}

    def record_faults(self, names: list[str]) -> None:
        """Count faults fired outside a request (the webhook sender's)."""
        with self._lock:
            self._stats.faults_fired.update(names)

    def take_finished(self) -> list[Finished]:
        """Background responses that have reached a finished status (on the simulated clock, or
        by cancel) and were not announced yet, oldest finish first; they are marked announced."""
        with self._lock:
            now = self.clock.now()
            out: list[Finished] = []
            for response_id, stored in list(self._unannounced.items()):
                status, finished = stored.status_at(now)
                if finished is None or status not in FINISHED or stored.announced:
                    continue
                stored.announced = True
                del self._unannounced[response_id]
                out.append(Finished(response_id, stored.job_id, status, int(self.clock.epoch(finished))))
            return sorted(out, key=lambda e: e.finished_at)

    def unannounced_finished(self) -> int:
        """How many finished background responses `take_finished` would hand out now."""
        with self._lock:
            now = self.clock.now()
            return sum(1 for s in self._unannounced.values() if s.status_at(now)[1] is not None)

    def reset(self) -> None:
        """Forget responses, counters and per-request faults; per-run faults are restored."""
        with self._lock:
            self._responses.clear()
            self._unannounced.clear()
            self._stats = Stats()
            self.faults.replace(self._run_faults)

    # -- operations -------------------------------------------------------------------------

    def create(self, raw: bytes, scope: tuple[str, str, str] = ("", "", "")) -> Reply:
        try:
            req = json.loads(raw or b"null")
        except (ValueError, UnicodeDecodeError):
            return _error(400, "We could not parse the JSON body of your request.", "invalid_request_error")
        problem = _invalid_create(req)
        if problem:
            return _error(400, problem, "invalid_request_error")
        if isinstance(req, dict):
            with self._lock:
                self._stats.create_params.append({
                    "keys": sorted(req), "model": req.get("model"), "temperature": req.get("temperature"),
                    "max_output_tokens": req.get("max_output_tokens"), "reasoning": req.get("reasoning"),
                    "service_tier": req.get("service_tier")})
        metadata = req.get("metadata") or {}
        metadata_job = metadata.get("iipub_job_id")
        with self._lock:
            refused_for_account = self._account_refusal("create", req, scope, metadata_job)
        if refused_for_account is not None:
            return refused_for_account
        param_refusal = params.refusal(req)  # what the real API refuses for this model (nothing is created)
        if param_refusal is not None:
            message, code, param = param_refusal
            with self._lock:
                self._stats.param_refused += 1
            return _error(400, message, "invalid_request_error", code=code, param=param)
        job_id = metadata.get("iipub_job_id")
        with self._lock:
            self._sweep_now_and_then()
            refused = self._fire("create", job_id, _CREATE_REFUSING)
            if refused:
                return refused
            tier = "flex" if req.get("service_tier") == "flex" else "default"
            flex_fault = self.faults.take_first("create", job_id, _FLEX_SHAPES) if tier == "flex" else None
            if flex_fault is not None:
                self._stats.faults_fired[flex_fault] += 1
                self._stats.flex_refused += 1
                return _flex_refusal(flex_fault)
            slow = self.flex_slowdown if tier == "flex" else 1.0
            content_faults = frozenset(self.faults.take("create", job_id, f.CONTENT_FAULTS))
            self._stats.faults_fired.update(content_faults)
            delivery = self._delivery("create", job_id)
            now = self.clock.now()
            stored = Stored(
                id="resp_" + secrets.token_hex(24),
                job_id=job_id,
                created=now,
                request=req,
                faults=content_faults,
                queued_s=self.queued_seconds * slow,
                in_progress_s=self.in_progress_seconds * slow,
                service_tier=tier,
                scope=scope,
                corrupt_lang=self.corrupt_lang,
                corrupt_domain=self.corrupt_domain,
            )
            self._responses[stored.id] = stored
            if self._announce and req.get("background"):
                self._unannounced[stored.id] = stored
            self._stats.creates_total += 1
            self._stats.creates_by_tier[tier] += 1
            if job_id is not None:
                self._stats.creates_by_job[job_id] += 1
            self._stats.create_metadata.append({str(k): str(v) for k, v in metadata.items()})
            return Reply(200, self._render(stored, now), _ok_headers(), delivery)

    def model(self, model: str, scope: tuple[str, str, str] = ("", "", "")) -> Reply:
        """`GET /v1/models/{model}`: the SDK's `Model` (id, created, object, owned_by) for a model
        the project may use; the account's 403 or 404 otherwise. Costs nothing."""
        with self._lock:
            refused = self._account_refusal("model", {"model": model}, scope, None)
            if refused is not None:
                return refused
            refused = self._fire("model", None, (f.RATE_LIMIT, f.SERVER_ERROR, f.UNAUTHORIZED, f.RATE_LIMIT_REQUESTS,
                                                 f.UNSUPPORTED_COUNTRY, f.SERVICE_UNAVAILABLE))
            if refused is not None:
                return refused
        return Reply(200, {"id": model, "object": "model", "created": 1_754_000_000,
                           "owned_by": "openai" if model.lower().startswith(("gpt-", "o")) else "system"},
                     _ok_headers())

    def _account_refusal(self, op: str, req: dict[str, Any], scope: tuple[str, str, str],
                         job_id: str | None) -> Reply | None:
        """What the account refuses before anything runs (under the lock): no access to the model,
        a model that does not exist, a create over the tokens-per-minute limit; from the account's
        options or a fault rule."""
        model = str(req.get("model") or "")
        fault = self.faults.take_first(op, job_id, (f.NO_MODEL_ACCESS, f.MODEL_NOT_FOUND, f.REQUEST_TOO_LARGE))
        if fault is not None:
            self._stats.faults_fired[fault] += 1
        org, project = self._scope(scope)
        if fault == f.NO_MODEL_ACCESS or model.lower() in self.no_access_models:
            return no_model_access(model, project)
        if fault == f.MODEL_NOT_FOUND or model.lower() in self.unknown_models:
            return model_not_found(model)
        if op != "create":
            return None
        requested = requested_tokens(req)
        limit = self.tokens_per_minute
        if fault == f.REQUEST_TOO_LARGE or (limit is not None and requested > limit):
            return request_too_large(model, org, limit if limit is not None else min(30_000, requested - 1),
                                     requested)
        return None

    def retrieve(self, response_id: str, scope: tuple[str, str, str] = ("", "", "")) -> Reply:
        with self._lock:
            found = self._lookup("retrieve", response_id, scope)
            if isinstance(found, Reply):
                return found
            stored, job_id = found
            self._stats.retrieves_by_response[response_id] += 1
            now = self.clock.now()
            shown = self._misreport(stored, job_id, now)
            delivery = self._delivery("retrieve", job_id)
            return Reply(200, self._render(stored, now, shown), _ok_headers(), delivery)

    def cancel(self, response_id: str, scope: tuple[str, str, str] = ("", "", "")) -> Reply:
        with self._lock:
            found = self._lookup("cancel", response_id, scope)
            if isinstance(found, Reply):
                return found
            stored, job_id = found
            if not stored.request.get("background"):
                return _error(400, "Only background responses can be cancelled.", "invalid_request_error")
            now = self.clock.now()
            status, _ = stored.status_at(now)
            if status in ("queued", "in_progress"):
                if self.faults.take_first("cancel", job_id, (f.CANCEL_RACE,)):
                    self._stats.faults_fired[f.CANCEL_RACE] += 1
                    stored.forced = (stored.natural_end, now)  # generation finished first
                else:
                    stored.forced = ("cancelled", now)
                    self._stats.cancels += 1
            elif status != "cancelled":
                return _error(400, f"Cannot cancel a response with status '{status}'.", "invalid_request_error")
            delivery = self._delivery("cancel", job_id)
            return Reply(200, self._render(stored, now), _ok_headers(), delivery)

    def delete(self, response_id: str, scope: tuple[str, str, str] = ("", "", "")) -> Reply:
        with self._lock:
            found = self._lookup("delete", response_id, scope)
            if isinstance(found, Reply):
                return found
            stored, job_id = found
            del self._responses[response_id]
            if stored.status_at(self.clock.now())[1] is None:
                self._unannounced.pop(response_id, None)  # deleted before it finished: no event
            self._stats.deletes += 1
            self._stats.deleted_ids.append(response_id)
            delivery = self._delivery("delete", job_id)
            return Reply(200, {"id": response_id, "object": "response", "deleted": True}, _ok_headers(), delivery)

    # -- internals --------------------------------------------------------------------------

    def _lookup(self, op: str, response_id: str, scope: tuple[str, str, str]) -> tuple[Stored, str | None] | Reply:
        """The live response an `op` on `response_id` acts on, with its job id; or the reply
        that ends the request instead (a refusing fault, else 404: a response created in another
        organization or project, `effective_scope`, is invisible). Under the lock."""
        stored = self._get(response_id)
        if stored is not None and self._scope(stored.scope) != self._scope(scope):
            stored = None  # created in another organization or project: invisible here
        job_id = stored.job_id if stored else None
        refused = self._fire(op, job_id, f.REFUSING_FAULTS, response_id)
        if refused:
            return refused
        if stored is None:
            return _not_found(response_id)
        return stored, job_id

    def _scope(self, scope: tuple[str, str, str]) -> tuple[str, str]:
        return effective_scope(*scope, self.key_projects)

    def _get(self, response_id: str) -> Stored | None:
        """The live response, purging it if its retention has run out."""
        stored = self._responses.get(response_id)
        if stored is None:
            return None
        _, finished = stored.status_at(self.clock.now())
        short = self.zdr or stored.request.get("store") is False
        retention = self.retention_seconds if short else self.stored_retention_seconds
        if finished is not None and self.clock.now() >= finished + retention:
            del self._responses[response_id]
            return None
        return stored

    def _sweep(self) -> None:
        for response_id in list(self._responses):
            self._get(response_id)
        self._swept_at = time.monotonic()

    def _sweep_now_and_then(self) -> None:
        # Purging on every create made N creates cost O(N^2); once a second bounds memory just
        # as well (reads purge the response they touch, `stats` sweeps in full).
        if time.monotonic() - self._swept_at >= 1.0:
            self._sweep()

    def _fire(self, op: str, job_id: str | None, names: tuple[str, ...], response_id: str = "") -> Reply | None:
        fault = self.faults.take_first(op, job_id, names)
        if fault is None:
            return None
        self._stats.faults_fired[fault] += 1
        if fault == f.RATE_LIMIT:
            return _error(
                429,
                "Rate limit reached for requests. Please try again in 2s.",
                "requests",
                code="rate_limit_exceeded",
                headers={"retry-after": "2", "x-ratelimit-reset-requests": "2s", "x-ratelimit-remaining-requests": "0"},
            )
        if fault == f.RATE_LIMIT_LONG:
            return _error(429, "Rate limit reached for requests. Please try again in 10m.", "requests",
                          code="rate_limit_exceeded",
                          headers={"retry-after": "600", "x-ratelimit-reset-requests": "10m",
                                   "x-ratelimit-remaining-requests": "0"})
        if fault == f.SERVER_ERROR:
            return _error(500, "The server had an error while processing your request.", "server_error")
        if fault == f.UNAUTHORIZED:
            return _error(401, "Incorrect API key provided.", "invalid_request_error", code="invalid_api_key")
        if fault == f.QUOTA_EXHAUSTED:  # billing, not rate: the real API sends no retry-after
            return _error(
                429,
                "You exceeded your current quota, please check your plan and billing details.",
                "insufficient_quota",
                code="insufficient_quota",
            )
        if fault == f.SERVICE_UNAVAILABLE:
            return _error(503, "The server is overloaded or not ready yet.", "server_error")
        if fault == f.RATE_LIMIT_REQUESTS:  # the request rate: its reset is near, the tokens' far off
            return _error(429, "Rate limit reached for requests. Please try again in 1s.", "requests",
                          code="rate_limit_exceeded",
                          headers={"x-ratelimit-reset-requests": "1s", "x-ratelimit-remaining-requests": "0",
                                   "x-ratelimit-reset-tokens": "6m0s", "x-ratelimit-remaining-tokens": "12000"})
        if fault == f.RATE_LIMIT_TOKENS:
            return _error(429, (f"Rate limit reached for gpt-5-mini in organization {DEFAULT_ORGANIZATION} on tokens "
                                "per min (TPM): Limit 30000, Used 29000, Requested 9000. Please try again in 6m0s. "
                                "Visit https://platform.openai.com/account/rate-limits to learn more."), "tokens",
                          code="rate_limit_exceeded",
                          headers={"x-ratelimit-reset-requests": "1s", "x-ratelimit-remaining-requests": "499",
                                   "x-ratelimit-reset-tokens": "6m0s", "x-ratelimit-remaining-tokens": "0"})
        if fault == f.UNSUPPORTED_COUNTRY:
            return _error(403, "Country, region, or territory not supported", "request_forbidden",
                          code="unsupported_country_region_territory")
        return _not_found(response_id)

    def _misreport(self, stored: Stored, job_id: str | None, now: float) -> str | None:
        """The status a read shows instead of the truth (read faults, the cancellation race), or None."""
        fault = self.faults.take_first("retrieve", job_id, f.READ_FAULTS)
        if fault is not None:
            self._stats.faults_fired[fault] += 1
        truth, _ = stored.status_at(now)
        if f.CANCELLED_THEN_COMPLETED in stored.faults and truth == "completed" and not stored.race_reported:
            stored.race_reported = True  # consumed even if a read fault lies about this read too
            return "cancelled" if fault is None else _SHOWN[fault]
        return None if fault is None else _SHOWN[fault]

    def _delivery(self, op: str, job_id: str | None) -> str:
        fault = self.faults.take_first(op, job_id, (f.DROP_AFTER_ACCEPT, f.SLOW))
        if fault is None:
            return "normal"
        self._stats.faults_fired[fault] += 1
        return "drop" if fault == f.DROP_AFTER_ACCEPT else "slow"

    def _render(self, s: Stored, now: float, shown: str | None = None) -> dict[str, Any]:
        """The response's JSON; `shown` misreports its status (output and usage follow it)."""
        status, finished = s.status_at(now)
        error_code = s.error_code
        if shown is not None:
            status, error_code = shown, "server_error"
        req = s.request
        output: list[dict[str, Any]] = []
        usage = None
        input_tokens = max(1, (len(str(req.get("instructions") or "")) + len(json.dumps(req.get("input")))) // 4)
        if status in ("completed", "incomplete"):
            text = s.full_text(self.seed)
            if status == "incomplete":
                text = content.truncate(text)
            output = _output_items(s, status, text, self.output_shapes)
            out_tokens = max(1, len(text) // 4)
            usage = _usage(input_tokens, out_tokens)
        elif status == "failed":
            usage = _usage(input_tokens, 0)
        return {
            "id": s.id,
            "object": "response",
            "created_at": int(self.clock.epoch(s.created)),
            "status": status,
            "background": bool(req.get("background")),
            "completed_at": int(self.clock.epoch(finished)) if status == "completed" and finished else None,
            "error": {"code": error_code, "message": _FAIL_MESSAGES.get(error_code, _FAIL_MESSAGES["server_error"])}
            if status == "failed"
            else None,
            "incomplete_details": ({"reason": "content_filter" if f.CONTENT_FILTER in s.faults else "max_output_tokens"}
                                   if status == "incomplete" else None),
            "instructions": req.get("instructions"),
            "max_output_tokens": req.get("max_output_tokens"),
            "model": req.get("model"),
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "reasoning": {"effort": (req.get("reasoning") or {}).get("effort") if isinstance(req.get("reasoning"), dict)
                          else None, "summary": None},
            "service_tier": s.service_tier,
            "temperature": req.get("temperature", 1.0),
            "text": req.get("text") or {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": req.get("top_p", 1.0),
            "truncation": "disabled",
            "usage": usage,
            "user": None,
            "metadata": req.get("metadata") or {},
        }


_FLEX_SHAPES = (f.FLEX_UNAVAILABLE, f.FLEX_UNAVAILABLE_BARE, f.FLEX_UNAVAILABLE_OVERLOADED)


def _flex_refusal(fault: str) -> Reply:
    """A flex create refused for capacity. OpenAI documents "429 Resource Unavailable" and no body,
    so the simulator answers in more than one shape: a client must not depend on one."""
    if fault == f.FLEX_UNAVAILABLE_BARE:
        return Reply(429, {"error": {"message": "Resource Unavailable"}})
    if fault == f.FLEX_UNAVAILABLE_OVERLOADED:
        return _error(429, "Resource Unavailable: the flex tier is at capacity. Please retry your request later.",
                      "server_error")
    return _error(429, "Resource Unavailable: there is not enough flex processing capacity for this request right "
                  "now. Retry later, or send it with service_tier 'default'.", "resource_unavailable",
                  code="resource_unavailable")


# Faults that refuse a create (nothing created, nothing counted).
_CREATE_REFUSING = (f.RATE_LIMIT, f.RATE_LIMIT_LONG, f.SERVER_ERROR, f.UNAUTHORIZED, f.QUOTA_EXHAUSTED,
                    f.SERVICE_UNAVAILABLE, f.RATE_LIMIT_REQUESTS, f.RATE_LIMIT_TOKENS, f.UNSUPPORTED_COUNTRY)

# The status each read fault shows.
_SHOWN = {f.REPORT_CANCELLED: "cancelled", f.REPORT_FAILED: "failed", f.UNKNOWN_STATUS: f.UNKNOWN_STATUS_VALUE}

_FAIL_MESSAGES = {
    "server_error": "The model failed to generate a response.",
    "invalid_prompt": "Invalid prompt: your prompt was flagged as potentially violating our usage policy.",
    "bio_policy": "This request was blocked under our biological and chemical safety policy.",
    "mystery_error": "Something went wrong that this client has never heard of.",
}


def _output_items(s: Stored, status: str, text: str, run_shapes: frozenset[str]) -> list[dict[str, Any]]:
    """The response's `output` array as the real API writes it: a reasoning item first for a
    reasoning model (or on `output_reasoning`), a `commentary` message before the `final_answer`
    one (`output_phases`), the answer in several parts (`output_parts`), a refusal part instead of
    the answer (`output_refusal`); `logprobs` on every output_text part."""
    shapes = s.faults | run_shapes
    message_status = "completed" if status == "completed" else "incomplete"
    items: list[dict[str, Any]] = []
    if f.OUTPUT_REASONING in shapes or params.reasons(str(s.request.get("model") or "")):
        # A reasoning model's output starts with its reasoning item (its summary only when asked).
        summary = ([{"type": "summary_text", "text": "**Planning the edition** Choosing the day's items and sources."}]
                   if f.OUTPUT_REASONING in shapes else [])
        items.append({"type": "reasoning", "id": "rs_" + s.message_id[4:], "summary": summary})
    phased = f.OUTPUT_PHASES in shapes
    if phased:
        items.append({"type": "message", "id": "msg_c" + s.message_id[5:], "status": "completed",
                      "role": "assistant", "phase": "commentary",
                      "content": [_text_part("I will draft the edition in every language, then check each source.")]})
    if f.OUTPUT_REFUSAL in shapes:
        content: list[dict[str, Any]] = [{"type": "refusal",
                                          "refusal": "I'm sorry, but I can't help with that request."}]
    elif f.OUTPUT_PARTS in shapes and len(text) >= 3:
        third = len(text) // 3
        content = [_text_part(text[:third]), _text_part(text[third:2 * third]), _text_part(text[2 * third:])]
    else:
        content = [_text_part(text)]
    final: dict[str, Any] = {"type": "message", "id": s.message_id, "status": message_status, "role": "assistant",
                             "content": content}
    if phased:
        final["phase"] = "final_answer"
    items.append(final)
    return items


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _invalid_create(req: Any) -> str | None:
    if not isinstance(req, dict):
        return "The request body must be a JSON object."
    if not isinstance(req.get("model"), str) or not req["model"]:
        return "Missing required parameter: 'model'."
    if req.get("background") and req.get("store") is False:
        return "Background mode requires store=true."
    if req.get("service_tier") not in (None, "auto", "default", "flex", "scale", "priority"):
        return f"Invalid value for 'service_tier': {str(req.get('service_tier'))[:40]!r}."
    metadata = req.get("metadata")
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        return "Invalid type for 'metadata': expected an object."
    if len(metadata) > _METADATA_MAX_KEYS:
        return f"Invalid 'metadata': too many keys ({len(metadata)} > {_METADATA_MAX_KEYS})."
    for key, value in metadata.items():
        if len(key) > _METADATA_MAX_KEY:
            return f"Invalid 'metadata': key longer than {_METADATA_MAX_KEY} characters."
        if not isinstance(value, str) or len(value) > _METADATA_MAX_VALUE:
            return f"Invalid 'metadata.{key}': values must be strings of at most {_METADATA_MAX_VALUE} characters."
    return None


def _usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": output_tokens // 5},
        "total_tokens": input_tokens + output_tokens,
    }


DEFAULT_ORGANIZATION, DEFAULT_PROJECT = "org_default", "proj_default"


def effective_scope(org: str, project: str, key: str, key_projects: Mapping[str, str]) -> tuple[str, str]:
    """The (organization, project) a request acts in: the headers when given, else the key's
    own project (`key_projects`; a key not listed belongs to the organization's default project)."""
    return org or DEFAULT_ORGANIZATION, project or key_projects.get(key, DEFAULT_PROJECT)


def caller(api_key: str) -> str:
    """How stats name a caller: the last six characters of its API key (test keys only)."""
    return "…" + api_key[-6:]


def _ok_headers() -> dict[str, str]:
    return {
        "x-ratelimit-limit-requests": "10000",
        "x-ratelimit-remaining-requests": "9999",
        "x-ratelimit-reset-requests": "6ms",
        "x-ratelimit-limit-tokens": "10000000",
        "x-ratelimit-remaining-tokens": "9990000",
        "x-ratelimit-reset-tokens": "0s",
    }


def no_model_access(model: str, project: str) -> Reply:
    """The 403 a project without access to `model` gets, on a create and on the models endpoint."""
    return _error(403, f"Project `{project}` does not have access to model `{model}`", "invalid_request_error",
                  code="model_not_found")


def model_not_found(model: str) -> Reply:
    return _error(404, f"The model `{model}` does not exist or you do not have access to it.",
                  "invalid_request_error", code="model_not_found")


def request_too_large(model: str, organization: str, limit: int, requested: int) -> Reply:
    """The 429 a create larger than the organization's tokens-per-minute limit gets, every time
    (waiting does not help: the request itself is over the limit)."""
    return _error(429, (f"Request too large for {model} in organization {organization} on tokens per min (TPM): "
                        f"Limit {limit}, Requested {requested}. The input or output tokens must be reduced in order "
                        "to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more."),
                  "tokens", code="rate_limit_exceeded",
                  headers={"x-ratelimit-limit-tokens": str(limit), "x-ratelimit-remaining-tokens": str(limit),
                           "x-ratelimit-reset-tokens": "0s", "x-ratelimit-reset-requests": "120ms"})


def requested_tokens(req: dict[str, Any]) -> int:
    """What the API counts a create as against the tokens-per-minute limit: its input (estimated
    at four characters a token, the output schema included) and its `max_output_tokens`."""
    text = json.dumps([req.get("instructions"), req.get("input"), req.get("text")], ensure_ascii=False)
    cap = req.get("max_output_tokens")
    return len(text) // 4 + (cap if isinstance(cap, int) and not isinstance(cap, bool) else 4096)


def _not_found(response_id: str) -> Reply:
    return _error(404, f"Response with id '{response_id}' not found.", "invalid_request_error")


def _error(
    status: int,
    message: str,
    type_: str,
    *,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return Reply(status, body, dict(headers or {}))


def error_reply(status: int, message: str, type_: str = "invalid_request_error", code: str | None = None) -> Reply:
    """An error in the API's envelope, for the HTTP layer (auth, routing, body size)."""
    return _error(status, message, type_, code=code)
