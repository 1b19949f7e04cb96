"""The restore drill for every state a backup can be taken in (all 18), with and without
webhooks, on the suite's backend (SQLite, or MariaDB with IIPUB_TEST_MYSQL_URL).

Each drill runs one slot to publication and cleanup, taking a copy of the database the moment
its job first enters the state under test (right after that write committed, as a backup would
see it); then restores the copy and runs ticks and the relay, plus the operator's own remedy
again for the states only an operator moves a job out of. Nothing may be paid twice (the
simulator's create count), no published page may change (the static site's bytes), and the
job must finish or be parked `restored_behind_ledger` with a remedy that pays nothing. What
each state does is recorded in docs/reliability.md ("Restore matrix").
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.machine import decisions, sweep
from iipub.model.jobs import Job
from iipub.model.states import State
from iipub.money.ledger import SpendLedger
from iipub.observe import invariants
from iipub.operate.executor import Operator
from iipub.provider.openai.simulator import Simulator
from iipub.publish import relay
from iipub.settings.config import Budgets, Settings, WebhookSettings
from iipub.store import clock
from iipub.store.job_store import Store
from iipub.store.track_store import TrackStore
from iipub.webhooks import receiver as webhook
from iipub.webhooks import server as webhook_server
from tests.support.databases import Snapshot, restore_rows, snapshot_rows
from tests.support.rows import job_events, job_rows
from tests.support.settings import make_settings
from tests.support.simulator import simulator

DAY = dt.date(2026, 11, 29)
PRODUCT = "daily-brief"
SECRET = "whsec_aWlwdWItcmVzdG9yZS1tYXRyaXgtc2VjcmV0LTAxMjM0NQ=="
STEP_SECONDS = 30.0  # simulated seconds between ticks: queued 40 s, in progress 40 s
OPERATOR_STATES = {State.VALIDATION_FAILED_RETAINED, State.QUARANTINED, State.MANUALLY_SUSPENDED}


@dataclass
class Drill:
    settings: Settings
    engine: sa.Engine
    sim: Simulator
    root: Path
    target: State
    backup: Snapshot | None = None
    remedy: Callable[[Drill], None] | None = None  # what the operator did to move the job on

    def job(self) -> dict[str, Any]:
        (row,) = job_rows(self.engine)
        return row

    def tick(self, n: int = 1) -> None:
        for _ in range(n):
            sweep.run(self.settings, self.engine)
            relay.run(self.settings, self.engine)
            self.sim.advance(STEP_SECONDS)
            self.sim.flush_webhooks(timeout=2.0)

    def run_on(self, until: Callable[[dict[str, Any]], bool], most: int = 14) -> None:
        for _ in range(most):
            if until(self.job()):
                return
            self.tick()
        raise AssertionError(f"{self.target}: the job stopped at {self.job()['state']} ({self.job()['last_error']})")

    def operator(self) -> Operator:
        return Operator(self.settings, self.engine)

    def pages(self) -> dict[str, str]:
        return {str(p.relative_to(self.root)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(self.root.rglob("*")) if p.is_file()}


@pytest.fixture
def drill_world(db_url: str, engine: sa.Engine, tmp_path: Path,
                request: pytest.FixtureRequest) -> Iterator[tuple[Settings, Simulator]]:
    """Settings and a simulator with a slow enough lifecycle that every polling state is seen
    (queued 40 s, in progress 40 s, 30 s per tick); with webhooks, a receiver the simulator
    announces finished responses to. Ticks make no slots: the drill's slot is the only one."""
    hooked = request.param
    hooks = WebhookSettings(enabled=True, poll_interval_seconds=0, lease_wait_seconds=0.3, request_seconds=10)
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(webhook_server.running(lambda e, s: [], hooks))
        sim = stack.enter_context(simulator(
            queued_seconds=40, in_progress_seconds=40,
            webhook_url=f"http://127.0.0.1:{server.port}/" if hooked else None,
            webhook_secret=SECRET if hooked else None, webhook_late_seconds=0.5))
        base = make_settings(db_url, sim.url, tmp_path / "public", reconcile={"auto_schedule": False})
        p = replace(base.products[PRODUCT], items=3, prompt="Write the brief.", opens_at=dt.time(0, 0))
        s = replace(base, products={PRODUCT: p}, webhook_sink=None)
        if hooked:
            s = replace(s, provider_webhook_secret=SECRET, webhooks=hooks)
            receiver = webhook.Receiver(s, engine=engine)
            stack.callback(receiver.close)
            server.set_app(receiver)
        yield s, sim


def _take_backup_on_entry(drill: Drill, mp: pytest.MonkeyPatch) -> None:
    """Copy the database right after the job's first committed move into `drill.target`. The
    store's two writes of a move are wrapped (and still done): a backup taken between two
    commits of one tick has no other place to happen."""
    transition, transition_many = Store.transition, Store.transition_many

    def seen(job: Job | None) -> None:
        if drill.backup is None and job is not None and job.state == drill.target:
            drill.backup = snapshot_rows(drill.engine)

    def hooked(self: Store, job: Job, to: State, **kw: Any) -> Job:
        new = transition(self, job, to, **kw)
        seen(new)
        return new

    def hooked_many(self: Store, writes: Any) -> Any:
        done = transition_many(self, writes)
        for new in done:
            seen(new)
        return done

    mp.setattr(Store, "transition", hooked)
    mp.setattr(Store, "transition_many", hooked_many)


def _is_done(row: dict[str, Any]) -> bool:
    return bool(row["state"] == "DELETED")


# -- how each state is reached and left, the first time round ------------------------------------


