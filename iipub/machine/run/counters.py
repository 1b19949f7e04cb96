"""What one run counts, summed by its threads into the report that ends in its summary and its
`tick_done` log line. Values only: no I/O."""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from dataclasses import dataclass, field

from iipub.model.states import State


@dataclass
class SweepReport:
    worker: str
    leased: int = 0
    taken: int = 0
    contention: int = 0
    lease_lost: int = 0
    errors: int = 0
    creates: int = 0  # creates sent that the provider may have processed (and charged)
    refused: int = 0  # creates provably not processed (429, never connected): not charged
    held_back: int = 0
    held_by_ceiling: int = 0  # creates waiting because a daily spend ceiling is reached
    held_by_product: int = 0  # creates waiting because their product's request was refused for a parameter
    held_by_model: int = 0  # creates waiting because the project may not use their model (or it does not exist)
    held_by_key: int = 0  # creates waiting because OPENAI_API_KEY is the placeholder `iipub init` writes
    provider_calls: int = 0
    unreachable: int = 0  # provider calls that could not even connect
    transitions: Counter[str] = field(default_factory=Counter)
    tracks_leased: int = 0  # language tracks leased by this tick
    track_transitions: Counter[str] = field(default_factory=Counter)  # by the state a track entered
    stopped_at_deadline: bool = False
    seconds: float = 0.0
    shadow: bool = False  # shadow mode: creates, saves, deletes and cancels were journaled, not done
    paused_everything: bool = False  # `pause --everything`: the tick did nothing

    @property
    def provider_unreachable(self) -> bool:
        """Every provider call of this tick failed to connect (`status --check` counts such ticks)."""
        return self.provider_calls > 0 and self.unreachable == self.provider_calls

    def summary(self) -> dict[str, object]:
        d = dataclasses.asdict(self)
        d["transitions"] = dict(self.transitions)
        d["track_transitions"] = dict(self.track_transitions)
        d["provider_unreachable"] = self.provider_unreachable
        return d


class Counters:
    """The run's `SweepReport`, counted under one lock by every thread of the run."""

    def __init__(self, report: SweepReport) -> None:
        self.report = report
        self._lock = threading.Lock()

    def count(self, attr: str, n: int = 1) -> None:
        with self._lock:
            setattr(self.report, attr, getattr(self.report, attr) + n)

    def entered(self, to: State) -> None:
        """A job's write committed, into `to`."""
        with self._lock:
            self.report.transitions[to.value] += 1

    def track_entered(self, to: State) -> None:
        """A language track's write committed, into `to`."""
        with self._lock:
            self.report.track_transitions[to.value] += 1

    def called(self, outcome: object) -> None:
        """One provider call and its outcome (an unreachable provider is counted per call)."""
        with self._lock:
            self.report.provider_calls += 1
            self.report.unreachable += int(bool(getattr(outcome, "unreachable", False)))

    def create_refused(self) -> None:
        """An admitted create (counted in `creates`) was provably refused: it is reported as
        refused, not as a create."""
        with self._lock:
            self.report.creates -= 1
            self.report.refused += 1

    def stopped_at_deadline(self) -> None:
        with self._lock:
            self.report.stopped_at_deadline = True
