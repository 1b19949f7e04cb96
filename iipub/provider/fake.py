"""`FakeProvider`: the `interface.Provider` in memory, for the tests of steps and decisions (a
real database, no HTTP). Pure: no HTTP import; nothing in the package imports it (the contract
says so).

It answers as `adapter.OpenAIAdapter` answers for the Responses API: a create is `Accepted` with a
new response the fake then holds (waiting until the test moves it on: `start`, `finish`,
`forget`), unless an outcome was scripted for it (`script_create`: `Refused`, `Ambiguous`,
`Rejected`, or an `Accepted` it then holds); a read or cancel of a held response is `Observed`,
of an unknown one `Missing`; a cancel of a finished one is `Rejected(400)`; a delete of a held
one is `Deleted` (then reads are `Missing`), of an unknown one `Missing`. Reads, cancels and
deletes take their scripted outcomes first (`script_retrieve`, ...: for one response or any).
The contract's caller bugs raise as the adapter's do: a malformed id (`ValueError`), a delete
without custody or a kill (`InvariantViolation`); neither reaches the provider.

Every call that reaches the provider is recorded (`calls`, `calls_of`, `count`, `creates`) with
its arguments and its answer, so a test asserts on the calls made: how many creates, which
deletes, with custody or not. `on_call` sees each call before it is answered: a test reads the
database there as the provider would see it at that moment (what was committed before the call).
"""

from __future__ import annotations

