"""Daily series drawn as inline SVG: stacked bars or lines over days, with a y axis, day labels and
the horizontal limits (a ceiling, an SLO). Pure: a `history_values.Chart` in, markup out.

Colours are classes (`s0`…`s7`, `limit`, `axis`, `grid`) that the page's stylesheet gives a value
in light and in dark; every text is escaped.
"""

from __future__ import annotations

import math
from html import escape

from iipub.observe.history_values import Chart

WIDTH, HEIGHT = 760, 250
LEFT, RIGHT, TOP, BOTTOM = 64, 120, 14, 36  # room for the y labels, the limits' names, the day labels
COLOURS = 8  # classes s0..s7; a chart with more series reuses them in order
MAX_DAY_LABELS = 10


def nice_step(value: float) -> float:
    """The smallest of 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 times a power of ten that is at least `value`
    (a quarter of the axis: its labels read 6k, 12k, 18k, 24k rather than 6.25k)."""
    if value <= 0:
        return 0.25
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if value <= step * power * (1 + 1e-9):
            return float(step * power)
    return float(10 * power)


def compact(value: float, unit: str = "") -> str:
    """A number for an axis or a label: 950, 1.2k, 3.4M; seconds as s, min or h."""
    if unit == "seconds":
        if value >= 3600:
            return f"{value / 3600:.3g} h"
        if value >= 120:
            return f"{value / 60:.3g} min"
        return f"{value:.3g} s"
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.3g}" if value != int(value) else str(int(value))


def svg(chart: Chart, title_id: str) -> str:
    """The chart as one `<svg>` element, labelled by its title."""
    n = len(chart.days)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = nice_step(chart.top * 1.05 / 4)
    if chart.unit != "seconds":  # counts: whole numbers on the axis
        step = float(max(1, math.ceil(step)))
    top = 4 * step
    band = plot_w / max(n, 1)

    def x_mid(i: int) -> float:
        return LEFT + band * (i + 0.5)

    def y_of(value: float) -> float:
        return TOP + plot_h * (1 - value / top)

    out = [(f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-labelledby="{escape(title_id)}" '
           f'xmlns="http://www.w3.org/2000/svg">'),
           f'<title id="{escape(title_id)}">{escape(chart.title)}</title>']
    for k in range(5):
        value = top * k / 4
        y = y_of(value)
        out.append(f'<line class="grid" x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot_w}" y2="{y:.1f}"/>')
        out.append(f'<text class="axis" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
                   f'{escape(compact(value, chart.unit))}</text>')
    step = max(1, math.ceil(n / MAX_DAY_LABELS))
    for i, day in enumerate(chart.days):
        if (n - 1 - i) % step == 0:  # the last day always labelled
            out.append(f'<text class="axis" x="{x_mid(i):.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">'
                       f'{escape(day.strftime("%m-%d"))}</text>')
    if chart.kind == "stacked":
        width = max(1.0, band * 0.72)
        for i in range(n):
            base = 0.0
            for j, series in enumerate(chart.series):
                value = series.values[i] or 0.0
                if value <= 0:
                    continue
                y0, y1 = y_of(base), y_of(base + value)
                out.append(f'<rect class="s{j % COLOURS}" x="{x_mid(i) - width / 2:.1f}" y="{y1:.1f}" '
                           f'width="{width:.1f}" height="{max(0.5, y0 - y1):.1f}"><title>'
                           f'{escape(f"{chart.days[i].isoformat()} {series.name}: {compact(value, chart.unit)}")}'
                           '</title></rect>')
                base += value
    else:
        for j, series in enumerate(chart.series):
            points = [(x_mid(i), y_of(v)) for i, v in enumerate(series.values) if v is not None]
            if len(points) > 1:
                path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
                out.append(f'<polyline class="line s{j % COLOURS}" points="{path}"/>')
            out.extend(f'<circle class="s{j % COLOURS}" cx="{x:.1f}" cy="{y:.1f}" r="2.5"/>' for x, y in points)
    for name, value in chart.limits:
        y = y_of(value)
        out.append(f'<line class="limit" x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot_w}" y2="{y:.1f}"/>')
        out.append(f'<text class="axis" x="{LEFT + plot_w + 6}" y="{y + 4:.1f}">'
                   f'{escape(f"{name} {compact(value, chart.unit)}")}</text>')
    out.append(f'<line class="axisline" x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}"/>')
    out.append("</svg>")
    return "\n".join(out)
