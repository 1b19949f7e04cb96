"""iipub's poll tick beside the floor (`bench/floor.py`, three variants) and beside a DBOS
Transact peer (`bench/peer_dbos.py`), in one invocation.

Part 1, the floor: for each run, the same seeded workload four times in turn (iipub, `floor`,
`floor --batch`, `floor --raw`): N jobs due for a
poll (`benchdb.seed_polls`: each with a real simulator response still in progress), one
simulator process (`latency` seconds before every answer), a fresh MariaDB database per
measurement; each program runs in its own child process, which times its own sweep (wall and
process CPU around it, the SDK imported before) and counts the commands PyMySQL writes
(`floor.WireCounter`, the same cheap meter for all four).

Part 2, the peer (with `--peer-python`, a Python that has `bench/requirements-peer.txt`): the DBOS
app in a child process on the local PostgreSQL, one workflow per job (create, then durable sleep +
retrieve until completed, then store), at two response durations so the cost of one more poll
can be told from the cost of a job; and iipub's full lifecycle (`lifecycle.driven`) for its
commits per job.

    .venv/bin/python bench/floor_vs_iipub.py [--mysql URL] [--n 1000] [--runs 3] [--latency 0.2]
        [--peer-python /tmp/peer-venv/bin/python] [--pg URL] [--peer-jobs 200] [--no-doc]
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa

import benchdb
import common
import reporting
import simproc
from iipub import tables

BENCH = Path(__file__).resolve().parent
SECTION_KEY = "floor_peer"
SECTION_TITLE = "Floor and peer"
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
IDLE_SECONDS = 10.0  # the peer's idle baseline: DBOS's background threads alone
PROGRAMS = ("iipub", "floor", "floor --batch", "floor --raw")
FLOORS = PROGRAMS[1:]

IIPUB_CHILD = """
import json, sys, tempfile
from pathlib import Path
sys.path.insert(0, {bench!r})
import benchdb, common, floor
from iipub import db, reconcile
from iipub.provider import Provider
common.production_logs_to_devnull()
floor.warm_imports()  # before the clock starts, as in the floor: the SDK imported, one GET made
with tempfile.TemporaryDirectory() as tmp:
    settings = benchdb.bench_settings({url!r}, {sim_url!r}, Path(tmp) / "public",
                                      reconcile={{"concurrency": {c}, "tick_seconds": 290.0}},
                                      provider={{"max_connections": {mc}}})
    warm = Provider(settings.provider, "sk-bench")
    warm.retrieve({warm_id!r})
    warm.close()
    engine = db.make_engine({url!r}, pool_size={c} + 4)  # as `iipub reconcile` sizes it
    with floor.measured() as m:
        report = reconcile.run(settings, engine)
    engine.dispose()
