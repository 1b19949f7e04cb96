"""`iipub reconcile` as cron runs it, beside the lean floor, the in-library floor and the DBOS
peer, in one run: the summary table of docs/benchmarks.md.

Every program is a process started cold (`harness.run_process`: logs appended to a file,
whole-process CPU and peak RSS from `wait4`), over the same bed (a fresh MariaDB database, N jobs
due for a poll, each holding a real simulator response still in progress, one simulator process
answering after `--latency`). What each program is: bench/notes/cli_tick.md.

With `--profile DIR` it instead samples `iipub reconcile` with py-spy (every thread) for an idle
tick and a tick of the largest N, and prints where the CPU goes.

    .venv/bin/python bench/cost/cli_tick.py [--mysql URL] [--runs 2] [--sizes 10,1000,10000]
        [--latency 0.2] [--concurrency 64] [--max-connections 64] [--compare OTHER/.venv/bin/iipub]
        [--peer-python /tmp/peer-venv/bin/python] [--peer-jobs 1000] [--profile DIR] [--no-doc]
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))  # bench/support: the shared modules
import benchdb
import harness
import metering
import reporting
import simproc
from reporting import spread

KEY, TITLE = "cli_tick", "Summary: `iipub reconcile` as cron runs it, beside the floors and the DBOS peer"
PROGRAMS = ("iipub", "lean floor", "library floor")
HERE = Path(__file__).resolve().parent  # bench/cost: the floors and the peer beside this script
# What any program on SQLAlchemy and MariaDB imports (the idle run's least), and with httpx what a
# tick that polls cannot do without: yardsticks beside `import sqlalchemy` for the two fixed costs.
DB_IMPORTS = "import sqlalchemy, sqlalchemy.dialects.mysql.pymysql"
POLL_IMPORTS = DB_IMPORTS + ", httpx"
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
Results = dict[tuple[str, int], list[dict[str, Any]]]


def _mariadb_pid(url: str) -> int | None:
    """The pid of the server `url` reaches, from its own pid file: a host may run several
    mariadbd (a Galera drill, a private test server), so the first `pidof` is not necessarily it."""
    if url.startswith("sqlite"):
        return None
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            pid_file = conn.execute(sa.text("SELECT @@pid_file")).scalar()
    finally:
        engine.dispose()
    try:
        return int(Path(str(pid_file)).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def measure(args: Any, program: str, n: int, sim: Any) -> dict[str, Any]:
    if program.startswith("import "):
        return harness.run_process([sys.executable, "-c", program])
    if program == "DBOS peer":
        return peer(args, n)
    c, mc = args.concurrency, args.max_connections
    sections = {"reconcile": {"concurrency": c}, "provider": {"max_connections": mc}}
    with harness.bed(args.mysql, "cli", sim, polls=n, pool_size=4, seed=None if n else harness.park_today,
                     sections=sections) as bed:
        exe = [str(args.iipub)] if args.iipub else harness.iipub_exe()
        cmd = {"iipub": [*exe, "reconcile"], "iipub idle": [*exe, "reconcile"],
               "iipub@base": [str(args.compare), "reconcile"],
               "lean floor": [sys.executable, str(HERE / "floor.py")],
               "library floor": [sys.executable, str(HERE / "floor.py"), "--library"]}[program]
        if "floor" in program:
            cmd += ["--url", bed.url, "--sim-url", sim.url, "--concurrency", str(c), "--max-connections", str(mc)]
        env = bed.env(**sections)  # writes the bed's configuration file: once, as a host has it
        if program in ("iipub idle", "iipub@base"):
            # An idle minute as cron meets it: the previous minute's full run has left its wake-up
            # row (iipub/observe/wakeup.py), so this run may be answered by the check alone.
            harness.run_process(cmd, env=env, cwd=harness.ROOT, log=bed.workdir / "prime.log")
        db_pid = _mariadb_pid(bed.url)
        others = (metering.cpu_seconds(sim.proc.pid), metering.cpu_seconds(db_pid) if db_pid else 0.0)
        m = harness.run_process(cmd, env=env, cwd=harness.ROOT, log=bed.workdir / "run.log")
        m["sim_cpu"] = metering.cpu_seconds(sim.proc.pid) - others[0]
        m["db_cpu"] = (metering.cpu_seconds(db_pid) - others[1]) if db_pid else 0.0
        log = bed.workdir / "run.log"
        m["log_lines"] = sum(1 for _ in log.open()) if log.exists() else 0
        result = m.pop("result", None) or {}
        m["polls"] = sum(result["transitions"].values()) if "transitions" in result else result.get("polls", 0)
        m["calls"] = result.get("provider_calls", m["polls"])
        m["stopped_at_deadline"] = bool(result.get("stopped_at_deadline"))
    return m


# -- the DBOS peer ---------------------------------------------------------------------------


def peer(args: Any, jobs: int) -> dict[str, Any]:
    """bench/cost/peer_dbos.py in its own venv (`--peer-python`): one workflow per job (create, then
    durable sleep + retrieve until completed, then store), its own simulator whose responses
    finish after `--peer-in-progress` seconds."""
    bodies = Path(args.workdir) / f"bodies-{jobs}.json"
    if not bodies.exists():
        peer_bodies(jobs + 1, bodies)  # the jobs', then the warm-up job's
    with simproc.SimProc(latency_seconds=args.latency, queued_seconds=0.0,
                                 in_progress_seconds=args.peer_in_progress, retention_seconds=3600.0) as sim:
        m = harness.run_process([args.peer_python, str(HERE / "peer_dbos.py"), "--pg", args.pg,
                                 "--sim-url", sim.url, "--bodies", str(bodies), "--jobs", str(jobs),
                                 "--sleep", "1.0", "--max-connections", str(args.max_connections)], timeout=1800)
    inner = m.pop("result")
    m.update(window_cpu=inner["cpu"], window_wall=inner["wall"], calls=inner["creates"] + inner["retrieves"],
             polls=inner["retrieves"], failed=inner["failed"])
    return m


def peer_bodies(n: int, path: Path) -> None:
    """The create bodies the peer sends: exactly what `OpenAIAdapter.create` sends for n slots."""
    settings = benchdb.bench_settings("sqlite://", "http://unused/v1", path.parent / "public")
    chosen = benchdb.slots(list(settings.products.values()), n, dt.date(2026, 11, 30))
    bodies = [{"job_id": f"peer-{i:05d}", "body": benchdb.create_body(p, day, f"peer-{i:05d}")}
              for i, (p, day) in enumerate(chosen)]
    path.write_text(json.dumps(bodies, default=str))


# -- the profile ----------------------------------------------------------------------------


def profile(args: Any, out: Path, n: int) -> None:
    """py-spy (`pip install py-spy`; only the thread holding the GIL is sampled, so the figures
    are CPU) of `iipub reconcile` for an idle tick and a tick of n polls."""
    out.mkdir(parents=True, exist_ok=True)
    spy = Path(sys.executable).parent / "py-spy"
    sections = {"reconcile": {"concurrency": args.concurrency}, "provider": {"max_connections": args.max_connections}}
    with harness.polling_simulator(args.latency) as sim:
        for label, polls in (("idle", 0), (f"poll{n}", n)):
            with harness.bed(args.mysql, "prof", sim, polls=polls, pool_size=4,
                             seed=None if polls else harness.park_today, sections=sections) as bed:
                stacks = out / f"{label}.folded"
                m = harness.run_process([str(spy), "record", "-r", "250", "--gil", "-f", "raw", "-o", str(stacks),
                                         "--", *harness.iipub_exe(), "reconcile"], env=bed.env(**sections),
                                        cwd=harness.ROOT, log=bed.workdir / "log")
            print(f"== {label}: wall {m['wall']:.2f} s, cpu {m['cpu']:.2f} s (py-spy's own CPU included)")
            print(folded_summary(stacks))


def folded_summary(path: Path, top: int = 25) -> str:
    """Samples by the package of the innermost frame, and by iipub function (inclusive)."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames, k = stack.split(";"), int(count)
        total += k
        own[_package(frames[-1])] += k
        for f in {f.rsplit(":", 1)[0] + ")" for f in frames if " (iipub/" in f}:
            incl[f] += k
    lines = [f"{total} samples; self by package:"]
    lines += [f"  {100 * v / total:5.1f}%  {k}" for k, v in own.most_common(top)]
    lines += ["inclusive, iipub functions:"]
    lines += [f"  {100 * v / total:5.1f}%  {k}" for k, v in incl.most_common(top)]
    return "\n".join(lines)