def _first_run(d: Drill) -> None:
    """Drive the slot to DELETED, through `d.target`, doing what an operator would where the job
    is parked (and remembering it in `d.remedy` to do again after the restore)."""
    t = d.target
    if t == State.VALIDATION_FAILED_RETAINED:
        d.sim.add_faults([{"op": "create", "fault": "schema_break", "times": 1}])  # the first output is bad
        d.run_on(lambda r: r["state"] == t.value)

        def regenerate(d: Drill) -> None:
            with d.operator() as op:
                op.regenerate(d.job()["id"], "the output broke the schema", "drill")
        d.remedy = regenerate
    elif t == State.QUARANTINED:
        tight = replace(d.settings, budgets=Budgets(max_poll_attempts=1))
        loose, d.settings = d.settings, tight  # the poll budget runs out while it runs ...
        d.run_on(lambda r: r["state"] == t.value)
        d.settings = loose  # ... and the operator raises it again

        def resume_polling(d: Drill) -> None:
            with d.operator() as op:
                job = d.job()
                if job["payload"] is not None:  # its webhook took custody while it was parked
                    op.revalidate(job["id"], "output kept while parked", "drill")
                else:
                    op.release(job["id"], "resume-polling", "poll budget raised", "drill")
        d.remedy = resume_polling
    elif t == State.MANUALLY_SUSPENDED:
        d.run_on(lambda r: r["state"] == State.ACCEPTED.value)
        with d.operator() as op:
            op.suspend(d.job()["id"], "hold it for a moment", "drill")

        def resume(d: Drill) -> None:
            with d.operator() as op:
                op.resume(d.job()["id"], "drill")
        d.remedy = resume
    elif t == State.COMPOSED_NOT_SAVED:
        # A slot is composed and unsaved while its language tracks' saves are journaled, not done
        # (shadow mode; a track validates, composes and saves in one transaction otherwise).
        with pytest.MonkeyPatch.context() as held:  # no setting holds tracks: none is due for a while
            held.setattr(TrackStore, "due", lambda self, limit, job_id=None: [])
            d.run_on(lambda r: r["state"] == State.READY_TO_COMPOSE.value)
        normal = d.settings
        d.settings = replace(normal, reconcile=replace(normal.reconcile, mode="shadow"))
        with pytest.MonkeyPatch.context() as now:
            now.setattr(decisions, "SHADOW_RECHECK_SECONDS", 0.0)  # the tracks' saves stay due
            d.run_on(lambda r: r["state"] == t.value)
        d.settings = normal
    elif t == State.PROVIDER_EXPIRED_OR_MISSING:
        d.sim.add_faults([{"op": "create", "fault": "fail", "times": 1}])  # the first response fails
    if d.remedy is not None:
        d.remedy(d)
    d.run_on(_is_done)


def _drill(d: Drill) -> None:
    Store(d.engine, "drill").schedule(d.settings.products[PRODUCT], DAY)
    with pytest.MonkeyPatch.context() as mp:
        _take_backup_on_entry(d, mp)
        if d.target == State.NO_JOB:
            d.backup = snapshot_rows(d.engine)  # the nightly backup: the slot exists, nothing more
        _first_run(d)
    assert d.backup is not None, f"the job never entered {d.target}"
    paid, live = d.sim.stats()["creates_total"], d.pages()
    assert live, "nothing was published"
    # -- the restore -------------------------------------------------------------------------
    restore_rows(d.engine, d.backup)
    clock.advance_clock(d.engine, 120)  # leases held at the moment of the backup have expired since
    parked = {s.value for s in OPERATOR_STATES}
    d.run_on(lambda r: _is_done(r) or r["state"] in parked, most=8)
    if d.remedy is not None and d.job()["state"] in parked:
        d.remedy(d)  # the operator does again what the backup forgot they did
        d.run_on(lambda r: _is_done(r) or r["quarantine_reason"] == "restored_behind_ledger", most=8)
    d.tick(2)  # and it stays so
    # -- what must hold ----------------------------------------------------------------------
    row = d.job()
    reasons = [e["reason"] for e in job_events(d.engine, row["id"])]
    assert d.sim.stats()["creates_total"] == paid, f"{d.target}: paid again ({reasons})"
    assert d.pages() == live, f"{d.target}: a published page changed"
    if row["state"] != "DELETED":
        assert (row["state"], row["quarantine_reason"]) == ("QUARANTINED", "restored_behind_ledger"), reasons
        assert "Without paying" in (row["last_error"] or "")
    path = d.settings.ledger_path()
    assert path is not None
    spend, bad, missing = SpendLedger(path).load()
    assert bad == 0 and missing is None
    assert invariants.check_ledger(d.engine, spend) == []
    found = invariants.check(d.engine, settings=d.settings, sim_stats=d.sim.stats(), ledger=spend)
    assert found == [], found


STATES = list(State)
assert len(STATES) == 18
# The fast loop restores one slot of each kind: not yet paid, paid and in flight, in custody but
# not public, public. The other fourteen states run with the slow tests (CI runs all 18).
FAST_STATES = {State.NO_JOB, State.ACCEPTED, State.SAVED_NOT_PUBLIC, State.PUBLISHED}


@pytest.mark.parametrize("drill_world", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["polls", "webhooks"],
                         indirect=True)
@pytest.mark.parametrize("state", [pytest.param(s, marks=() if s in FAST_STATES else pytest.mark.slow)
                                   for s in STATES], ids=[s.value for s in STATES])
def test_restore_drill_pays_nothing_twice_and_keeps_every_page(
    state: State, drill_world: tuple[Settings, Simulator], engine: sa.Engine
) -> None:
    settings, sim = drill_world
    assert settings.static_sink is not None
    d = Drill(settings, engine, sim, Path(settings.static_sink.root), state)
    _drill(d)
