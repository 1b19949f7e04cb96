#!/usr/bin/env python
"""Chaos runner for iipub: real `iipub reconcile` / `iipub relay` processes against MariaDB and
`iipub simulator` with random faults, while workers are SIGKILLed and SIGSTOPped, database
connections are killed from another session, time jumps (database and simulator clocks
together) and, optionally, MariaDB itself restarts. Then the chaos stops, a clean
convergence phase runs (no faults, a few reconcile/relay rounds with time advancing) and
`iipub.observe.invariants.check` judges the result.

    .venv/bin/python bench/chaos/chaos.py --mysql mysql+pymysql://root@127.0.0.1:3306/test \\
        --slots 300 --seconds 180 --seed 7
    # the long variant (manual): >= 1,000 slots and a MariaDB restart mid-run
    .venv/bin/python bench/chaos/chaos.py --mysql mysql+pymysql://root@127.0.0.1:3306/test \\
        --slots 1200 --seconds 480 --seed 11 --restart-db

Reproducibility, bounds, exit status and the report: bench/notes/chaos.md (also in `--help`).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import datetime as dt
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))  # bench/support: the shared modules
import benchdb  # puts this checkout on sys.path before iipub

# isort: split
import chaos_restore
import harness
import simproc
from iipub.model import states
from iipub.model.states import State
from iipub.money import gate
from iipub.money.ledger import SpendLedger
from iipub.observe import invariants
from iipub.provider.factory import settings_from_dict
from iipub.provider.openai.simulator.faults import ACCOUNT_FAULTS, ALLOWED_OPS, FAULTS, WEBHOOK_FAULTS
from iipub.settings.loading import default_ledger_path
from iipub.store import clock, db, migrate, tables
from iipub.store.job_store import Store

WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"iipub-chaos-webhook-secret-32byt").decode()
API_KEY = "sk-chaos"

# The simulator faults (name, op, low, high) and the chaos actions with their weights:
# bench/chaos/chaos_plan.toml.
BENCH = Path(__file__).resolve().parent
PLAN = tomllib.loads((BENCH / "chaos_plan.toml").read_text(encoding="utf-8"))
FAULT_PLAN: tuple[tuple[str, str, float, float], ...] = tuple(tuple(f) for f in PLAN["faults"])
OPENING_FAULTS: tuple[tuple[str, str, int], ...] = tuple(tuple(f) for f in PLAN.get("opening", ()))
ACTIONS: tuple[tuple[str, int], ...] = tuple(PLAN["actions"].items())

TICK_SECONDS = 30.0  # long enough that the SDK import (seconds on a busy host) is a small part
LEASE_SECONDS = 12.0
KILL_WAIT_SECONDS = 2.0  # how long a kill waits for a run of its role to be alive
# The clock jumps, seconds drawn from these ranges: backoffs come due; every lease held expires;
# cron was down longer than the provider's retention.
JUMPS = {"advance_small": (1, 8), "advance_lease": (LEASE_SECONDS + 1, 40), "advance_outage": (610, 700)}


def log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def signal_group(pid: int, *sigs: int) -> bool:
    """Send each signal to the process group `pid` leads (SIGCONT before SIGKILL wakes a stopped
    one); False when it is gone."""
    try:
        for sig in sigs:
            os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


# -- configuration -------------------------------------------------------------------------------


def config_toml(public: Path, webhook_url: str, prompt_suffix: str = "") -> str:
    """The workers' iipub.toml: bench/chaos/chaos_config.toml with its fields filled in."""
    template = (BENCH / "chaos_config.toml").read_text(encoding="utf-8")
    return template.format(lease=LEASE_SECONDS, tick=TICK_SECONDS, public=public, webhook_url=webhook_url,
                           suffix=prompt_suffix)


def _held_by_parked_tracks() -> sa.ColumnElement[bool]:
    """A forked slot whose tracks are each published or parked, one at least parked: one
    language's failure parks only its track (`corrupt_language`), and the slot waits for an
    operator's `revalidate --lang` like a parked job."""
    t, j = tables.tracks.c, tables.jobs.c
    done_or_parked = [s.value for s in states.TRACK_PARKED | {State.PUBLISHED, State.DELETED}]
    return sa.and_(
        j.state.in_([s.value for s in states.TRACKS_RUN_IN]),
        sa.select(t.id).where(t.job_id == j.id, t.state.in_([s.value for s in states.TRACK_PARKED])).exists(),
        ~sa.select(t.id).where(t.job_id == j.id, t.state.not_in(done_or_parked)).exists())


def plan_faults(rng: random.Random) -> list[tuple[str, float]]:
    covered = {name for name, *_ in FAULT_PLAN}
    # Webhook delivery faults are campaigned by bench/throughput/webhooks.py and tests/integration/
    # test_settle.py: this campaign runs without a receiver. The account's answers that hold a
    # model or a product, or open the breaker for 15 minutes (no access, no such model, too large
    # for the tier, a refused country) wait for an operator or the models endpoint, which a
    # campaign that must drain cannot: tests/integration/test_account_limits.py plays them. A
    # requests 429 (a one-second hint) runs here.
    missing = set(FAULTS) - covered - set(WEBHOOK_FAULTS) - (set(ACCOUNT_FAULTS) - {"rate_limit_requests"})
    if missing:
        raise SystemExit(f"FAULT_PLAN does not cover simulator faults: {sorted(missing)}")
    out = []
    for name, op, lo, hi in FAULT_PLAN:
        assert op in ALLOWED_OPS[name], (name, op)
        out.append((f"{name}@{op}", round(rng.uniform(lo, hi), 4)))
    return out


# -- a webhook receiver (the relay's second sink) -----------------------------------------------------


