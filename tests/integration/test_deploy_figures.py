"""Figures operators read as documented: `max_in_flight` is counted across processes in the
database, and the unretrieved-dwell SLI runs from the provider's completion, not from the poll
that happened to see it."""

from __future__ import annotations

import datetime as dt
import json
import random
import time
from dataclasses import replace
from pathlib import Path

import sqlalchemy as sa

from iipub.machine import sweep
from iipub.machine.decisions import on_output
from iipub.machine.run import run_context
from iipub.model.states import State
from iipub.observe import queries
from iipub.observe import status_report as status
from iipub.provider.fake import FakeProvider
from iipub.provider.openai.simulator import Simulator
from iipub.provider.outcomes import Observed, Stage
from iipub.settings.config import Settings
from iipub.store import tables
from iipub.store.job_store import Store
from tests.support.offline import offline_settings
from tests.support.rows import utc_today
from tests.support.settings import open_at_midnight


def test_max_in_flight_counts_what_another_process_has_in_flight(db_url: str, engine: sa.Engine,
                                                                 tmp_path: Path) -> None:
    # A provider that keeps every response queued, and polls a minute apart: an accepted create
    # stays in flight after its tick.
    base = offline_settings(db_url, tmp_path / "public")
    settings: Settings = open_at_midnight(replace(
        base, reconcile=replace(base.reconcile, max_in_flight=1, concurrency=1, poll_interval_seconds=60)))
    store_a = Store(engine, "process-a", 15)
    for product in settings.products.values():
        store_a.schedule(product, utc_today())
    with FakeProvider() as provider:
        # process A starts its tick while nothing is in flight ...
        tick_a = run_context.for_sweep(settings, store_a, provider, time.monotonic() + 30, random.Random(1))
        # ... and process B dispatches one create meanwhile
        report_b = sweep.run(settings, engine, provider=provider)
        assert report_b.creates == 1 and store_a.count_in_flight() == 1
        # A sees B's create in the database: no room under max_in_flight = 1
        assert tick_a.creates.admission.admit() is False and tick_a.counters.report.held_back == 1
        assert provider.count("create") == provider.accepted == 1


def test_max_in_flight_counts_this_ticks_admissions_until_they_commit(engine: sa.Engine, db_url: str,
                                                                      tmp_path: Path) -> None:
    settings = offline_settings(db_url, tmp_path / "public")
    s = replace(settings, reconcile=replace(settings.reconcile, max_in_flight=2))
    with FakeProvider() as provider:
        t = run_context.for_sweep(s, Store(engine, "w", 15), provider, time.monotonic() + 30, random.Random(1))
        admission = t.creates.admission
        assert admission.admit() and admission.admit()
        assert not admission.admit()  # two admitted, neither committed yet
        admission.admitted()  # one failed before its write: its room is free again
        assert admission.admit()
        assert provider.calls == []  # admission is the database's alone


T0 = dt.datetime(2026, 12, 1, 6, 0)
CIF, ACC, IP = State.CREATE_IN_FLIGHT.value, State.ACCEPTED.value, State.IN_PROGRESS.value
CNR, RNV = State.COMPLETED_NOT_RETRIEVED.value, State.RETRIEVED_NOT_VALIDATED.value


def _at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def test_dwell_runs_from_the_providers_completion_mapped_to_the_database_clock() -> None:
    # The provider ran the response 100 s (its clock, 3 hours off ours) and finished it at our
    # t=105; a poll saw it only at t=400 and took custody at once. It waited 295 s unseen.
    provider_detail = json.dumps({"provider_created_at": 1_800_000_000.0 + 10_800,
                                  "provider_completed_at": 1_800_000_100.0 + 10_800})
    durations, failed = status.dwell_samples([
        ("a", CIF, ACC, _at(5), None),
        ("a", ACC, IP, _at(60), None),
        ("a", IP, CNR, _at(400), None),
        ("a", CNR, RNV, _at(400.2), provider_detail),
        # no provider times (an older journal row): from the entry into COMPLETED_NOT_RETRIEVED
        ("b", CIF, ACC, _at(0), None),
        ("b", IP, CNR, _at(50), None),
        ("b", CNR, RNV, _at(80), json.dumps({"bytes": 10})),
        # accepted before the window: from the entry into COMPLETED_NOT_RETRIEVED too
        ("c", IP, CNR, _at(10), None),
        ("c", CNR, RNV, _at(12), provider_detail),
    ])
    assert [round(d, 3) for d in durations] == [295.2, 30.0, 2.0] and failed == 0


def test_custody_journals_the_providers_times_for_the_dwell(engine: sa.Engine, settings: Settings) -> None:
    store = Store(engine, "test")
    store.schedule(settings.products["daily-brief"], utc_today())
    job = store.list_jobs()[0]
    observed = Observed("resp_1", "completed", "{}", None, created_at=1_800_000_000.0, completed_at=1_800_000_100.0,
                        stage=Stage.FINISHED)
    decision = on_output(job, observed)
    assert decision.detail["provider_created_at"] == 1_800_000_000.0
    assert decision.detail["provider_completed_at"] == 1_800_000_100.0


def test_status_reads_the_dwell_from_the_journal(engine: sa.Engine, settings: Settings, sim: Simulator) -> None:
    """A whole job through the simulator: the SLI has its sample, from the journal's provider times."""
    s = open_at_midnight(replace(settings, products={"daily-brief": settings.products["daily-brief"]}))
    Store(engine, "test").schedule(s.products["daily-brief"], utc_today())
    for _ in range(6):
        sweep.run(s, engine)
        with engine.connect() as conn:
            if conn.execute(sa.select(sa.func.count()).where(tables.job_events.c.to_state == RNV)).scalar_one():
                break
        sim.advance(5)
    with engine.connect() as conn:
        details = [json.loads(d) for d in conn.execute(
            sa.select(tables.job_events.c.detail).where(tables.job_events.c.to_state == RNV)).scalars()]
    assert details and {"provider_created_at", "provider_completed_at"} <= set(details[0])
    report = queries.collect(engine, s)
    assert report.dwell.count >= 1
