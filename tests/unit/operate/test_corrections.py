"""The event contract a consumer relies on (README, "The events a consumer receives"), pure:
time-ordered ids, every event's type and revision, what a withdrawal carries, and the revision a
correction or withdrawal takes past both the database's and the spend ledger's."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest

from iipub.core.errors import OperatorRefused
from iipub.core.ids import uuid7, uuid7_time
from iipub.model import states
from iipub.model.jobs import Job
from iipub.model.states import EditionStatus, Reason, State
from iipub.money.spend import summarize
from iipub.operate import corrections
from iipub.publish.sinks import EditionEvent

SHA = "a" * 64
BASE: dict[str, Any] = {"event_id": "e1", "job_id": "j1", "product": "daily-brief", "edition_date": "2026-12-01",
                        "lang": "en", "sha256": SHA, "published_at": "2026-12-01T06:00:00Z"}


def test_ids_are_uuid7_and_sort_as_their_times() -> None:
    t0 = dt.datetime(2026, 12, 6, 18, 0, 0, tzinfo=dt.UTC)
    ids = [uuid7(t0 + dt.timedelta(milliseconds=ms)) for ms in (0, 1, 2, 1000, 86_400_000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(uuid.UUID(i).version == 7 and uuid.UUID(i).variant == uuid.RFC_4122 for i in ids)
    assert uuid7_time(ids[0]) == t0 and uuid7_time(str(uuid.uuid4())) is None
    assert uuid7(t0.replace(tzinfo=None))[:13] == ids[0][:13]  # naive is UTC
    same = [uuid7(t0) for _ in range(1000)]  # one millisecond: still in the order they were made
    assert same == sorted(same) and len(set(same)) == 1000
    assert all(uuid.UUID(i).version == 7 and uuid7_time(i) == t0 for i in same)
    # an operator's prefix tells them apart: ids of one millisecond differ in their first 18 characters
    assert len({i[:18] for i in same}) == len(same)


def test_a_payload_from_before_corrections_is_a_first_publication() -> None:
    ev = EditionEvent.from_payload({**BASE, "artifact": {"x": 1}})
    assert (ev.type, ev.revision, ev.supersedes, ev.public_note) == ("edition.published", 1, None, None)
    assert ev.to_payload() == {**BASE, "artifact": {"x": 1}, "type": "edition.published", "revision": 1}


def test_a_withdrawal_carries_no_artifact_and_every_other_event_does() -> None:
    gone = EditionEvent.from_payload({**BASE, "type": "edition.withdrawn", "revision": 2, "public_note": "n",
                                      "changed_at": "2026-12-02T00:00:00Z"})
    assert gone.artifact is None and "artifact" not in gone.to_payload()
    assert json.loads(gone.body())["public_note"] == "n"
    with pytest.raises(ValueError, match="lacks 'artifact'"):
        EditionEvent.from_payload({**BASE, "type": "edition.corrected", "revision": 2})
    with pytest.raises(ValueError, match="must be an object"):
        EditionEvent.from_payload({**BASE, "type": "edition.corrected", "revision": 2, "artifact": None})
    with pytest.raises(ValueError, match="lacks 'artifact'"):
        EditionEvent.from_payload(BASE)


@pytest.mark.parametrize(("field", "value", "why"), [
    ("revision", 0, "positive integer"), ("revision", "2", "positive integer"), ("revision", True, "positive"),
    ("type", "edition.deleted", "unknown event type"), ("public_note", 3, "string or null"),
])
def test_a_malformed_event_is_refused(field: str, value: Any, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        EditionEvent.from_payload({**BASE, "artifact": {}, field: value})


class _Edition:
    status: EditionStatus

    def __init__(self, lang: str, revision: int) -> None:
        self.lang, self.revision, self.sha256 = lang, revision, SHA
        self.status, self.public = EditionStatus.LIVE, True


def test_the_next_revision_is_past_the_databases_and_the_ledgers() -> None:
    lines = [json.dumps({"t": "revised", "slot": "daily-brief/2026-12-01", "attempt": 1, "job_id": "j1", "lang": "es",
                         "revision": r, "kind": "withdrawn", "sha256": SHA, "event_id": f"e{r}"}) for r in (2, 4, 3)]
    spend = summarize(lines)[0]["daily-brief/2026-12-01"]
    assert spend.revisions == {"es": (4, "withdrawn", SHA)}  # the highest, whatever the order of the lines
    assert corrections.next_revision(_Edition("es", 1), spend) == 5  # a restored database forgot 2..4
    assert corrections.next_revision(_Edition("es", 6), spend) == 7
    assert corrections.next_revision(_Edition("en", 1), spend) == 2
    assert corrections.next_revision(_Edition("en", 1), None) == 2


def _slot(state: State, **values: object) -> Job:
    now = dt.datetime(2026, 12, 1, 6, 0)
    base: dict[str, object] = {
        "id": "job-1", "product": "daily-brief", "edition_date": dt.date(2026, 12, 1), "state": state.value,
        "version": 9, "priority": 10, "is_backfill": False, "opens_at": now, "next_attempt_at": now,
        "generation_attempts": 1, "poll_count": 4, "retry_count": 0, "input_tokens": 0, "output_tokens": 0,
        "total_tokens": 0, "kill_requested": False, "created_at": now, "updated_at": now, "state_entered_at": now,
        "payload": "{}", "payload_sha256": "b" * 64, **values,
    }
    return Job.from_row({f: base.get(f) for f in Job.__dataclass_fields__})


def test_a_paid_correction_sends_a_published_slot_back_to_its_create_naming_what_it_replaces() -> None:
    withdrawn = _Edition("es", 2)
    withdrawn.status = EditionStatus.WITHDRAWN
    d = corrections.regenerate(_slot(State.DELETED, response_id="resp_old"), [withdrawn], 3, "ed", "wrong", "Fixed.")
    assert (d.to, d.reason) == (State.CREATE_ELIGIBLE, Reason.OPERATOR_CORRECT_REGENERATE)
    assert states.allowed(State.DELETED, d.to, operator=True) and not states.allowed(State.DELETED, d.to)
    assert d.changes["response_id"] is None and d.changes["payload"] is None and d.changes["poll_count"] == 0
    assert d.detail["languages"] == ["es"] and d.detail["statuses"] == {"es": "withdrawn"}
    assert d.detail["supersedes"] == {"es": SHA} and d.detail["revisions"] == {"es": 2}
    assert (d.detail["by"], d.detail["why"], d.detail["public_note"]) == ("ed", "wrong", "Fixed.")
    assert d.detail["replaced_response_id"] == "resp_old"
    assert corrections.regenerate(_slot(State.PUBLISHED), [withdrawn], 3, "ed", "w", None).to == State.CREATE_ELIGIBLE


@pytest.mark.parametrize(("slot", "words"), [
    (_slot(State.READY_TO_COMPOSE), "under way"),  # a generation (or a correction) is running
    (_slot(State.SAVED_NOT_PUBLIC), "under way"),
    (_slot(State.MANUALLY_SUSPENDED, suspended_from="DELETED"), "under way"),
    (_slot(State.PUBLISHED, response_id="resp_1"), "not deleted yet"),  # its output would be left behind
    (_slot(State.DELETED, generation_attempts=3), "--from-file FILE"),  # the budget: the free way is named
])
def test_a_paid_correction_is_refused_in_one_line_where_it_cannot_start(slot: Job, words: str) -> None:
    with pytest.raises(OperatorRefused) as caught:
        corrections.regenerate(slot, [_Edition("en", 1)], 3, "ed", "w", None)
    assert words in str(caught.value) and "\n" not in str(caught.value)
