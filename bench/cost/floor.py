"""The floors: an iipub poll tick's I/O and nothing else, on two stacks.

What both do on the wire, and the two stacks: bench/notes/floor.md (also in `--help`). Run as a
process (cold, as cron starts one) by `bench/cost/cli_tick.py`; prints one JSON line:

    .venv/bin/python bench/cost/floor.py --url mysql+pymysql://root@127.0.0.1:3306/DB --sim-url URL
        [--library] [--concurrency 64] [--max-connections 64]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

NOW = "UTC_TIMESTAMP(6)"
ACTIVE = ("NO_JOB", "CREATE_ELIGIBLE", "CREATE_IN_FLIGHT", "ACCEPTED", "QUEUED", "IN_PROGRESS",
          "COMPLETED_NOT_RETRIEVED", "RETRIEVED_NOT_VALIDATED", "READY_TO_COMPOSE", "COMPOSED_NOT_SAVED",
          "PUBLISHED", "CLEANUP_PENDING", "PROVIDER_EXPIRED_OR_MISSING")
STATUS_STATE = {"queued": "QUEUED", "in_progress": "IN_PROGRESS"}
Item = tuple[dict[str, Any], str]


def _marks(n: int, mark: str = "%s") -> str:
    return ", ".join([mark] * n)


# -- the two stacks: a transaction that runs SQL text, and a GET ---------------------------


class Lean:
    """PyMySQL connections in a queue (READ COMMITTED, as iipub's engine sets; no TLS context
    built for a server that offers none), httpx's plain GET. As in iipub's provider, each thread
    has a one-connection HTTP pool of its own, up to `max_connections` pools (then shared in
    turn): one pool shared by 64 threads costs more CPU in its lock than the rest of a poll."""

    def __init__(self, url: str, sim_url: str, max_connections: int) -> None:
        import pymysql

        u = urlsplit(url.replace("mysql+pymysql://", "mysql://"))
        self.connect: Callable[[], Any] = lambda: pymysql.connect(
            host=u.hostname or "127.0.0.1", port=u.port or 3306, user=u.username or "root", password=u.password or "",
            database=u.path.lstrip("/"), charset="utf8mb4", autocommit=False, ssl_disabled=True,
            init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        self.idle: queue.LifoQueue[Any] = queue.LifoQueue()
        self.url, self.max_connections = sim_url.rstrip("/"), max_connections
        self.pools: list[Any] = []
        self.mine = threading.local()
        self.lock = threading.Lock()
        self.turn = 0
        self.tls = httpx.create_ssl_context()

    def client(self) -> Any:
        """This thread's pool (`http` for lean, an SDK client on its own pool for library)."""
        mine = getattr(self.mine, "client", None)
        if mine is None:
            with self.lock:
                if len(self.pools) < self.max_connections:
                    self.pools.append(self.new_client(httpx.Client(
                        timeout=httpx.Timeout(60.0, connect=10.0), limits=httpx.Limits(max_connections=1),
                        verify=self.tls, headers={"Authorization": "Bearer sk-bench"})))
                    mine = self.pools[-1]
                else:
                    self.turn += 1
                    mine = self.pools[self.turn % len(self.pools)]
            self.mine.client = mine
        return mine

    def new_client(self, http: httpx.Client) -> Any:
        return http

    @contextmanager
    def transaction(self) -> Iterator[Callable[[str, Sequence[Any]], Any]]:
        try:
            conn = self.idle.get_nowait()
        except queue.Empty:
            conn = self.connect()
        cur = conn.cursor()
        try:
            yield lambda sql, params: (cur.execute(sql, params), cur)[1]
            conn.commit()
        finally:
            cur.close()
            self.idle.put(conn)

    def get(self, response_id: str) -> str:
        resp = self.client().get(f"{self.url}/responses/{response_id}")
        resp.raise_for_status()
        return str(json.loads(resp.content)["status"])

    def close(self) -> None:
        for pool in self.pools:
            pool.close()
        while not self.idle.empty():
            self.idle.get_nowait().close()