m["polls"] = sum(report.transitions.values())
m["results"] = {{"errors": report.errors, "transitions": dict(report.transitions)}}
print(json.dumps(m, default=str))
"""


def child_json(cmd: Sequence[str], timeout: float = 1800) -> dict[str, Any]:
    out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, cwd=benchdb.ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed ({out.returncode}): {out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# -- part 1: iipub, the floor, the raw floor -------------------------------------------------


def measure(program: str, base_url: str, sim: simproc.SimProc, n: int, c: int, mc: int) -> dict[str, Any]:
    sim.reset()
    with benchdb.fresh_database(base_url, "floor") as url, tempfile.TemporaryDirectory() as tmp:
        engine = benchdb.open_db(url, pool_size=4)
        try:
            settings = benchdb.bench_settings(url, sim.url, Path(tmp) / "public")
            benchdb.seed_polls(engine, settings, sim, n)
            # One more response, not in the database: each program GETs it once before its clock starts.
            p = next(iter(settings.products.values()))
            warm_id = sim.precreate([benchdb.create_body(p, dt.date(2020, 1, 1), "warm-up")])[0]
            before = sim.requests().get("retrieve", 0)
            if program == "iipub":
                code = IIPUB_CHILD.format(bench=str(BENCH), url=url, sim_url=sim.url, c=c, mc=mc, warm_id=warm_id)
                m = child_json([sys.executable, "-c", code])
            else:
                m = child_json([sys.executable, str(BENCH / "floor.py"), "--url", url, "--sim-url", sim.url,
                                "--concurrency", str(c), "--max-connections", str(mc), "--warm-id", warm_id,
                                *program.split()[1:]])
            m["gets"] = sim.requests().get("retrieve", 0) - before - 1  # less the warm-up GET
            m["journal"] = journal_polls(engine)
        finally:
            engine.dispose()
    if not (m["polls"] == m["gets"] == m["journal"] == n):
        print(f"  !! {program}: polls {m['polls']}, GETs {m['gets']}, journal rows {m['journal']} (N = {n}); "
              f"{m.get('results')}", flush=True)
    return m


def journal_polls(engine: sa.Engine) -> int:
    E = tables.job_events
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(E).where(E.c.reason == "poll")).scalar_one())


def per_poll(m: dict[str, Any], key: str) -> float:
    wire: dict[str, int] = m["wire"]
    polls = float(max(m["polls"], 1))
    if key == "statements":
        return wire.get("statement", 0) / polls
    if key == "wire":
        return sum(wire.values()) / polls
    return wire.get(key, 0) / polls


def floor_table(results: dict[str, list[dict[str, Any]]]) -> str:
    rows = []
    floors = [f for f in FLOORS if f in results]
    for program, ms in results.items():
        cpu = [m["cpu"] / m["polls"] * 1000 for m in ms]
        ratios = [[m["cpu"] / m["polls"] / (f["cpu"] / f["polls"]) for m, f in zip(ms, results[ref], strict=True)]
                  for ref in floors]
        rows.append([
            f"`{program}`", str(len(ms)), reporting.spread([m["wall"] for m in ms], 2),
            reporting.spread([m["polls"] / m["wall"] for m in ms]), reporting.spread(cpu, 2),
            *(reporting.spread(r, 2) for r in ratios),
            (f"{reporting.median(per_poll(m, 'statements') for m in ms):.2f} / "
             f"{reporting.median(per_poll(m, 'wire') for m in ms):.2f}"),
            f"{reporting.median(per_poll(m, 'COMMIT') for m in ms):.2f}",
            reporting.spread([m.get("peak_rss_mib", float("nan")) for m in ms], 0),
        ])
    return reporting.table(["program", "runs", "wall s", "polls/s", "CPU ms per poll",
                            *(f"÷ `{f}` (same run)" for f in floors), "SQL statements / wire round trips per poll",
                            "COMMITs per poll", "peak RSS MiB"], rows)


# -- part 2: the DBOS peer, and iipub's lifecycle commits --------------------------------------


def peer_bodies(n: int, path: Path) -> None:
    """The create bodies the peer sends: exactly what `Provider.create` sends for n slots."""
    settings = benchdb.bench_settings("sqlite://", "http://unused/v1", path.parent / "public")
    chosen = benchdb.slots(list(settings.products.values()), n, dt.date(2026, 11, 30))
    bodies = [{"job_id": f"peer-{i:05d}", "body": benchdb.create_body(p, day, f"peer-{i:05d}")}
              for i, (p, day) in enumerate(chosen)]
    path.write_text(json.dumps(bodies, default=str))


def run_peer(python: str, pg: str, jobs: int, in_progress: float, latency: float, mc: int, sleep: float,
             tmp: Path, idle: float = 0.0) -> dict[str, Any]:
    bodies = tmp / f"bodies-{jobs}.json"  # the jobs', then the warm-up job's
    if not bodies.exists():
        peer_bodies(jobs + 1, bodies)
    with simproc.SimProc(latency_seconds=latency, queued_seconds=0.0, in_progress_seconds=in_progress,
                         retention_seconds=3600.0) as sim:
        m = child_json([python, str(BENCH / "peer_dbos.py"), "--pg", pg, "--sim-url", sim.url,
                        "--bodies", str(bodies), "--jobs", str(jobs), "--sleep", str(sleep),
                        "--max-connections", str(mc), "--idle", str(idle)])
        m["sim"] = sim.requests()
    m["in_progress"] = in_progress
    return m


def peer_table(peer: list[dict[str, Any]], life: dict[str, Any] | None, tick: list[dict[str, Any]]) -> str:
    """The peer's runs, iipub's lifecycle and iipub's poll tick, per job and per provider call."""
    rows = []
    for m in peer:
        calls = m["creates"] + m["retrieves"]
        rows.append([
            f"DBOS peer, responses in progress {m['in_progress']:g} s", f"{m['jobs']:,}", f"{m['wall']:.2f}",
            f"{m['retrieves'] / m['jobs']:.2f}", f"{m['cpu'] / calls * 1000:.2f}",
            f"{m['cpu'] / m['jobs'] * 1000:.1f}", f"{m['server_commits'] / m['jobs']:.1f}",
            f"{m['client_commits'] / m['jobs']:.1f}", f"{m['client_statements'] / m['jobs']:.1f}",
        ])
    if life is not None:
        k = life["k"]
        calls = sum(life["calls"].values())
        rows.append([
            "iipub full lifecycle (NO_JOB → DELETED, relay included, zero latency)"
            + (f"; quarantined by the tree: {life['quarantined']}" if life["quarantined"] else ""),
            f"{k:,}", f"{life['wall']:.2f}", f"{life['calls'].get('retrieve', 0) / k:.2f}",
            f"{life['cpu'] / calls * 1000:.2f} (all work / calls)", f"{life['cpu'] / k * 1000:.1f}", "–",
            f"{life['wire'].get('COMMIT', 0) / k:.1f}",
            f"{sum(life['statements'].values()) / k:.1f}",
        ])
    polls = list(tick)
    rows.append([
        "iipub poll tick (part 1 above, per poll)", "–", "–", "1.00",
        reporting.spread([m["cpu"] / m["polls"] * 1000 for m in polls], 2), "–", "–",
        f"{reporting.median(per_poll(m, 'COMMIT') for m in polls):.2f} per poll",
        f"{reporting.median(per_poll(m, 'statements') for m in polls):.2f} per poll",
    ])
    return reporting.table(["program", "jobs", "wall s", "GETs per job", "CPU ms per provider call",
                            "CPU ms per job", "commits per job (server, `pg_stat_database`)",
                            "commits per job (client)", "SQL statements per job (client)"], rows)


