"""The page `iipub report` writes: one self-contained HTML document (its stylesheet inline, its
charts inline SVG, no script, no font, no image or link to fetch), readable in light and in dark
(`prefers-color-scheme`), every text escaped. Pure: a `history_values.History` in, the page out.

Each chart is followed by a table of the numbers it draws; an empty range says so in words.
"""

from __future__ import annotations

import re
from html import escape

from iipub.core.timefmt import duration, iso_z
from iipub.observe import charts
from iipub.observe.history_values import AGE_BUCKETS, Chart, History

# Colours checked for AA contrast (4.5:1) of every text against its background in both schemes
# (tests/acceptance/test_report_chromium.py); the series colours are for bars and lines.
STYLE = """
:root { color-scheme: light dark; --bg: #ffffff; --fg: #1b1f24; --muted: #4a5560; --grid: #d5dbe1;
  --rule: #aab4be; --panel: #f5f7f9; --limit: #b42318;
  --s0: #1f5fa8; --s1: #c2410c; --s2: #2e7d32; --s3: #8e24aa; --s4: #a16207; --s5: #0e7490; --s6: #be123c;
  --s7: #4b5563; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #12161b; --fg: #e6e9ed; --muted: #a9b4bf; --grid: #2c343d; --rule: #4a5561; --panel: #1a2027;
    --limit: #ff7b72;
    --s0: #6aa9ff; --s1: #ff9a5c; --s2: #72c777; --s3: #d393f0; --s4: #e8bd4f; --s5: #4fcfe0; --s6: #ff7b95;
    --s7: #aeb7c2; }
}
html { background: var(--bg); color: var(--fg); }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 auto;
  max-width: 920px; padding: 20px 16px 48px; background: var(--bg); color: var(--fg); }
h1 { font-size: 1.5rem; margin: 0 0 4px; }
h2 { font-size: 1.15rem; margin: 0 0 4px; }
p { margin: 4px 0 10px; }
.meta, .note, caption { color: var(--muted); }
section { background: var(--panel); border: 1px solid var(--grid); border-radius: 6px; padding: 14px 16px;
  margin: 18px 0; }
.empty { font-size: 1.05rem; padding: 18px; border: 1px dashed var(--rule); border-radius: 6px; }
svg.chart { width: 100%; height: auto; display: block; margin: 6px 0; }
svg .grid { stroke: var(--grid); stroke-width: 1; }
svg .axisline { stroke: var(--rule); stroke-width: 1; }
svg text { fill: var(--muted); color: var(--muted); font-size: 11px; }
svg .limit { stroke: var(--limit); stroke-width: 1.5; stroke-dasharray: 6 4; }
svg .line { fill: none; stroke-width: 2; }
""" + "".join(f"svg .s{i} {{ fill: var(--s{i}); }} svg .line.s{i} {{ stroke: var(--s{i}); fill: none; }} "
              f".key .s{i} {{ background: var(--s{i}); }}\n" for i in range(charts.COLOURS)) + """
.key { list-style: none; padding: 0; margin: 4px 0; display: flex; flex-wrap: wrap; gap: 4px 16px; }
.key span { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 6px; }
.key .limitkey { background: var(--limit); height: 3px; vertical-align: middle; }
table { border-collapse: collapse; width: 100%; font-size: 13px; margin-top: 8px;
  font-variant-numeric: tabular-nums; }
caption { text-align: left; padding-bottom: 4px; }
th, td { padding: 2px 8px; border-bottom: 1px solid var(--grid); text-align: right; }
th:first-child, td:first-child { text-align: left; }
thead th { border-bottom: 1px solid var(--rule); }
code { font: 0.92em ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
"""


