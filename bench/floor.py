"""The floor: the least a program can do for one poll, with the same I/O as an iipub poll tick.

Over jobs seeded as for the tick benchmark (`benchdb.seed_polls`: due, unleased, each holding a
real simulator response still in progress), on the same schema (iipub's migrations), the same
engine settings (`iipub.db.make_engine`: SQLAlchemy + PyMySQL, READ COMMITTED) and the same
simulator process, it does what iipub's tick does on the wire and nothing else:

* the candidate SELECT (the WHERE and ORDER BY of `Store.due_candidates`, `batch` rows more
  than the sweep has seen, those it has seen left out: one poll per job per sweep, as iipub);
* a chunk of `concurrency` candidates leased in one transaction: one UPDATE fenced on each
  (id, version) pair with the lease free, the re-read of what was leased, COMMIT;
* per job, in one of `concurrency` threads: GET the response through the official openai SDK
  (`client.responses.retrieve`, `max_retries=0`, one shared httpx client with
  `max_connections`), then one transaction: the fenced UPDATE (state, poll_count,
  next_attempt_at = database clock + 30 s, version + 1, lease cleared), the journal INSERT, COMMIT.

No logging, no decisions beyond status -> state, no per-job objects. Variants (`Floor`):
`--batch` reads the body as JSON through the SDK's request path and writes each leased chunk in one
transaction from one writer thread (a fenced UPDATE per job, one multi-row journal INSERT, one
COMMIT), which is iipub's current I/O; `--raw` does a plain httpx GET and writes each chunk with a
single UPDATE fenced on all its (id, version) pairs, one multi-row INSERT and one COMMIT.

Normally run by `bench/floor_vs_iipub.py` as a child process (it seeds the database and owns
the simulator); run alone it measures a database already seeded and prints one JSON line:

    .venv/bin/python bench/floor.py --url URL --sim-url URL [--batch | --raw | --get G --writes W]
        [--concurrency 64] [--max-connections 32]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import resource
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Any

import httpx
import sqlalchemy as sa

import benchdb  # noqa: F401 - puts this checkout on sys.path before iipub
from iipub import db, states
from iipub.states import Reason, State

API_KEY = "sk-bench"
POLL_INTERVAL_SECONDS = 30  # iipub's reconcile.poll_interval_seconds default
LEASE_SECONDS = 60  # iipub's reconcile.lease_seconds default
STATUS_STATE = {"queued": State.QUEUED.value, "in_progress": State.IN_PROGRESS.value}

_ACTIVE = sorted(s.value for s in states.ACTIVE)
_CREATE_PHASE = [State.NO_JOB.value, State.CREATE_ELIGIBLE.value, State.PROVIDER_EXPIRED_OR_MISSING.value]
_CLEANUP_PHASE = [State.PUBLISHED.value, State.CLEANUP_PENDING.value]
_NOW = "UTC_TIMESTAMP(6)"

# The statements, written once (the floor compiles nothing per call).
CANDIDATES = sa.text(f"""
    SELECT id, version, state FROM jobs
    WHERE state IN :active AND next_attempt_at <= {_NOW} AND (lease_expiry IS NULL OR lease_expiry < {_NOW})
    ORDER BY CASE WHEN state IN :create_phase THEN 2 WHEN state IN :cleanup_phase THEN 3 ELSE 0 END,
             is_backfill, priority, next_attempt_at, id
    LIMIT :limit""").bindparams(sa.bindparam("active", expanding=True), sa.bindparam("create_phase", expanding=True),
                                sa.bindparam("cleanup_phase", expanding=True))
LEASE = sa.text(f"""
    UPDATE jobs SET lease_owner = :worker, lease_expiry = {_NOW} + INTERVAL {LEASE_SECONDS} SECOND,
                    version = version + 1
    WHERE id IN :ids AND (id, version) IN :pairs AND (lease_expiry IS NULL OR lease_expiry < {_NOW})
          AND state != :suspended""").bindparams(sa.bindparam("ids", expanding=True),
                                                 sa.bindparam("pairs", expanding=True))
REREAD = sa.text("""
    SELECT id, version, state, response_id, poll_count, next_attempt_at FROM jobs
    WHERE id IN :ids AND (id, version) IN :pairs AND lease_owner = :worker""").bindparams(
    sa.bindparam("ids", expanding=True), sa.bindparam("pairs", expanding=True))
# MySQL assigns left to right, so state_entered_at compares with the state before this write.
POLLED = sa.text(f"""
    UPDATE jobs SET state_entered_at = IF(state = :state, state_entered_at, {_NOW}), state = :state,
                    poll_count = :polls, retry_count = 0, version = version + 1, updated_at = {_NOW},
                    next_attempt_at = {_NOW} + INTERVAL {POLL_INTERVAL_SECONDS} SECOND,
                    lease_owner = NULL, lease_expiry = NULL
    WHERE id = :id AND version = :version""")
JOURNAL = sa.text(f"""
    INSERT INTO job_events (job_id, from_state, to_state, version, worker, reason, detail, at)
    VALUES (:job_id, :from_state, :to_state, :version, :worker, :reason, :detail, {_NOW})""")


# -- a cheap meter: the commands PyMySQL writes ---------------------------------------------


class WireCounter:
    """Every command PyMySQL writes to its sockets, by kind (statement, COMMIT, ROLLBACK, PING…):
    one counter increment per command, so the meter costs the same to every program measured
    (no SQLAlchemy event hooks). PyMySQL sends every statement as its own COM_QUERY, so
    `statement` is also the number of SQL statements."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._undo: Callable[[], None] | None = None

    def __enter__(self) -> WireCounter:
        import pymysql.connections as pc

        original = pc.Connection._execute_command
        names = {14: "PING", 1: "QUIT", 2: "INIT_DB"}
        counts, lock = self.counts, self._lock

        def counted(conn: Any, command: int, sql: Any) -> Any:
            if command == 3:
                head = (sql[:9].decode("latin-1") if isinstance(sql, bytes) else str(sql)[:9]).strip().upper()
                name = head if head in ("COMMIT", "ROLLBACK") else "statement"
            else:
                name = names.get(command, f"COM_{command}")
            with lock:
                counts[name] += 1
            return original(conn, command, sql)

        pc.Connection._execute_command = counted

        def undo() -> None:
            pc.Connection._execute_command = original

        self._undo = undo
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._undo is not None:
            self._undo()

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)


