"""Peak memory of a reconcile tick: `iipub reconcile` (the console script, as cron runs it)
in a child process over N = 0, 1,000 and 10,000 due polling jobs; the child's own peak
resident set (`ru_maxrss` from `os.wait4`, so the simulator child is not mixed in).

    .venv/bin/python bench/memory.py [--mysql URL] [--quick] [--latency S]
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import common

from iipub import db


def measure(base_url: str, sim: common.SimProc, n: int, sections: dict[str, dict[str, Any]]) -> dict[str, Any]:
    sim.reset()
    with common.fresh_database(base_url, "mem") as url, tempfile.TemporaryDirectory() as tmp:
        engine = common.open_db(url, pool_size=4)
        try:
            settings = common.bench_settings(url, sim.url, Path(tmp) / "public", **sections)
            common.park_today(engine, settings)
            if n:
                common.insert_rows(engine, db.jobs, common.polling_rows(settings, sim, n, common.db_now(engine)))
            cfg = Path(tmp) / "iipub.toml"
            cfg.write_text(common.settings_toml(Path(tmp) / "public", **sections))
            env = {k: v for k, v in os.environ.items() if not k.startswith(("IIPUB_", "OPENAI_"))}
            env.update(IIPUB_DATABASE_URL=url, IIPUB_CONFIG=str(cfg), OPENAI_API_KEY="sk-bench",
                       OPENAI_BASE_URL=sim.url)
            out_path = Path(tmp) / "out.json"
            t0 = time.perf_counter()
            with out_path.open("w") as out:
                child = subprocess.Popen([*common.iipub_exe(), "reconcile"], env=env, cwd=tmp, stdout=out,
                                         stderr=subprocess.DEVNULL)
                code, usage = common.wait_rusage(child, timeout=900)
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
    args = ap.parse_args()
    load_before = common.loadavg()
    runs = args.runs or (1 if args.quick else 3)
    big_runs = args.big_runs or (1 if args.quick else 2)
    scenarios: list[tuple[str, int, dict[str, dict[str, Any]], int]] = []
    default = {"reconcile": {"tick_seconds": 3600.0}}
    for n in ([0, 1000] if args.quick else [0, 1000, 10_000]):
        scenarios.append(("concurrency 16 (default)", n, default, big_runs if n >= 10_000 else runs))
    if not args.quick:
        wide = {"reconcile": {"tick_seconds": 3600.0, "concurrency": 64}, "provider": {"max_connections": 64}}
        scenarios.append(("concurrency 64, max_connections 64", 10_000, wide, 1))
    started = time.monotonic()
    rows = []
    with common.SimProc(latency_seconds=args.latency, queued_seconds=0.0, in_progress_seconds=86400.0,
                        retention_seconds=864000.0) as sim:
        for label, n, sections, k in scenarios:
            ms = []
            for r in range(k):
                m = measure(args.mysql, sim, n, sections)
                ms.append(m)
                print(f"{label} N={n} run {r + 1}: peak RSS {m['rss_mib']:.1f} MiB, tick {m['tick']:.1f} s, "
                      f"process {m['wall']:.1f} s, CPU {m['cpu']:.1f} s", flush=True)
            rows.append([label, f"{n:,}", str(k), common.spread([m["rss_mib"] for m in ms]),
                         common.spread([m["tick"] for m in ms]), common.spread([m["cpu"] for m in ms]),
                         f"{common.median(m['cpu'] for m in ms) / max(n, 1) * 1000:.1f}" if n else "–"])
    elapsed = time.monotonic() - started
    probe = common.server_probe(args.mysql)
    try:
        head = common.header_lines(probe, f"{runs} per small N, {big_runs} at N = 10,000 (median, min–max)",
                                   load_before, [f"- Script wall time: {elapsed:.0f} s"])
    finally:
        probe.dispose()
    body = f"""{head}
- Set-up per run: fresh database; N polling jobs seeded as for the tick benchmark (real simulator
  responses, still in progress; simulator latency {args.latency * 1000:g} ms, in its own process);
  `iipub reconcile` as a child process (`IIPUB_CONFIG` with `reconcile.tick_seconds = 3600`, logs at
  info to /dev/null); peak RSS is the child's `ru_maxrss` from `os.wait4`; CPU is the child's user +
  system time (the database and simulator are other processes).

{common.table(["configuration", "N", "runs", "peak RSS MiB", "tick s", "child CPU s", "child CPU ms per poll"], rows)}
"""
    common.write_section("memory", "6. Peak memory of a tick", body, enabled=not args.no_doc)


if __name__ == "__main__":
    main()