class Receiver:
    """A WSGI app (served by `harness.wsgi_server`): records every Idempotency-Key; during the
    chaos phase answers 503 now and then."""

    def __init__(self, seed: int, fail_rate: float) -> None:
        self.keys: Counter[str] = Counter()
        self.fail_rate = fail_rate
        self.failed = 0
        self.url = ""
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        with self._lock:
            fail = self._rng.random() < self.fail_rate
            if fail:
                self.failed += 1
            else:
                self.keys[environ.get("HTTP_IDEMPOTENCY_KEY", "")] += 1
        body = b'{"ok":false}' if fail else b'{"ok":true}'
        start_response("503 Service Unavailable" if fail else "200 OK",
                       [("Content-Length", str(len(body))), *([("retry-after", "1")] if fail else [])])
        return [body]


# -- worker processes ----------------------------------------------------------------------------------


@dataclass
class Worker:
    """One cron line run back to back: start `iipub ROLE`, wait, start again."""

    role: str
    index: int
    env: dict[str, str]
    cwd: Path
    rng: random.Random
    logdir: Path
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    log_size_at_start: int = 0
    paused_until: float | None = None
    runs: int = 0
    exits: Counter[str] = field(default_factory=Counter)
    hung: int = 0
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    def loop(self, stop: threading.Event, hard_deadline: float) -> None:
        out = open(self.logdir / f"{self.name}.out", "ab")  # noqa: SIM115 - closed below
        err = open(self.logdir / f"{self.name}.err", "ab")  # noqa: SIM115
        try:
            while not stop.is_set() and time.monotonic() < hard_deadline:
                with self.lock:
                    if self.closed or stop.is_set():
                        break
                    self.log_size_at_start = os.fstat(err.fileno()).st_size
                    self.proc = subprocess.Popen([*harness.iipub_exe(), self.role], env=self.env, cwd=self.cwd,
                                                 stdout=out, stderr=err, start_new_session=True)
                    self.started_at = time.monotonic()
                    self.runs += 1
                rc = self._wait(hard_deadline)
                with self.lock:
                    self.proc = None
                    self.paused_until = None
                self.exits[str(rc)] += 1
                stop.wait(self.rng.uniform(0.2, 1.0))  # cron's spacing, shortened
        finally:
            self.terminate()
            out.close()
            err.close()

    def _wait(self, hard_deadline: float) -> int:
        assert self.proc is not None
        limit = TICK_SECONDS + 90.0  # deadline + slowest in-flight step + the longest pause
        while True:
            try:
                return self.proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
            age = time.monotonic() - self.started_at
            if age > limit or time.monotonic() > hard_deadline:
                if age > limit:
                    self.hung += 1
                    log(f"{self.name}: pid {self.proc.pid} still running after {age:.0f} s; killing it")
                self.signal(signal.SIGCONT, signal.SIGKILL)

    def running(self) -> bool:
        """A run is alive and not paused (it may still be starting up)."""
        proc = self.proc
        return proc is not None and proc.poll() is None and self.paused_until is None

    def working(self) -> bool:
        """Past its start-up (imports take seconds on a loaded host): a reconcile has logged
        something, a relay (which logs only at the end) has run for a few seconds."""
        proc = self.proc
        if proc is None or proc.poll() is not None or self.paused_until is not None:
            return False
        if self.role == "reconcile":
            try:
                return (self.logdir / f"{self.name}.err").stat().st_size > self.log_size_at_start
            except OSError:
                return False
        return time.monotonic() - self.started_at > 3.0

    def signal(self, *sigs: int) -> bool:
        proc = self.proc
        return proc is not None and proc.poll() is None and signal_group(proc.pid, *sigs)

    def terminate(self) -> None:
        """Kill the current process (if any) and start no other."""
        with self.lock:
            self.closed = True
            proc = self.proc
        if proc is not None and proc.poll() is None:
            simproc.stop_process(proc, 10, signals=(signal.SIGCONT, signal.SIGKILL), group=True)


