"""What every benchmark script (bench/*.py) starts with: its command line (`parser`,
`start`), production logging into /dev/null, the `Run` that writes its section of
docs/benchmarks.md, and how it starts `iipub` itself as a child process.

The other shared modules: `benchdb` (databases, settings, rows), `simproc` (the simulator
in a child process), `metering` (statements, round trips, CPU) and `reporting` (figures
and the document).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import benchdb
import reporting

DEFAULT_MYSQL = "mysql+pymysql://root@127.0.0.1:3306/test"

# -- command line -------------------------------------------------------------------


def parser(description: str, *, sqlite: bool = False) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--mysql", default=os.environ.get("IIPUB_BENCH_MYSQL_URL", DEFAULT_MYSQL),
                   help="server URL; each measurement creates and drops its own iipub_bench_* database "
                        f"(default {DEFAULT_MYSQL})")
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer runs (a smoke run)")
    p.add_argument("--runs", type=int, default=None, help="repetitions per measurement (median is reported)")
    p.add_argument("--no-doc", action="store_true", help="print only; leave docs/benchmarks.md alone")
    if sqlite:
        p.add_argument("--sqlite", action="store_true", help="also measure on SQLite (bonus figures)")
    return p


@dataclass(frozen=True)
class Run:
    """One run of a benchmark script: its arguments, the load average before it started and
    when it started."""

    args: argparse.Namespace
    load_before: str
    started: float

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def header(self, runs: str, extra: Sequence[str] = ()) -> str:
        """The section's header lines (`reporting.header_lines`, the server's version included),
        with the script's wall time so far."""
        wall = f"- Script wall time: {self.elapsed():.0f} s"
        return reporting.server_header(self.args.mysql, runs, self.load_before, [wall, *extra])

    def write_section(self, key: str, title: str, body: str) -> None:
        reporting.write_section(key, title, body, enabled=not self.args.no_doc)


def start(ap: argparse.ArgumentParser, *, production_logs: bool = True) -> Run:
    """Parse the command line, configure logging as production does (unless told not to: a
    script whose ticks run in child processes), and note the load average and the time."""
    args = ap.parse_args()
    if production_logs:
        production_logs_to_devnull()
    return Run(args, reporting.loadavg(), time.monotonic())


# -- logging --------------------------------------------------------------------------


def production_logs_to_devnull() -> None:
    """Configure structlog exactly as the CLI does (JSON lines, level info) but into
    /dev/null: the rendering cost of every transition's log line is part of the figure,
    the terminal noise is not."""
    from iipub import logs

    saved = sys.stderr
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    try:
        logs.configure("info")
    finally:
        sys.stderr = saved
    logging.getLogger().setLevel(logging.WARNING)


# -- iipub as a child process ---------------------------------------------------------


def iipub_exe() -> list[str]:
    exe = Path(sys.executable).parent / "iipub"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "iipub"]


def reconcile_env(url: str, sim_url: str, workdir: Path, sections: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The environment of an `iipub reconcile` child run as cron runs it: this process's
    environment without any IIPUB_/OPENAI_ variable, plus the database, the simulator as the
    provider, and `IIPUB_CONFIG` (written to `workdir/iipub.toml`: `sections` and a static
    sink under `workdir/public`)."""
    cfg = workdir / "iipub.toml"
    cfg.write_text(benchdb.settings_toml(workdir / "public", **sections))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IIPUB_", "OPENAI_"))}
    env.update(IIPUB_DATABASE_URL=url, IIPUB_CONFIG=str(cfg), OPENAI_API_KEY="sk-bench", OPENAI_BASE_URL=sim_url)
    return env


def run_reconcilers(envs: Sequence[Mapping[str, str]], cwd: str | Path, timeout: float = 900) -> list[dict[str, Any]]:
    """Start one `iipub reconcile` per environment, all at once (as overlapping cron runs would),
    wait for every one and return their JSON summaries (the last line each prints), in order."""
    children = [subprocess.Popen([*iipub_exe(), "reconcile"], env=dict(env), cwd=cwd,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                for env in envs]
    summaries = []
    for child in children:
        out, _ = child.communicate(timeout=timeout)
        if child.returncode != 0:
            raise RuntimeError(f"iipub reconcile exited {child.returncode}: {out[-500:]}")
        summaries.append(json.loads(out.strip().splitlines()[-1]))
    return summaries
