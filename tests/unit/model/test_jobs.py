"""A job row as a value: a new slot's row, the operator's JSON view, the state a suspended job
stands for, custody owed while parked, the edition dates a slot may have, and when an edition is
late or stranded (one definition for `status` and `check`)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from iipub.model import jobs
from iipub.model.jobs import PUBLIC_FIELDS, Job, JournalEntry, slot_row
from iipub.model.states import State

NOW = dt.datetime(2026, 12, 1, 6, 0)
OPENS = dt.datetime(2026, 12, 1, 5, 0)


def new_job(**changes: object) -> Job:
    job = Job.from_row(slot_row(job_id="job-1", product="daily-brief", day=dt.date(2026, 12, 1), priority=10,
                                opens_at=OPENS, now=NOW))
    return dataclasses.replace(job, **changes)  # type: ignore[arg-type]


def test_a_new_slot_is_no_job_at_version_1_due_when_its_window_opens() -> None:
    job = new_job()
    assert (job.state, job.version, job.next_attempt_at, job.generation_attempts, job.payload) == (
        State.NO_JOB, 1, OPENS, 0, None)


def test_a_row_read_as_a_tuple_is_the_same_job() -> None:
    row = slot_row(job_id="job-1", product="daily-brief", day=dt.date(2026, 12, 1), priority=10, opens_at=OPENS,
                   now=NOW)
    assert Job.from_columns(list(row), list(row.values())) == Job.from_row(row)


def test_the_public_view_has_every_documented_field_in_order_and_no_payload() -> None:
    doc = new_job(payload='{"secret": 1}').public()
    assert tuple(doc) == PUBLIC_FIELDS and "payload" not in doc
    assert (doc["edition_date"], doc["state"], doc["opens_at"]) == (
        "2026-12-01", "NO_JOB", "2026-12-01T05:00:00.000000Z")


def test_a_suspended_job_is_what_it_was_for_the_operators_rules() -> None:
    assert new_job(state=State.MANUALLY_SUSPENDED, suspended_from="QUEUED").effective_state == State.QUEUED
    assert new_job(state=State.MANUALLY_SUSPENDED, suspended_from="nonsense").effective_state == (
        State.MANUALLY_SUSPENDED)
    assert new_job(state=State.QUEUED).effective_state == State.QUEUED


def test_a_parked_job_with_a_response_and_no_payload_owes_custody() -> None:
    parked = new_job(state=State.QUARANTINED, response_id="resp_1")
    assert parked.owes_custody
    assert not dataclasses.replace(parked, payload="{}").owes_custody
    assert not dataclasses.replace(parked, kill_requested=True).owes_custody
    assert not dataclasses.replace(parked, response_id=None).owes_custody
    assert not new_job(state=State.IN_PROGRESS, response_id="resp_1").owes_custody  # polled, not watched


def test_an_edition_date_more_than_a_year_away_is_refused_with_its_reason() -> None:
    today = dt.date(2026, 12, 1)
    assert jobs.date_outside_window(today, today) is None
    assert jobs.date_outside_window(today - dt.timedelta(days=366), today) is None
    assert jobs.date_outside_window(dt.date(2016, 12, 1), today) == (
        "2016-12-01 is more than 366 days in the past (earliest 2025-11-30; today is 2026-12-01 by the database "
        "clock)")
    assert "days ahead (latest 2027-12-02" in (jobs.date_outside_window(dt.date(2028, 1, 1), today) or "")


def test_lateness_counts_from_the_slots_opening_or_its_creation_for_a_backfill() -> None:
    assert jobs.late_seconds(State.QUEUED, False, OPENS, OPENS, NOW) == 3600
    assert jobs.late_seconds(State.QUEUED, False, OPENS, NOW - dt.timedelta(minutes=10), NOW) == 600  # backfill
    assert jobs.late_seconds(State.PUBLISHED, False, OPENS, OPENS, NOW) is None
    assert jobs.late_seconds(State.QUEUED, True, OPENS, OPENS, NOW) is None  # killed
    assert jobs.late_seconds(State.NO_JOB, False, NOW + dt.timedelta(hours=1), OPENS, NOW) is None  # not open yet


def test_a_late_job_nobody_is_asked_to_act_on_is_stranded() -> None:
    assert jobs.is_stranded("QUEUED", False, OPENS, OPENS, NOW, 1800) == 3600
    assert jobs.is_stranded("QUEUED", False, OPENS, OPENS, NOW, 7200) is None
    assert jobs.is_stranded("QUARANTINED", False, OPENS, OPENS, NOW, 60) is None  # parked: reported as such


@pytest.mark.parametrize("role", ["reconcile", "relay"])
def test_a_worker_id_names_its_role_host_and_process(role: str) -> None:
    first, second = jobs.new_worker_id(role), jobs.new_worker_id(role)
    assert first.startswith(f"{role}:") and first.split(":")[2].isdigit() and first != second


def test_a_journal_entry_is_shown_with_its_time_in_utc() -> None:
    entry = JournalEntry(1, "job-1", "NO_JOB", "CREATE_ELIGIBLE", 2, "w", "window_open", {"k": 1}, NOW, "es")
    assert entry.public() == {"from_state": "NO_JOB", "to_state": "CREATE_ELIGIBLE", "version": 2,
                              "reason": "window_open", "worker": "w", "at": "2026-12-01T06:00:00.000000Z",
                              "lang": "es", "detail": {"k": 1}}
