"""What an idle cron minute costs: `iipub reconcile` and `iipub relay` with nothing due, as cron
starts them (cold processes, logs on, whole-process CPU from `wait4`), beside the yardsticks, in
paired rounds on SQLite and MariaDB. What each program is: bench/notes/idle_cost.md.

    .venv/bin/python bench/cost/idle_cost.py [--mysql URL] [--runs 15] [--no-sqlite] [--no-doc]
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))  # bench/support: the shared modules
import harness
import simproc

KEY, TITLE = "idle_cost", "The idle minute: `iipub reconcile` and `iipub relay` with nothing due"
FLOOR = str(Path(__file__).resolve().parent / "idle_floor.py")
PROGRAMS = ("import sqlalchemy", "idle floor", "reconcile", "relay", "reconcile (check off)")


def _program(name: str, bed: harness.Bed, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    exe = harness.iipub_exe()
    if name == "import sqlalchemy":
        return [sys.executable, "-c", "import sqlalchemy"], dict(env)
    if name == "idle floor":
        return [sys.executable, FLOOR, bed.url], dict(env)
    if name == "reconcile (check off)":
        return [*exe, "reconcile"], {**env, "IIPUB_WAKEUP_CHECK": "off"}
    return [*exe, name], dict(env)


@contextmanager
def idle_bed(base_url: str, sim: simproc.SimProc) -> Iterator[tuple[harness.Bed, dict[str, str]]]:
    """A database whose today's slots are finished (nothing to dispatch, no catch-up days), primed
    by one full run of each command so the wake-up rows exist."""
    sections = {"reconcile": {"catch_up_days": 0}}
    with harness.bed(base_url, "idle", sim, seed=harness.park_today, sections=sections) as bed:
        env = {**bed.env(**sections), "IIPUB_LOG_FORMAT": "json"}
        for command in ("reconcile", "relay"):
            harness.run_process([*harness.iipub_exe(), command], env=env, cwd=bed.workdir,
                                log=bed.workdir / "run.log")
        yield bed, env


def measure(base_url: str, runs: int, sim: simproc.SimProc) -> dict[str, list[dict[str, Any]]]:
    results: dict[str, list[dict[str, Any]]] = {p: [] for p in PROGRAMS}
    with idle_bed(base_url, sim) as (bed, env):
        for r in range(runs):
            order = list(PROGRAMS)
            random.shuffle(order)  # paired rounds, in a new order each: drift hits every program alike
            for name in order:
                cmd, penv = _program(name, bed, env)
                m = harness.run_process(cmd, env=penv, cwd=bed.workdir, log=bed.workdir / "run.log")
                result = m.pop("result", None) or {}
                m["idle_answer"] = bool(result.get("idle")) if name in ("reconcile", "relay") else None
                results[name].append(m)
            print(f"{base_url.split(':')[0]} round {r + 1}/{runs}", file=sys.stderr, flush=True)
    return results


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(backend: str, results: dict[str, list[dict[str, Any]]]) -> tuple[str, dict[str, float]]:
    ref = [m["cpu"] for m in results["import sqlalchemy"]]
    rows = [("| program | CPU s, median (min–max) | ÷ `import sqlalchemy`, median of paired rounds | wall s | "
             "peak RSS MiB | answered idle |"), "|---|---|---|---|---|---|"]
    ratios: dict[str, float] = {}
    for name in PROGRAMS:
        ms = results[name]
        cpu = [m["cpu"] for m in ms]
        paired = [c / r for c, r in zip(cpu, ref, strict=True) if r > 0]
        ratios[name] = _median(paired)
        idle = [m["idle_answer"] for m in ms if m["idle_answer"] is not None]
        rows.append(f"| {name} | {spread(cpu)} | {_median(paired):.2f} | {_median([m['wall'] for m in ms]):.3f} | "
                    f"{_median([m['peak_rss_mib'] for m in ms]):.0f} | "
                    f"{f'{sum(idle)}/{len(idle)}' if idle else '–'} |")
    return f"### {backend}\n\n" + "\n".join(rows) + "\n", ratios


def spread(values: list[float]) -> str:
    return f"{_median(values):.3f} ({min(values):.3f}–{max(values):.3f})" if values else "–"


def main() -> None:
    ap = harness.parser(__doc__ or "", runs=15)
    ap.add_argument("--no-sqlite", action="store_true", help="MariaDB only")
    run = harness.start(ap, production_logs=False)
    args = run.args
    backends = ([] if args.no_sqlite else [("SQLite", "sqlite")]) + [("MariaDB", args.mysql)]
    parts, summary = [], {}
    with simproc.SimProc(latency_seconds=0.0) as sim:
        for label, base in backends:
            results = measure(base, args.runs, sim)
            text, ratios = table(label, results)
            parts.append(text)
            summary[label] = ratios
            print(text)
    print(json.dumps(summary, indent=1))
    body = harness.note(KEY) + "\n" + run.header(f"{args.runs} paired rounds per database") + "\n" + "\n".join(parts)
    run.write_section(KEY, TITLE, body)


if __name__ == "__main__":
    main()