class Library(Lean):
    """The same SQL through SQLAlchemy's engine and pool, the GET through the SDK's request path
    (an SDK client per pool, as iipub's provider has)."""

    def __init__(self, url: str, sim_url: str, max_connections: int, pool_size: int) -> None:
        super().__init__(url, sim_url, max_connections)
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))  # bench/support
        import benchdb  # noqa: F401 - puts this checkout on sys.path before iipub
        from iipub.store import db

        self.engine = db.make_engine(url, pool_size=pool_size)  # as `iipub reconcile` sizes it

    def new_client(self, http: httpx.Client) -> Any:
        import openai

        return openai.OpenAI(api_key="sk-bench", base_url=self.url, max_retries=0, http_client=http)

    @contextmanager
    def transaction(self) -> Iterator[Callable[[str, Sequence[Any]], Any]]:
        with self.engine.begin() as conn:
            yield lambda sql, params: conn.exec_driver_sql(sql, tuple(params))

    def get(self, response_id: str) -> str:
        resp = self.client().get(f"/responses/{response_id}", cast_to=httpx.Response)
        return str(json.loads(resp.content)["status"])

    def close(self) -> None:
        super().close()
        self.engine.dispose()


# -- the sweep --------------------------------------------------------------------------------


class Floor:
    def __init__(self, stack: Lean, concurrency: int, batch: int) -> None:
        self.stack, self.concurrency, self.batch = stack, concurrency, batch
        self.worker = f"floor:{os.getpid()}"
        self.results: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.chunks: queue.Queue[list[Item] | None] = queue.Queue()

    def count(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.results[key] += n

    def run(self) -> None:
        writer = threading.Thread(target=self.writer)
        writer.start()
        pending: set[Future[None]] = set()
        seen: set[str] = set()
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            while batch := [c for c in self.candidates(self.batch + len(seen)) if c[0] not in seen]:
                for start in range(0, len(batch), self.concurrency):
                    while len(pending) >= self.concurrency:
                        _, pending = wait(pending, return_when=FIRST_COMPLETED)
                    wanted = batch[start : start + self.concurrency]
                    seen.update(job_id for job_id, _ in wanted)
                    jobs = self.lease(wanted)
                    chunk = Chunk(len(jobs))
                    pending.update(pool.submit(self.poll, job, chunk) for job in jobs)
            wait(pending)
        self.chunks.put(None)
        writer.join()

    def candidates(self, limit: int) -> list[tuple[str, int]]:
        with self.stack.transaction() as sql:
            rows = sql(f"SELECT id, version FROM jobs WHERE state IN ({_marks(len(ACTIVE))}) AND next_attempt_at <= "
                       f"{NOW} AND (lease_expiry IS NULL OR lease_expiry < {NOW}) ORDER BY CASE WHEN state IN "
                       "('NO_JOB', 'CREATE_ELIGIBLE', 'PROVIDER_EXPIRED_OR_MISSING') THEN 2 WHEN state IN "
                       "('PUBLISHED', 'CLEANUP_PENDING') THEN 3 ELSE 0 END, is_backfill, priority, next_attempt_at, "
                       "id LIMIT %s", (*ACTIVE, limit)).fetchall()
        return [(r[0], r[1]) for r in rows]

    def lease(self, chunk: list[tuple[str, int]]) -> list[dict[str, Any]]:
        ids, n = [job_id for job_id, _ in chunk], len(chunk)
        fenced = f"id IN ({_marks(n)}) AND (id, version) IN ({_marks(n, '(%s, %s)')})"
        with self.stack.transaction() as sql:
            leased = sql(f"UPDATE jobs SET lease_owner = %s, lease_expiry = {NOW} + INTERVAL 60 SECOND, version = "
                         f"version + 1 WHERE {fenced} AND (lease_expiry IS NULL OR lease_expiry < {NOW}) AND state != "
                         "'MANUALLY_SUSPENDED'", (self.worker, *ids, *(x for p in chunk for x in p))).rowcount
            rows = sql("SELECT id, version, state, response_id, poll_count, next_attempt_at FROM jobs WHERE "
                       f"{fenced} AND lease_owner = %s",
                       (*ids, *(x for job_id, v in chunk for x in (job_id, v + 1)), self.worker)).fetchall() \
                if leased else []
        self.count("leased", len(rows))
        keys = ("id", "version", "state", "response_id", "poll_count", "next_attempt_at")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def poll(self, job: dict[str, Any], chunk: Chunk) -> None:
        status: str | None = None
        try:
            status = self.stack.get(job["response_id"])
        except Exception as exc:  # counted; the lease simply expires
            self.count(f"get_error:{type(exc).__name__}")
        full = chunk.add(job, status)
        if full is not None:
            self.chunks.put(full)

    def writer(self) -> None:
        while (items := self.chunks.get()) is not None:
            if items:
                try:
                    self.write(items)
                except Exception as exc:
                    self.count(f"write_error:{type(exc).__name__}", len(items))

    def write(self, items: list[Item]) -> None:
        kept: list[Item] = []
        with self.stack.transaction() as sql:
            for job, status in items:
                to = STATUS_STATE.get(status, job["state"])
                if sql(f"UPDATE jobs SET state_entered_at = IF(state = %s, state_entered_at, {NOW}), state = %s, "
                       f"poll_count = %s, retry_count = 0, version = version + 1, updated_at = {NOW}, next_attempt_at "
                       f"= {NOW} + INTERVAL 30 SECOND, lease_owner = NULL, lease_expiry = NULL WHERE id = %s AND "
                       "version = %s", (to, to, job["poll_count"] + 1, job["id"], job["version"])).rowcount == 1:
                    kept.append((job, status))
            values: list[Any] = []
            for job, status in kept:  # the journal detail iipub writes for a poll (`handlers.after_poll`)
                detail = json.dumps({"due_at": str(job["next_attempt_at"]), "status": status}, sort_keys=True)
                values += [job["id"], job["state"], STATUS_STATE.get(status, job["state"]), job["version"] + 1,
                           self.worker, "poll", detail]
            if kept:
                sql("INSERT INTO job_events (job_id, from_state, to_state, version, worker, reason, detail, at) "
                    f"VALUES {_marks(len(kept), f'(%s, %s, %s, %s, %s, %s, %s, {NOW})')}", values)
        self.count("polled", len(kept))
        self.count("lease_lost", len(items) - len(kept))


class Chunk:
    """A leased chunk's results, handed to the writer whole when its last GET is in."""

    def __init__(self, size: int) -> None:
        self.left, self.lock = size, threading.Lock()
        self.items: list[Item] = []

    def add(self, job: dict[str, Any], status: str | None) -> list[Item] | None:
        with self.lock:
            if status is not None:
                self.items.append((job, status))
            self.left -= 1
            return self.items if self.left == 0 else None


def main() -> None:
    notes = Path(__file__).resolve().parents[1] / "notes" / "floor.md"
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0], epilog=notes.read_text(encoding="utf-8"),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--sim-url", required=True)
    ap.add_argument("--library", action="store_true", help="SQLAlchemy and the SDK's request path")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--max-connections", type=int, default=64)
    ap.add_argument("--batch", type=int, default=500)
    args = ap.parse_args()
    stack = (Library(args.url, args.sim_url, args.max_connections, args.concurrency + 4) if args.library
             else Lean(args.url, args.sim_url, args.max_connections))
    floor = Floor(stack, args.concurrency, args.batch)
    try:
        floor.run()
    finally:
        stack.close()
    print(json.dumps({"polls": floor.results["polled"], "results": dict(floor.results)}))


if __name__ == "__main__":
    main()
