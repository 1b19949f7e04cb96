"""The 18 job states, every allowed transition and every journal reason, declared once as data.

`store.transition` checks every write against `EDGES` and `Reason`; nothing else decides
what may follow what, or what a journal entry may be called. Pure: no I/O.
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
# A response accepted and its output not in custody yet: a finished response is news to such a
# job (a webhook, an accepted create's dwell), and suspended from one of these, its finished output
# is still taken into custody.
CUSTODY_PENDING = POLLING | {S.COMPLETED_NOT_RETRIEVED}
# Parked states whose response, if the job holds one and no payload yet, is still watched for
# custody (the custody watch; PRODUCT.md section 20): the poll budget bounds observation only.
CUSTODY_WATCHED = frozenset({S.QUARANTINED, S.MANUALLY_SUSPENDED})
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

# Published slots `correct --regenerate` may send back to a paid create (their editions public).
REGENERATES_TO_CORRECT = frozenset({S.PUBLISHED, S.CLEANUP_PENDING, S.DELETED})

EDGES: tuple[Edge, ...] = tuple(
    _edges(S.NO_JOB, [S.CREATE_ELIGIBLE, S.QUARANTINED])
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
    # Config drift, a removed product or a step that keeps failing park the job with its payload kept.
    + _edges(S.RETRIEVED_NOT_VALIDATED, [S.READY_TO_COMPOSE, S.VALIDATION_FAILED_RETAINED, S.QUARANTINED])
    # A forked slot follows its slowest language track (`TRACK_EDGES`): every track composed, or
    # every track saved at once (validate, compose and save of a track are one transaction).
    # A slot none of whose tracks is saved parks with them (every track failed validation, or parked).
    + _edges(S.READY_TO_COMPOSE, [S.COMPOSED_NOT_SAVED, S.SAVED_NOT_PUBLIC, S.VALIDATION_FAILED_RETAINED,
                                  S.QUARANTINED])
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
    + _edges(S.QUARANTINED, [S.CREATE_ELIGIBLE, S.RETRIEVED_NOT_VALIDATED], operator=True)
    # A slot parked with all its language tracks, one of them revalidated (`revalidate ID --lang
    # L`): the slot lets its tracks run again, so that language goes on to publication.
    + _edges(S.VALIDATION_FAILED_RETAINED, [S.READY_TO_COMPOSE], operator=True)
    + _edges(S.QUARANTINED, [S.READY_TO_COMPOSE], operator=True)
    # A slot waiting on a parked language track: a new paid generation for the unpublished
    # languages (`regenerate`, budget permitting).
    + _edges(S.READY_TO_COMPOSE, [S.CREATE_ELIGIBLE], operator=True)
    + _edges(S.COMPOSED_NOT_SAVED, [S.CREATE_ELIGIBLE], operator=True)
    # A published slot generated again to correct its public editions (`correct --regenerate`,
    # paid, budget and payment authority permitting): its tracks' new output is committed as a
    # correction (a new revision of each edition), never as a second edition. The only way out of
    # DELETED, and only an operator's.
    + [Edge(s, S.CREATE_ELIGIBLE, operator=True) for s in sorted(REGENERATES_TO_CORRECT)]
    # Output an operator recovered from the provider's dashboard after the response was lost
    # (`iipub jobs import-payload`): custody by hand, validated by the next tick as usual.
    + _edges(S.PROVIDER_EXPIRED_OR_MISSING, [S.RETRIEVED_NOT_VALIDATED], operator=True)
    # An orphan's kept output adopted for a job a restore sent back before its create
    # (`iipub orphans adopt`): custody by hand, nothing paid.
    + _edges(S.NO_JOB, [S.RETRIEVED_NOT_VALIDATED], operator=True)
    + _edges(S.CREATE_ELIGIBLE, [S.RETRIEVED_NOT_VALIDATED], operator=True)
    # Adopting a response the job provably paid for (an operator's --link, or iipub itself on
    # proof: the spend ledger after a restore); `unreleased_exit` checks the reason.
    + _edges(S.QUARANTINED, [S.ACCEPTED, S.QUEUED, S.IN_PROGRESS, S.COMPLETED_NOT_RETRIEVED])
    # `iipub adopt`: a response a legacy system started (and paid for) taken over by a slot iipub
    # has not started: polled from the next tick, nothing paid (section 16 of PRODUCT.md).
    + _edges(S.NO_JOB, [S.ACCEPTED], operator=True)
    # Shadow mode journals what it would do and stays where it is (no create, no save, no delete);
    # a slot waiting for its create is re-planned when its product's configuration changed.
    + [Edge(s, s) for s in (S.NO_JOB, S.CREATE_ELIGIBLE, S.COMPOSED_NOT_SAVED)]
    # ... or on what the live site proves: the ledger's published editions are still served.
    + _edges(S.QUARANTINED, [S.DELETED])
    + [Edge(s, S.MANUALLY_SUSPENDED, operator=True) for s in sorted(SUSPENDABLE)]
    # Suspension freezes decisions and spending, never custody: output that finishes is stored.
    + [Edge(S.MANUALLY_SUSPENDED, S.MANUALLY_SUSPENDED)]
    # Quarantine neither: a parked job's response that finishes is stored, the job stays parked
    # with its reason (the custody watch, or the response's webhook); a response found gone is
    # journaled there too, and nothing is paid for it.
    + [Edge(S.QUARANTINED, S.QUARANTINED)]
    + [Edge(S.MANUALLY_SUSPENDED, s, operator=True) for s in sorted(SUSPENDABLE)]
    + [Edge(s, S.CLEANUP_PENDING, operator=True) for s in sorted(KILLABLE)
       if s not in (S.VALIDATION_FAILED_RETAINED, S.MANUALLY_SUSPENDED)]
)

# -- state groups ------------------------------------------------------------------------------
# Every group of states iipub decides by is declared here, once, and named for what it means.
# `PARTITIONS` names the families that split the states: tests/unit/model/test_states.py checks that
# each places every state exactly once, so a new state must be placed in each.

# Who moves a job (the first partition). `reconcile` works on ACTIVE ones (`steps.STEPS`).
ACTIVE = frozenset(
    {
        S.NO_JOB, S.CREATE_ELIGIBLE, S.CREATE_IN_FLIGHT, S.ACCEPTED, S.QUEUED, S.IN_PROGRESS,
        S.COMPLETED_NOT_RETRIEVED, S.RETRIEVED_NOT_VALIDATED, S.READY_TO_COMPOSE, S.COMPOSED_NOT_SAVED,
        S.PUBLISHED, S.CLEANUP_PENDING, S.PROVIDER_EXPIRED_OR_MISSING,
    }
)
# Saved editions waiting for their sinks: the relay's, never the sweep's.
RELAYING = frozenset({S.SAVED_NOT_PUBLIC})
# Parked: not terminal, but nothing moves them except an operator.
PARKED = frozenset({S.QUARANTINED, S.VALIDATION_FAILED_RETAINED, S.MANUALLY_SUSPENDED})
TERMINAL = frozenset({S.DELETED})

# Where the job's output is (the second partition): not in custody yet, taken into custody, or
# parked from anywhere (CUSTODY_WATCHED above: the job's columns say which).
BEFORE_CUSTODY = frozenset(
    {
        S.NO_JOB, S.CREATE_ELIGIBLE, S.CREATE_IN_FLIGHT, S.ACCEPTED, S.QUEUED, S.IN_PROGRESS,
        S.COMPLETED_NOT_RETRIEVED, S.PROVIDER_EXPIRED_OR_MISSING,
    }
)
CUSTODY_TAKEN = frozenset(
    {
        S.RETRIEVED_NOT_VALIDATED, S.VALIDATION_FAILED_RETAINED, S.READY_TO_COMPOSE, S.COMPOSED_NOT_SAVED,
        S.SAVED_NOT_PUBLIC, S.PUBLISHED, S.CLEANUP_PENDING, S.DELETED,
    }
)

# Published (or on its way out after publication): nothing is late any more.
DONE = frozenset({S.PUBLISHED, S.CLEANUP_PENDING, S.DELETED})
# The slot's editions are saved: nothing left to kill, something to republish.
EDITIONS_SAVED = RELAYING | DONE
# Where a job rests once nothing more will happen by itself: deleted, or parked for an operator.
SETTLED = TERMINAL | PARKED
# Parked, but not quarantined (quarantine has its own line in `status`).
PARKED_OUTSIDE_QUARANTINE = PARKED - {S.QUARANTINED}

# A create comes next: no response of the current attempt exists (a lost one is created again).
CREATE_NEXT = frozenset({S.NO_JOB, S.CREATE_ELIGIBLE, S.PROVIDER_EXPIRED_OR_MISSING})
# Slots not dispatched yet, as the time-to-dispatch SLI counts them.
AWAITING_DISPATCH = frozenset({S.NO_JOB, S.CREATE_ELIGIBLE})
# A create sent or accepted and its response not finished: the provider may be generating
# (admission control counts them against new creates).
GENERATING = frozenset({S.CREATE_IN_FLIGHT}) | POLLING
# Between the create and custody: what `export --in-flight` hands over and a rollback hands back.
IN_FLIGHT = frozenset({S.CREATE_IN_FLIGHT}) | CUSTODY_PENDING
# Suspended from one of these, a job whose output is stored resumes into validation.
RESUMES_INTO_VALIDATION = CUSTODY_PENDING | {S.PROVIDER_EXPIRED_OR_MISSING}
# A custody dwell that ends here lost the output it was meant to fetch.
DWELL_LOST = frozenset({S.PROVIDER_EXPIRED_OR_MISSING, S.QUARANTINED})
# Published, the provider's copy not deleted yet: the sweep's cleanup work.
CLEANING_UP = frozenset({S.PUBLISHED, S.CLEANUP_PENDING})

# States whose next step calls the provider: not stepped while that kind of call cools down.
PROVIDER_BOUND = frozenset({S.CREATE_ELIGIBLE, S.ACCEPTED, S.QUEUED, S.IN_PROGRESS, S.COMPLETED_NOT_RETRIEVED,
                            S.CLEANUP_PENDING})
# States whose steps in one tick never reach the provider (they end at SAVED_NOT_PUBLIC or in
# quarantine); any other active one may, directly or by the steps it goes on to (NO_JOB -> a
# create, PUBLISHED -> a delete), so the provider's client is set up before such a job is leased.
LOCAL_STEPS = frozenset({S.RETRIEVED_NOT_VALIDATED, S.READY_TO_COMPOSE, S.COMPOSED_NOT_SAVED})

# The states `import-payload` takes a job out of: each has an edge into RETRIEVED_NOT_VALIDATED.
IMPORTABLE = frozenset({S.QUARANTINED, S.COMPLETED_NOT_RETRIEVED, S.PROVIDER_EXPIRED_OR_MISSING})
# Where an orphan's output may enter: a job a restore sent back before its create, or one whose
# own response is lost or parked; never one holding custody or polling a live response.
ORPHAN_ADOPTABLE = frozenset({S.NO_JOB, S.CREATE_ELIGIBLE, S.QUARANTINED, S.COMPLETED_NOT_RETRIEVED,
                              S.PROVIDER_EXPIRED_OR_MISSING})

_BY_PAIR = {(e.src, e.dst): e for e in EDGES}

# -- language tracks (PRODUCT.md section 15) --------------------------------------------------
# After the slot's shared validation its payload forks into one track per language; a track
# validates, composes, saves and publishes its own edition. Its states are `State` members.
TRACK_UNPUBLISHED = frozenset({S.RETRIEVED_NOT_VALIDATED, S.VALIDATION_FAILED_RETAINED, S.READY_TO_COMPOSE,
                               S.COMPOSED_NOT_SAVED, S.QUARANTINED})
# A track holding its language's saved edition: kept across a new generation, never replaced.
TRACK_SAVED = frozenset({S.SAVED_NOT_PUBLIC, S.PUBLISHED})
TRACK_PARKED = frozenset({S.VALIDATION_FAILED_RETAINED, S.QUARANTINED})
# Tracks the sweep works on (the relay publishes SAVED_NOT_PUBLIC ones).
TRACK_ACTIVE = frozenset({S.RETRIEVED_NOT_VALIDATED, S.READY_TO_COMPOSE, S.COMPOSED_NOT_SAVED})
# The slot states whose tracks the sweep moves: a suspended, parked or killed slot freezes them.
TRACKS_RUN_IN = frozenset({S.READY_TO_COMPOSE, S.COMPOSED_NOT_SAVED})
# Slot states that never run their tracks and never fork again by themselves: a track due for the
# track pass under such a slot waits for nothing (a suspended slot waits for `resume`).
TRACKS_NEVER_RUN_IN = frozenset({S.VALIDATION_FAILED_RETAINED, S.QUARANTINED, S.SAVED_NOT_PUBLIC, S.PUBLISHED,
                                 S.CLEANUP_PENDING, S.DELETED})
# A slot parked with its tracks: `revalidate ID --lang L` takes it back to READY_TO_COMPOSE.
REOPENS_FOR_A_TRACK = frozenset({S.VALIDATION_FAILED_RETAINED, S.QUARANTINED})

# A slot past the fork without tracks (a row from before them, or restored from an older
# backup) is converted: each language's track in this state (`track_store.convert`).
TRACK_OF_UNFORKED_SLOT: dict[State, State] = {
    S.READY_TO_COMPOSE: S.RETRIEVED_NOT_VALIDATED,
    S.COMPOSED_NOT_SAVED: S.COMPOSED_NOT_SAVED,
    S.SAVED_NOT_PUBLIC: S.SAVED_NOT_PUBLIC,
    S.PUBLISHED: S.PUBLISHED,
    S.CLEANUP_PENDING: S.PUBLISHED,
    S.DELETED: S.PUBLISHED,
}

TRACK_EDGES: tuple[Edge, ...] = tuple(
    # Config drift, a removed product or a failing step park the track with its part kept.
    _edges(S.RETRIEVED_NOT_VALIDATED, [S.READY_TO_COMPOSE, S.VALIDATION_FAILED_RETAINED, S.QUARANTINED])
    + _edges(S.READY_TO_COMPOSE, [S.COMPOSED_NOT_SAVED, S.QUARANTINED])
    # The save writes the edition and its outbox rows in the same transaction (a clash: rolled back).
    + _edges(S.COMPOSED_NOT_SAVED, [S.SAVED_NOT_PUBLIC, S.QUARANTINED])
    + _edges(S.SAVED_NOT_PUBLIC, [S.PUBLISHED])
    # Shadow mode journals the save it would do and stays.
    + [Edge(S.COMPOSED_NOT_SAVED, S.COMPOSED_NOT_SAVED)]
    # A new generation of the slot forks again: an unpublished track takes the new part. The
    # same edge out of VALIDATION_FAILED_RETAINED / QUARANTINED is `revalidate ID --lang L`'s:
    # the kept part re-checked under fixed rules (free).
    + [Edge(s, S.RETRIEVED_NOT_VALIDATED) for s in sorted(TRACK_UNPUBLISHED)]
    # ... and a published track whose edition an operator's `correct --regenerate` replaces takes
    # it too (the fork of that paid generation): its save is the edition's correction.
    + [Edge(S.PUBLISHED, S.RETRIEVED_NOT_VALIDATED)]
    # `kill`: the slot will not publish; its unpublished tracks end with it.
    + [Edge(s, S.DELETED, operator=True) for s in sorted(TRACK_UNPUBLISHED)]
)
_TRACK_BY_PAIR = {(e.src, e.dst): e for e in TRACK_EDGES}
# The states a language track takes.
TRACK_STATES = frozenset({e.src for e in TRACK_EDGES} | {e.dst for e in TRACK_EDGES})

# The families of groups that split the states, each state in exactly one group of each: a job's
# over `State`, a track's over `TRACK_STATES` (tests/unit/model/test_states.py).
PARTITIONS: dict[str, tuple[frozenset[State], ...]] = {
    "who moves a job: the sweep, the relay, an operator, nobody": (ACTIVE, RELAYING, PARKED, TERMINAL),
    "where a job's output is: not in custody yet, parked from anywhere, in custody": (
        BEFORE_CUSTODY, CUSTODY_WATCHED, CUSTODY_TAKEN),
}
TRACK_PARTITIONS: dict[str, tuple[frozenset[State], ...]] = {
    "where a track is: worked by the sweep, parked, saved, ended": (
        TRACK_ACTIVE, TRACK_PARKED, TRACK_SAVED, TERMINAL),
}


def track_allowed(src: State | str, dst: State | str, *, operator: bool = False) -> bool:
    e = _TRACK_BY_PAIR.get((State(src), State(dst)))
    return e is not None and (operator or not e.operator)


def track_blocks(job_state: State) -> frozenset[State]:
    """Track states that keep a forked slot where it is: before every track is composed (a slot
    in READY_TO_COMPOSE), before every track is saved (COMPOSED_NOT_SAVED)."""
    if job_state == S.READY_TO_COMPOSE:
        return TRACK_UNPUBLISHED - {S.COMPOSED_NOT_SAVED} | {S.DELETED}
    return TRACK_UNPUBLISHED | {S.DELETED}


def edge(src: State | str, dst: State | str) -> Edge | None:
    return _BY_PAIR.get((State(src), State(dst)))


def allowed(src: State | str, dst: State | str, *, operator: bool = False) -> bool:
    e = edge(src, dst)
    return e is not None and (operator or not e.operator)


def successors(src: State, *, operator: bool = True) -> set[State]:
    return {e.dst for e in EDGES if e.src == src and (operator or not e.operator)}


class Reason(enum.StrEnum):
    """Every `job_events.reason` iipub writes. Each member has an `operator` flag (only an
    operator command writes it, and an operator command writes nothing else) and a one-line
    `meaning`; quarantine reasons are also the values of `jobs.quarantine_reason`."""

    # The slot's life, in order.
    SCHEDULED = "scheduled"
    WINDOW_OPEN = "window_open"
    DISPATCH = "dispatch"
    ACCEPTED = "accepted"
    CREATE_REFUSED = "create_refused"
    CREATE_PARAM_REFUSED = "create_param_refused"
    POLL = "poll"
    POLL_FAILED = "poll_failed"
    PROVIDER_FINISHED = "provider_finished"
    PROVIDER_UNEXPECTED_STATUS = "provider_unexpected_status"
    LOSS_SUSPECTED = "loss_suspected"
    SCOPE_MISMATCH = "scope_mismatch"
    LOSS_CONFIRMED = "loss_confirmed"
    RETRIEVED = "retrieved"
    RECREATE_AFTER_LOSS = "recreate_after_loss"
    VALIDATED = "validated"
    VALIDATION_FAILED = "validation_failed"
    COMPOSED = "composed"
    SAVED = "saved"
    ALL_EVENTS_DELIVERED = "all_events_delivered"
    CLEANUP_START = "cleanup_start"
    CLEANUP_RETRY = "cleanup_retry"
    REMOTE_DELETED = "remote_deleted"
    NOTHING_REMOTE = "nothing_remote"
    FORKED = "forked"
    PARKED_RESPONSE_GONE = "parked_response_gone"
    # Quarantine reasons written by the machine.
    CREATE_OUTCOME_UNKNOWN = "create_outcome_unknown"
    CREATE_REJECTED = "create_rejected"
    CRASHED_DURING_CREATE = "crashed_during_create"
    GENERATION_BUDGET_EXHAUSTED = "generation_budget_exhausted"
    POLL_BUDGET_EXHAUSTED = "poll_budget_exhausted"
    CONFIG_DRIFT = "config_drift"
    EDITION_CONFLICT = "edition_conflict"
    PROVIDER_REFUSED = "provider_refused"
    OUTPUT_CAP_REACHED = "output_cap_reached"
    CONTENT_FILTERED = "content_filtered"
    CREATE_ACCESS_REFUSED = "create_access_refused"
    CREATE_TOO_LARGE = "create_too_large"
    SCOPE_UNKNOWN = "scope_unknown"
    PRODUCT_REMOVED = "product_removed"
    RESTORED_BEHIND_LEDGER = "restored_behind_ledger"
    RESTORED_ADOPTED = "restored_adopted"
    RESTORED_PUBLISHED = "restored_published"
    AUTO_LINKED = "auto_linked"
    STEP_FAILING = "step_failing"
    PAYMENT_REFUSED = "payment_refused"
    CONFIG_REPLANNED = "config_replanned"
    # Operator commands.
    OPERATOR_RELEASE_VERIFIED_LOST = "operator_release_verified_lost"
    OPERATOR_RESUME_POLLING = "operator_resume_polling"
    OPERATOR_LINK = "operator_link"
    OPERATOR_HARVEST = "operator_harvest"
    OPERATOR_SUSPEND = "operator_suspend"
    OPERATOR_RESUME = "operator_resume"
    OPERATOR_CANCEL = "operator_cancel"
    OPERATOR_CANCELLED = "operator_cancelled"  # the quarantine reason an operator cancel leaves
    OPERATOR_KILL = "operator_kill"
    OPERATOR_REVALIDATE = "operator_revalidate"
    OPERATOR_REGENERATE = "operator_regenerate"
    OPERATOR_IMPORT_PAYLOAD = "operator_import_payload"
    OPERATOR_ADOPT_ORPHAN = "operator_adopt_orphan"
    OPERATOR_ADOPT = "operator_adopt"
    # Taking a published edition back (the job stays where it is; `EDITION_ACTIONS`).
    OPERATOR_WITHDRAW = "operator_withdraw"
    OPERATOR_CORRECT = "operator_correct"
    OPERATOR_CORRECT_REGENERATE = "operator_correct_regenerate"
    # A paid generation for a correction, saved: the edition's new revision (the job's sweep).
    CORRECTION_SAVED = "correction_saved"
    # Shadow mode: what a normal tick would have done, journaled instead of done.
    SHADOW_WOULD_CREATE = "shadow_would_create"
    SHADOW_WOULD_PUBLISH = "shadow_would_publish"
    SHADOW_WOULD_DELETE = "shadow_would_delete"
    SHADOW_WOULD_CANCEL = "shadow_would_cancel"

    @property
    def operator(self) -> bool:
        return REASON_INFO[self][0]

    @property
    def meaning(self) -> str:
        return REASON_INFO[self][1]


R = Reason
# member -> (written only by an operator command, one-line meaning)
REASON_INFO: dict[Reason, tuple[bool, str]] = {
    R.SCHEDULED: (False, "the slot was created (NO_JOB), by the schedule or a backfill"),
    R.WINDOW_OPEN: (False, "the slot's window opened; its config fingerprint was recorded"),
    R.DISPATCH: (False, ("a paid create was charged to the generation budget, committed before the POST "
                         "(detail: the service tier asked)")),
    R.ACCEPTED: (False, "the provider accepted the create; its response id is recorded"),
    R.CREATE_REFUSED: (False, ("the provider provably refused the create (429, flex without capacity, never "
                               "connected); attempt refunded")),
    R.CREATE_PARAM_REFUSED: (False, ("the provider refused a parameter of the create (400 invalid_request_error "
                                     "naming it; nothing billed); attempt refunded, the product's creates held "
                                     "until its configuration changes")),
    R.CREATE_ACCESS_REFUSED: (False, ("the provider refused the create for its model: the project has no access to it "
                                      "(403) or it does not exist (404 model_not_found); nothing billed, attempt "
                                      "refunded, the model's creates held until the models endpoint answers for it")),
    R.CREATE_TOO_LARGE: (False, ("the provider refused the create as larger than the organization's tokens-per-minute "
                                 "limit (429 Request too large); nothing billed, attempt refunded, the product's "
                                 "creates held until its request changes")),
    R.POLL: (False, "a poll found the response queued or in progress"),
    R.POLL_FAILED: (False, "a poll failed in a way that is safe to repeat (429, 5xx, timeout); backing off"),
    R.PROVIDER_FINISHED: (False, "a poll found the response completed or incomplete"),
    R.PROVIDER_UNEXPECTED_STATUS: (False, ("the provider reports a status iipub does not know; observed again, "
                                           "never taken as a loss")),
    R.LOSS_SUSPECTED: (False, "a 404, an unrequested `cancelled` or a `failed`: read again before believing it"),
    R.SCOPE_MISMATCH: (False, ("a 404 read under another organization, project or key than the create's: the "
                               "response is invisible there, not lost; the job waits for its scope's credentials")),
    R.LOSS_CONFIRMED: (False, "the loss held over the confirmation reads; the response is gone"),
    R.RETRIEVED: (False, "the finished output was stored on the job row (custody)"),
    R.RECREATE_AFTER_LOSS: (False, "a lost response is generated again on the same row, budget permitting"),
    R.VALIDATED: (False, "the stored output passed validation"),
    R.VALIDATION_FAILED: (False, "the stored output failed validation; payload kept"),
    R.COMPOSED: (False, "the per-language artifacts were composed and hashed"),
    R.SAVED: (False, "editions and their outbox rows were saved in one transaction"),
    R.ALL_EVENTS_DELIVERED: (False, "the relay delivered every outbox event of the job"),
    R.CLEANUP_START: (False, "published: the remote response is due for deletion"),
    R.CLEANUP_RETRY: (False, "deleting the remote response failed; retrying later"),
    R.REMOTE_DELETED: (False, "the remote response is deleted (or was already gone)"),
    R.NOTHING_REMOTE: (False, "no remote response to delete"),
    R.FORKED: (False, ("the slot's payload passed the shared checks: this language's part forked into its "
                       "track (a new generation forks again only into tracks not saved)")),
    R.PARKED_RESPONSE_GONE: (False, ("the custody watch found a parked job's response gone or dead (404, failed, "
                                     "cancelled): reported, the job stays parked and nothing is paid for it")),
    R.CREATE_OUTCOME_UNKNOWN: (False, "quarantine: the create may have been accepted and billed (timeout, reset, 5xx)"),
    R.CREATE_REJECTED: (False, "quarantine: the provider rejected the create with a 4xx it will repeat"),
    R.CRASHED_DURING_CREATE: (False, "quarantine: a worker died mid-create; it may have been billed"),
    R.GENERATION_BUDGET_EXHAUSTED: (False, "quarantine: every paid create of the slot is used"),
    R.POLL_BUDGET_EXHAUSTED: (False, "quarantine: the poll budget ran out; the response id is kept"),
    R.CONFIG_DRIFT: (False, "quarantine: the deployed product config changed under the job"),
    R.EDITION_CONFLICT: (False, "quarantine: an edition for this slot already exists; nothing was written"),
    R.PRODUCT_REMOVED: (False, "quarantine: the job's product is no longer configured; any output is kept"),
    R.RESTORED_BEHIND_LEDGER: (False, ("quarantine: the spend ledger knows of paid creates, custody, saves or "
                                       "publications this row has forgotten (a restored backup); no create until "
                                       "it is settled")),
    R.CONFIG_REPLANNED: (False, ("the product's configuration changed while the slot waited for its create (nothing "
                                 "paid, no output): re-planned under the deployed one, both fingerprints journaled")),
    R.PAYMENT_REFUSED: (False, ("quarantine: the payment authority found the slot paid for or its output held "
                                "(custody, the legacy system, the live site, nothing left to buy); no create")),
    R.RESTORED_ADOPTED: (False, ("the response the ledger recorded was still at the provider, naming this slot: "
                                 "adopted, nothing paid again")),
    R.RESTORED_PUBLISHED: (False, ("the ledger recorded the slot's editions published and the live site still serves "
                                   "them: the restored job is done, nothing paid or published again")),
    R.AUTO_LINKED: (False, ("a verified webhook proved which response an unknown create made (its metadata names "
                            "this job, attempt and config): the job adopted it, nothing paid again")),
    R.STEP_FAILING: (False, "quarantine: the job's step failed with an unexpected error too many times in a row"),
    R.PROVIDER_REFUSED: (False, ("quarantine: the provider refused the prompt or policy (a failed response, or "
                                 "the model's refusal in its answer, kept); paying again would fail again")),
    R.OUTPUT_CAP_REACHED: (False, ("quarantine: the response stopped at the product's max_output_tokens "
                                   "(incomplete); its output is kept, nothing is paid again until an operator "
                                   "raises the cap and releases it")),
    R.CONTENT_FILTERED: (False, ("quarantine: the provider's content filter stopped the response before its answer "
                                 "was complete (incomplete: content_filter); its output is kept, nothing is paid "
                                 "again until an operator changes the prompt and releases it")),
    R.SCOPE_UNKNOWN: (False, ("quarantine: a response taken over without a known scope answered 404 on every read: "
                              "it may live in another organization or project, so it is not taken as a loss; kept "
                              "and watched for a person")),
    R.OPERATOR_RELEASE_VERIFIED_LOST: (True, "operator: the response is verified lost; create again"),
    R.OPERATOR_RESUME_POLLING: (True, "operator: poll the kept response again, poll budget reset"),
    R.OPERATOR_LINK: (True, "operator: adopt a response found at the provider whose metadata names the job"),
    R.OPERATOR_HARVEST: (True, "operator: output of an adopted or cancelled response was stored (custody)"),
    R.OPERATOR_SUSPEND: (True, "operator: the job is parked in MANUALLY_SUSPENDED"),
    R.OPERATOR_RESUME: (True, "operator: the job returned to the state it was suspended from"),
    R.OPERATOR_CANCEL: (True, "operator: a remote cancel was requested and its real outcome recorded"),
    # The machine writes it too: a cancelled response polled again after a release parks again.
    R.OPERATOR_CANCELLED: (False, "quarantine: an operator cancelled the generation"),
    R.OPERATOR_KILL: (True, "operator: the job will not publish; remote data is cancelled and deleted"),
    R.OPERATOR_REVALIDATE: (True, "operator: re-check the kept payload under fixed rules (free)"),
    R.OPERATOR_REGENERATE: (True, "operator: pay for a new generation of output that failed validation"),
    R.OPERATOR_IMPORT_PAYLOAD: (True, ("operator: output recovered from the provider's dashboard was stored "
                                       "(custody); validated as usual")),
    R.OPERATOR_ADOPT_ORPHAN: (True, ("operator: the kept output of an orphan response of this installation was "
                                     "stored for the job (custody, nothing paid); validated as usual")),
    R.OPERATOR_ADOPT: (True, ("operator: a response a legacy system started was adopted from a hand-over file "
                              "(`iipub adopt`), charged with the creates it already cost; nothing paid")),
    R.OPERATOR_WITHDRAW: (True, ("operator: a public edition was withdrawn (`iipub withdraw`): its page is replaced "
                                 "by a notice through the outbox (`edition.withdrawn`); the edition is kept")),
    R.OPERATOR_CORRECT: (True, ("operator: a public edition was corrected (`iipub correct`): a new revision with a "
                                "visible notice goes out through the outbox (`edition.corrected`)")),
    R.OPERATOR_CORRECT_REGENERATE: (True, ("operator: a published slot is generated again, paid, to correct its "
                                           "public editions (`iipub correct --regenerate --pay-again`); the editions "
                                           "stay as they are until the new output is saved as their correction")),
    R.CORRECTION_SAVED: (False, ("the paid generation of a correction was checked and composed: saved as the "
                                 "edition's new revision (`edition.corrected`, naming the sha256 it supersedes)")),
    R.SHADOW_WOULD_CREATE: (False, "shadow mode: a paid create is due; not sent"),
    R.SHADOW_WOULD_PUBLISH: (False, "shadow mode: the edition would be saved and published; not saved"),
    R.SHADOW_WOULD_DELETE: (False, "shadow mode: the remote response would be deleted; kept"),
    R.SHADOW_WOULD_CANCEL: (False, "shadow mode: the remote generation would be cancelled and deleted; left alone"),
}

# A create the provider provably refused: the attempt it was charged is refunded.
REFUND_REASONS = frozenset({R.CREATE_REFUSED, R.CREATE_PARAM_REFUSED, R.CREATE_ACCESS_REFUSED, R.CREATE_TOO_LARGE})
# The values of `jobs.quarantine_reason`.
QUARANTINE_REASONS = frozenset({
    R.CREATE_OUTCOME_UNKNOWN, R.CREATE_REJECTED, R.CRASHED_DURING_CREATE, R.GENERATION_BUDGET_EXHAUSTED,
    R.POLL_BUDGET_EXHAUSTED, R.CONFIG_DRIFT, R.EDITION_CONFLICT, R.PROVIDER_REFUSED, R.OUTPUT_CAP_REACHED,
    R.CONTENT_FILTERED, R.SCOPE_UNKNOWN, R.PRODUCT_REMOVED,
    R.STEP_FAILING, R.RESTORED_BEHIND_LEDGER, R.OPERATOR_CANCELLED, R.PAYMENT_REFUSED,
})
# The machine may take a job out of quarantine only with one of these: proof, not a guess.
ADOPTION_REASONS = frozenset({R.RESTORED_ADOPTED, R.RESTORED_PUBLISHED, R.AUTO_LINKED})
# Parked with the output in custody: a remedy may validate it again under the current rules.
PAYLOAD_QUARANTINES = frozenset({R.CONFIG_DRIFT, R.PRODUCT_REMOVED, R.STEP_FAILING, R.PAYMENT_REFUSED})
# Parked with output that is known bad (cut at the output cap, or a refusal): validating it again
# parks it again; it still counts as held, and `regenerate` is the explicit way to pay again.
KNOWN_BAD_OUTPUT = frozenset({R.OUTPUT_CAP_REACHED, R.PROVIDER_REFUSED})
# A dispatch that ended in one of these may or may not have reached the provider.
AMBIGUOUS_CREATE = frozenset({R.CREATE_OUTCOME_UNKNOWN, R.CRASHED_DURING_CREATE})
# Provider observations; their detail carries `due_at` (the overdue-poll SLI).
# What shadow mode journals, by the action a legacy system's decision file names (`shadow`).
SHADOW_REASONS: dict[Reason, str] = {
    R.SHADOW_WOULD_CREATE: "create", R.SHADOW_WOULD_PUBLISH: "publish", R.SHADOW_WOULD_DELETE: "delete",
    R.SHADOW_WOULD_CANCEL: "cancel",
}
# Where shadow mode holds a job (its create, save or delete journaled, not done): the legacy
# system's business while `[reconcile] mode = "shadow"`, so not late or stranded for `status`.
SHADOW_HELD = frozenset({S.NO_JOB, S.CREATE_ELIGIBLE, S.COMPOSED_NOT_SAVED, S.CLEANUP_PENDING})
# Operator actions on a slot's public editions: journaled on the slot without moving it (the
# entry's from and to state are the job's own), and only where its editions are saved.
EDITION_ACTIONS = frozenset({R.OPERATOR_WITHDRAW, R.OPERATOR_CORRECT})
POLL_REASONS = frozenset({R.POLL, R.PROVIDER_FINISHED, R.POLL_FAILED, R.LOSS_SUSPECTED,
                          R.PROVIDER_UNEXPECTED_STATUS, R.SCOPE_MISMATCH})


class EditionStatus(enum.StrEnum):
    """What an `editions` row is on the public site (`editions.status`)."""

    LIVE = "live"  # as published (revision 1)
    CORRECTED = "corrected"  # replaced by an operator's correction, shown with a notice
    WITHDRAWN = "withdrawn"  # taken back: its page is a notice; kept in the database as evidence


class EventType(enum.StrEnum):
    """The type every outbox event names (`outbox.event_type` and the payload's `type`)."""

    PUBLISHED = "edition.published"
    CORRECTED = "edition.corrected"
    WITHDRAWN = "edition.withdrawn"


# The event each status is announced by.
EVENT_OF_STATUS = {EditionStatus.LIVE: EventType.PUBLISHED, EditionStatus.CORRECTED: EventType.CORRECTED,
                   EditionStatus.WITHDRAWN: EventType.WITHDRAWN}


def reason_of(text: str | None) -> Reason | None:
    """The declared reason a journal entry names, or None (an entry from an older or foreign writer)."""
    try:
        return Reason(text) if text is not None else None
    except ValueError:
        return None


def is_operator_reason(text: str | None) -> bool:
    r = reason_of(text)
    return r is not None and r.operator
