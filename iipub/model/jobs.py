"""A job row and a journal entry as values, with their JSON views. Pure: no database import."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import socket
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from iipub.core.timefmt import iso_z, jsonable, naive_utc
from iipub.model.states import CUSTODY_WATCHED, DONE, PARKED, State

# Unpublished and not parked this long after its slot opened: stranded (`iipub check`).
STRANDED_AFTER_SECONDS = 7200.0

# Every column the operator-facing JSON shows, in the documented order.
PUBLIC_FIELDS = (
    "id", "product", "edition_date", "state", "version", "generation_attempts", "poll_count",
    "response_id", "quarantine_reason", "lease_owner", "lease_expiry", "next_attempt_at",
    "config_fingerprint", "retry_count", "priority", "is_backfill", "opens_at", "suspended_from", "kill_requested",
    "payload_sha256", "composed_sha256", "input_tokens", "output_tokens", "total_tokens",
    "last_error", "created_at", "updated_at", "state_entered_at", "origin", "adopted_at", "output_end", "create_scope",
    "custody_watch_at",
)


def new_worker_id(role: str = "reconcile") -> str:
    return f"{role}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Job:
    id: str
    product: str
    edition_date: dt.date
    state: State
    version: int
    priority: int
    is_backfill: bool
    opens_at: dt.datetime
    next_attempt_at: dt.datetime
    lease_owner: str | None
    lease_expiry: dt.datetime | None
    generation_attempts: int
    poll_count: int
    retry_count: int
    response_id: str | None
    config_fingerprint: str | None
    payload: str | None
    payload_sha256: str | None
    composed: str | None
    composed_sha256: str | None
    input_tokens: int
    output_tokens: int
    total_tokens: int
    quarantine_reason: str | None
    last_error: str | None
    suspended_from: str | None
    kill_requested: bool
    created_at: dt.datetime
    updated_at: dt.datetime
    state_entered_at: dt.datetime
    origin: str | None = None  # "adopted": taken over from a legacy system by `iipub adopt`
    adopted_at: dt.datetime | None = None
    output_end: str | None = None  # `max_output_tokens` or `refusal`: how the custody's response ended
    create_scope: str | None = None  # the scope the create was sent under (`Provider.scope`, opaque)
    custody_watch_at: dt.datetime | None = None  # the custody watch's next read of a parked job

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> Job:
        return cls._made({name: row[name] for name in _FIELD_NAMES if name in row})

    @classmethod
    def from_columns(cls, keys: Sequence[str], row: Sequence[Any]) -> Job:
        """A job from a row of `jobs` read as a tuple with its column names: the claim makes
        thousands a tick, and a row read as a mapping cost several times more per field."""
        values = dict(zip(keys, row, strict=True))
        if values.keys() != _FIELD_SET:
            values = {name: values[name] for name in _FIELD_NAMES if name in values}
        return cls._made(values)

    @classmethod
    def _made(cls, values: dict[str, Any]) -> Job:
        values["state"] = State(values["state"])
        values["is_backfill"] = bool(values["is_backfill"])
        values["kill_requested"] = bool(values["kill_requested"])
        if values.keys() == _FIELD_SET:
            # Every field given: the generated __init__ would only assign each one (a frozen
            # dataclass with no __post_init__), so fill the instance directly, at a fifth of the cost.
            job = object.__new__(cls)
            job.__dict__.update(values)
            return job
        return cls(**values)

    @property
    def effective_state(self) -> State:
        """What the job is for an operator's rules: a suspended job is what it was."""
        if (self.state == State.MANUALLY_SUSPENDED and self.suspended_from is not None
                and self.suspended_from in State.__members__):
            return State(self.suspended_from)
        return self.state

    @property
    def owes_custody(self) -> bool:
        """Parked (quarantined, suspended) with a response whose output is not stored yet: the
        custody watch reads it (`Store.custody_watch_due` is the same rule in SQL)."""
        return (self.state in CUSTODY_WATCHED and self.response_id is not None and self.payload is None
                and not self.kill_requested)

    def public(self) -> dict[str, Any]:
        """JSON-ready view (no payload): dates `YYYY-MM-DD`, times ISO 8601 UTC."""
        return {name: jsonable(getattr(self, name)) for name in PUBLIC_FIELDS}


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(Job))  # `dataclasses.fields` builds a tuple per call
_FIELD_SET = frozenset(_FIELD_NAMES)


