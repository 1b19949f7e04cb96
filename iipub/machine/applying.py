"""The one way a decision becomes a fenced write: the job store's transition, the tick's counters
and chain record, and the cool-down a 429 asks for. The steps of jobs and of language tracks
apply their decisions through it."""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from iipub.machine.decisions import Decision
from iipub.machine.tick import Tick
from iipub.model.jobs import Job
from iipub.model.states import State


def apply(tick: Tick, job: Job, d: Decision, *, extra: Callable[[sa.Connection], object] | None = None) -> Job:
    # A dispatch always keeps its lease: the POST follows, deadline or not, and a free
    # CREATE_IN_FLIGHT row would look like a crashed worker to the next tick.
    go_on = d.to == State.CREATE_IN_FLIGHT or (d.go_on and not tick.past_deadline())
    new = tick.store.transition(
        job, d.to, reason=d.reason, changes=d.changes, detail=d.detail, delay=d.delay,
        keep_lease=go_on, extra=extra,
    )
    tick.counted(d.to)
    tick.record_chain(new, d.reason)  # custody and saves, once committed
    if d.cooldown is not None:  # a create's 429 holds creates; a read's, reads
        tick.cool_down(d.cooldown, creates=job.state == State.CREATE_IN_FLIGHT)
    return new