@contextmanager
def measured() -> Iterator[dict[str, Any]]:
    """Wall, process CPU (all threads) and wire commands over the block, and the process's peak
    RSS at its end, written into the dict it yields."""
    out: dict[str, Any] = {}
    with WireCounter() as wire:
        cpu0, t0 = time.process_time(), time.perf_counter()
        yield out
        out["wall"] = time.perf_counter() - t0
        out["cpu"] = time.process_time() - cpu0
        out["wire"] = wire.snapshot()
        out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# -- the floor ------------------------------------------------------------------------------


GETS = ("model", "sdk", "httpx")
WRITES = ("job", "chunk", "chunk-one-update")


class Floor:
    """One sweep. `get`: how a response is read — `model`, the SDK's `responses.retrieve` (its
    pydantic Response built); `sdk`, the SDK's request path with the body read as JSON
    (`client.get(path, cast_to=httpx.Response)`, as iipub's `Provider.retrieve` now does);
    `httpx`, a plain GET on the shared httpx client. `writes`: `job`, one transaction per job
    (fenced UPDATE, journal INSERT, COMMIT); `chunk`, one transaction per leased chunk, written by
    one writer thread once the chunk's last GET is in (a fenced UPDATE per job, one multi-row
    journal INSERT, one COMMIT: iipub's `WriteBatch`); `chunk-one-update`, the same with a single
    UPDATE fenced on all the chunk's (id, version) pairs."""

    def __init__(self, url: str, sim_url: str, *, concurrency: int = 64, max_connections: int = 32,
                 batch: int = 500, get: str = "model", writes: str = "job", timeout: float = 60.0) -> None:
        if get not in GETS or writes not in WRITES:
            raise ValueError(f"get must be one of {GETS}, writes one of {WRITES}")
        self.engine = db.make_engine(url, pool_size=concurrency + 4)  # as `iipub reconcile` sizes it
        self.sim_url = sim_url
        self.concurrency = concurrency
        self.batch = batch
        self.get, self.writes = get, writes
        self.worker = f"floor:{os.getpid()}"
        self.http = httpx.Client(timeout=httpx.Timeout(timeout, connect=10.0),
                                 limits=httpx.Limits(max_connections=max_connections))
        self.sdk: Any = None
        if get != "httpx":
            import openai

            self.sdk = openai.OpenAI(api_key=API_KEY, base_url=sim_url, max_retries=0, http_client=self.http,
                                     timeout=httpx.Timeout(timeout, connect=10.0))
        self.headers = {"Authorization": f"Bearer {API_KEY}"}
        self.results: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._chunks: queue.Queue[list[tuple[dict[str, Any], str]] | None] = queue.Queue()

    def close(self) -> None:
        self.http.close()

    def count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.results[key] += n

    # The sweep: candidates, then chunks leased as workers come free (iipub's `_pass`).

    def run(self) -> None:
        writer = threading.Thread(target=self._writer, name="floor-writer") if self.writes != "job" else None
        if writer is not None:
            writer.start()
        pending: set[Future[None]] = set()
        seen: set[str] = set()  # one poll per job per sweep, as iipub's tick: a job polled early
        # comes due again 30 s later, which a sweep longer than that would otherwise chase forever
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="floor-job") as pool:
            while True:
                batch = [c for c in self.candidates(self.batch + len(seen)) if c[0] not in seen]
                if not batch:
                    break
                for start in range(0, len(batch), self.concurrency):
                    while len(pending) >= self.concurrency:
                        _, pending = wait(pending, return_when=FIRST_COMPLETED)
                    wanted = batch[start : start + self.concurrency]
                    seen.update(job_id for job_id, _ in wanted)
                    jobs = self.lease(wanted)
                    chunk = _Chunk(len(jobs)) if writer is not None else None
                    pending.update(pool.submit(self.poll, job, chunk) for job in jobs)
            wait(pending)
        if writer is not None:
            self._chunks.put(None)
            writer.join()

    def candidates(self, limit: int) -> list[tuple[str, int]]:
        with self.engine.connect() as conn:
            rows = conn.execute(CANDIDATES, {"active": _ACTIVE, "create_phase": _CREATE_PHASE,
                                             "cleanup_phase": _CLEANUP_PHASE, "limit": limit}).all()
        return [(r[0], r[1]) for r in rows]

    def lease(self, chunk: Sequence[tuple[str, int]]) -> list[dict[str, Any]]:
        ids = [job_id for job_id, _ in chunk]
        with self.engine.begin() as conn:
            leased = conn.execute(LEASE, {"ids": ids, "pairs": list(chunk), "worker": self.worker,
                                          "suspended": State.MANUALLY_SUSPENDED.value}).rowcount
            if leased == 0:
                return []
            rows = conn.execute(REREAD, {"ids": ids, "pairs": [(job_id, v + 1) for job_id, v in chunk],
                                         "worker": self.worker}).mappings().all()
        self.count("leased", len(rows))
        return [dict(r) for r in rows]

    # One job: the GET, then its write (in this thread, or with its chunk by the writer).

    def poll(self, job: dict[str, Any], chunk: _Chunk | None) -> None:
        status: str | None = None
        try:
            status = self._get(job["response_id"])
        except Exception as exc:  # counted; the job's lease simply expires
            self.count(f"get_error:{type(exc).__name__}")
        if chunk is not None:
            full = chunk.add(job, status)
            if full is not None:
                self._chunks.put(full)
            return
        if status is None:
            return
        try:
            self._write_one(job, status)
        except Exception as exc:
            self.count(f"write_error:{type(exc).__name__}")

    def _get(self, response_id: str) -> str:
        if self.get == "model":
            return str(self.sdk.responses.retrieve(response_id).status)
        if self.get == "sdk":
            resp = self.sdk.get(f"/responses/{response_id}", cast_to=httpx.Response)
        else:
            resp = self.http.get(f"{self.sim_url}/responses/{response_id}", headers=self.headers)
            resp.raise_for_status()
        return str(json.loads(resp.content)["status"])

    def _write_one(self, job: dict[str, Any], status: str) -> None:
        to_state = STATUS_STATE.get(status, job["state"])
        try:
            with self.engine.begin() as conn:
                res = conn.execute(POLLED, {"state": to_state, "polls": job["poll_count"] + 1, "id": job["id"],
                                            "version": job["version"]})
                if res.rowcount != 1:
                    raise _LeaseLost
                conn.execute(JOURNAL, {"job_id": job["id"], "from_state": job["state"], "to_state": to_state,
                                       "version": job["version"] + 1, "worker": self.worker,
                                       "reason": Reason.POLL.value, "detail": _detail(job, status)})
        except _LeaseLost:  # rolled back: someone wrote since the lease
            self.count("lease_lost")
            return
        self.count("polled")

    # Chunk writes: one writer, one transaction per chunk.

    def _writer(self) -> None:
        while True:
            items = self._chunks.get()
            if items is None:
                return
            if not items:
                continue
            try:
                if self.writes == "chunk":
                    self._write_chunk(items)
                else:
                    self._write_chunk_one_update(items)
            except Exception as exc:
                self.count(f"write_error:{type(exc).__name__}", len(items))

    def _write_chunk(self, items: list[tuple[dict[str, Any], str]]) -> None:
        kept = []
        with self.engine.begin() as conn:
            for job, status in items:
                res = conn.execute(POLLED, {"state": STATUS_STATE.get(status, job["state"]),
                                            "polls": job["poll_count"] + 1, "id": job["id"], "version": job["version"]})
                if res.rowcount == 1:
                    kept.append((job, status))
                else:  # dropped; the others commit
                    self.count("lease_lost")
            if kept:
                self._journal_rows(conn, kept)
        self.count("polled", len(kept))

    def _journal_rows(self, conn: sa.Connection, items: list[tuple[dict[str, Any], str]]) -> None:
        """One multi-row INSERT. (An executemany would not be one: PyMySQL rewrites only VALUES
        lists made of placeholders alone, and the database-clock column is an expression.)"""
        rows = ", ".join([f"(%s, %s, %s, %s, %s, %s, %s, {_NOW})"] * len(items))
        values: list[Any] = []
        for job, status in items:
            values += [job["id"], job["state"], STATUS_STATE.get(status, job["state"]), job["version"] + 1,
                       self.worker, Reason.POLL.value, _detail(job, status)]
        conn.exec_driver_sql("INSERT INTO job_events (job_id, from_state, to_state, version, worker, reason, "
                             f"detail, at) VALUES {rows}", tuple(values))

    def _write_chunk_one_update(self, items: list[tuple[dict[str, Any], str]]) -> None:
        by_state: dict[str, list[dict[str, Any]]] = {}
        for job, status in items:
            by_state.setdefault(STATUS_STATE.get(status, job["state"]), []).append(job)
        with self.engine.begin() as conn:
            for to_state, group in by_state.items():
                ids = ", ".join(["%s"] * len(group))
                pairs = ", ".join(["(%s, %s)"] * len(group))
                sql = (f"UPDATE jobs SET state_entered_at = IF(state = %s, state_entered_at, {_NOW}), state = %s, "
                       f"poll_count = poll_count + 1, retry_count = 0, version = version + 1, updated_at = {_NOW}, "
                       f"next_attempt_at = {_NOW} + INTERVAL {POLL_INTERVAL_SECONDS} SECOND, "
                       f"lease_owner = NULL, lease_expiry = NULL WHERE id IN ({ids}) AND (id, version) IN ({pairs})")
                params: list[Any] = [to_state, to_state, *(j["id"] for j in group)]
                for j in group:
                    params += [j["id"], j["version"]]
                matched = conn.exec_driver_sql(sql, tuple(params)).rowcount
                # Which rows lost their fence is not known here, so the journal below still has
                # them: a floor for an uncontended run, counted if it ever happens.
                if matched != len(group):
                    self.count("lease_lost", len(group) - matched)
            self._journal_rows(conn, items)
        self.count("polled", len(items))


