"""What iipub asks of a provider, as a `typing.Protocol`: the calls the sweep, the webhook
deliveries and the operator commands make, each answering a value from `outcomes` (never
raising for what the provider said). Pure: no HTTP import.

Everything above the `provider` package names this interface; only the places that build a
provider from the settings name a concrete one (`factory.build`). A new provider
implements every method below and honours the rules that go with them, written here once:

- `create` is the money path: it answers `Accepted` only when the provider holds the job (it
  will be charged), `Refused` only when it provably did not process it (nothing charged),
  `Rejected` for a request it will keep refusing, and `Ambiguous` whenever it cannot tell. It
  never retries, and records `create_metadata(req)` on the response, which every read of it
  answers (`Observed.metadata`: `model.owners` decides whose a response is from it).
- `retrieve` and `cancel` answer the response as it now stands (`Observed`), `Missing` when the
  provider does not know the id, `Transient` when asking again may help, `Rejected` for a
  4xx it will keep giving (a cancel of a finished response is one). They are safe to repeat.
- `delete` refuses (`InvariantViolation`, nothing sent) unless the output is in local custody or
  an operator killed the job; `Deleted` or `Missing` (gone already) otherwise.
- A malformed response id is a caller bug: `ValueError`, nothing sent (`check_response_id`).
- `until(deadline)` is the same provider with every read, cancel and delete over by `deadline`
  (`time.monotonic()`); a call with no time left is not sent (`Transient`). A create is never cut
  short: a caller with a deadline does not create.
- `ready()` sets up what the calls need (a client, a pool) or raises `ConfigError` in one line,
  before the sweep leases anything; `close()` releases it.

- `scope` names where responses are created and read, opaque to everything above this package
  (never a secret). A create records it (`jobs.create_scope`); `reaches(scope)` says whether a
  read here sees what was created there: a 404 read where it does not is `scope_mismatch`,
  never a loss.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, Protocol, runtime_checkable

from iipub.core.errors import InvariantViolation
from iipub.provider.outcomes import (
    CreateOutcome,
    CreateRequest,
    DeleteOutcome,
    ModelLookup,
    ReadOutcome,
    SavedResponse,
    Stage,
    VerifiedEvent,
)

# Responses API metadata limits.
METADATA_MAX_KEYS = 16
METADATA_MAX_KEY_CHARS = 64
METADATA_MAX_VALUE_CHARS = 512
# As long as `jobs.response_id` holds.
_RESPONSE_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


@runtime_checkable
class Provider(Protocol):
    """A provider of background responses, reduced to the calls iipub makes."""

    @property
    def scope(self) -> str:
        """Where this provider's responses are created and read (see the module)."""

    def reaches(self, created_under: str) -> bool:
        """Whether a read here sees a response created under the scope `created_under`."""

    def stage_of(self, status: str) -> Stage:
        """What a status this provider reported (`Observed.status`, as iipub recorded it) means."""

    def create(self, req: CreateRequest) -> CreateOutcome:
        """Start one paid background response for `req` (the money path: see the module)."""

    def retrieve(self, response_id: str) -> ReadOutcome:
        """The response as it now stands."""

    def cancel(self, response_id: str) -> ReadOutcome:
        """Cancel a running response; a finished one answers `Rejected` (read it instead)."""

    def delete(self, response_id: str, *, has_custody: bool, kill_requested: bool = False) -> DeleteOutcome:
        """Delete the provider's copy: only with the output in custody or a kill requested."""

    def look_up(self, model: str) -> ModelLookup:
        """What the provider says of `model` for this account: it exists and the project may use
        it, or why not (`outcomes.Standing`). Free of charge; never raises for what it said."""

    def requested_tokens(self, req: CreateRequest) -> int:
        """What the create for `req` counts against a tokens-per-minute limit: its input (an
        estimate) and its output cap. Pure: nothing is sent."""

    def until(self, deadline: float) -> Provider:
        """This provider with every read, cancel and delete over by `deadline` (`time.monotonic()`)."""

    def ready(self) -> None:
        """Set up what the calls need now, or raise `ConfigError` saying why it cannot be."""

    def close(self) -> None:
        """Release what `ready` or the calls set up."""


# A response saved from the provider, read from a file's JSON object: None when it is not one
# (`factory.saved_response_reader`; `OperatorRefused` for one that holds no output to import).
SavedResponseReader = Callable[[Mapping[str, Any]], SavedResponse | None]


@runtime_checkable
class WebhookVerifier(Protocol):
    """The provider's webhook deliveries, verified before anything in them is believed."""

    def verify(self, body: bytes, headers: Mapping[str, str]) -> VerifiedEvent:
        """The event `body` announces, once its signature is verified; `DeliveryRejected` otherwise."""

    def test_delivery(self) -> tuple[bytes, dict[str, str]]:
        """A delivery of `EventKind.TEST` and its headers, signed as the provider signs."""


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


def is_response_id(value: object) -> bool:
    """Whether a provider's answer names a response id iipub can store and send back."""
    return isinstance(value, str) and _RESPONSE_ID.fullmatch(value) is not None


def check_response_id(response_id: str) -> None:
    """A malformed id is a caller bug; sent anyway it would come back as a Transient forever."""
    if not is_response_id(response_id):
        raise ValueError(f"malformed response id {response_id!r}")


def check_delete_allowed(response_id: str, *, has_custody: bool, kill_requested: bool) -> None:
    """The deletion-safety invariant: the remote copy is the only copy until the payload is held,
    so it may only go earlier if an operator killed the job. Checked before anything is sent."""
    if not (has_custody or kill_requested):
        check_response_id(response_id)
        _refuse_delete(response_id)


def _refuse_delete(response_id: str) -> NoReturn:
    raise InvariantViolation(
        f"refusing to delete {response_id}: its output is not in local custody and no kill was requested",
        response_id=response_id,
    )
