"""The cutover's rules as values: the legacy system's decisions file parsed (bad lines counted,
not fatal), shadow decisions against it (an adopted slot's legacy create is no difference), the
days of the window, and what `status --check` makes of them."""

from __future__ import annotations

import datetime as dt
import json

from iipub.core.severity import Severity
from iipub.observe.cutover_values import Abort, Cutover, Difference, differences, parse_legacy, window_days

D1, D2 = dt.date(2026, 12, 1), dt.date(2026, 12, 2)


def line(product: str, day: str, action: str) -> str:
    return json.dumps({"product": product, "edition_date": day, "action": action})


def test_the_legacy_file_is_read_for_the_window_and_bad_lines_are_counted() -> None:
    lines = [line("daily-brief", "2026-12-01", "create"), "", "not json", line("daily-brief", "2026-12-01", "dance"),
             json.dumps({"product": "x"}), line("daily-brief", "2026-11-20", "create"),
             line("revolution-watch", "2026-12-02", "delete")]
    found, read, bad = parse_legacy(lines, [D1, D2])
    assert found == {("daily-brief", D1, "create"), ("revolution-watch", D2, "delete")}
    assert (read, bad) == (6, 3)  # blank lines are not lines; an unknown action is unreadable


def test_differences_name_who_did_what_and_ignore_an_adopted_slots_legacy_create() -> None:
    shadow = {("daily-brief", D1, "create"), ("daily-brief", D2, "save")}
    legacy = {("daily-brief", D2, "save"), ("revolution-watch", D1, "create"), ("world-report", D2, "create")}
    found = differences(shadow, legacy, adopted={("world-report", D2)})
    assert found == [Difference("daily-brief", D1, "create", True, False),
                     Difference("revolution-watch", D1, "create", False, True)]
    assert found[0].text() == "daily-brief 2026-12-01 create: iipub would, the legacy system did not"
    assert found[1].text() == "revolution-watch 2026-12-01 create: the legacy system did, iipub would not"


def test_the_window_covers_every_day_it_touches() -> None:
    assert window_days(dt.datetime(2026, 12, 2, 1, 0), 24) == [D1, D2]
    assert window_days(dt.datetime(2026, 12, 2, 1, 0), 1) == [D2]


def test_a_quiet_cutover_has_no_problem() -> None:
    assert Cutover(days=(D1,)).problems() == []


def test_an_abort_with_responses_finishing_unretrieved_is_critical() -> None:
    quiet = Abort("ops", "incident", None, 0, None)
    assert Cutover(days=(D1,), abort=quiet).problems() == [(Severity.WARNING, "everything paused by ops: incident")]
    busy = Abort("ops", "incident", None, 2, 300.0)
    ((severity, text),) = Cutover(days=(D1,), abort=busy).problems()
    assert severity == Severity.CRITICAL
    assert text == ("everything paused by ops: incident; 2 responses finishing unretrieved, the first retention "
                    "may run out in 5m00s")


def test_missing_slots_differences_and_an_unreadable_file_warn() -> None:
    missing = tuple(("daily-brief", D1 - dt.timedelta(days=n)) for n in range(7))
    c = Cutover(days=(D1,), missing=missing, differences=(Difference("daily-brief", D1, "create", True, False),),
                legacy_problem="legacy decisions file unreadable")
    texts = [text for severity, text in c.problems() if severity == Severity.WARNING]
    assert texts[0].startswith("7 edition days without a slot (daily-brief 2026-12-01, ") and "and 2 more" in texts[0]
    assert texts[1].startswith("1 shadow decisions differ from the legacy system's (e.g. daily-brief 2026-12-01")
    assert texts[2] == "legacy decisions file unreadable"
    doc = c.to_dict()
    assert doc["missing_slots"][0] == {"product": "daily-brief", "edition_date": "2026-12-01"}
    assert doc["paused_everything"] is None