def marginal(peer: list[dict[str, Any]]) -> str:
    """What one more poll costs the peer: the difference between the two response durations
    divided by the difference in GETs."""
    if len(peer) < 2:
        return ""
    a, b = sorted(peer, key=lambda m: m["retrieves"])[:: len(peer) - 1]
    dgets = b["retrieves"] - a["retrieves"]
    if dgets <= 0:
        return ""
    cpu = (b["cpu"] - a["cpu"]) / dgets * 1000
    server = (b["server_commits"] - a["server_commits"]) / dgets
    client = (b["client_commits"] - a["client_commits"]) / dgets
    stmts = (b["client_statements"] - a["client_statements"]) / dgets
    return (f"One more poll (DBOS.sleep + retrieve step), from the two peer runs: {cpu:.2f} ms CPU, "
            f"{server:.2f} commits (server), {client:.2f} commits and {stmts:.2f} SQL statements (client) "
            f"({dgets:,} more GETs).")


def lifecycle_run(base_url: str, k: int) -> dict[str, Any]:
    """`bench/lifecycle.py`'s measurement (K backfill slots NO_JOB → DELETED, reconcile + relay
    loops, zero latency) with this process's CPU, and a slot the tree quarantines counted as
    finished (its reason reported) instead of failing the run."""
    import lifecycle
    from iipub.states import State

    # tick_seconds 290, not lifecycle.py's 3600: the config refuses a tick budget past the
    # heartbeat's (300 s); these ticks take seconds.
    with lifecycle.driven(base_url, k, ends=(State.DELETED.value, State.QUARANTINED.value), tick_seconds=290.0,
                          ledger_in_temp_dir=True) as d:
        J = tables.jobs
        with d.engine.connect() as conn:
            parked: dict[Any, Any] = dict(conn.execute(sa.select(J.c.quarantine_reason, sa.func.count())
                                       .where(J.c.state == State.QUARANTINED.value)
                                       .group_by(J.c.quarantine_reason)).all())
    rt = d.round_trips
    return {"k": k, "wall": d.wall, "cpu": d.cpu, "events": d.events, "wire": rt["wire"],
            "statements": rt["statements"], "calls": d.calls,
            "quarantined": {str(r): int(n) for r, n in parked.items()}}


