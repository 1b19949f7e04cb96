"""The one way a decision becomes a fenced write: the job store's transition, the run's counters
and chain record, and the cool-down a 429 asks for. The steps of jobs and of language tracks
apply their decisions through it."""

from __future__ import annotations

from collections.abc import Callable

from iipub.machine.decisions import Decision
from iipub.machine.run.run_context import RunContext
from iipub.machine.run.shared_cool_down import SharedCoolDown
from iipub.model.jobs import Job
from iipub.model.states import State
from iipub.store.handles import Connection


def apply(ctx: RunContext, job: Job, d: Decision, *, extra: Callable[[Connection], object] | None = None,
          cools: SharedCoolDown | None = None) -> Job:
    """`cools`: the cool-down a 429 in `d` starts: the reads' unless the caller names another (the
    create step names the creates': a create's 429 holds creates, a read's holds reads)."""
    # A dispatch always keeps its lease: the POST follows, deadline or not, and a free
    # CREATE_IN_FLIGHT row would look like a crashed worker to the next tick.
    go_on = d.to == State.CREATE_IN_FLIGHT or (d.go_on and not ctx.deadline.passed())
    new = ctx.store.transition(
        job, d.to, reason=d.reason, changes=d.changes, detail=d.detail, delay=d.delay,
        keep_lease=go_on, extra=extra,
    )
    ctx.counters.entered(d.to)
    ctx.chain.record(new, d.reason)  # custody and saves, once committed
    if d.cooldown is not None:
        (cools or ctx.reads).cool_down(d.cooldown)
    return new
