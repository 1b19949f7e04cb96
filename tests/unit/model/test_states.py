"""Properties of the transition table, checked the way a state-machine library checks
its definition when it is built."""

from __future__ import annotations

from collections import deque

from iipub.model import states
from iipub.model.states import EDGES, State


def _reachable(start: State, *, operator: bool = True) -> set[State]:
    seen, todo = {start}, deque([start])
    while todo:
        for nxt in states.successors(todo.popleft(), operator=operator):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_there_are_exactly_18_states() -> None:
    assert len(State) == 18


def test_no_exits_from_terminal_states() -> None:
    # Save one, an operator's: a published slot generated again, paid, to correct its editions
    # (`correct --regenerate --pay-again`); nothing in the machine ever leaves DELETED.
    for e in EDGES:
        assert e.src not in states.TERMINAL or (e.operator and e.dst == State.CREATE_ELIGIBLE), e
    assert {e.src for e in EDGES if e.src in states.TERMINAL} <= states.REGENERATES_TO_CORRECT
    assert states.REGENERATES_TO_CORRECT == states.DONE
    assert all(states.edge(s, State.CREATE_ELIGIBLE).operator for s in states.REGENERATES_TO_CORRECT)  # type: ignore[union-attr]


def test_every_state_reachable_from_no_job() -> None:
    assert _reachable(State.NO_JOB) == set(State)


def test_happy_path_needs_no_operator() -> None:
    assert State.DELETED in _reachable(State.NO_JOB, operator=False)


def test_every_non_terminal_state_can_reach_terminal_or_quarantine() -> None:
    for s in State:
        if s in states.TERMINAL:
            continue
        reach = _reachable(s) - {s}
        assert reach & (states.TERMINAL | {State.QUARANTINED}), s


def test_operator_only_edges_are_marked() -> None:
    ops = {(e.src, e.dst) for e in EDGES if e.operator}
    # Every way out of quarantine and out of suspension needs an operator.
    custody = (State.MANUALLY_SUSPENDED, State.MANUALLY_SUSPENDED)  # output stored while suspended
    parked_custody = (State.QUARANTINED, State.QUARANTINED)  # ... and while quarantined (it stays parked)
    # Adoption on proof (the spend ledger, the live site) may leave quarantine without an
    # operator; the reason is checked by `iipub check` (unreleased_exit).
    adoption = {(State.QUARANTINED, s) for s in (State.ACCEPTED, State.QUEUED, State.IN_PROGRESS,
                                                  State.COMPLETED_NOT_RETRIEVED, State.DELETED)}
    assert all(e.operator for e in EDGES if e.src in (State.QUARANTINED, State.MANUALLY_SUSPENDED)
               and (e.src, e.dst) not in (custody, parked_custody) and (e.src, e.dst) not in adoption)
    assert states.allowed(*custody) and not states.edge(*custody).operator  # type: ignore[union-attr]
    assert states.allowed(*parked_custody) and not states.edge(*parked_custody).operator  # type: ignore[union-attr]
    assert (State.QUARANTINED, State.CREATE_ELIGIBLE) in ops
    assert not states.allowed(State.QUARANTINED, State.CREATE_ELIGIBLE)
    assert states.allowed(State.QUARANTINED, State.CREATE_ELIGIBLE, operator=True)
    # Suspension is only ever an operator action.
    assert all(e.operator for e in EDGES if e.dst == State.MANUALLY_SUSPENDED and (e.src, e.dst) != custody)


def test_edges_are_declared_once() -> None:
    pairs = [(e.src, e.dst) for e in EDGES]
    assert len(pairs) == len(set(pairs))


def test_money_edges() -> None:
    # The only way into CREATE_IN_FLIGHT is from CREATE_ELIGIBLE (where the budget is charged).
    assert {e.src for e in EDGES if e.dst == State.CREATE_IN_FLIGHT} == {State.CREATE_ELIGIBLE}
    # An in-flight create never goes straight to a second create attempt except via refusal.
    assert states.successors(State.CREATE_IN_FLIGHT, operator=False) == {
        State.ACCEPTED, State.CREATE_ELIGIBLE, State.QUARANTINED,
    }
    # Publication needs custody: no edge reaches SAVED_NOT_PUBLIC except from a composed payload,
    # or a forked slot's READY_TO_COMPOSE once its language tracks saved their composed parts
    # (resuming a suspended job returns it to where it was, which may be SAVED_NOT_PUBLIC.)
    assert {e.src for e in EDGES if e.dst == State.SAVED_NOT_PUBLIC and not e.operator} == {
        State.COMPOSED_NOT_SAVED, State.READY_TO_COMPOSE
    }
    assert {e.src for e in states.TRACK_EDGES if e.dst == State.SAVED_NOT_PUBLIC} == {State.COMPOSED_NOT_SAVED}


