"""Calendar truth: every tick makes sure the slots of the last `[reconcile] catch_up_days`
exist (backfill priority), so a day on which no tick ran is not skipped; `status` reports a day
without its slot; two writers scheduling the same slot at once never end the tick."""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.core.severity import Severity
from iipub.machine import scheduling, sweep
from iipub.model.jobs import slot_row
from iipub.observe import metrics
from iipub.observe import queries as status_queries
from iipub.settings.config import Settings
from iipub.store import clock, tables
from iipub.store.job_store import Store
from tests.support.rows import job_rows, utc_today


def _with(settings: Settings, **reconcile_values: Any) -> Settings:
    return dataclasses.replace(settings, reconcile=dataclasses.replace(settings.reconcile, **reconcile_values))


def _slots(engine: sa.Engine) -> dict[tuple[str, dt.date], dict[str, Any]]:
    return {(r["product"], r["edition_date"]): r for r in job_rows(engine)}


def _last_ticked(settings: Settings, engine: sa.Engine, days_ago: int) -> dt.date:
    """A database whose last tick was `days_ago` days ago: every product's slots up to that day."""
    store = Store(engine, "test")
    last = utc_today() - dt.timedelta(days=days_ago)
    for p in settings.products.values():
        for n in range(3):
            store.schedule(p, last - dt.timedelta(days=n))
    return last


def test_the_next_tick_schedules_the_days_cron_missed_at_backfill_priority(
    settings: Settings, engine: sa.Engine
) -> None:
    last = _last_ticked(settings, engine, 3)
    sweep.run(_with(settings, max_in_flight=1, tick_seconds=1), engine)
    today = utc_today()
    slots = _slots(engine)
    for p in settings.products.values():
        for n in (1, 2):
            day = today - dt.timedelta(days=n)
            assert (p.name, day) in slots, (p.name, day)
            assert slots[p.name, day]["is_backfill"] and slots[p.name, day]["priority"] == p.priority + 1000
        assert (p.name, today) in slots and not slots[p.name, today]["is_backfill"]
    assert (settings.products["daily-brief"].name, last + dt.timedelta(days=1)) in slots
    assert len(slots) == len(settings.products) * (3 + 3)


def test_with_auto_schedule_off_a_tick_makes_no_slot_and_advances_the_ones_that_exist(
    settings: Settings, engine: sa.Engine
) -> None:
    _last_ticked(settings, engine, 3)
    before = set(_slots(engine))
    report = sweep.run(_with(settings, auto_schedule=False, tick_seconds=1), engine)
    assert set(_slots(engine)) == before  # neither today's slots nor the missed days'
    assert report.transitions  # the slots that exist moved on (their windows opened)
    sweep.run(_with(settings, tick_seconds=1), engine)  # on again: today's and the missed days' made
    assert len(_slots(engine)) == len(settings.products) * (3 + 3)


def test_a_new_installation_does_not_pay_for_the_days_before_it_existed(settings: Settings, engine: sa.Engine) -> None:
    store = Store(engine, "test")
    assert scheduling.ensure_scheduled(store, settings.products.values(), utc_today(), 2) == len(settings.products)
    assert {day for _, day in _slots(engine)} == {utc_today()}


def test_with_catch_up_off_status_reports_the_missing_day_and_check_warns(settings: Settings,
                                                                           engine: sa.Engine) -> None:
    _last_ticked(settings, engine, 3)
    off = _with(settings, catch_up_days=0)
    store = Store(engine, "test")
    scheduling.ensure_scheduled(store, off.products.values(), utc_today(), off.reconcile.catch_up_days)
    yesterday = utc_today() - dt.timedelta(days=1)
    assert {day for _, day in _slots(engine)} == {utc_today(), *(utc_today() - dt.timedelta(days=n)
                                                                  for n in (3, 4, 5))}
    report = status_queries.collect(engine, off)
    assert report.cutover is not None
    assert ("daily-brief", yesterday) in report.cutover.missing
    assert ("revolution-watch", yesterday) in report.cutover.missing
    code, line = report.check()
    assert code >= Severity.WARNING and "without a slot" in line and f"daily-brief {yesterday}" in line
    wide = status_queries.collect(
        engine, dataclasses.replace(off, status=dataclasses.replace(off.status, window_hours=72)))
    assert wide.cutover is not None
    assert {d for p, d in wide.cutover.missing if p == "daily-brief"} == {yesterday, yesterday - dt.timedelta(days=1)}
    assert "missing_slots" in report.to_dict()["cutover"]
    assert f"iipub_missing_slots {float(len(report.cutover.missing))}" in metrics.render(report).decode()


def test_a_steady_tick_reads_the_calendar_with_one_select(settings: Settings, engine: sa.Engine) -> None:
    _last_ticked(settings, engine, 0)
    store = Store(engine, "test")
    scheduling.ensure_scheduled(store, settings.products.values(), utc_today(), 2)  # catch up once
    with _statements(engine) as seen:
        created = scheduling.ensure_scheduled(store, settings.products.values(), utc_today(), 2)
    assert created == 0
    queries = [q for q in seen if not q.lstrip().upper().startswith("BEGIN")]  # SQLite's own BEGIN IMMEDIATE
    assert len(queries) == 1 and queries[0].lstrip().upper().startswith("SELECT"), seen


@contextmanager
def _statements(engine: sa.Engine) -> Iterator[list[str]]:
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


@pytest.mark.mysql
def test_two_writers_scheduling_the_same_slot_at_once_both_go_on(settings: Settings, engine: sa.Engine) -> None:
    """InnoDB's version of the race Galera reports at commit: a third transaction holds the slot's
    key and rolls back; the two schedulers waiting on it deadlock (1213), one wins. Neither raises."""
    product = settings.products["daily-brief"]
    day = utc_today() - dt.timedelta(days=9)
    blocker = engine.connect()
    tx = blocker.begin()
    blocker.execute(tables.jobs.insert().values(slot_row(job_id="blocker", product=product.name, day=day, priority=0,
                                                     opens_at=product.opens_on(day), now=dt.datetime(2026, 1, 1))))
    results: list[bool | BaseException] = []

    def schedule() -> None:
        try:
            results.append(Store(engine, "test").schedule(product, day))
        except BaseException as exc:
            results.append(exc)

    threads = [threading.Thread(target=schedule) for _ in range(2)]
    for t in threads:
        t.start()
    threading.Event().wait(1.0)  # both wait on the blocker's key
    tx.rollback()
    blocker.close()
    for t in threads:
        t.join(30)
    assert sorted(results, key=str) == [False, True], results
    assert [r["id"] for r in job_rows(engine)] != ["blocker"] and len(job_rows(engine)) == 1


def test_in_shadow_mode_what_the_legacy_system_publishes_is_not_late_for_status(
    settings: Settings, engine: sa.Engine
) -> None:
    Store(engine, "test").schedule(settings.products["daily-brief"], utc_today() - dt.timedelta(days=2))
    clock.advance_clock(engine, 3 * 3600)  # three hours since the slot was made: stranded unless shadowed
    normal = status_queries.collect(engine, settings)
    assert normal.stranded and normal.late
    shadow = status_queries.collect(engine, _with(settings, mode="shadow"))
    assert not shadow.stranded and not shadow.late
