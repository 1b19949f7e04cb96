"""The hand-over file `iipub adopt` reads and `iipub export --in-flight` writes (pure)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from iipub.core.errors import UsageError
from iipub.operate import handover

TODAY = dt.date(2026, 12, 1)
PRODUCTS = {"daily-brief", "revolution-watch"}
RID = "resp_" + "c" * 40


def test_csv_columns_in_any_order_with_a_bom_and_optional_columns() -> None:
    raw = ("\ufeffresponse_id,edition_date,product\n"
           f"{RID},2026-11-30,daily-brief\n\n").encode()
    rows, refused = handover.parse(raw, PRODUCTS, TODAY)
    assert refused == []
    assert [(r.line, r.slot, r.response_id, r.attempts, r.started_at) for r in rows] == [
        (2, "daily-brief/2026-11-30", RID, 1, None)]


def test_json_lines_with_times_and_states_round_trip_through_render() -> None:
    doc = {"product": "revolution-watch", "edition_date": "2026-11-29", "response_id": RID, "attempts": 3,
           "started_at": "2026-11-29T06:00:02+01:00", "state": "IN_PROGRESS"}
    rows, refused = handover.parse((json.dumps(doc) + "\n").encode(), PRODUCTS, TODAY)
    assert refused == [] and rows[0].started_at == dt.datetime(2026, 11, 29, 5, 0, 2)
    for fmt in handover.FORMATS:
        again, none = handover.parse(handover.render(rows, fmt).encode(), PRODUCTS, TODAY)
        assert none == [] and [(r.slot, r.response_id, r.attempts, r.started_at, r.state) for r in again] == [
            (r.slot, r.response_id, r.attempts, r.started_at, r.state) for r in rows]


@pytest.mark.parametrize(("record", "why"), [
    ({"product": "daily-brief", "edition_date": "2026-12-05", "response_id": RID}, "in the future"),
    ({"product": "daily-brief", "edition_date": "2026-11-30", "response_id": RID, "attempts": True}, "attempts"),
    ({"product": "daily-brief", "edition_date": "2026-11-30", "response_id": RID, "attempts": 101}, "attempts"),
    ({"product": "daily-brief", "edition_date": "2026-11-30", "response_id": RID, "started_at": "noon"},
     "bad started_at"),
    ({"product": "daily-brief", "edition_date": "2026-11-30", "response_id": RID, "state": "DONE"}, "unknown state"),
    ({"product": "daily-brief", "edition_date": "2026-11-30", "response_id": "resp_a b"}, "malformed"),
    ({"product": "daily-brief", "edition_date": "30/11/2026", "response_id": RID}, "bad edition_date"),
    ({"product": "daily-brief", "edition_date": "2026-11-30", "response_id": RID, "slot": "x"}, "unknown key"),
])
def test_each_bad_json_line_is_one_refusal(record: object, why: str) -> None:
    rows, refused = handover.parse((json.dumps(record) + "\n").encode(), PRODUCTS, TODAY)
    assert rows == [] and len(refused) == 1 and why in refused[0].why, refused
    assert refused[0].text().startswith("line 1 (")


def test_a_line_that_is_not_an_object_is_refused_and_the_others_go_on() -> None:
    good = json.dumps({"product": "daily-brief", "edition_date": "2026-11-30", "response_id": RID})
    rows, refused = handover.parse(f"{good}\n[1, 2]\n{{broken\n".encode(), PRODUCTS, TODAY)
    assert len(rows) == 1 and [(r.line, r.why) for r in refused] == [(2, "not a JSON object"),
                                                                    (3, "not a JSON object")]


def test_a_file_that_is_no_hand_over_file_is_a_usage_error() -> None:
    for raw in (b"", b"product,edition_date\n", b"\xff\xfe", b"product,edition_date,response_id,colour\n"):
        with pytest.raises(UsageError):
            handover.parse(raw, PRODUCTS, TODAY)