# -- the run ----------------------------------------------------------------------------------------------


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.seed: int = args.seed
        self.rng = random.Random(self.seed)
        self.server_url = sa.engine.make_url(args.mysql)
        self.dbname = args.database or f"iipub_chaos_{self.seed}_{uuid.uuid4().hex[:6]}"
        self.url = self.server_url.set(database=self.dbname).render_as_string(hide_password=False)
        self.workdir = Path(args.workdir or tempfile.mkdtemp(prefix=f"iipub-chaos-{self.seed}-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logdir = self.workdir / "logs"
        self.logdir.mkdir(exist_ok=True)
        self.public = self.workdir / "public"
        self.actions_log = open(self.workdir / "actions.jsonl", "w", encoding="utf-8")  # noqa: SIM115
        self.counts: Counter[str] = Counter()
        self.advanced = {"db_seconds": 0.0, "sim_seconds": 0.0}
        self.workers: list[Worker] = []
        self.threads: list[threading.Thread] = []
        self.stop = threading.Event()
        self.sim_proc: subprocess.Popen[bytes] | None = None
        self.sim_origin = ""
        # Engines connect on first use: the database itself is created by `setup`.
        self.admin = sa.create_engine(self.server_url.set(database=None), isolation_level="AUTOCOMMIT",
                                      pool_pre_ping=True, connect_args={"connect_timeout": 5})
        self.engine = db.make_engine(self.url, pool_size=4)
        self.receiver = Receiver(self.seed ^ 0x5EED, round(self.rng.uniform(0.02, 0.06), 4))
        self.report: dict[str, Any] = {"seed": self.seed, "database": self.dbname, "workdir": str(self.workdir)}
        self.paused: list[tuple[float, Worker, int]] = []
        self.undo: list[tuple[float, list[str]]] = []  # operator commands to run later (resume, unpause)
        self.config_restore_at: float | None = None
        self.backup: chaos_restore.Backup | None = None
        self.servers = contextlib.ExitStack()  # the webhook receiver's server
        self.t0 = time.monotonic()

    # -- recording ---------------------------------------------------------------------

    def record(self, name: str, **detail: Any) -> None:
        self.counts[name] += 1
        self.actions_log.write(json.dumps({"t": round(time.monotonic() - self.t0, 3), "action": name, **detail},
                                          default=str) + "\n")
        self.actions_log.flush()

    # -- setup -------------------------------------------------------------------------

    def setup(self) -> None:
        log(f"seed {self.seed}; database {self.dbname}; workdir {self.workdir}")
        with self.admin.connect() as conn:
            conn.execute(sa.text(f"CREATE DATABASE `{self.dbname}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
        migrate.migrate(self.engine)

        server = self.servers.enter_context(harness.wsgi_server(self.receiver))
        self.receiver.url = f"http://127.0.0.1:{server.server_port}/hooks/iipub"
        cfg = self.workdir / "iipub.toml"
        cfg.write_text(config_toml(self.public, self.receiver.url), encoding="utf-8")
        self.settings = settings_from_dict(tomllib.loads(cfg.read_text(encoding="utf-8")), base_dir=self.workdir)
        # The workers' ledger (IIPUB_CONFIG is set for them: beside the configuration file).
        self.settings = dataclasses.replace(self.settings, ledger=dataclasses.replace(
            self.settings.ledger, path=default_ledger_path(cfg, {})))

        faults = plan_faults(self.rng)
        self.report["faults_configured"] = dict(faults)
        self.report["webhook_fail_rate"] = self.receiver.fail_rate
        port_file = self.workdir / "sim.port"
        cmd = [*harness.iipub_exe(), "simulator", "--port", "0", "--port-file", str(port_file),
               "--seed", str(self.seed), "--queued-seconds", "1", "--in-progress-seconds", "2",
               # A zero-data-retention project: responses are forgotten 600 s after they finish (with
               # store: true the real API keeps them for weeks), so clock jumps still cause losses.
               "--retention-seconds", "600", "--zdr", "--slow-seconds", "5", "--no-log-requests"]
        opening = [f"{name}@{op}:1*{times}" for name, op, times in OPENING_FAULTS]
        self.report["faults_opening"] = opening
        for spec in opening:  # first: the simulator tries its rules in order
            cmd += ["--fault", spec]
        for spec, probability in faults:
            cmd += ["--fault", f"{spec}:{probability}"]
        self.sim_proc = self._spawn(cmd, "simulator")
        end = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.monotonic() > end or self.sim_proc.poll() is not None:
                raise RuntimeError("the simulator did not start (see logs/simulator.err)")
            time.sleep(0.1)
        self.sim_origin = f"http://127.0.0.1:{int(port_file.read_text())}"

        # Slots: past dates for every product (today's are added by the ticks themselves).
        store = Store(self.engine, "chaos-setup")
        with self.engine.connect() as conn:
            today = clock.read_now(conn).date()
        slots = benchdb.slots(list(self.settings.products.values()), self.args.slots, today - dt.timedelta(days=1))
        self.report["slots_scheduled"] = sum(store.schedule(p, day, backfill=True) for p, day in slots)

        self.env = harness.clean_env(IIPUB_DATABASE_URL=self.url, IIPUB_CONFIG=str(cfg), OPENAI_API_KEY=API_KEY,
                                     OPENAI_BASE_URL=self.sim_origin + "/v1", IIPUB_WEBHOOK_SECRET=WEBHOOK_SECRET,
                                     PYTHONUNBUFFERED="1")
        self.workers = [self.worker(role, i, self.env) for role, n in (("reconcile", self.args.reconcilers),
                                                                       ("relay", self.args.relays)) for i in range(n)]

    def worker(self, role: str, index: int, env: dict[str, str]) -> Worker:
        rng = random.Random(f"{self.seed}-{'r' if role == 'reconcile' else 'l'}{index}")
        return Worker(role, index, env, self.workdir, rng, self.logdir)

    # -- chaos ------------------------------------------------------------------------

    def chaos(self) -> None:
        a = self.args
        start = time.monotonic()
        end = start + a.seconds
        hard = end + TICK_SECONDS + 120
        for w in self.workers:
            t = threading.Thread(target=w.loop, args=(self.stop, hard), name=w.name, daemon=True)
            t.start()
            self.threads.append(t)
        restart_at = start + self.rng.uniform(0.4, 0.6) * a.seconds if a.restart_db else None
        backup_at = start + self.rng.uniform(0.3, 0.5) * a.seconds if a.restore else None
        # Bounded actions: (budget, fallback once the budget is spent); operator and config_swap share one.
        budget = {"outages": max(1, int(a.seconds // 150)), "operator": max(3, a.slots // 40)}
        bounded = {"advance_outage": ("outages", "advance_small"), "operator": ("operator", "nothing"),
                   "config_swap": ("operator", "nothing")}
        names = [n for n, _ in ACTIONS]
        weights = [w for _, w in ACTIONS]
        n = 0
        log(f"chaos phase: {a.seconds:g} s, {len(self.workers)} workers")
        while time.monotonic() < end and n < a.max_actions:
            time.sleep(self.rng.uniform(0.2, 1.0))
            self._resume_due()
            if restart_at is not None and time.monotonic() >= restart_at:
                restart_at = None
                self.restart_db()
                continue
            if backup_at is not None and time.monotonic() >= backup_at:
                backup_at = None
                self.take_backup()
                continue
            action = self.rng.choices(names, weights)[0]
            n += 1
            if action in bounded:
                key, fallback = bounded[action]
                if budget[key] <= 0:
                    action = fallback
                else:
                    budget[key] -= 1
            self._operator_due()
            try:
                if action in JUMPS:
                    self.advance(round(self.rng.uniform(*JUMPS[action]), 3), action)
                else:
                    getattr(self, "do_" + action)()
            except Exception as exc:  # the database may be down: the chaos goes on
                self.record("action_failed", failed=action, error=f"{type(exc).__name__}: {str(exc)[:200]}")
            if n % 50 == 0:
                log(f"{n} actions, {time.monotonic() - start:.0f} s; {self._state_line()}")
        self.report["chaos_actions"] = n
        self.report["chaos_seconds"] = round(time.monotonic() - start, 1)

    def do_kill_reconcile(self) -> None:
        self._kill("reconcile")

    def do_kill_relay(self) -> None:
        self._kill("relay")

    def _victim(self, of_role: str | None, missed: str, wait: float = 0.0, **detail: Any) -> Worker | None:
        """A working worker (of the role, if given) chosen at random; with `wait`, up to that many
        seconds for one, and past half of it a run still starting will do. None, recorded as
        `missed` with `detail`, when there is none."""
        started = time.monotonic()
        while True:
            mine = [w for w in self.workers if of_role is None or w.role == of_role]
            live = [w for w in mine if w.working()]
            if live:
                return self.rng.choice(live)
            elapsed = time.monotonic() - started
            if wait > 0 and elapsed >= wait / 2:
                starting = [w for w in mine if w.running()]
                if starting:
                    return self.rng.choice(starting)
            if elapsed >= wait:
                self.record(missed, **detail)
                return None
            time.sleep(0.01)

    def _kill(self, role: str) -> None:
        # Idle cron runs end in a few hundredths of a second (the wake-up check): a kill waits a
        # little for a run that is alive, so a campaign lands its kills whatever the timing.
        w = self._victim(role, "kill_missed", wait=KILL_WAIT_SECONDS, role=role)
        if w is None:
            return
        if w.working():  # a short random delay first so the kill lands at a random point of the tick
            time.sleep(self.rng.uniform(0, 0.3))
        if w.signal(signal.SIGKILL):
            self.record(f"sigkill_{role}", worker=w.name)
        else:
            self.record("kill_missed", role=role, why="the run ended first")

    def do_terminate(self) -> None:
        w = self._victim(None, "terminate_missed")
        if w is None:
            return
        if w.signal(signal.SIGTERM):
            self.record(f"sigterm_{w.role}", worker=w.name)

    def do_pause(self) -> None:
        w = self._victim(None, "pause_missed")
        if w is None:
            return
        # Half the pauses outlast the lease: the worker wakes up fenced out.
        seconds = self.rng.uniform(0.5, LEASE_SECONDS - 2) if self.rng.random() < 0.5 else \
            self.rng.uniform(LEASE_SECONDS + 1, LEASE_SECONDS + 15)
        if w.signal(signal.SIGSTOP):
            w.paused_until = time.monotonic() + seconds
            proc = w.proc
            self.paused.append((w.paused_until, w, proc.pid if proc else -1))
            self.record("sigstop", worker=w.name, seconds=round(seconds, 2), beyond_lease=seconds > LEASE_SECONDS)

    def _resume_due(self, everything: bool = False) -> None:
        due, self.paused = split_due(self.paused, everything)
        for _, w, pid in due:
            if w.proc is not None and w.proc.pid == pid:
                w.signal(signal.SIGCONT)
                self.record("sigcont", worker=w.name)
            w.paused_until = None

    def _processlist(self, conn: sa.Connection) -> list[Any]:
        """The server's other connections (SHOW PROCESSLIST rows: id, user, host, db, command, ...)."""
        own = conn.execute(sa.text("SELECT CONNECTION_ID()")).scalar_one()
        return [r for r in conn.execute(sa.text("SHOW PROCESSLIST")).all() if int(r[0]) != own]

    def do_kill_db_connections(self) -> None:
        with self.admin.connect() as conn:
            ours = sorted(int(r[0]) for r in self._processlist(conn) if r[3] == self.dbname)
            if not ours:
                self.record("kill_db_connections_missed")
                return
            victims = self.rng.sample(ours, min(len(ours), self.rng.randint(1, 4)))
            killed = 0
            for cid in victims:
                try:
                    conn.execute(sa.text(f"KILL {int(cid)}"))
                    killed += 1
                except sa.exc.DBAPIError:
                    pass  # gone already
        self.counts["db_connections_killed"] += killed
        self.record("kill_db_connections", candidates=len(ours), killed=killed)

    def advance(self, seconds: float, label: str, *, wait: float = 1.0) -> bool:
        """Move both clocks: the database drill offset and the simulator's clock.

        Every iipub write reads the drill offset through a subquery, which InnoDB runs as a
        locking read: each open write transaction holds a shared lock on the `clock` row, and
        `UPDATE clock` queues behind it while every later writer queues behind the UPDATE. With
        a worker SIGSTOPped inside a transaction, `clock.advance_clock` would freeze the whole
        system for innodb_lock_wait_timeout (50 s). So the runner waits at most `wait` seconds
        and otherwise defers the jump (counted as `<label>_deferred`)."""
        us = int(seconds * 1_000_000)
        try:
            with self.engine.begin() as conn:
                if db.dialect_family(conn) == "mysql":
                    conn.exec_driver_sql(f"SET STATEMENT innodb_lock_wait_timeout={max(1, int(wait))} FOR "
                                         f"UPDATE clock SET offset_us = offset_us + {us} WHERE id = 1")
                else:
                    conn.execute(tables.clock.update().where(tables.clock.c.id == 1)
                                 .values(offset_us=tables.clock.c.offset_us + us))
        except sa.exc.DBAPIError as exc:
            if db.mysql_error_code(exc) == 1205:
                self.record(label + "_deferred", seconds=seconds)
                return False
            raise
        self.advanced["db_seconds"] += seconds
        httpx.post(self.sim_origin + "/_sim/advance", json={"seconds": seconds}, timeout=10).raise_for_status()
        self.advanced["sim_seconds"] += seconds
        self.record(label, seconds=seconds)
        return True

    def do_operator(self) -> None:
        """An operator acts while the tick runs: cancels or kills a job waiting on the provider,
        suspends a live job (resumed a few seconds later), or pauses creates for a while. Kills
        and cancels race the suspended state too: they are judged on what the job was."""
        verb = self.rng.choices(["cancel", "kill", "suspend", "pause"], [30, 15, 40, 15])[0]
        if verb == "pause":
            self._iipub("operator_pause", ["pause", "--reason", "chaos drill", "--by", "chaos"])
            self.undo.append((time.monotonic() + self.rng.uniform(3, 10), ["unpause", "--by", "chaos"]))
            return
        wanted = [State.ACCEPTED, State.QUEUED, State.IN_PROGRESS]
        if verb != "cancel":
            wanted += [State.CREATE_ELIGIBLE, State.COMPLETED_NOT_RETRIEVED, State.RETRIEVED_NOT_VALIDATED,
                       State.READY_TO_COMPOSE, State.SAVED_NOT_PUBLIC, State.MANUALLY_SUSPENDED]
        with self.engine.connect() as conn:
            ids = sorted(conn.execute(sa.select(tables.jobs.c.id).where(
                tables.jobs.c.state.in_([s.value for s in wanted]))).scalars())
        if not ids:
            self.record("operator_missed")
            return
        job_id = self.rng.choice(ids)
        self._iipub(f"operator_{verb}", [verb, job_id, "--reason", "chaos drill", "--by", "chaos"], job_id=job_id)
        if verb == "suspend":
            self.undo.append((time.monotonic() + self.rng.uniform(2, 8),
                              ["resume", job_id, "--by", "chaos", "--reason", "drill over"]))

    def do_config_swap(self) -> None:
        """A deploy changes the prompt under in-flight jobs (they drift: custody first, then
        quarantine), and is rolled back a few seconds later."""
        cfg = self.workdir / "iipub.toml"
        cfg.write_text(config_toml(self.public, self.receiver.url, " Changed."), encoding="utf-8")
        self.config_restore_at = time.monotonic() + self.rng.uniform(3, 10)
        self.record("config_swap")

    def _operator_due(self, everything: bool = False) -> None:
        due, self.undo = split_due(self.undo, everything)
        for _, cmd in due:
            self._iipub(f"operator_{cmd[0]}", cmd)
        if self.config_restore_at is not None and (everything or time.monotonic() >= self.config_restore_at):
            (self.workdir / "iipub.toml").write_text(config_toml(self.public, self.receiver.url), encoding="utf-8")
            self.config_restore_at = None
            self.record("config_restored")

    def _iipub(self, label: str, args: list[str], **facts: Any) -> None:
        proc = subprocess.run([*harness.iipub_exe(), *args], env=self.env, cwd=self.workdir, capture_output=True,
                              text=True, timeout=60)
        self.record(label, rc=proc.returncode, out=(proc.stdout.strip() or proc.stderr.strip())[-300:], **facts)

    def do_nothing(self) -> None:
        self.record("nothing")

    def restart_db(self) -> None:
        """Stop MariaDB and start it again, unless other clients are using it."""
        a = self.args
        busy = self._foreign_clients()
        waited = 0.0
        while busy and not a.force_restart and waited < a.restart_wait:
            time.sleep(2)
            waited += 2
            self._resume_due()
            busy = self._foreign_clients()
        if busy and not a.force_restart:
            log(f"not restarting MariaDB: other clients are connected ({', '.join(busy[:5])})")
            self.record("db_restart_skipped", clients=busy[:20], waited=waited)
            self.report["db_restart"] = {"done": False, "skipped_because": busy[:20], "waited_seconds": waited}
            return
        log(f"stopping MariaDB: {a.db_stop_cmd}")
        t = time.monotonic()
        stop = subprocess.run(shlex.split(a.db_stop_cmd), check=False, timeout=120, capture_output=True, text=True)
        went_down = _wait_for_db(self.admin, 90, up=False)
        stopped = time.monotonic()
        down = self.rng.uniform(2, 6)
        time.sleep(down)
        log(f"starting MariaDB: {a.db_start_cmd}")
        start = subprocess.run(shlex.split(a.db_start_cmd), check=False, timeout=60, capture_output=True, text=True)
        self.record("db_restart_commands", stop_rc=stop.returncode, stop_err=stop.stderr[-300:],
                    start_rc=start.returncode, start_err=start.stderr[-300:])
        up = _wait_for_db(self.admin, 120)
        self.report["db_restart"] = {
            "done": went_down and up, "went_down": went_down, "stop_rc": stop.returncode,
            "stop_error": stop.stderr.strip()[-300:], "stop_seconds": round(stopped - t, 1),
            "down_seconds": round(time.monotonic() - stopped, 1), "came_back": up, "waited_for_quiet_seconds": waited,
        }
        self.record("db_restart", **self.report["db_restart"])
        log(f"MariaDB restarted: {self.report['db_restart']}")
        if not up:
            raise RuntimeError("MariaDB did not come back after the restart")

    def _foreign_clients(self) -> list[str]:
        try:
            with self.admin.connect() as conn:
                rows = self._processlist(conn)
        except sa.exc.DBAPIError:
            return []
        return [f"{r[0]}:{r[3]}" for r in rows
                if r[1] not in ("system user", "event_scheduler") and r[4] != "Daemon" and r[3] != self.dbname]

    def _state_line(self) -> str:
        try:
            return " ".join(f"{s}={n}" for s, n in sorted(benchdb.state_counts(self.engine).items()))
        except sa.exc.DBAPIError:
            return "(database unavailable)"

    # -- stop and converge --------------------------------------------------------------

    def stop_workers(self, grace: float = 0.0) -> None:
        """Stop the worker loops (again, if already asked: each step is idempotent): paused workers
        woken, `grace` seconds for the current runs to end, then whatever still runs killed."""
        self.stop.set()
        self._resume_due(everything=True)
        for t in self.threads:
            t.join(timeout=grace)
        for w in self.workers:
            w.terminate()
        for t in self.threads:
            t.join(timeout=15)

    def stop_chaos(self) -> None:
        log("stopping the chaos")
        self.stop.set()
        self._resume_due(everything=True)
        self._operator_due(everything=True)
        self.stop_workers(grace=TICK_SECONDS + 120)
        httpx.delete(self.sim_origin + "/_sim/faults", timeout=10).raise_for_status()
        self.receiver.fail_rate = 0.0

    def take_backup(self) -> None:
        """The nightly backup, taken while the workers run."""
        try:
            self.backup = chaos_restore.take_backup(self.engine)
        except sa.exc.DBAPIError as exc:  # a killed connection: one more try a moment later
            self.record("db_backup_failed", error=str(exc)[:200])
            time.sleep(1)
            self.backup = chaos_restore.take_backup(self.engine)
        jobs = self.backup.get("jobs") or []
        facts = {"jobs": len(jobs), "states": dict(Counter(str(j["state"]) for j in jobs)),
                 "at_seconds": round(time.monotonic() - self.t0, 1)}
        self.report["restore"] = {"backup": facts}
        self.record("db_backup", **facts)
        log(f"database backed up: {facts}")

    def restore_backup(self) -> None:
        """The workers are stopped (step 1 of the runbook's procedure): the database goes back to
        the backup; the ledger and the public site stay as they are."""
        if self.backup is None:
            raise RuntimeError("--restore: the chaos phase ended before the backup was taken")
        stats = httpx.get(self.sim_origin + "/_sim/stats", timeout=30).json()
        before = {"creates_total": stats.get("creates_total"), "pages": chaos_restore.pages(self.public)}
        self._before_restore = before
        chaos_restore.restore(self.engine, self.backup)
        self.report["restore"].update(restored_at_seconds=round(time.monotonic() - self.t0, 1),
                                      creates_before_restore=before["creates_total"],
                                      edition_files_before_restore=sum(p.endswith(".json") for p in before["pages"]))
        self.record("db_restore", jobs=len(self.backup.get("jobs") or []))
        log(f"database restored to the backup; {before['creates_total']} creates paid so far")
        with self.engine.connect() as conn:
            paused = gate.read(conn).paused
        if paused:  # the backup caught an operator's pause: the operator lifts it again
            self._iipub("operator_unpause_after_restore", ["unpause", "--by", "chaos", "--reason", "after the restore"])

    def restore_verdict(self) -> list[invariants.Violation]:
        """What the restore must not have cost: a published edition replaced, a slot paid for
        again after its publication."""
        before = self._before_restore
        changed = chaos_restore.changed_pages(before["pages"], chaos_restore.pages(self.public))
        path = self.settings.ledger_path()
        repaid = chaos_restore.paid_after_publication(path) if path is not None else []
        stats = httpx.get(self.sim_origin + "/_sim/stats", timeout=30).json()
        self.report["restore"].update(creates_after_convergence=stats.get("creates_total"),
                                      edition_files_changed=changed[:50], slots_paid_after_publication=repaid[:50])
        return ([invariants.Violation("restore_page_changed", None, p) for p in changed]
                + [invariants.Violation("restore_paid_again", None, s) for s in repaid])

    def converge(self) -> None:
        """No faults, no kills: reconcile and relay rounds with time advancing, until settled."""
        a = self.args
        rounds = 0
        started = time.monotonic()
        pending = -1
        _wait_for_db(self.admin, 120)
        while rounds < a.convergence_rounds and time.monotonic() - started < a.convergence_seconds:
            rounds += 1
            # Past every lease (12 s) and backoff cap (20 s): what a dead worker held is free again;
            # and past the create breaker's cool-down, so its probe can close it (the provider is
            # healthy now).
            while not self.advance(max(25.0, self._breaker_wait()), "converge_advance", wait=10):
                time.sleep(1)
            procs = [self._spawn([*harness.iipub_exe(), role], f"converge-{role}-{rounds}-{i}", self.spawn_env())
                     for i, role in enumerate(("reconcile", "reconcile", "relay"))]
            rcs = [_wait(p, TICK_SECONDS + 90) for p in procs]
            self.counts["converge_exit_" + ",".join(map(str, rcs))] += 1
            pending = self._pending()
            log(f"convergence round {rounds}: exits {rcs}, {pending} jobs/events still moving; {self._state_line()}")
            if pending == 0:
                break
        self.report["convergence"] = {"rounds": rounds, "seconds": round(time.monotonic() - started, 1),
                                      "settled": pending == 0}

    def _breaker_wait(self) -> float:
        """Seconds (database clock) until the open create breaker allows its probe; 0 if closed."""
        try:
            with self.engine.connect() as conn:
                g = gate.read(conn)
                now = clock.read_now(conn)
        except sa.exc.DBAPIError:
            return 0.0
        if not g.is_open or g.probe_after is None:
            return 0.0
        return max(0.0, (g.probe_after - now).total_seconds() + 1.0)

    def _spawn(self, cmd: list[str], name: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """`cmd` in a process group of its own, its output appended to logs/NAME.out and NAME.err."""
        with open(self.logdir / f"{name}.out", "ab") as out, open(self.logdir / f"{name}.err", "ab") as err:
            return subprocess.Popen(cmd, env=env, cwd=self.workdir, stdout=out, stderr=err, start_new_session=True)

    def spawn_env(self) -> dict[str, str]:
        """The environment of a convergence round's process."""
        return self.env

    def _pending(self) -> int:
        """Jobs and events still moving. A forked slot whose tracks are each published or parked
        (one language's failure parks only its track: `corrupt_language`) waits for an operator's
        `revalidate --lang`, like a parked job: settled too."""
        settled = [s.value for s in states.SETTLED]
        j = tables.jobs.c
        with self.engine.connect() as conn:
            now = clock.now(conn)
            jobs = conn.execute(sa.select(sa.func.count()).where(
                j.state.not_in(settled), ~_held_by_parked_tracks(),
                sa.not_(sa.and_(j.state == State.NO_JOB.value, j.opens_at > now)))).scalar_one()
            events = conn.execute(sa.select(sa.func.count()).where(tables.outbox.c.published_at.is_(None))).scalar_one()
        return int(jobs) + int(events)

    def _held_by_parked_tracks(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).where(_held_by_parked_tracks())).scalar_one())

    # -- verdict --------------------------------------------------------------------------

    def verdict(self) -> list[invariants.Violation]:
        stats = httpx.get(self.sim_origin + "/_sim/stats", timeout=30).json()
        (self.workdir / "sim_stats.json").write_text(json.dumps(stats, indent=1), encoding="utf-8")
        path = self.settings.ledger_path()
        spend, unreadable, missing = SpendLedger(path).load() if path is not None else ({}, 0, None)
        found = invariants.check(self.engine, settings=self.settings, sim_stats=stats,
                                 webhook_keys=set(self.receiver.keys), settled=True, ledger=spend)
        found += invariants.check_ledger(self.engine, spend, unreadable, missing=missing)
        if self.args.restore:
            found += self.restore_verdict()
        by_state = benchdb.state_counts(self.engine)
        reasons = benchdb.count_by(self.engine, tables.jobs.c.quarantine_reason,
                                   tables.jobs.c.state == State.QUARANTINED.value)
        outbox_n = benchdb.count_rows(self.engine, tables.outbox)
        self.report.update({
            "jobs_total": sum(by_state.values()),
            "final_states": dict(sorted(by_state.items())),
            "slots_held_by_parked_tracks": self._held_by_parked_tracks(),
            "quarantine_reasons": dict(sorted((k or "-", v) for k, v in reasons.items())),
            "validation_failure_kinds": self._validation_reasons(),
            "journal_events": benchdb.count_rows(self.engine, tables.job_events),
            "editions": benchdb.count_rows(self.engine, tables.editions),
            "outbox_events": outbox_n,
            "deliveries_by_sink": dict(benchdb.count_by(self.engine, tables.outbox_deliveries.c.sink)),
            "webhook_received_keys": len(self.receiver.keys),
            "webhook_redeliveries": sum(n - 1 for n in self.receiver.keys.values()),
            "webhook_503_answers": self.receiver.failed,
            "simulator": {**{k: stats.get(k) for k in ("creates_total", "requests", "deletes", "cancels",
                                                         "max_retry_count_seen")},
                          "faults_fired": dict(sorted((stats.get("faults_fired") or {}).items()))},
            "violations_by_kind": invariants.summarize(found),
            "violations": [v.to_dict() for v in found[:200]],
        })
        return found

    def _validation_reasons(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(tables.job_events.c.detail).where(
                tables.job_events.c.to_state == State.VALIDATION_FAILED_RETAINED.value)).scalars()
            for detail in rows:
                for r in (json.loads(detail or "{}").get("reasons") or [])[:1]:
                    out[str(r).split(":", 1)[0]] += 1
        return dict(sorted(out.items()))

    def logs_summary(self) -> dict[str, Any]:
        """What the workers wrote to stderr: warning/error events by name, structlog exception
        records (a handler crashed on something unexpected), raw Python tracebacks grouped by
        the line before them and their last line, and one-line CLI errors."""
        events: Counter[str] = Counter()
        exceptions: Counter[str] = Counter()
        library: Counter[str] = Counter()
        raw: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        plain: Counter[str] = Counter()
        lines = 0
        for path in sorted(self.logdir.glob("*.err")):
            if path.name.startswith("simulator"):
                continue
            context = "(uncaught)"
            in_tb = False
            with open(path, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    line = line.rstrip("\n")
                    if not line.strip():
                        continue
                    lines += 1
                    if in_tb:
                        if line.startswith((" ", "\t", "Traceback", "During handling", "The above exception")):
                            continue
                        raw[f"{context} | {_shorten(line, 14)}"] += 1
                        in_tb, context = False, "(uncaught)"
                        continue
                    if line.startswith("{"):
                        try:
                            doc = json.loads(line)
                        except ValueError:
                            errors["(unparsable log line)"] += 1
                            continue
                        if doc.get("event") == "error" and "message" in doc:  # the CLI's own error line
                            errors[_shorten(str(doc["message"]))] += 1
                        if doc.get("level") in ("warning", "error", "critical"):
                            events[str(doc.get("event"))] += 1
                        if "logger" in doc:  # a library's record (SQLAlchemy's pool, httpx)
                            if doc.get("level") in ("error", "critical"):
                                library[f"{doc['logger']} | {_shorten(str(doc.get('event')), 8)}"] += 1
                        elif "exception" in doc:  # iipub caught something it did not expect
                            exceptions[f"{doc.get('event')} | {_shorten(str(doc.get('error', '')), 14)}"] += 1
                    elif line.startswith("Traceback"):
                        in_tb = True
                    else:
                        plain[_shorten(line, 10)] += 1  # every stderr line should be one JSON object
                        context = line.strip()[:80]
        return {"warnings_and_errors_by_event": dict(events.most_common()),
                "handler_exceptions": dict(exceptions.most_common()),
                "library_errors": dict(library.most_common()),
                "raw_tracebacks": dict(raw.most_common()),
                "uncaught_tracebacks": sum(n for k, n in raw.items() if k.startswith("(uncaught)")),
                "cli_errors": dict(errors.most_common(20)),
                "stderr_lines": lines,
                "non_json_lines": dict(plain.most_common(20))}

    def finish(self, found: list[invariants.Violation]) -> None:
        self.report["actions"] = dict(sorted(self.counts.items()))
        self.report["advanced"] = {k: round(v, 1) for k, v in self.advanced.items()}
        self.report["processes"] = {
            w.name: {"runs": w.runs, "exits": dict(w.exits), "hung_killed": w.hung} for w in self.workers
        }
        self.report["process_runs"] = sum(w.runs for w in self.workers)
        # 0 done, 69 database unavailable (connection killed, restart), -9 SIGKILL, -15 SIGTERM.
        self.report["unexpected_exits"] = {code: n for w in self.workers for code, n in w.exits.items()
                                           if code not in ("0", "69", "-9", "-15")}
        self.report["hung_killed"] = sum(w.hung for w in self.workers)
        self.report["logs"] = self.logs_summary()
        self.report["wall_seconds"] = round(time.monotonic() - self.t0, 1)
        self.report["ok"] = not found
        path = Path(self.args.report) if self.args.report else self.workdir / "report.json"
        path.write_text(json.dumps(self.report, indent=1, default=str), encoding="utf-8")
        self.report_path = path

    # -- teardown --------------------------------------------------------------------------

    def cleanup(self, keep_db: bool) -> None:
        self.stop_workers()
        if self.sim_proc is not None:
            simproc.stop_process(self.sim_proc, 10, group=True)
        self.servers.close()
        self.engine.dispose()
        if not keep_db:
            with contextlib.suppress(sa.exc.DBAPIError), self.admin.connect() as conn:
                conn.execute(sa.text(f"DROP DATABASE IF EXISTS `{self.dbname}`"))
        self.admin.dispose()
        self.actions_log.close()


Due = TypeVar("Due", bound=tuple[Any, ...])


def split_due(items: list[Due], everything: bool = False) -> tuple[list[Due], list[Due]]:
    """(due, not yet due) of timed entries whose first field is a `time.monotonic()` deadline."""
    now = time.monotonic()
    due = [x for x in items if everything or x[0] <= now]
    return due, [x for x in items if not (everything or x[0] <= now)]


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """Its exit status, or -999 when it hung and was killed after `timeout` seconds."""
    rc = simproc.stop_process(proc, timeout, signals=(), group=True)
    return -999 if rc is None else rc


def _wait_for_db(admin: sa.Engine, timeout: float, up: bool = True) -> bool:
    """True once a fresh connection to the server succeeds (`up`) or fails (the stop command
    really stopped it), within `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        admin.dispose()
        try:
            with admin.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
            if up:
                return True
        except sa.exc.DBAPIError:
            if not up:
                return True
        time.sleep(1 if up else 0.5)
    return False


def _shorten(line: str, words: int = 6) -> str:
    # Group one-line errors by their kind, not their ids and numbers.
    return " ".join(line.split()[:words])[:160]


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM/SIGHUP end the run like Ctrl-C, so `finally` cleans up."""

    def _raise(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = {s: signal.signal(s, _raise) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def campaign_args(p: argparse.ArgumentParser, seed: int) -> None:
    """The options of a campaign, here and in bench/cluster/galera.py."""
    p.add_argument("--database", help="database to create (default iipub_chaos_<seed>_<random>)")
    p.add_argument("--slots", type=int, default=300, help="publication slots to schedule (past dates)")
    p.add_argument("--seconds", type=float, default=180.0, help="length of the chaos phase")
    p.add_argument("--seed", type=int, default=seed)
    p.add_argument("--max-actions", type=int, default=5000, help="bound on chaos actions")
    p.add_argument("--convergence-rounds", type=int, default=30)
    p.add_argument("--convergence-seconds", type=float, default=600.0)
    p.add_argument("--workdir", help="where logs, the static site and the report go (default: a new temp dir)")
    p.add_argument("--report", help="write the JSON report here (default WORKDIR/report.json)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = harness.described(__doc__ or "", "chaos")
    p.add_argument("--mysql", default=os.environ.get("IIPUB_TEST_MYSQL_URL"),
                   help="MariaDB/MySQL server URL (the database part is ignored; default $IIPUB_TEST_MYSQL_URL)")
    campaign_args(p, seed=7)
    p.add_argument("--reconcilers", type=int, default=3, help="concurrent `iipub reconcile` loops")
    p.add_argument("--relays", type=int, default=2, help="concurrent `iipub relay` loops")
    p.add_argument("--restart-db", action="store_true", help="restart MariaDB once, mid-run (start-stop-daemon)")
    p.add_argument("--db-stop-cmd",
                   default="start-stop-daemon --stop --exec /usr/sbin/mariadbd --retry TERM/60/KILL/10",
                   help="how --restart-db stops the server (default: every mariadbd on the host)")
    p.add_argument("--db-start-cmd",
                   default="start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd",
                   help="how --restart-db starts it again")
    p.add_argument("--restore", action="store_true",
                   help="back the database up mid-chaos and restore that copy once the chaos stops, before "
                        "convergence (the spend ledger and the public site are left alone)")
    p.add_argument("--force-restart", action="store_true",
                   help="restart MariaDB even while other clients are connected to it")
    p.add_argument("--restart-wait", type=float, default=60.0,
                   help="seconds to wait for other clients to leave before skipping the restart")
    p.add_argument("--keep-db", action="store_true", help="keep the database (kept anyway when violations are found)")
    a = p.parse_args(argv)
    if not a.mysql:
        p.error("--mysql URL is required (or set IIPUB_TEST_MYSQL_URL)")
    if a.slots < 1 or a.seconds <= 0 or a.reconcilers < 1 or a.relays < 1:
        p.error("--slots, --seconds, --reconcilers and --relays must be positive")
    return a


def campaign(run: Run, keep_db: bool) -> tuple[list[invariants.Violation], bool]:
    """Set-up, chaos, convergence and verdict; the report is written and the run cleaned up
    whatever happens (Ctrl-C, SIGTERM or an error included). The database is kept when
    `keep_db`, when the run failed, or when violations were found. Returns (violations, failed)."""
    found: list[invariants.Violation] | None = None
    failed = False
    try:
        with _signals_raise():
            run.setup()
            run.chaos()
            run.stop_chaos()
            if run.args.restore:
                run.restore_backup()
            run.converge()
            found = run.verdict()
    except KeyboardInterrupt:
        log("interrupted")
        failed = True
    except Exception as exc:
        log(f"run failed: {type(exc).__name__}: {exc}")
        run.report["error"] = f"{type(exc).__name__}: {exc}"
        failed = True
    finally:
        keep = keep_db or failed or bool(found)
        try:
            run.finish(found or [])
        finally:
            run.cleanup(keep_db=keep)
    return found or [], failed


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = Run(args)
    found, failed = campaign(run, keep_db=args.keep_db)
    keep = args.keep_db or failed or bool(found)
    r = run.report
    log(f"seed {r['seed']}: {r.get('jobs_total')} slots, {r.get('process_runs')} worker runs, "
        f"actions {r.get('actions')}, advanced {r.get('advanced')}")
    return outcome(run, found, failed, f"; database kept: {run.dbname}" if keep else "")


def outcome(run: Run, found: list[invariants.Violation], failed: bool, kept: str = "") -> int:
    """Log a campaign's final states and violations; its exit status (0 none, 1 violations,
    2 the run failed)."""
    r = run.report
    log(f"final states {r.get('final_states')}; quarantine {r.get('quarantine_reasons')}")
    log(f"violations: {r.get('violations_by_kind') or 'none'}; report {run.report_path}{kept}")
    for v in found[:20]:
        log(f"  {v}")
    return 2 if failed else 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
