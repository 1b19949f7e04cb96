"""The report page as a value: hostile names stay text, the document parses as HTML5 without an
error, nothing is fetched, and an empty history says so instead of drawing empty axes."""

from __future__ import annotations

import datetime as dt
import re

import html5lib

from iipub.observe import charts, history_values, report_page

NOW = dt.datetime(2026, 3, 7, 12, 0)
HOSTILE = "<script>alert(1)</script>\"'&"


def _history(rows: bool = True) -> history_values.History:
    days = history_values.day_range(NOW.date(), 3)
    spend = [{"paid_at": NOW, "product": HOSTILE, "tokens": 1234, "estimated": False}] if rows else []
    journal = [{"job_id": "j1", "from_state": "IN_PROGRESS", "to_state": "QUARANTINED", "at": NOW,
                "detail": None, "reason": HOSTILE, "lang": None}] if rows else []
    quarantined = [{"quarantine_reason": HOSTILE, "state_entered_at": NOW - dt.timedelta(hours=2)}] if rows else []
    chart_set = (history_values.spend_chart(days, spend, [(HOSTILE, 5000)]),
                 history_values.quarantine_chart(days, journal), history_values.provider_chart(days, journal),
                 history_values.runs_chart(days, []))
    return history_values.History(NOW, days, chart_set, history_values.quarantine_now(quarantined, NOW))


def test_hostile_names_are_text() -> None:
    page = report_page.render(_history())
    assert "<script" not in page.lower() and "alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#x27;&amp;" in page
    parser = html5lib.HTMLParser(strict=True)
    parser.parse(page)  # raises on a parse error
    assert not re.search(r"<link|@import|url\(|src=|href=", page, re.IGNORECASE)
    # the numbers under the chart: the spend table holds the day's tokens, the ceiling in its caption
    assert "<td>1,234</td>" in page and "ceiling &lt;script&gt;" in page
    assert page.count("<svg") == 3  # spend, quarantines, provider answers; the runs chart says it has none
    assert "No run recorded in these days." in page


def test_an_empty_history_says_so() -> None:
    history = _history(rows=False)
    assert history.empty
    page = report_page.render(history)
    assert 'id="empty"' in page and "<svg" not in page and "<table" not in page


def test_axis_steps_read_well() -> None:
    assert [round(charts.nice_step(v), 6) for v in (0.3, 1.05, 5250, 7000, 99)] == [0.3, 1.5, 6000, 8000, 100]
    assert charts.compact(18_000) == "18k" and charts.compact(90, "seconds") == "90 s"
    assert charts.compact(7200, "seconds") == "2 h"