def _package(frame: str) -> str:
    where = frame.rsplit(" (", 1)[-1].rstrip(")").split(":")[0]
    if where.startswith("iipub/"):
        return where
    if where.startswith("<frozen"):
        return "import machinery"
    return where.split("/")[0] if "/" in where else f"{where} ({frame.split(' (')[0]})"


# -- the tables -----------------------------------------------------------------------------


def per_call_ms(ms: Sequence[dict[str, Any]], cpu: str = "cpu") -> list[float]:
    return [1000 * m[cpu] / m["calls"] for m in ms if m.get("calls")]


def ratio(a: Sequence[float], b: Sequence[float], digits: int = 2) -> str:
    return spread([x / y for x, y in zip(a, b, strict=False) if y], digits) if a and b else "–"


def summary(res: Results, sizes: Sequence[int], args: Any) -> str:
    def cpu(key: tuple[str, int]) -> list[float]:
        return [m["cpu"] for m in res.get(key, [])]

    big, rows = max(sizes), []
    sqla = cpu(("import sqlalchemy", 0))
    def idle_ratio(ms: Sequence[dict[str, Any]]) -> str:
        return f"{spread([m['cpu'] for m in ms], 3)}; {ratio([m['cpu'] for m in ms], sqla)}"

    db_only = cpu((DB_IMPORTS, 0))
    rows.append(["idle run: CPU s; ÷ `python -c \"import sqlalchemy\"`", "≤ 1.2×",
                 idle_ratio(res.get(("iipub idle", 0), [])),
                 (f"`import sqlalchemy` {spread(sqla, 3)}; with its MariaDB dialect and PyMySQL {spread(db_only, 3)} "
                 f"({ratio(db_only, sqla)})"), _base(res, ("iipub@base", 0), idle_ratio)])
    small = min(sizes)
    openai_cpu, lean_small = spread(cpu(("import openai", 0)), 2), spread(cpu(("lean floor", small)), 2)
    rows.append([f"a working tick's fixed CPU (whole process, N = {small}), s", "≤ 0.6",
                 spread(cpu(("iipub", small)), 2),
                 (f"`import openai` alone {openai_cpu}; SQLAlchemy, its MariaDB dialect and httpx imported "
                 f"{spread(cpu((POLL_IMPORTS, 0)), 2)}; lean floor {lean_small}"),
                 _base(res, ("iipub@base", small), lambda ms: spread([m["cpu"] for m in ms], 2))])
    for n in sizes:
        if n == small:
            continue
        mine, lean = per_call_ms(res.get(("iipub", n), [])), per_call_ms(res.get(("lean floor", n), []))
        lib = per_call_ms(res.get(("library floor", n), []))
        rows.append([f"CPU per poll at N = {n:,}, ms; ÷ lean floor", "≤ 1.5×" if n == big else "",
                     f"{spread(mine, 2)}; {ratio(mine, lean)}",
                     f"lean {spread(lean, 2)}; library {spread(lib, 2)} (÷ lean {ratio(lib, lean)})",
                     _base(res, ("iipub@base", n), lambda ms: f"{spread(per_call_ms(ms), 2)}")])
    ms = res.get(("iipub", big), [])
    def wall_polls(ms: Sequence[dict[str, Any]]) -> str:
        return f"{spread([m['wall'] for m in ms], 1)}; {'/'.join(str(m['polls']) for m in ms)}"

    others = (f"simulator CPU {spread([m['sim_cpu'] for m in ms], 1)} s, MariaDB "
              f"{spread([m['db_cpu'] for m in ms], 1)} s over the tick")
    rows.append([f"{big:,} due polls: wall s (tick budget 50 s); polls done", "≤ 50", wall_polls(ms), others,
                 _base(res, ("iipub@base", big), wall_polls)])
    rows.append([f"peak RSS at N = {big:,}, MiB", "", spread([m["peak_rss_mib"] for m in ms], 0),
                 f"lean {spread([m['peak_rss_mib'] for m in res.get(('lean floor', big), [])], 0)}", "–"])
    dbos = res.get(("DBOS peer", args.peer_jobs), [])
    if dbos:
        mine = per_call_ms(res.get(("iipub", args.peer_jobs), []))
        whole, window = per_call_ms(dbos), per_call_ms(dbos, "window_cpu")
        shown = (f"{ratio(whole, mine, 1)} (whole processes); {ratio(window, mine, 1)} (DBOS's workload "
                 "window only)")
        # iipub's CPU per poll beyond its fixed cost: (N polls' tick - the smallest tick) / the polls between.
        fixed = {i: m["cpu"] for i, m in enumerate(res.get(("iipub", small), []))}
        extra = [1000 * (m["cpu"] - fixed[i]) / (m["calls"] - small)
                 for i, m in enumerate(res.get(("iipub", args.peer_jobs), [])) if i in fixed and m["calls"] > small]
        beside = (f"DBOS {spread(whole, 2)} ms whole process, {spread(window, 2)} ms in its window; iipub "
                  f"{spread(mine, 2)} ms, {spread(extra, 2)} ms beyond its fixed cost (DBOS window ÷ that: "
                  f"{ratio(window, extra, 1)})")
        rows.append([f"DBOS ÷ iipub, CPU per provider call at N = {args.peer_jobs:,}", "≥ 5×", shown, beside, "–"])
    return reporting.table(["figure", "target", "iipub (this tree)", "beside it, same run", "iipub@base"], rows)


