"""The 18 job states and every allowed transition, declared once as data.

`store.transition` checks every write against `EDGES`; nothing else decides what
may follow what. Pure: no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class State(enum.StrEnum):
    NO_JOB = "NO_JOB"
    CREATE_ELIGIBLE = "CREATE_ELIGIBLE"
    CREATE_IN_FLIGHT = "CREATE_IN_FLIGHT"
    ACCEPTED = "ACCEPTED"
    QUEUED = "QUEUED"
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED_NOT_RETRIEVED = "COMPLETED_NOT_RETRIEVED"
    RETRIEVED_NOT_VALIDATED = "RETRIEVED_NOT_VALIDATED"
    VALIDATION_FAILED_RETAINED = "VALIDATION_FAILED_RETAINED"
    READY_TO_COMPOSE = "READY_TO_COMPOSE"
    COMPOSED_NOT_SAVED = "COMPOSED_NOT_SAVED"
    SAVED_NOT_PUBLIC = "SAVED_NOT_PUBLIC"
    PUBLISHED = "PUBLISHED"
    CLEANUP_PENDING = "CLEANUP_PENDING"
    DELETED = "DELETED"
    PROVIDER_EXPIRED_OR_MISSING = "PROVIDER_EXPIRED_OR_MISSING"
    QUARANTINED = "QUARANTINED"
    MANUALLY_SUSPENDED = "MANUALLY_SUSPENDED"


S = State


@dataclass(frozen=True)
class Edge:
    src: State
    dst: State
    operator: bool = False  # only an operator command may take this edge


def _edges(src: State, dsts: Iterable[State], operator: bool = False) -> list[Edge]:
    return [Edge(src, d, operator) for d in dsts]


# States where a job has an accepted response we may still observe.
POLLING = frozenset({S.ACCEPTED, S.QUEUED, S.IN_PROGRESS})
# States an operator may suspend (everything alive that is not mid-POST).
SUSPENDABLE = frozenset(
    {
        S.NO_JOB, S.CREATE_ELIGIBLE, S.ACCEPTED, S.QUEUED, S.IN_PROGRESS,
        S.COMPLETED_NOT_RETRIEVED, S.RETRIEVED_NOT_VALIDATED, S.READY_TO_COMPOSE,
        S.COMPOSED_NOT_SAVED, S.SAVED_NOT_PUBLIC, S.PUBLISHED, S.CLEANUP_PENDING,
        S.PROVIDER_EXPIRED_OR_MISSING, S.VALIDATION_FAILED_RETAINED, S.QUARANTINED,
    }
)
# States from which an operator kill is allowed (before anything is public).
KILLABLE = frozenset(
    {
        S.NO_JOB, S.CREATE_ELIGIBLE, S.ACCEPTED, S.QUEUED, S.IN_PROGRESS,
        S.COMPLETED_NOT_RETRIEVED, S.RETRIEVED_NOT_VALIDATED, S.VALIDATION_FAILED_RETAINED,
        S.READY_TO_COMPOSE, S.COMPOSED_NOT_SAVED, S.PROVIDER_EXPIRED_OR_MISSING,
        S.QUARANTINED, S.MANUALLY_SUSPENDED,
    }
)

EDGES: tuple[Edge, ...] = tuple(
    _edges(S.NO_JOB, [S.CREATE_ELIGIBLE])
    + _edges(S.CREATE_ELIGIBLE, [S.CREATE_IN_FLIGHT, S.QUARANTINED])
    + _edges(S.CREATE_IN_FLIGHT, [S.ACCEPTED, S.CREATE_ELIGIBLE, S.QUARANTINED])
    # A poll may report any provider status, including the one we already hold.
    + _edges(S.ACCEPTED, [S.ACCEPTED, S.QUEUED, S.IN_PROGRESS, S.COMPLETED_NOT_RETRIEVED,
                          S.RETRIEVED_NOT_VALIDATED, S.PROVIDER_EXPIRED_OR_MISSING, S.QUARANTINED])
    + _edges(S.QUEUED, [S.QUEUED, S.IN_PROGRESS, S.COMPLETED_NOT_RETRIEVED,
                        S.RETRIEVED_NOT_VALIDATED, S.PROVIDER_EXPIRED_OR_MISSING, S.QUARANTINED])
    + _edges(S.IN_PROGRESS, [S.IN_PROGRESS, S.COMPLETED_NOT_RETRIEVED, S.RETRIEVED_NOT_VALIDATED,
                             S.PROVIDER_EXPIRED_OR_MISSING, S.QUARANTINED])
    + _edges(S.COMPLETED_NOT_RETRIEVED, [S.COMPLETED_NOT_RETRIEVED, S.RETRIEVED_NOT_VALIDATED,
                                         S.PROVIDER_EXPIRED_OR_MISSING, S.QUARANTINED])
    + _edges(S.RETRIEVED_NOT_VALIDATED, [S.READY_TO_COMPOSE, S.VALIDATION_FAILED_RETAINED])
    + _edges(S.READY_TO_COMPOSE, [S.COMPOSED_NOT_SAVED])
    + _edges(S.COMPOSED_NOT_SAVED, [S.SAVED_NOT_PUBLIC, S.QUARANTINED])
    + _edges(S.SAVED_NOT_PUBLIC, [S.PUBLISHED])
    + _edges(S.PUBLISHED, [S.CLEANUP_PENDING])
    + _edges(S.CLEANUP_PENDING, [S.CLEANUP_PENDING, S.DELETED])
    + _edges(S.PROVIDER_EXPIRED_OR_MISSING, [S.CREATE_ELIGIBLE, S.QUARANTINED])
    # A killed job goes through cleanup so remote data is cancelled and deleted.
    # Out of a validation failure only by decision: re-check the kept payload under fixed
    # rules (free), or pay for a new generation (budget permitting), or kill.
    + _edges(S.VALIDATION_FAILED_RETAINED, [S.CLEANUP_PENDING, S.RETRIEVED_NOT_VALIDATED, S.CREATE_ELIGIBLE],
             operator=True)
    + _edges(S.QUARANTINED, [S.CREATE_ELIGIBLE, S.ACCEPTED, S.QUEUED, S.IN_PROGRESS,
                             S.COMPLETED_NOT_RETRIEVED, S.RETRIEVED_NOT_VALIDATED], operator=True)
    + [Edge(s, S.MANUALLY_SUSPENDED, operator=True) for s in sorted(SUSPENDABLE)]
    + [Edge(S.MANUALLY_SUSPENDED, s, operator=True) for s in sorted(SUSPENDABLE)]
    + [Edge(s, S.CLEANUP_PENDING, operator=True) for s in sorted(KILLABLE)
       if s not in (S.VALIDATION_FAILED_RETAINED, S.MANUALLY_SUSPENDED)]
)

TERMINAL = frozenset({S.DELETED})
# Parked: not terminal, but nothing moves them except an operator.
PARKED = frozenset({S.QUARANTINED, S.VALIDATION_FAILED_RETAINED, S.MANUALLY_SUSPENDED})
# States `reconcile` works on. SAVED_NOT_PUBLIC belongs to the relay; parked states
# wait for an operator.
ACTIVE = frozenset(State) - TERMINAL - PARKED - {S.SAVED_NOT_PUBLIC}

_BY_PAIR = {(e.src, e.dst): e for e in EDGES}


def edge(src: State | str, dst: State | str) -> Edge | None:
    return _BY_PAIR.get((State(src), State(dst)))


def allowed(src: State | str, dst: State | str, *, operator: bool = False) -> bool:
    e = edge(src, dst)
    return e is not None and (operator or not e.operator)


def successors(src: State, *, operator: bool = True) -> set[State]:
    return {e.dst for e in EDGES if e.src == src and (operator or not e.operator)}