def slot_row(*, job_id: str, product: str, day: dt.date, priority: int, opens_at: Any, now: Any,
             backfill: bool = False) -> dict[str, Any]:
    """Every column of a new slot's row: NO_JOB at version 1, due when its window opens, nothing
    spent, nothing held. `now` may be a value or a database-clock expression."""
    return {
        "id": job_id, "product": product, "edition_date": day, "state": State.NO_JOB.value, "version": 1,
        "priority": priority, "is_backfill": backfill, "opens_at": opens_at, "next_attempt_at": opens_at,
        "lease_owner": None, "lease_expiry": None, "generation_attempts": 0, "poll_count": 0, "retry_count": 0,
        "response_id": None, "config_fingerprint": None, "payload": None, "payload_sha256": None,
        "composed": None, "composed_sha256": None, "input_tokens": 0, "output_tokens": 0, "total_tokens": 0,
        "quarantine_reason": None, "last_error": None, "suspended_from": None, "kill_requested": False,
        "created_at": now, "updated_at": now, "state_entered_at": now,
    }


@dataclass(frozen=True)
class JournalEntry:
    id: int
    job_id: str
    from_state: str | None
    to_state: str
    version: int
    worker: str
    reason: str
    detail: dict[str, Any]
    at: dt.datetime
    lang: str | None = None  # a language track's entry (its version is the track's); None: the slot's

    def public(self) -> dict[str, Any]:
        return {
            "from_state": self.from_state, "to_state": self.to_state, "version": self.version,
            "reason": self.reason, "worker": self.worker, "at": iso_z(self.at), "lang": self.lang,
            "detail": self.detail,
        }


# -- the edition dates a slot may have: one window for `schedule --date` and `adopt` ----------

# How far back a slot may be dated (what a backfill reaches) and how far ahead, by the database clock.
MAX_PAST_DAYS = 366
MAX_AHEAD_DAYS = 366


def date_outside_window(day: dt.date, today: dt.date) -> str | None:
    """Why an edition date is refused (a 2016 typed for 2026, a year 1900), or None. Pure."""
    earliest = today - dt.timedelta(days=MAX_PAST_DAYS)
    latest = today + dt.timedelta(days=MAX_AHEAD_DAYS)
    if day < earliest:
        return (f"{day} is more than {MAX_PAST_DAYS} days in the past (earliest {earliest}; today is {today} by the "
                "database clock)")
    if day > latest:
        return (f"{day} is more than {MAX_AHEAD_DAYS} days ahead (latest {latest}; today is {today} by the "
                "database clock)")
    return None


# -- liveness: one definition for `status` and `check` ---------------------------------------


def slot_opened(opens_at: dt.datetime | str, created_at: dt.datetime | str) -> dt.datetime:
    """When the slot's clock starts: its window's opening, or its creation for a backfill."""
    return max(naive_utc(opens_at), naive_utc(created_at))


def late_seconds(state: State | str, kill_requested: bool, opens_at: dt.datetime | str,
                 created_at: dt.datetime | str, now: dt.datetime) -> float | None:
    """How long an edition has been due and unpublished (measured from the slot's opening,
    whatever its state history), or None if it is published, killed or not open yet."""
    if State(state) in DONE or kill_requested:
        return None
    age = (naive_utc(now) - slot_opened(opens_at, created_at)).total_seconds()
    return age if age >= 0 else None


def is_stranded(state: State | str, kill_requested: bool, opens_at: dt.datetime | str,
                created_at: dt.datetime | str, now: dt.datetime, after_seconds: float) -> float | None:
    """Late by more than `after_seconds` while nobody is asked to act (parked jobs are reported
    as quarantined or suspended instead): its age, or None."""
    if State(state) in PARKED:
        return None
    age = late_seconds(state, kill_requested, opens_at, created_at, now)
    return age if age is not None and age > after_seconds else None