import copy
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from iipub.core.closing import Closing
from iipub.core.errors import ConfigError
from iipub.provider.interface import check_delete_allowed, check_response_id, create_metadata
from iipub.provider.outcomes import (
    LIVE,
    Accepted,
    Ambiguous,
    CreateOutcome,
    CreateRequest,
    Deleted,
    DeleteOutcome,
    FailureCause,
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

OPS = ("create", "retrieve", "cancel", "delete")
# How a live response ends (`FakeProvider.finish`), in the fake's own words, and where each leaves it.
ENDINGS: dict[str, Stage] = {"complete": Stage.FINISHED, "cut_at_cap": Stage.FINISHED, "failed": Stage.GONE,
                             "cancelled": Stage.GONE}
WAITING, RUNNING = "waiting", "running"  # the fake's words for a live response
_MIN_CALL_SECONDS = 0.2  # as the adapter: less than this left before a deadline, the call is not sent
_NO_TIME_LEFT = Transient(None, "not sent: the request budget is spent")
FAILED_MESSAGE = "The model failed to generate a response."

Outcome = CreateOutcome | ReadOutcome | DeleteOutcome


@dataclass(frozen=True)
class Call:
    """One call that reached the provider, with its arguments and (once answered) its answer."""

    op: str  # one of OPS
    response_id: str | None = None  # None for a create
    request: CreateRequest | None = None  # a create's request
    has_custody: bool | None = None  # a delete's flags
    kill_requested: bool | None = None
    outcome: Outcome | None = None  # None while `on_call` sees it


@dataclass
class Held:
    """A response the fake provider holds, as its reads answer it."""

    response_id: str
    status: str = WAITING  # the fake's word: WAITING, RUNNING or one of ENDINGS
    request: CreateRequest | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    tier: str | None = "default"
    created_at: float = field(default_factory=time.time)
    held_since: float = field(default_factory=time.monotonic)  # when the fake took it (its lifecycle's start)
    completed_at: float | None = None
    output_text: str | None = None
    usage: Usage | None = None
    error: str | None = None
    error_code: str | None = None
    refusal: str | None = None
    failure: FailureCause | None = None

    @property
    def stage(self) -> Stage:
        return {WAITING: Stage.WAITING, RUNNING: Stage.RUNNING}.get(self.status) or ENDINGS.get(self.status,
                                                                                              Stage.UNKNOWN)

    def observed(self) -> Observed:
        return Observed(response_id=self.response_id, status=self.status, output_text=self.output_text,
                        usage=self.usage, metadata=dict(self.metadata),
                        cut_reason="output cap" if self.status == "cut_at_cap" else None,
                        error=self.error, error_code=self.error_code, completed_at=self.completed_at,
                        created_at=self.created_at, tier=self.tier, refusal=self.refusal, stage=self.stage,
                        at_cap=self.status == "cut_at_cap", failure=self.failure)


def edition_text(req: CreateRequest, faults: Iterable[str] = ()) -> str:
    """The output a finished response to `req` holds: the simulator's edition for the request's
    schema (valid for its product), bent by its content `faults` (`simulator.faults`)."""
    from iipub.provider.openai.simulator import content
    from iipub.settings import edition_schema  # pydantic: only when a response finishes

    p = req.product
    schema = edition_schema.text_format(p.languages, p.items)["schema"]
    return content.generate(schema, model=p.model, slot=f"{p.name}/{req.edition_date.isoformat()}", seed=None,
                            faults=frozenset(faults))


def usage_for(req: CreateRequest | None, text: str) -> Usage:
    """Token counts of the rough size the simulator reports (a token is about four characters)."""
    prompt = len(req.product.prompt) if req is not None else 0
    input_tokens, output_tokens = max(1, prompt // 4 + 40), max(1, len(text) // 4)
    return Usage(input_tokens, output_tokens, input_tokens + output_tokens)


class _State:
    """What the fake provider holds and has been asked, shared by every `until` view."""

    def __init__(self, on_call: Callable[[Call], None] | None, ready_error: str | None,
                 lifecycle: tuple[float, float] | None) -> None:
        self.lock = threading.Lock()
        self.held: dict[str, Held] = {}
        self.calls: list[Call] = []
        self.scripts: dict[tuple[str, str | None], deque[Outcome]] = {}
        self.next_id = 0
        self.closed = False
        self.on_call = on_call
        self.ready_error = ready_error
        self.lifecycle = lifecycle


FAKE_SCOPE = "fake"  # opaque, as every scope is


_INSTALLED: list[FakeProvider] = []  # the provider `[provider] kind = "fake"` answers with


def install(provider: FakeProvider | None) -> None:
    """The fake provider that settings of `[provider] kind = "fake"` build (`factory.build`) from
    now on in this process: a test's own, scripted; None forgets it."""
    _INSTALLED[:] = [provider] if provider is not None else []


def installed() -> FakeProvider:
    """A view of the installed fake provider (a new one when none is): what the factory builds.
    Closing the view leaves the installed one open for the next command of the test."""
    if not _INSTALLED:
        _INSTALLED.append(FakeProvider())
    view = copy.copy(_INSTALLED[0])
    view._root = _INSTALLED[0]
    return view


class FakeProvider(Closing):
    """An in-memory provider: scripted outcomes, every call recorded (see the module)."""

    def __init__(self, *, on_call: Callable[[Call], None] | None = None, ready_error: str | None = None,
                 scope: str = FAKE_SCOPE, lifecycle: tuple[float, float] | None = None) -> None:
        """`lifecycle` (seconds waiting, seconds running): a response then moves on by itself, as
        the simulator's do, and completes with its edition; without it, only as the test says."""
        self._state = _State(on_call, ready_error, lifecycle)
        self.scope = scope  # `until` views share it: copies of this object
        self.standings: dict[str, Standing] = {}  # what `look_up` says of a model (lower case): else available
        self._deadline: float | None = None
        self._root = self

    # -- the interface ----------------------------------------------------------------------------

    def create(self, req: CreateRequest) -> CreateOutcome:
        if self._state.closed:  # as the adapter: its client cannot be built, not a byte is sent
            return Refused(None, "not sent: RuntimeError: the provider was closed", kind=RefusalKind.UNSENT)
        self._reach(Call("create", request=req))
        s = self._state
        with s.lock:
            scripted = self._scripted("create", None)
            if scripted is None:
                s.next_id += 1
                outcome: CreateOutcome = Accepted(f"resp_fake{s.next_id:04d}", WAITING, req.tier)
            else:
                outcome = _create_outcome(scripted)
            if isinstance(outcome, Accepted) and outcome.response_id not in s.held:
                s.held[outcome.response_id] = Held(outcome.response_id, outcome.status, req, create_metadata(req),
                                                   outcome.tier)
            s.calls.append(Call("create", request=req, outcome=outcome))
        return outcome

    def retrieve(self, response_id: str) -> ReadOutcome:
        return self._read("retrieve", response_id)

    def cancel(self, response_id: str) -> ReadOutcome:
        return self._read("cancel", response_id)

    def delete(self, response_id: str, *, has_custody: bool, kill_requested: bool = False) -> DeleteOutcome:
        check_delete_allowed(response_id, has_custody=has_custody, kill_requested=kill_requested)
        check_response_id(response_id)
        if self._no_time_left():
            return _NO_TIME_LEFT
        call = Call("delete", response_id, has_custody=has_custody, kill_requested=kill_requested)
        self._reach(call)
        s = self._state
        with s.lock:
            scripted = self._scripted("delete", response_id)
            outcome: DeleteOutcome
            if scripted is not None:
                outcome = _delete_outcome(scripted)
            elif s.held.pop(response_id, None) is not None:
                outcome = Deleted(response_id)
            else:
                outcome = _not_found(response_id)
            s.calls.append(replace(call, outcome=outcome))
        return outcome

    def reaches(self, created_under: str) -> bool:
        return created_under == self.scope

    def stage_of(self, status: str) -> Stage:
        return Held("-", status).stage

    def look_up(self, model: str) -> ModelLookup:
        """Every model is available unless a test said otherwise (`standings`); recorded as a call
        of no response."""
        standing = self.standings.get(model.lower(), Standing.AVAILABLE)
        return ModelLookup(model, standing, "" if standing is Standing.AVAILABLE else f"{model}: {standing.value}")

    def requested_tokens(self, req: CreateRequest) -> int:
        """As the adapter counts it: the prompt at four characters a token, and the output cap."""
        return len(req.product.prompt) // 4 + req.product.output_token_cap()

    def until(self, deadline: float) -> FakeProvider:
        view = copy.copy(self)  # the same `_State`: what a view is asked is recorded with the rest
        view._deadline = deadline
        return view

    def ready(self) -> None:
        why = "RuntimeError: the provider was closed" if self._state.closed else self._state.ready_error
        if why is not None:  # as the adapter says it
            raise ConfigError(f"cannot set up the provider's HTTP client: {why}")

    def close(self) -> None:
        if self._root is self:  # a view's root owns what it holds
            self._state.closed = True

    # -- scripting: what the next calls answer --------------------------------------------------

    def script_create(self, *outcomes: CreateOutcome) -> None:
        """The next creates answer `outcomes`, in order (an `Accepted` one is then held)."""
        self._script("create", None, outcomes)

    def script_retrieve(self, *outcomes: ReadOutcome, response_id: str | None = None) -> None:
        """The next retrieves (of `response_id`, or of any response) answer `outcomes`, in order."""
        self._script("retrieve", response_id, outcomes)

    def script_cancel(self, *outcomes: ReadOutcome, response_id: str | None = None) -> None:
        self._script("cancel", response_id, outcomes)

    def script_delete(self, *outcomes: DeleteOutcome, response_id: str | None = None) -> None:
        self._script("delete", response_id, outcomes)

    # -- the provider's side: what it holds -----------------------------------------------------

    def hold(self, response: Held) -> None:
        """The provider holds `response` (made elsewhere: another installation, a legacy system)."""
        with self._state.lock:
            self._state.held[response.response_id] = response

    def start(self, response_id: str | None = None) -> None:
        """A waiting response (or every one) runs."""
        with self._state.lock:
            for h in self._pick(response_id):
                h.status = RUNNING

    def finish(self, response_id: str | None = None, *, ending: str = "complete", output_text: str | None = None,
               usage: Usage | None = None, faults: Iterable[str] = (),
               failure: FailureCause = FailureCause.PROVIDER_FAULT, refusal: str | None = None) -> None:
        """A live response (or every one) ends (`ENDINGS`): `complete` with its edition (or
        `output_text`; `faults` bend the edition), `cut_at_cap` with half of it (cut at the
        request's output cap), `failed` (for `failure`: the provider's fault unless given) or
        `cancelled`. `refusal`: the model refused (its text; no output text unless given)."""
        assert ending in ENDINGS, ending
        with self._state.lock:
            for h in self._pick(response_id):
                _end(h, ending, output_text, usage, faults, failure, refusal)

    def forget(self, response_id: str) -> None:
        """The provider no longer has the response (expired, or deleted elsewhere): reads are Missing."""
        with self._state.lock:
            self._state.held.pop(response_id, None)

    def status_of(self, response_id: str) -> str | None:
        """The response's status as the provider holds it, or None if it holds none by that id."""
        with self._state.lock:
            h = self._state.held.get(response_id)
            return h.status if h is not None else None

    # -- what was asked ---------------------------------------------------------------------------

    @property
    def calls(self) -> list[Call]:
        """Every call that reached the provider, in order, with its answer."""
        with self._state.lock:
            return list(self._state.calls)

    def calls_of(self, op: str) -> list[Call]:
        assert op in OPS, op
        return [c for c in self.calls if c.op == op]

    def count(self, op: str) -> int:
        return len(self.calls_of(op))

    @property
    def creates(self) -> list[CreateRequest]:
        """The requests of every create that reached the provider, in order."""
        return [c.request for c in self.calls_of("create") if c.request is not None]

    @property
    def accepted(self) -> int:
        """How many creates the provider took (each will be charged)."""
        return sum(isinstance(c.outcome, Accepted) for c in self.calls_of("create"))

    @property
    def held_ids(self) -> list[str]:
        with self._state.lock:
            return list(self._state.held)

    # -- internals --------------------------------------------------------------------------------

    def _read(self, op: str, response_id: str) -> ReadOutcome:
        check_response_id(response_id)
        if self._no_time_left():
            return _NO_TIME_LEFT
        self._reach(Call(op, response_id))
        s = self._state
        with s.lock:
            scripted = self._scripted(op, response_id)
            h = s.held.get(response_id)
            if h is not None:
                self._lived(h)
            outcome: ReadOutcome
            if scripted is not None:
                outcome = _read_outcome(op, scripted)
            elif h is None:
                outcome = _not_found(response_id)
            elif op == "cancel" and h.stage not in LIVE and h.status != "cancelled":
                outcome = Rejected(400, f"HTTP 400: Cannot cancel a response with status '{h.status}'.")
            else:
                if op == "cancel" and h.status != "cancelled":
                    h.status, h.completed_at = "cancelled", time.time()
                outcome = h.observed()
            s.calls.append(Call(op, response_id, outcome=outcome))
        return outcome

    def _lived(self, h: Held) -> None:
        """Under `lifecycle`, a live response moved on by the time it is read. Under the lock."""
        life = self._state.lifecycle
        if life is None or h.stage not in LIVE:
            return
        held = time.monotonic() - h.held_since
        if held >= life[0] + life[1]:
            _end(h, "complete")
        elif held >= life[0]:
            h.status = RUNNING

    def _reach(self, call: Call) -> None:
        """The call reaches the provider: refused on a closed provider, then shown to `on_call`."""
        if self._state.closed:  # a caller bug, as with the adapter
            raise RuntimeError("the provider was closed")
        if self._state.on_call is not None:
            self._state.on_call(call)

    def _no_time_left(self) -> bool:
        return self._deadline is not None and self._deadline - time.monotonic() < _MIN_CALL_SECONDS

    def _script(self, op: str, response_id: str | None, outcomes: Iterable[Outcome]) -> None:
        if response_id is not None:
            check_response_id(response_id)
        with self._state.lock:
            self._state.scripts.setdefault((op, response_id), deque()).extend(outcomes)

    def _scripted(self, op: str, response_id: str | None) -> Outcome | None:
        """The next scripted outcome of `op` (for this response first, then for any). Under the lock."""
        for key in ((op, response_id), (op, None)) if response_id is not None else ((op, None),):
            queue = self._state.scripts.get(key)
            if queue:
                return queue.popleft()
        return None

    def _pick(self, response_id: str | None) -> list[Held]:
        """The response named (KeyError if not held), or every live one. Under the lock."""
        if response_id is not None:
            return [self._state.held[response_id]]
        return [h for h in self._state.held.values() if h.stage in LIVE]


# A scripted outcome is one of the kind its call answers (`outcomes`' closed sets), else a test's bug.
def _create_outcome(outcome: Outcome) -> CreateOutcome:
    if isinstance(outcome, (Accepted, Refused, Ambiguous, Rejected)):
        return outcome
    raise TypeError(f"a create cannot answer {outcome!r}")


def _read_outcome(op: str, outcome: Outcome) -> ReadOutcome:
    if isinstance(outcome, (Observed, Missing, Transient, Rejected)):
        return outcome
    raise TypeError(f"a {op} cannot answer {outcome!r}")


def _delete_outcome(outcome: Outcome) -> DeleteOutcome:
    if isinstance(outcome, (Deleted, Missing, Transient, Rejected)):
        return outcome
    raise TypeError(f"a delete cannot answer {outcome!r}")


def _end(h: Held, ending: str, output_text: str | None = None, usage: Usage | None = None,
         faults: Iterable[str] = (), failure: FailureCause = FailureCause.PROVIDER_FAULT,
         refusal: str | None = None) -> None:
    """`h` ends as `FakeProvider.finish` says."""
    h.status, h.completed_at = ending, time.time()
    if ENDINGS[ending] is Stage.FINISHED:
        text = output_text
        if text is None:
            text = "" if refusal is not None else _text(h, faults)
            if ending == "cut_at_cap":
                text = text[: max(1, len(text) // 2)]
        h.output_text, h.refusal = text, refusal
        h.usage = usage if usage is not None else usage_for(h.request, text)
    elif ending == "failed":
        h.failure = failure
        h.error_code = failure.value
        h.error = FAILED_MESSAGE
        h.usage = usage if usage is not None else usage_for(h.request, "")


def _text(h: Held, faults: Iterable[str]) -> str:
    return edition_text(h.request, faults) if h.request is not None else "{}"


def _not_found(response_id: str) -> Missing:
    return Missing(f"HTTP 404: Response with id '{response_id}' not found.")