class _Chunk:
    """A leased chunk's results, handed to the writer whole when its last GET is in."""

    def __init__(self, size: int) -> None:
        self._left = size
        self._items: list[tuple[dict[str, Any], str]] = []
        self._lock = threading.Lock()

    def add(self, job: dict[str, Any], status: str | None) -> list[tuple[dict[str, Any], str]] | None:
        with self._lock:
            if status is not None:
                self._items.append((job, status))
            self._left -= 1
            return self._items if self._left == 0 else None


class _LeaseLost(Exception):
    pass


def _detail(job: dict[str, Any], status: str) -> str:
    """The journal detail iipub writes for a poll (`handlers.after_poll`)."""
    return json.dumps({"due_at": str(job["next_attempt_at"]), "status": status}, sort_keys=True)


def warm_imports() -> None:
    """What every measured program imports before its clock starts: the SDK, its Responses
    resource and models (a one-off second of CPU that would otherwise land on the first polls)."""
    import openai
    import openai.resources.responses
    import openai.types.responses  # noqa: F401


def measure(url: str, sim_url: str, *, get: str = "model", writes: str = "job", concurrency: int = 64,
            max_connections: int = 32, warm_id: str | None = None) -> dict[str, Any]:
    """One floor sweep over the seeded database: wall, process CPU, wire commands, outcomes.
    Before the clock starts: the SDK imported and, given `warm_id` (a response not among the
    seeded ones), one GET of it the way this variant reads (the SDK's lazily built models)."""
    warm_imports()
    if warm_id is not None:
        warm = Floor(url, sim_url, concurrency=1, max_connections=1, get=get, writes=writes)
        try:
            warm._get(warm_id)
        finally:
            warm.close()
            warm.engine.dispose()
    with measured() as m:
        floor = Floor(url, sim_url, concurrency=concurrency, max_connections=max_connections, get=get,
                      writes=writes)
        try:
            floor.run()
        finally:
            floor.close()
    floor.engine.dispose()  # outside the clock, as for iipub
    m["results"] = dict(floor.results)
    m["polls"] = floor.results.get("polled", 0)
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="the seeded database (mysql+pymysql://…)")
    ap.add_argument("--sim-url", required=True, help="the simulator's base URL (…/v1)")
    ap.add_argument("--get", choices=GETS, default="model", help="how a response is read (default model)")
    ap.add_argument("--writes", choices=WRITES, default="job", help="how polls are written (default job)")
    ap.add_argument("--batch", action="store_true", help="= --get sdk --writes chunk (iipub's current I/O)")
    ap.add_argument("--raw", action="store_true", help="= --get httpx --writes chunk-one-update")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--max-connections", type=int, default=32)
    ap.add_argument("--warm-id", default=None, help="a response to GET once before the clock starts")
    args = ap.parse_args()
    get, writes = args.get, args.writes
    if args.batch:
        get, writes = "sdk", "chunk"
    if args.raw:
        get, writes = "httpx", "chunk-one-update"
    m = measure(args.url, args.sim_url, get=get, writes=writes, concurrency=args.concurrency,
                max_connections=args.max_connections, warm_id=args.warm_id)
    m["pid"] = os.getpid()
    m["mode"] = {"get": get, "writes": writes}
    print(json.dumps(m))


if __name__ == "__main__":
    main()