def _base(res: Results, key: tuple[str, int], show: Any) -> str:
    ms = res.get(key, [])
    return show(ms) if ms else "–"


def detail(res: Results) -> str:
    rows = []
    for (program, n), ms in res.items():
        rows.append([program, f"{n:,}", spread([m["wall"] for m in ms], 2), spread([m["cpu"] for m in ms], 2),
                     spread([m["user"] for m in ms], 2), spread([m["sys"] for m in ms], 2),
                     spread(per_call_ms(ms), 2) if n else "–", spread([m["peak_rss_mib"] for m in ms], 0),
                     "/".join(str(m.get("log_lines", "–")) for m in ms)])
    return reporting.table(["program", "N", "wall s", "CPU s", "user s", "sys s", "CPU ms per provider call",
                            "peak RSS MiB", "log lines"], rows)


def main() -> None:
    ap = harness.parser(__doc__.split("\n\n")[0], runs=2)
    ap.add_argument("--sizes", default="10,1000,10000", help="due polls per tick (the smallest: the fixed cost)")
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--max-connections", type=int, default=64)
    ap.add_argument("--programs", default=",".join(PROGRAMS))
    ap.add_argument("--iipub", type=Path, default=None, metavar="EXE",
                    help="the iipub measured (default: this checkout's venv; a plain `pip install .` is what "
                         "users run: the dev extra brings rich, which structlog then imports at every start)")
    ap.add_argument("--compare", type=Path, default=None, metavar="EXE",
                    help="also run this `iipub` executable (another checkout's venv) as iipub@base")
    ap.add_argument("--peer-python", default=None, help="a Python with bench/cost/requirements-peer.txt (DBOS)")
    ap.add_argument("--pg", default=DEFAULT_PG, help=f"the peer's PostgreSQL (default {DEFAULT_PG})")
    ap.add_argument("--peer-jobs", type=int, default=1000)
    ap.add_argument("--peer-in-progress", type=float, default=1.5, help="seconds a peer response runs")
    ap.add_argument("--profile", type=Path, default=None, help="py-spy iipub reconcile into this folder instead")
    run = harness.start(ap, production_logs=False)
    args = run.args
    sizes = sorted(int(s) for s in args.sizes.split(",") if s)
    if args.profile is not None:
        profile(args, args.profile, sizes[-1])
        return
    programs = [p for p in args.programs.split(",") if p] + (["iipub@base"] if args.compare else [])
    cells = [("import sqlalchemy", 0), (DB_IMPORTS, 0), (POLL_IMPORTS, 0), ("import openai", 0), ("iipub idle", 0),
             *([("iipub@base", 0)] if args.compare else []), *[(p, n) for n in sizes for p in programs],
             *([("DBOS peer", args.peer_jobs)] if args.peer_python else [])]
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, harness.polling_simulator(args.latency) as sim:
        args.workdir = tmp
        res = harness.grid(args.runs, cells, lambda cell: measure(args, cell[0], cell[1], sim))
    body = "\n".join([run.header(f"{args.runs} per cell, every cell once per run in turn (median, min–max)"), "",
                      harness.note(KEY), summary(res, sizes, args), "", "Every cell:", "", detail(res), ""])
    print(body)
    run.write_section(KEY, TITLE, body)


if __name__ == "__main__":
    main()
