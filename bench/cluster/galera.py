#!/usr/bin/env python
"""iipub on a MariaDB Galera cluster, proven under node failures.

How the cluster is built, the node faults and the verdict: bench/notes/galera.md (also in `--help`).

    .venv/bin/python bench/cluster/galera.py campaign --slots 1000 --seconds 420 --seed 21 \\
        --node-kills 2 --node-pauses 2
    .venv/bin/python bench/cluster/galera.py start --nodes 3   # just a cluster, until Ctrl-C
    .venv/bin/python bench/cluster/galera.py throughput        # a 10,000-job poll tick, 1 vs 3 nodes

Every mariadbd it starts is stopped by pid at exit (and SIGKILLed if it does not stop);
the MariaDB on 127.0.0.1:3306 is never touched.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parents[1]
for p in (str(ROOT), str(BENCH.parent / "support"), str(BENCH.parent / "chaos")):
    if p not in sys.path:
        sys.path.insert(0, p)

import chaos
import harness
import simproc
from iipub.observe import invariants

MARIADBD = "/usr/sbin/mariadbd"
INSTALL_DB = "/usr/bin/mariadb-install-db"
PROVIDER = "/usr/lib/galera/libgalera_smm.so"
CNF_TEMPLATE = BENCH / "galera.cnf"  # a node's my.cnf, its braced fields filled by Cluster._write_cnf


def log(msg: str) -> None:
    print(f"[galera {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- the cluster ---------------------------------------------------------------------------------


@dataclass
class Node:
    index: int  # 1-based
    base: Path
    sql_port: int
    gcomm_port: int
    ist_port: int
    sst_port: int
    proc: subprocess.Popen[bytes] | None = None
    state: str = "stopped"  # stopped | running | killed | paused
    starts: int = 0
    faults: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"node{self.index}"

    @property
    def datadir(self) -> Path:
        return self.base / "data"

    @property
    def socket(self) -> Path:
        return self.base / "mysqld.sock"

    @property
    def cnf(self) -> Path:
        return self.base / "my.cnf"

    @property
    def error_log(self) -> Path:
        return self.base / "error.log"

    def url(self, database: str | None = None) -> str:
        return f"mysql+pymysql://root@127.0.0.1:{self.sql_port}/{database or ''}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None


class Cluster:
    """N Galera nodes on loopback under one temp dir, owned by the `mysql` user."""

    def __init__(self, n: int, workdir: Path, *, sql_port: int = 33061, gcomm_port: int = 45671,
                 ist_port: int = 45681, sst_port: int = 45691, buffer_pool: str = "256M") -> None:
        if n < 1:
            raise ValueError("a cluster needs at least one node")
        self.workdir = workdir
        self.buffer_pool = buffer_pool
        self.nodes = [Node(i + 1, workdir / f"node{i + 1}", sql_port + i, gcomm_port + i, ist_port + i, sst_port + i)
                      for i in range(n)]
        self._lock = threading.Lock()

    # -- configuration ---------------------------------------------------------------

    def _write_cnf(self, node: Node) -> None:
        """The node's my.cnf, from bench/cluster/galera.cnf."""
        text = CNF_TEMPLATE.read_text(encoding="utf-8").format(
            node=node, peers=",".join(f"127.0.0.1:{n.gcomm_port}" for n in self.nodes), provider=PROVIDER,
            buffer_pool=self.buffer_pool)
        node.cnf.write_text(text, encoding="utf-8")

    def _chown(self, path: Path) -> None:
        pw = pwd.getpwnam("mysql")
        for dirpath, _dirnames, filenames in os.walk(path):
            os.chown(dirpath, pw.pw_uid, pw.pw_gid)
            for f in filenames:
                with contextlib.suppress(FileNotFoundError):
                    os.chown(os.path.join(dirpath, f), pw.pw_uid, pw.pw_gid)

    # -- lifecycle -----------------------------------------------------------------------

    def start(self, timeout: float = 180.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.workdir, 0o755)  # the mysql user must reach its datadir
        for node in self.nodes:
            node.base.mkdir(parents=True, exist_ok=True)
            self._write_cnf(node)
            self._chown(node.base)
            out = subprocess.run([INSTALL_DB, f"--defaults-file={node.cnf}", "--user=mysql",
                                  "--auth-root-authentication-method=normal", "--skip-test-db"],
                                 capture_output=True, text=True, timeout=120)
            if out.returncode != 0:
                raise RuntimeError(f"mariadb-install-db failed for {node.name}: {out.stderr[-500:]}")
        first = self.nodes[0]
        self.launch(first, bootstrap=True)
        self.wait_node(first, timeout)
        # root over TCP from 127.0.0.1 with an empty password (replicated to the joiners).
        self.sql(first, "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'; "
                        "GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;")
        for node in self.nodes[1:]:
            self.launch(node)
            self.wait_node(node, timeout)  # one joiner at a time: each SST has one donor
        self.wait_synced(timeout)

    def launch(self, node: Node, *, bootstrap: bool = False) -> None:
        cmd = [MARIADBD, f"--defaults-file={node.cnf}"]
        if bootstrap:
            cmd.append("--wsrep-new-cluster")
        with open(node.base / "stdout.log", "ab") as out:
            node.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        node.state = "running"
        node.starts += 1
        log(f"{node.name}: mariadbd pid {node.proc.pid}{' (bootstrap)' if bootstrap else ''}")

    def sql(self, node: Node, statement: str, *options: str, timeout: float = 60) -> str:
        """`statement` run by the `mariadb` client over the node's socket: its output."""
        out = subprocess.run(["mariadb", f"--socket={node.socket}", "-uroot", "-N", "-B", *options, "-e", statement],
                             capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"{node.name}: {out.stderr.strip()[-300:]}")
        return out.stdout

    def status(self, node: Node) -> dict[str, str]:
        """wsrep status variables of a node ({} when it does not answer)."""
        if node.state in ("killed", "paused", "stopped"):
            return {}
        try:
            out = self.sql(node, "SHOW GLOBAL STATUS LIKE 'wsrep_%'", "--connect-timeout=2", timeout=10)
        except (subprocess.TimeoutExpired, RuntimeError):
            return {}
        return dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)

    def wait_node(self, node: Node, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if node.proc is not None and node.proc.poll() is not None:
                raise RuntimeError(f"{node.name} exited with {node.proc.returncode}; see {node.error_log}")
            st = self.status(node)
            if st.get("wsrep_local_state_comment") == "Synced" and st.get("wsrep_ready") == "ON":
                return
            time.sleep(0.5)
        raise RuntimeError(f"{node.name} not Synced after {timeout:.0f} s; see {node.error_log}")

    def wait_synced(self, timeout: float = 180.0) -> dict[str, Any]:
        """Every node Synced in one primary component of N; returns what was seen."""
        end = time.monotonic() + timeout
        n = len(self.nodes)
        seen: dict[str, Any] = {}
        while time.monotonic() < end:
            seen = {}
            for node in self.nodes:
                st = self.status(node)
                seen[node.name] = {k: st.get(k) for k in ("wsrep_cluster_size", "wsrep_local_state_comment",
                                                            "wsrep_cluster_status", "wsrep_last_committed")}
            if all(v["wsrep_cluster_size"] == str(n) and v["wsrep_local_state_comment"] == "Synced"
                   and v["wsrep_cluster_status"] == "Primary" for v in seen.values()):
                return seen
            time.sleep(0.5)
        raise RuntimeError(f"cluster not Synced after {timeout:.0f} s: {seen}")

    # -- node faults -------------------------------------------------------------------

    def _signal(self, node: Node, sig: int, states: tuple[str, ...], then: str) -> None:
        """Send `sig` to a node's running mariadbd if the node is in one of `states`; it is `then`."""
        with self._lock:
            if node.proc is None or node.pid is None or node.state not in states:
                return
            os.kill(node.pid, sig)
            if sig == signal.SIGKILL:
                node.proc.wait(timeout=30)
            node.state = then

    def kill(self, node: Node) -> None:
        self._signal(node, signal.SIGKILL, ("running", "paused"), "killed")

    def pause(self, node: Node) -> None:
        self._signal(node, signal.SIGSTOP, ("running",), "paused")

    def resume(self, node: Node) -> None:
        self._signal(node, signal.SIGCONT, ("paused",), "running")

    def restart(self, node: Node) -> None:
        with self._lock:
            if node.state == "killed":
                self.launch(node)

    def stop(self) -> None:
        """Stop every node this cluster started, by pid: SIGCONT, SIGTERM, then SIGKILL."""
        for node in reversed(self.nodes):
            proc = node.proc
            if proc is None or proc.poll() is not None:
                continue
            simproc.stop_process(proc, 60, signals=(signal.SIGCONT, signal.SIGTERM))
            node.state = "stopped"
            log(f"{node.name}: stopped (pid {proc.pid})")


@contextlib.contextmanager
def running_cluster(n: int, workdir: Path, **ports: Any) -> Iterator[Cluster]:
    cluster = Cluster(n, workdir, **ports)
    try:
        t = time.monotonic()
        cluster.start()
        log(f"{n}-node cluster Synced in {time.monotonic() - t:.1f} s under {workdir}")
        yield cluster
    finally:
        cluster.stop()


@contextlib.contextmanager
def cluster_of(args: argparse.Namespace) -> Iterator[Cluster]:
    """The cluster the command line asks for, under --cluster-dir (or a new temp dir, removed
    afterwards unless --keep-cluster)."""
    base = Path(args.cluster_dir or tempfile.mkdtemp(prefix="iipub-galera-"))
    with running_cluster(args.nodes, base, sql_port=args.sql_port, gcomm_port=args.gcomm_port,
                         ist_port=args.ist_port, sst_port=args.sst_port) as cluster:
        yield cluster
    if not args.keep_cluster:
        shutil.rmtree(base, ignore_errors=True)


# -- the campaign ----------------------------------------------------------------------------------


class GaleraRun(chaos.Run):
    """bench/chaos/chaos.py's campaign with a reconcile and a relay per node and node faults."""

    def __init__(self, args: argparse.Namespace, cluster: Cluster) -> None:
        args.mysql = cluster.nodes[0].url()
        super().__init__(args)
        self.cluster = cluster
        self.node_rng = random.Random(f"{self.seed}-nodes")
        self.node_plan: list[tuple[float, str, Node]] = []
        self.node_undo: list[tuple[float, str, Node]] = []
        self.node_events: list[dict[str, Any]] = []
        self.worker_node: dict[str, str] = {}
        self.envs: list[dict[str, str]] = []
        self._spawned = 0

    def setup(self) -> None:
        super().setup()  # database, migrations (through node 1), simulator, receiver, slots
        self.report["cluster"] = {"nodes": len(self.cluster.nodes),
                                  "ports": [n.sql_port for n in self.cluster.nodes]}
        self.workers = []
        for node in self.cluster.nodes:
            env = dict(self.env, IIPUB_DATABASE_URL=node.url(self.dbname))
            self.envs.append(env)
            for role in ("reconcile",) * self.args.reconcilers_per_node + ("relay",) * self.args.relays_per_node:
                w = self.worker(role, len(self.workers), env)
                self.workers.append(w)
                self.worker_node[w.name] = node.name
        self.report["workers"] = dict(self.worker_node)
        # Node faults at random moments of the chaos phase, never two at once, never node 1.
        victims = self.cluster.nodes[1:]
        if not victims and (self.args.node_kills or self.args.node_pauses):
            raise SystemExit("node faults need at least 2 nodes (node 1 is the control node)")
        kinds = ["kill"] * self.args.node_kills + ["pause"] * self.args.node_pauses
        self.node_rng.shuffle(kinds)
        slots = len(kinds)
        for i, kind in enumerate(kinds):
            at = self.args.seconds * (0.1 + 0.75 * (i + self.node_rng.uniform(0.1, 0.6)) / slots)
            self.node_plan.append((at, kind, self.node_rng.choice(victims)))
        self.report["node_fault_plan"] = [{"at_s": round(a, 1), "kind": k, "node": n.name}
                                          for a, k, n in self.node_plan]

    def chaos(self) -> None:
        self.chaos_t0 = time.monotonic()
        super().chaos()

    # chaos.Run calls _resume_due on every step of its loop (and with everything=True when the
    # chaos stops): the hook for the node faults.
    def _resume_due(self, everything: bool = False) -> None:
        super()._resume_due(everything)
        t0 = getattr(self, "chaos_t0", None)
        if t0 is None:
            return
        now = time.monotonic()
        busy = {n.name for _, _, n in self.node_undo}
        while self.node_plan and not everything and now - t0 >= self.node_plan[0][0]:
            _, kind, node = self.node_plan.pop(0)
            if node.name in busy or node.state != "running":
                self.node_event("node_fault_skipped", node, kind=kind)
                continue
            if kind == "kill":
                time.sleep(self.node_rng.uniform(0, 0.5))
                self.cluster.kill(node)
                self.node_event("node_sigkill", node)
                self.node_undo.append((now + self.node_rng.uniform(5, 15), "restart", node))
            else:
                seconds = self.node_rng.uniform(chaos.LEASE_SECONDS + 6, chaos.LEASE_SECONDS + 16)
                self.cluster.pause(node)
                self.node_event("node_sigstop", node, seconds=round(seconds, 1))
                self.node_undo.append((now + seconds, "resume", node))
            busy.add(node.name)
        due, self.node_undo = chaos.split_due(self.node_undo, everything)
        for _, what, node in due:
            if what == "restart":
                self.cluster.restart(node)
                self.node_event("node_restart", node)
            else:
                self.cluster.resume(node)
                self.node_event("node_sigcont", node)
        if everything:
            self.node_plan = []

    def node_event(self, name: str, node: Node, **detail: Any) -> None:
        t0 = getattr(self, "chaos_t0", self.t0)
        ev = {"t": round(time.monotonic() - t0, 1), "event": name, "node": node.name, **detail}
        self.node_events.append(ev)
        self.record(name, node=node.name, **detail)
        log(f"{node.name}: {name} {detail or ''}")

    def do_kill_db_connections(self) -> None:
        """Kill connections on a random live node (chaos.py's version only knows one server)."""
        live = [n for n in self.cluster.nodes if n.state == "running"]
        node = self.rng.choice(live)
        admin = self.admin
        try:
            self.admin = sa.create_engine(node.url(), isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool,
                                          connect_args={"connect_timeout": 3, "read_timeout": 10})
            super().do_kill_db_connections()
        finally:
            if self.admin is not admin and self.admin is not None:
                self.admin.dispose()
            self.admin = admin

    def stop_chaos(self) -> None:
        super().stop_chaos()
        t = time.monotonic()
        seen = self.cluster.wait_synced(300)
        self.report["resync_after_chaos"] = {"seconds": round(time.monotonic() - t, 1), "nodes": seen}
        log(f"cluster Synced again after {time.monotonic() - t:.1f} s")

    def spawn_env(self) -> dict[str, str]:
        """Convergence rounds rotate over the nodes too."""
        self._spawned += 1
        return self.envs[(self._spawned - 1) % len(self.envs)]

    def verdict(self) -> list[invariants.Violation]:
        found = super().verdict()
        # The same check as an operator would run it: `iipub check` through one node.
        proc = subprocess.run([*harness.iipub_exe(), "check", "--simulator", self.sim_origin, "--settled", "--json"],
                              env=self.envs[0], cwd=self.workdir, capture_output=True, text=True, timeout=600)
        try:
            doc: Any = json.loads(proc.stdout)
        except ValueError:
            doc = proc.stdout[-2000:]
        self.report["iipub_check"] = {"rc": proc.returncode, "output": doc, "stderr": proc.stderr[-1000:]}
        self.report["figures"] = self.figures(found)
        return found

    def figures(self, found: list[invariants.Violation]) -> dict[str, Any]:
        kinds = invariants.summarize(found)

        def n(*names: str) -> int:
            return sum(kinds.get(k, 0) for k in names)

        return {
            "violations_total": len(found),
            "duplicate_paid_creates_outside_quarantine": n("unjournaled_create", "create_after_ambiguous",
                                                           "create_unknown_job", "attempts_mismatch", "sdk_retry",
                                                           "budget_exceeded"),
            "duplicate_publications": n("published_twice", "killed_but_published"),
            "lost_outputs": n("response_abandoned", "expiry_unjournaled", "deleted_without_custody", "edition_orphan"),
            "stranded_jobs": n("stranded", "unsettled", "not_published", "stale_lease", "outbox_unpublished",
                               "outbox_pending", "unreleased_exit"),
            "iipub_check_rc": self.report.get("iipub_check", {}).get("rc"),
        }

    def finish(self, found: list[invariants.Violation]) -> None:
        self.report["node_events"] = self.node_events
        self.report["node_starts"] = {n.name: n.starts for n in self.cluster.nodes}
        super().finish(found)


def campaign(args: argparse.Namespace) -> int:
    with cluster_of(args) as cluster:
        if args.workdir is None:
            args.workdir = str(cluster.workdir / "run")
        run = GaleraRun(args, cluster)
        # The database is not dropped: the cluster (and the database with it) goes away below anyway.
        found, failed = chaos.campaign(run, keep_db=True)
    r = run.report
    log(f"seed {r['seed']}: {r.get('jobs_total')} slots on {args.nodes} nodes, {r.get('process_runs')} worker runs")
    log(f"node events: {[(e['t'], e['event'], e['node']) for e in r.get('node_events', [])]}")
    log(f"figures {r.get('figures')}; unexpected exits {r.get('unexpected_exits')}")
    print(json.dumps({k: r.get(k) for k in ("seed", "jobs_total", "figures", "violations_by_kind", "node_events",
                                            "final_states", "unexpected_exits", "wall_seconds")}, default=str))
    return chaos.outcome(run, found, failed)


def measure_spread(cluster: Cluster, sim: Any, n: int, nodes: list[int], concurrency: int = 64,
                   max_connections: int = 64) -> dict[str, Any]:
    """bench/throughput/overlap.py's measurement, one `iipub reconcile` per entry of `nodes` (1-based node
    numbers), each with IIPUB_DATABASE_URL of its node: wall time of one tick over N due polls."""
    sections: dict[str, dict[str, Any]] = {
        "reconcile": {"concurrency": concurrency, "tick_seconds": 600.0},
        "provider": {"max_connections": max_connections},
        "monitoring": {"heartbeat_after_seconds": 0},  # a 600 s tick: the heartbeat check off
    }
    with harness.bed(cluster.nodes[0].url(), "galera", sim, polls=n, pool_size=4, sections=sections) as bed:
        dbname = sa.engine.make_url(bed.url).database
        env = bed.env(**sections)
        cluster.wait_synced(120)
        before = sim.requests().get("retrieve", 0)
        t0 = time.perf_counter()
        summaries = harness.run_reconcilers(
            [dict(env, IIPUB_DATABASE_URL=cluster.nodes[i - 1].url(dbname)) for i in nodes], bed.workdir)
        wall = time.perf_counter() - t0
        polls = sim.requests().get("retrieve", 0) - before
    keys = ("leased", "taken", "contention", "lease_lost", "errors")
    return {"nodes": nodes, "wall": round(wall, 2), "polls": polls, "rate": round(polls / wall, 1),
            "tick_s": [float(s["seconds"]) for s in summaries],
            **{k: sum(int(s.get(k, 0)) for s in summaries) for k in keys}}


def throughput(args: argparse.Namespace) -> int:
    """One tick over `--jobs` due polls at `--latency`: 1 process on node 1, then one process on
    each node (and, with --same-node, N processes all on node 1)."""
    results = []
    with cluster_of(args) as cluster, harness.polling_simulator(args.latency) as sim:
        cells = [[1], list(range(1, args.nodes + 1))] + ([[1] * args.nodes] if args.same_node else [])
        for cell in cells:
            m = measure_spread(cluster, sim, args.jobs, cell)
            results.append(m)
            log(f"N={args.jobs} processes on nodes {cell}: {m}")
    print(json.dumps(results))
    return 0


def start_only(args: argparse.Namespace) -> int:
    with cluster_of(args) as cluster:
        for node in cluster.nodes:
            print(node.url())
        sys.stdout.flush()
        with contextlib.suppress(KeyboardInterrupt), chaos._signals_raise():  # until Ctrl-C or SIGTERM
            while True:
                time.sleep(3600)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = harness.described(__doc__ or "", "galera")
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("start", "campaign", "throughput"):
        s = sub.add_parser(name)
        s.add_argument("--nodes", type=int, default=3)
        s.add_argument("--cluster-dir", help="where the datadirs go (default: a new temp dir)")
        s.add_argument("--keep-cluster", action="store_true", help="keep the datadirs and logs afterwards")
        s.add_argument("--sql-port", type=int, default=33061)
        s.add_argument("--gcomm-port", type=int, default=45671)
        s.add_argument("--ist-port", type=int, default=45681)
        s.add_argument("--sst-port", type=int, default=45691)
        if name == "campaign":
            chaos.campaign_args(s, seed=21)
            s.add_argument("--reconcilers-per-node", type=int, default=1)
            s.add_argument("--relays-per-node", type=int, default=1)
            s.add_argument("--node-kills", type=int, default=1)
            s.add_argument("--node-pauses", type=int, default=1)
            # What chaos.Run reads from its own arguments (its database restart and restore are off).
            s.set_defaults(keep_db=True, restart_db=False, restore=False, force_restart=False, restart_wait=0.0,
                           db_stop_cmd="", db_start_cmd="")
        if name == "throughput":
            s.add_argument("--jobs", type=int, default=10_000)
            s.add_argument("--latency", type=float, default=0.2)
            s.add_argument("--same-node", action="store_true",
                           help="also run N processes all on node 1 (separates more processes from more nodes)")
    a = p.parse_args(argv)
    if a.command == "campaign":
        a.reconcilers = a.nodes * a.reconcilers_per_node
        a.relays = a.nodes * a.relays_per_node
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "start":
        return start_only(args)
    if args.command == "campaign":
        return campaign(args)
    return throughput(args)


if __name__ == "__main__":
    sys.exit(main())
