"""Peak memory of a reconcile tick: `iipub reconcile` (the console script, as cron runs it)
in a child process over N = 0, 1,000 and 10,000 due polling jobs; the child's own peak
resident set (`ru_maxrss` from `os.wait4`, so the simulator child is not mixed in).

    .venv/bin/python bench/memory.py [--mysql URL] [--quick] [--latency S]
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import benchdb
import common
import metering
import reporting
import simproc
from iipub import tables


def measure(base_url: str, sim: simproc.SimProc, n: int, sections: dict[str, dict[str, Any]]) -> dict[str, Any]:
    sim.reset()
    with benchdb.fresh_database(base_url, "mem") as url, tempfile.TemporaryDirectory() as tmp:
        engine = benchdb.open_db(url, pool_size=4)
        try:
            settings = benchdb.bench_settings(url, sim.url, Path(tmp) / "public", **sections)
            benchdb.park_today(engine, settings)
            if n:
                benchdb.insert_rows(engine, tables.jobs, benchdb.polling_rows(settings, sim, n, benchdb.db_now(engine)))
            env = common.reconcile_env(url, sim.url, Path(tmp), sections)
            out_path = Path(tmp) / "out.json"
            t0 = time.perf_counter()
            with out_path.open("w") as out:
                child = subprocess.Popen([*common.iipub_exe(), "reconcile"], env=env, cwd=tmp, stdout=out,
                                         stderr=subprocess.DEVNULL)
                code, usage = metering.wait_rusage(child, timeout=900)
            wall = time.perf_counter() - t0
            if code != 0:
                raise RuntimeError(f"iipub reconcile exited {code}")
            summary = json.loads(out_path.read_text().strip().splitlines()[-1])
            moved = sum(summary["transitions"].values())
            if moved != n:
                print(f"  !! N={n}: {moved} transitions, summary {summary}")
            return {"rss_mib": usage.ru_maxrss / 1024, "wall": wall, "tick": float(summary["seconds"]),
                    "moved": moved, "cpu": usage.ru_utime + usage.ru_stime}
        finally:
            engine.dispose()


def main() -> None:
    ap = common.parser(__doc__.split("\n\n")[0])
    ap.add_argument("--latency", type=float, default=0.0, help="provider latency in seconds (default 0)")
    ap.add_argument("--big-runs", type=int, default=None, help="runs at N = 10,000 (default 2)")
    run = common.start(ap, production_logs=False)  # the ticks run in child processes
    args = run.args
    runs = args.runs or (1 if args.quick else 3)
    big_runs = args.big_runs or (1 if args.quick else 2)
    default = {"reconcile": {"tick_seconds": 3600.0}}
    scenarios: list[tuple[str, int, dict[str, dict[str, Any]], int]] = [
        ("concurrency 16 (default)", n, default, big_runs if n >= 10_000 else runs)
        for n in ([0, 1000] if args.quick else [0, 1000, 10_000])
    ]
    if not args.quick:
        wide: dict[str, dict[str, Any]] = {"reconcile": {"tick_seconds": 3600.0, "concurrency": 64},
                                           "provider": {"max_connections": 64}}
        scenarios.append(("concurrency 64, max_connections 64", 10_000, wide, 1))
    rows = []
    with simproc.SimProc(latency_seconds=args.latency, queued_seconds=0.0, in_progress_seconds=86400.0,
                         retention_seconds=864000.0) as sim:
        for label, n, sections, k in scenarios:
            ms = []
            for r in range(k):
                m = measure(args.mysql, sim, n, sections)
                ms.append(m)
                print(f"{label} N={n} run {r + 1}: peak RSS {m['rss_mib']:.1f} MiB, tick {m['tick']:.1f} s, "
                      f"process {m['wall']:.1f} s, CPU {m['cpu']:.1f} s", flush=True)
            rows.append([label, f"{n:,}", str(k), reporting.spread([m["rss_mib"] for m in ms]),
                         reporting.spread([m["tick"] for m in ms]), reporting.spread([m["cpu"] for m in ms]),
                         f"{reporting.median(m['cpu'] for m in ms) / max(n, 1) * 1000:.1f}" if n else "–"])
    head = run.header(f"{runs} per small N, {big_runs} at N = 10,000 (median, min–max)")
    body = f"""{head}
- Set-up per run: fresh database; N polling jobs seeded as for the tick benchmark (real simulator
  responses, still in progress; simulator latency {args.latency * 1000:g} ms, in its own process);
  `iipub reconcile` as a child process (`IIPUB_CONFIG` with `reconcile.tick_seconds = 3600`, logs at
  info to /dev/null); peak RSS is the child's `ru_maxrss` from `os.wait4`; CPU is the child's user +
  system time (the database and simulator are other processes).

{reporting.table(["configuration", "N", "runs", "peak RSS MiB", "tick s", "child CPU s", "child CPU ms per poll"],
                 rows)}
"""
    run.write_section("memory", "6. Peak memory of a tick", body)


if __name__ == "__main__":
    main()
