"""The same tick on two versions of iipub, side by side: the working tree and an earlier
commit (checked out into a temporary git worktree), alternating within each run. Each
measurement is a child process that imports iipub from one tree and runs one tick over N
jobs due for a poll (`tick_throughput.measure`, 200 ms latency, concurrency 64).

    .venv/bin/python bench/before_after.py --base REV [--mysql URL] [--quick] [--runs N] [--n N]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import common
import reporting

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

CHILD = """
import json, sys
sys.path.insert(0, {bench!r})
import common, simproc, tick_throughput as tt
import iipub
common.production_logs_to_devnull()
with simproc.SimProc(latency_seconds=0.2, queued_seconds=0.0, in_progress_seconds=86400.0,
                     retention_seconds=864000.0) as sim:
    m = tt.measure({url!r}, sim, {n}, tt.C64, 0.2)
print(json.dumps({{"wall": m["wall"], "polls": m["polls"], "cpu": m["cpu"], "stmts": m["stmts_per_poll"],
                  "wire": m["wire_per_poll"], "iipub": iipub.__file__}}))
"""


def measure(tree: Path, url: str, n: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    code = CHILD.format(bench=str(BENCH), url=url, n=n)
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tree, capture_output=True, text=True,
                         timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"tick on {tree} failed: {out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if not result["iipub"].startswith(str(tree)):
        raise RuntimeError(f"imported iipub from {result['iipub']}, not {tree}")
    return result


def main() -> None:
    ap = common.parser(__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the earlier commit to compare with (any git revision)")
    ap.add_argument("--n", type=int, default=None, help="jobs due for a poll (default 1,000; --quick 300)")
    run = common.start(ap, production_logs=False)  # the ticks run in child processes
    args = run.args
    runs = args.runs or (1 if args.quick else 3)
    n = args.n or (300 if args.quick else 1000)
    base = subprocess.run(["git", "rev-parse", "--short", args.base], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "iipub"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip())
    results: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(old), base], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            for r in range(runs):
                for label, tree in (("before", old), ("after", ROOT)):  # side by side within a run
                    m = measure(tree, args.mysql, n)
                    results[label].append(m)
                    print(f"run {r + 1} {label}: {m['wall']:.2f} s, {m['polls'] / m['wall']:.1f} polls/s, "
                          f"{m['cpu'] / m['polls'] * 1000:.1f} ms CPU/poll", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=False,
                           capture_output=True)
    head_text = run.header(f"{runs} per version, alternating (median, min–max)")
    rows = []
    for label, ms in results.items():
        speedup = [b["wall"] / m["wall"] for b, m in zip(results["before"], ms, strict=True)]
        rows.append([
            f"{label} ({base if label == 'before' else head + (' + uncommitted changes' if dirty else '')})",
            reporting.spread([m["wall"] for m in ms], 2), reporting.spread([m["polls"] / m["wall"] for m in ms]),
            reporting.spread([m["cpu"] / m["polls"] * 1000 for m in ms]),
            f"{reporting.median(m['stmts'] for m in ms):.1f} / {reporting.median(m['wire'] for m in ms):.1f}",
            reporting.spread(speedup, 2),
        ])
    body = f"""{head_text}
- Set-up: as for the tick benchmark (section 1): one tick over N = {n:,} jobs due for a poll, 200 ms
  provider latency, concurrency 64, `provider.max_connections = 32`; each tick in its own child
  process importing iipub from its tree (the bench scripts are the working tree's for both).
  *CPU per poll*: the tick's process CPU (all threads) / polls. *speed-up*: before wall / this wall,
  per run.

{reporting.table(["version", "tick wall s", "polls/s", "CPU ms per poll",
                 "SQL stmts / wire round trips per poll", "speed-up"], rows)}
"""
    run.write_section("before_after", "9. Before and after the speed work", body)


if __name__ == "__main__":
    main()