def _prose(text: str) -> str:
    """A sentence escaped, its `command` spans set as code."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(text))


def _cell(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    if unit == "seconds":
        return f"{value:.1f}"
    return f"{value:,.0f}" if value == int(value) else f"{value:,.2f}"


def _table(chart: Chart) -> str:
    stacked = chart.kind == "stacked" and len(chart.series) > 1
    heads = ["day", *(s.name for s in chart.series), *(["total"] if stacked else [])]
    unit = " (seconds)" if chart.unit == "seconds" else f" ({chart.unit})"
    rows = []
    for i, day in enumerate(chart.days):
        values = [s.values[i] for s in chart.series]
        cells = [_cell(v, chart.unit) for v in values]
        if stacked:
            cells.append(_cell(sum(v or 0 for v in values), chart.unit))
        rows.append(f'<tr><th scope="row">{escape(day.isoformat())}</th>'
                    + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
    limits = "; ".join(f"{name}: {_cell(value, chart.unit)}" for name, value in chart.limits)
    caption = f"{chart.title}{unit}" + (f"; {limits}" if limits else "")
    return (f'<table data-chart="{escape(chart.key)}"><caption>{escape(caption)}</caption><thead><tr>'
            + "".join(f'<th scope="col">{escape(h)}</th>' for h in heads) + "</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def _key(chart: Chart) -> str:
    items = [f'<li><span class="s{j % charts.COLOURS}"></span>{escape(s.name)}</li>'
             for j, s in enumerate(chart.series)]
    items += [f'<li><span class="limitkey"></span>{escape(name)}</li>' for name, _ in chart.limits]
    return f'<ul class="key">{"".join(items)}</ul>'


def _section(chart: Chart) -> str:
    head = f'<section id="{escape(chart.key)}"><h2>{escape(chart.title)}</h2>'
    note = f'<p class="note">{_prose(chart.note)}</p>' if chart.note else ""
    if not chart.has_data:
        return f'{head}{note}<p class="empty">{escape(chart.empty_note.capitalize())}.</p></section>'
    return (f"{head}{note}{_key(chart)}{charts.svg(chart, f'title-{chart.key}')}{_table(chart)}</section>")


def _quarantine(history: History) -> str:
    head = ('<section id="quarantine-now"><h2>Quarantined now, by reason and age</h2>'
            '<p class="note">Jobs waiting in QUARANTINED for an operator (<code>iipub quarantine list</code>), by '
            "how long they have waited.</p>")
    if not history.quarantine:
        return f'{head}<p class="empty">Nothing is quarantined.</p></section>'
    heads = ["reason", "jobs", *(label for label, _ in AGE_BUCKETS), "oldest"]
    rows = "".join(
        f'<tr><th scope="row">{escape(q.reason)}</th><td>{q.count}</td>'
        + "".join(f"<td>{n}</td>" for n in q.by_age)
        + f"<td>{escape(duration(q.oldest_seconds))}</td></tr>" for q in history.quarantine)
    return (f'{head}<table data-chart="quarantine-now"><caption>Quarantined jobs by reason and age</caption>'
            "<thead><tr>" + "".join(f'<th scope="col">{escape(h)}</th>' for h in heads)
            + f"</tr></thead><tbody>{rows}</tbody></table></section>")


def render(history: History, title: str = "iipub report") -> str:
    """The whole page."""
    span = f"{history.first.isoformat()} to {history.last.isoformat()} (UTC, {len(history.days)} days)"
    made = iso_z(history.generated_at, "seconds")
    meta = f'<p class="meta">{escape(span)}; made {escape(made)} by the database clock.</p>'
    if history.empty:
        body = (f'<p class="empty" id="empty">No history in these days: the database holds no run, paid create, '
                f"edition, journal entry or quarantined job between {escape(history.first.isoformat())} and "
                f"{escape(history.last.isoformat())}. Once cron runs <code>iipub reconcile</code> and "
                "<code>iipub relay</code>, this page fills in.</p>")
    else:
        body = "".join(_section(c) for c in history.charts) + _quarantine(history)
    return ("<!DOCTYPE html>\n"
            '<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<meta name="color-scheme" content="light dark">'
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
            "img-src data:\">"
            f"<title>{escape(title)}</title><style>{STYLE}</style></head>"
            f"<body><header><h1>{escape(title)}</h1>{meta}</header><main>{body}</main></body></html>\n")
