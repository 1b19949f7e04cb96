"""Figures and the benchmark document: median / percentile / spread helpers, Markdown
tables, the machine description and the writer of a script's section of
docs/benchmarks.md (`write_section`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
import re
import shlex
import statistics
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa

import benchdb

ROOT = benchdb.ROOT
DOC = ROOT / "docs" / "benchmarks.md"
VENV_PY = ".venv/bin/python"


def command_line() -> str:
    script = os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)
    return " ".join([VENV_PY, shlex.quote(script), *map(shlex.quote, sys.argv[1:])])


def median(values: Iterable[float]) -> float:
    vals = list(values)
    return statistics.median(vals) if vals else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[k]


def fmt(x: float, digits: int = 1) -> str:
    if x != x:  # NaN
        return "–"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:,.{digits}f}"


def spread(values: Sequence[float], digits: int = 1) -> str:
    """`median (min–max, n)` for tables."""
    if not values:
        return "–"
    if len(values) == 1:
        return fmt(values[0], digits)
    return f"{fmt(median(values), digits)} ({fmt(min(values), digits)}–{fmt(max(values), digits)})"


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


# -- the document ---------------------------------------------------------------------------

SECTIONS = ("cli_tick", "idle_cost", "lifecycle", "idle_tick", "overlap", "relay_throughput", "webhook_load",
            "flex_day", "history")

# The start of a new docs/benchmarks.md (written by hand once the file exists).
DOC_HEADER = ROOT / "bench" / "notes" / "header.md"


def machine(base_url: str | None = None) -> str:
    """The host, the versions, and the database server's version when `base_url` is given."""
    import pymysql

    mem = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    parts = [
        f"`nproc` {os.cpu_count()} ({cpu})", f"memory {mem}", f"Linux {platform.release()}",
        f"Python {platform.python_version()}", f"SQLAlchemy {sa.__version__}", f"PyMySQL {pymysql.__version__}",
    ]
    if base_url is not None:
        with benchdb.server_probe(base_url) as probe:
            parts.append(benchdb.server_version(probe))
    return ", ".join(parts)


def server_header(base_url: str, runs: str, load_before: str, extra: Sequence[str] = ()) -> str:
    """The lines that open a section: date, machine (and `base_url`'s server), command, runs, load."""
    lines = [
        f"- Date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Machine: {machine(base_url)}",
        f"- Command: `{command_line()}`",
        f"- Runs: {runs}",
        (f"- Load average (1/5/15 min) before / after: {load_before} / {loadavg()} "
         "(a shared machine: other processes may have been running on the same 2 cores)"),
        *extra,
    ]
    return "\n".join(lines)


def write_section(key: str, title: str, body: str, *, enabled: bool = True) -> None:
    """Replace this script's section of docs/benchmarks.md (creating the file, with the
    sections in a fixed order, if needed)."""
    block_body = f"## {title}\n\n{body.rstrip()}\n"
    print("\n" + block_body)
    if not enabled:
        return
    DOC.parent.mkdir(parents=True, exist_ok=True)
    text = (DOC if DOC.exists() else DOC_HEADER).read_text(encoding="utf-8")
    for k in SECTIONS:  # placeholders keep the order stable whatever runs first
        if f"<!-- bench:{k}:begin -->" not in text:
            text = text.rstrip() + f"\n\n<!-- bench:{k}:begin -->\n<!-- bench:{k}:end -->\n"
    begin, end = f"<!-- bench:{key}:begin -->", f"<!-- bench:{key}:end -->"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    text = pattern.sub(lambda _m: f"{begin}\n{block_body}{end}", text, count=1)
    DOC.write_text(text, encoding="utf-8")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)
