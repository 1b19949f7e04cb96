"""Where the host's two cores go during the goal-shaped tick: one reconcile tick over N jobs
due for a poll (concurrency 64, 64 provider connections, 200 ms latency), with the CPU time
of the reconcile process (all its threads), the simulator process and the MariaDB server
read from /proc over the same interval. It shows which resource bounds one process.

    .venv/bin/python bench/host_share.py [--mysql URL] [--quick] [--runs N] [--n N]
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

import common
import reporting
import simproc
import tick_throughput
from metering import cpu_seconds


def server_pid() -> int | None:
    """The local MariaDB server, if it runs on this host (None for a remote --mysql)."""
    for name in ("mariadbd", "mysqld"):
        try:
            return int(subprocess.check_output(["pidof", name], text=True).split()[0])
        except (subprocess.CalledProcessError, FileNotFoundError, IndexError):
            continue
    return None


def measure(base_url: str, sim: simproc.SimProc, n: int, server: int | None) -> dict[str, Any]:
    """One tick, with the CPU of the three processes over exactly the tick's interval."""
    meters = {"simulator": lambda: cpu_seconds(sim.proc.pid)}
    if server:
        meters["database"] = lambda: cpu_seconds(server)
    m = tick_throughput.measure(base_url, sim, n, tick_throughput.C64W, 0.2, meters=meters)
    return {"wall": m["wall"], "polls": m["polls"], "iipub": m["cpu"], "simulator": m["simulator"],
            "database": m.get("database", float("nan"))}


def main() -> None:
    ap = common.parser(__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=None, help="jobs due for a poll (default 10,000; --quick 1,000)")
    run = common.start(ap)
    args = run.args
    runs = args.runs or (1 if args.quick else 3)
    n = args.n or (1000 if args.quick else 10_000)
    cores = os.cpu_count() or 1
    server = server_pid()
    results = []
    with simproc.SimProc(latency_seconds=0.2, queued_seconds=0.0, in_progress_seconds=86400.0,
                         retention_seconds=864000.0) as sim:
        for r in range(runs):
            m = measure(args.mysql, sim, n, server)
            results.append(m)
            print(f"run {r + 1}: {m['wall']:.1f} s, {m['polls'] / m['wall']:.0f} polls/s; CPU s: iipub "
                  f"{m['iipub']:.1f}, simulator {m['simulator']:.1f}, database {m['database']:.1f}", flush=True)
    rows = []
    for key, label in (("iipub", "`reconcile` (one process, all threads)"), ("simulator", "simulator"),
                       ("database", "MariaDB server")):
        secs = [m[key] for m in results]
        rows.append([label, reporting.spread(secs), reporting.spread([m[key] / m["wall"] for m in results], 2),
                     reporting.spread([m[key] / m["wall"] / cores * 100 for m in results], 0) + " %",
                     f"{reporting.median(m[key] / m['polls'] * 1000 for m in results):.2f}"])
    idle = [100 - sum(m[k] for k in ("iipub", "simulator", "database")) / m["wall"] / cores * 100 for m in results]
    rows.append(["left for everything else", "–", "–", reporting.spread(idle, 0) + " %", "–"])
    head = run.header(f"{runs} (median, min–max)")
    wall = reporting.spread([m["wall"] for m in results])
    rate = reporting.spread([m["polls"] / m["wall"] for m in results])
    body = f"""{head}
- Set-up: as for the tick benchmark (section 1), N = {n:,}, concurrency 64,
  `provider.max_connections = 64`, simulator latency 200 ms; tick wall
  {wall} s, {rate} polls/s.
- CPU seconds are read from `/proc/PID/stat` (user + system) at the start and end of
  `reconcile.run`; *cores busy* is CPU seconds / wall seconds (1.00 = one core for the whole tick).

{reporting.table(["process", "CPU s", "cores busy", f"share of the host ({cores} cores)", "CPU ms per poll"], rows)}
"""
    run.write_section("host_share", "8. Where the host's CPU goes during the goal-shaped tick", body)


if __name__ == "__main__":
    main()