def test_suspended_and_parked_never_worked_by_reconcile() -> None:
    assert State.MANUALLY_SUSPENDED not in states.ACTIVE
    assert State.QUARANTINED not in states.ACTIVE
    assert State.SAVED_NOT_PUBLIC not in states.ACTIVE  # the relay's


# -- the state groups -----------------------------------------------------------------------------

def _groups() -> dict[str, frozenset[object]]:
    """Every named group of `model/states.py`: its module-level frozensets."""
    return {name: value for name, value in vars(states).items() if isinstance(value, frozenset)}


def test_each_partition_places_every_state_exactly_once() -> None:
    assert states.PARTITIONS
    for name, groups in states.PARTITIONS.items():
        placed = [s for group in groups for s in group]
        assert sorted(placed) == sorted(State), name  # every state, none twice
        assert all(groups), name


def test_each_track_partition_places_every_track_state_exactly_once() -> None:
    assert states.TRACK_PARTITIONS
    assert len(states.TRACK_STATES) == 8
    for name, groups in states.TRACK_PARTITIONS.items():
        placed = [s for group in groups for s in group]
        assert sorted(placed) == sorted(states.TRACK_STATES), name
        assert all(groups), name


def test_every_named_group_is_a_nonempty_set_of_declared_members() -> None:
    groups = _groups()
    assert len(groups) > 30
    for name, group in groups.items():
        assert group, name
        members = {type(m) for m in group}
        assert members in ({State}, {states.Reason}), name
        if members == {State}:
            assert group <= frozenset(State), name
    assert set(states.TRACK_OF_UNFORKED_SLOT) | set(states.TRACK_OF_UNFORKED_SLOT.values()) <= set(State)


def test_every_partition_is_made_of_named_groups() -> None:
    named = set(_groups().values())
    for groups in (*states.PARTITIONS.values(), *states.TRACK_PARTITIONS.values()):
        assert all(group in named for group in groups)


def test_how_the_groups_relate() -> None:
    s = states
    # The saved editions are the relay's and the done ones; the sweep's provider use splits ACTIVE.
    assert s.EDITIONS_SAVED == s.RELAYING | s.DONE
    assert s.LOCAL_STEPS <= s.ACTIVE and s.PROVIDER_BOUND <= s.ACTIVE and not s.LOCAL_STEPS & s.PROVIDER_BOUND
    # Custody: polling comes before it; a job parked from anywhere is watched for it.
    assert s.POLLING < s.CUSTODY_PENDING < s.IN_FLIGHT <= s.BEFORE_CUSTODY
    assert s.GENERATING <= s.IN_FLIGHT and s.RESUMES_INTO_VALIDATION <= s.BEFORE_CUSTODY
    assert s.CUSTODY_WATCHED <= s.PARKED and s.SETTLED == s.TERMINAL | s.PARKED
    assert s.AWAITING_DISPATCH < s.CREATE_NEXT <= s.BEFORE_CUSTODY
    assert s.CLEANING_UP < s.DONE and s.DONE & s.ACTIVE == s.CLEANING_UP
    # Tracks run only under a slot that lets them; a slot frozen for its tracks never does.
    assert not s.TRACKS_RUN_IN & s.TRACKS_NEVER_RUN_IN
    assert s.REOPENS_FOR_A_TRACK <= s.PARKED & s.TRACKS_NEVER_RUN_IN
    assert all(s.allowed(src, State.READY_TO_COMPOSE, operator=True) for src in s.REOPENS_FOR_A_TRACK)
    assert all(s.allowed(src, State.RETRIEVED_NOT_VALIDATED, operator=True) for src in s.IMPORTABLE)
    assert not s.ORPHAN_ADOPTABLE & (s.CUSTODY_TAKEN | s.POLLING)