# -- the document ---------------------------------------------------------------------------------


def write_section(key: str, title: str, body: str, enabled: bool) -> None:
    """This script's section, at the end of docs/benchmarks.md between its own markers (it is not
    one of the numbered sections `reporting.write_section` keeps in order)."""
    block = f"## {title}\n\n{body.rstrip()}\n"
    print("\n" + block)
    if not enabled:
        return
    begin, end = f"<!-- bench:{key}:begin -->", f"<!-- bench:{key}:end -->"
    text = reporting.DOC.read_text(encoding="utf-8")
    if begin not in text:
        text = text.rstrip() + f"\n\n{begin}\n{end}\n"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    text = pattern.sub(lambda _m: f"{begin}\n{block}{end}", text, count=1)
    reporting.DOC.write_text(text, encoding="utf-8")


def main() -> None:
    ap = common.parser(__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=None, help="jobs due for a poll (default 1,000; --quick 200)")
    ap.add_argument("--latency", type=float, default=0.2, help="provider latency in seconds (default 0.2)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--max-connections", type=int, default=32, help="HTTP connections (iipub's default 32)")
    ap.add_argument("--programs", default=",".join(PROGRAMS),
                    help=f"comma-separated subset of part 1's programs (default {','.join(PROGRAMS)})")
    ap.add_argument("--peer-python", default=None,
                    help="a Python with bench/requirements-peer.txt installed: also run the DBOS peer")
    ap.add_argument("--pg", default=DEFAULT_PG, help=f"PostgreSQL server for the peer (default {DEFAULT_PG})")
    ap.add_argument("--peer-jobs", type=int, default=None, help="workflows per peer run (default 200; --quick 40)")
    ap.add_argument("--peer-sleep", type=float, default=1.0, help="the peer's durable sleep between polls, s")
    ap.add_argument("--peer-in-progress", default="2,6",
                    help="response durations (simulator in_progress_seconds) of the peer runs (default 2,6)")
    ap.add_argument("--doc-key", default=SECTION_KEY,
                    help=f"the section's marker key at the end of docs/benchmarks.md (default {SECTION_KEY})")
    ap.add_argument("--lifecycle-slots", type=int, default=None,
                    help="iipub full-lifecycle slots beside the peer (default 200; 0 skips)")
    run = common.start(ap, production_logs=True)  # the lifecycle run is in this process
    args = run.args
    runs = args.runs or (1 if args.quick else 3)
    n = args.n or (200 if args.quick else 1000)
    c, mc = args.concurrency, args.max_connections
    programs = [p.strip() for p in args.programs.split(",") if p.strip()]
    if unknown := set(programs) - set(PROGRAMS):
        ap.error(f"--programs: unknown {sorted(unknown)}; choose from {list(PROGRAMS)}")
    results: dict[str, list[dict[str, Any]]] = {p: [] for p in programs}
    with simproc.SimProc(latency_seconds=args.latency, queued_seconds=0.0, in_progress_seconds=86400.0,
                         retention_seconds=864000.0) as sim:
        for r in range(runs):
            for program in programs:  # side by side within a run
                m = measure(program, args.mysql, sim, n, c, mc)
                results[program].append(m)
                print(f"run {r + 1} {program:<12} {m['wall']:7.2f} s {m['polls'] / m['wall']:7.1f} polls/s "
                      f"{m['cpu'] / max(m['polls'], 1) * 1000:6.2f} ms CPU/poll  wire {m['wire']}", flush=True)
    part1_wall = run.elapsed()

    peer: list[dict[str, Any]] = []
    baselines: dict[str, float] = {}
    life: dict[str, Any] | None = None
    if args.peer_python:
        jobs = args.peer_jobs or (40 if args.quick else 200)
        with tempfile.TemporaryDirectory() as tmp:
            base = run_peer(args.peer_python, args.pg, 0, 1.0, args.latency, mc, args.peer_sleep, Path(tmp))
            idle = run_peer(args.peer_python, args.pg, 0, 1.0, args.latency, mc, args.peer_sleep, Path(tmp),
                            idle=IDLE_SECONDS)
            idle_rate = (idle["xact_commit"] - base["xact_commit"]) / IDLE_SECONDS
            baselines.update(launch=base["xact_commit"], idle_per_s=idle_rate,
                             idle_cpu_per_s=idle["idle_cpu"] / IDLE_SECONDS)
            print(f"peer baselines: launch + destroy {base['xact_commit']} commits, idle {idle_rate:.1f} commits/s",
                  flush=True)
            for t in (float(x) for x in args.peer_in_progress.split(",")):
                m = run_peer(args.peer_python, args.pg, jobs, t, args.latency, mc, args.peer_sleep, Path(tmp))
                # Less launch + warm-up + destroy, and DBOS's background transactions over the window.
                m["server_commits"] = m["xact_commit"] - base["xact_commit"] - idle_rate * m["wall"]
                peer.append(m)
                print(f"peer in_progress {t:g} s: {m['wall']:.2f} s, {m['creates']} creates, "
                      f"{m['retrieves']} retrieves, {m['cpu'] / (m['creates'] + m['retrieves']) * 1000:.2f} ms "
                      f"CPU/call, commits/job server {m['server_commits'] / jobs:.1f} client "
                      f"{m['client_commits'] / jobs:.1f}", flush=True)
        k = args.lifecycle_slots if args.lifecycle_slots is not None else (40 if args.quick else 200)
        if k:
            try:
                life = lifecycle_run(args.mysql, k)
                print(f"iipub lifecycle K={k}: {life['wall']:.2f} s, COMMITs/slot "
                      f"{life['wire'].get('COMMIT', 0) / k:.1f}, quarantined {life['quarantined']}", flush=True)
            except Exception as exc:  # the tree under test may fail it: the other figures stand
                print(f"!! iipub lifecycle failed: {type(exc).__name__}: {exc}", flush=True)

    versions = peer[0]["versions"] if peer else {}
    head = run.header(f"{runs} per program, alternating {' → '.join(programs)} within each run "
                      "(median, min–max)", [f"- Part 1 wall time: {part1_wall:.0f} s"])
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=benchdb.ROOT, capture_output=True, text=True,
                         check=False).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "iipub"], cwd=benchdb.ROOT, capture_output=True,
                                text=True, check=False).stdout.strip())
    body = f"""{head}
- Tree measured: {git}{' + uncommitted changes under iipub/' if dirty else ''}.
- Part 1 set-up: N = {n:,} jobs due for a poll, seeded as for the tick benchmark (section 1) into a fresh
  database per measurement; one simulator process, `latency_seconds={args.latency}`, responses in progress for
  the whole run; concurrency {c}, {mc} HTTP connections, chunks of {c} leased per transaction, batches of 500
  candidates. Each program in its own child process, timed around its sweep only (before the clock starts: the
  openai SDK and its Responses models imported, and one GET of a response outside the workload made the
  program's own way, so lazily built models are ready; engine connections are made inside); *CPU per poll* =
  the child's process CPU (all threads) / polls. iipub: `reconcile.run` with production settings except
  `tick_seconds = 290`, `concurrency`, `max_connections`, logs rendered into /dev/null. The floors
  (`bench/floor.py`, no logging, no decisions beyond status → state, the same candidate SELECT and fenced
  chunk lease + re-read as iipub): *floor* — per job a GET through `client.responses.retrieve` (the SDK's
  pydantic model built), then its own transaction: fenced UPDATE + journal INSERT + COMMIT (the I/O the issue
  describes); *floor --batch* — iipub's current I/O: the GET through the SDK's request path with the body read
  as JSON (`client.get(…, cast_to=httpx.Response)`, as `Provider.retrieve` now does), and per leased chunk one
  transaction written by one writer thread: a fenced UPDATE per job, one multi-row journal INSERT, one COMMIT;
  *floor --raw* — a plain httpx GET, and per chunk a single UPDATE fenced on all its (id, version) pairs, one
  multi-row INSERT, one COMMIT. Round trips are the commands PyMySQL wrote (one counter for all). *÷ floor*:
  this program's CPU per poll / the floor's, measured back to back in the same run.

{floor_table(results)}
"""
    if peer:
        p0 = peer[0]
        body += f"""
- Part 2 set-up (the same invocation): `bench/peer_dbos.py` under `{args.peer_python}` (DBOS
  {versions.get('dbos', '?')}, openai {versions.get('openai', '?')}, httpx {versions.get('httpx', '?')},
  SQLAlchemy {versions.get('sqlalchemy', '?')}, psycopg {versions.get('psycopg', '?')}), PostgreSQL
  {p0.get('server', '?')} on 127.0.0.1 (a fresh `dbos_bench_*` database per run, system database and
  application datasource in it, dropped after). One workflow per job, all {p0['jobs']} started at once
  (`DBOS.start_workflow`): a create step (`client.responses.create` with the body iipub sends), then
  `DBOS.sleep({args.peer_sleep:g})` + a retrieve step until the response is completed, then a store step (a
  `SQLAlchemyDatasource` transaction inserting the output into a table). One shared httpx client, {mc}
  connections, `max_retries=0`; simulator latency {args.latency:g} s, responses queued 0 s then in progress as
  listed. *CPU per provider call*: the peer process's CPU from the first workflow started to the last result /
  (creates + retrieves). *commits (server)*: `xact_commit` of the run's database in `pg_stat_database` over
  the whole process, less a baseline run with no jobs (launch, migrations, one warm-up job, destroy) and less
  DBOS's idle transaction rate × the run's window (both below); *commits (client)*: COMMITs SQLAlchemy sent on
  any engine (DBOS's own included) between the first workflow start and the last result — fewer than the
  server counts, as DBOS also runs statements outside explicit transactions. The warm-up job (before the
  clock) loads DBOS's and the SDK's lazy parts.
- iipub's lifecycle row: `bench/lifecycle.py`'s measurement (section 2) rerun here (tick budgets 290 s): K
  slots NO_JOB → DELETED (11 journaled transitions each: create, polls, custody, validation, compose, save of
  two editions with their outbox rows, relay delivery, remote delete), zero provider latency, MariaDB; CPU of
  this process (reconcile and relay, all threads); COMMITs counted on the wire.

{peer_table(peer, life, results.get('iipub', []))}

{marginal(peer)} Baselines: launch + warm-up job + destroy {baselines['launch']:.0f} commits;
DBOS idle (its background threads, {IDLE_SECONDS:g} s launched with nothing to do) {baselines['idle_per_s']:.1f}
commits/s and {baselines['idle_cpu_per_s'] * 1000:.0f} ms CPU/s. GETs per job by run: {'; '.join(
    f"{m['in_progress']:g} s: {m['polls_per_job']}" for m in peer)}.
"""
    title = SECTION_TITLE if args.doc_key == SECTION_KEY else f"{SECTION_TITLE}: N = {n:,}"
    write_section(args.doc_key, title, body, enabled=not args.no_doc)


if __name__ == "__main__":
    main()
