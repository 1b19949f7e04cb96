"""A DBOS Transact peer: iipub's provider work written the way DBOS would have it.

The workflow, the client and what is printed: bench/notes/peer_dbos.md (also in `--help`).
Needs `bench/cost/requirements-peer.txt` (DBOS is not an iipub dependency), in its own virtualenv:

    python3.11 -m venv /tmp/peer-venv && /tmp/peer-venv/bin/pip install -r bench/cost/requirements-peer.txt
    /tmp/peer-venv/bin/python bench/cost/peer_dbos.py --sim-url URL --bodies FILE [--jobs 200] [--sleep 1.0]
        [--pg postgresql+psycopg://postgres@127.0.0.1:5432/test] [--max-connections 32] [--jobs 0 --idle S]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import openai
import sqlalchemy as sa
from dbos import DBOS, DBOSConfig, SQLAlchemyDatasource  # type: ignore[import-not-found]
from sqlalchemy import event

API_KEY = "sk-bench"
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"

calls: Counter[str] = Counter()
sql: Counter[str] = Counter()
_lock = threading.Lock()
_window = threading.Event()  # set while the workload runs: SQL counted only then

outputs = sa.Table(
    "peer_outputs", sa.MetaData(),
    sa.Column("job_id", sa.String(36), primary_key=True),
    sa.Column("response_id", sa.String(128), nullable=False),
    sa.Column("output", sa.Text, nullable=False),
    sa.Column("stored_at", sa.DateTime, nullable=False, server_default=sa.func.now()),
)


def _count(counter: Counter[str], key: str) -> None:
    with _lock:
        counter[key] += 1


def _counted(key: str) -> Callable[..., None]:
    """An engine-event listener counting `key` in `sql` while the workload runs."""

    def listener(*args: Any) -> None:
        if _window.is_set():
            _count(sql, key)

    return listener


for _event, _key in (("commit", "COMMIT"), ("rollback", "ROLLBACK"), ("before_cursor_execute", "statement")):
    event.listen(sa.engine.Engine, _event, _counted(_key))


def db_stats(admin: sa.Engine, name: str) -> dict[str, int]:
    """`pg_stat_database` for `name`, once the counts stop moving (an ended session reports its
    counts as it exits)."""
    last: dict[str, int] | None = None
    for _ in range(40):
        with admin.connect() as conn:
            conn.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
            row = conn.execute(sa.text("SELECT xact_commit, xact_rollback, numbackends FROM pg_stat_database "
                                       "WHERE datname = :n"), {"n": name}).one()
        now = {"xact_commit": int(row[0]), "xact_rollback": int(row[1]), "backends": int(row[2])}
        if now == last and now["backends"] == 0:
            return now
        last = now
        time.sleep(0.25)
    assert last is not None
    return last


def warm_imports() -> None:
    """The SDK's Responses resource and models, imported before the clock starts (as for iipub
    and the floor: a one-off second of CPU that would otherwise land on the first calls)."""
    import openai.resources.responses
    import openai.types.responses  # noqa: F401


def run(url: str, sim_url: str, bodies: list[dict[str, Any]], warm_body: dict[str, Any], sleep: float,
        max_connections: int, idle: float = 0.0) -> dict[str, Any]:
    warm_imports()
    timeout = httpx.Timeout(60.0, connect=10.0)
    http = httpx.Client(timeout=timeout, limits=httpx.Limits(max_connections=max_connections))
    client = openai.OpenAI(api_key=API_KEY, base_url=sim_url, max_retries=0, timeout=timeout, http_client=http)

    config: DBOSConfig = {"name": "iipub-peer", "system_database_url": url, "log_level": "WARNING",
                          "max_executor_threads": max(64, len(bodies) + 16)}
    DBOS(config=config)
    ds = SQLAlchemyDatasource.create(url)
    with ds.engine.begin() as conn:
        outputs.create(conn, checkfirst=True)

    @DBOS.step()  # type: ignore[untyped-decorator]
    def create_step(body: dict[str, Any]) -> str:
        _count(calls, "create")
        return str(client.responses.create(**body).id)

    @DBOS.step()  # type: ignore[untyped-decorator]
    def retrieve_step(response_id: str) -> dict[str, Any]:
        _count(calls, "retrieve")
        resp = client.responses.retrieve(response_id)
        return {"status": resp.status, "output": resp.output_text if resp.status == "completed" else None}

    @ds.transaction()  # type: ignore[untyped-decorator]
    def store_step(job_id: str, response_id: str, output: str) -> None:
        ds.sql_session().execute(outputs.insert().values(job_id=job_id, response_id=response_id, output=output))

    @DBOS.workflow()  # type: ignore[untyped-decorator]
    def job_workflow(job_id: str, body: dict[str, Any]) -> int:
        response_id = create_step(body)
        polls = 0
        while True:
            DBOS.sleep(sleep)
            seen = retrieve_step(response_id)
            polls += 1
            if seen["status"] == "completed":
                break
            if seen["status"] not in ("queued", "in_progress"):
                raise RuntimeError(f"response {response_id} ended {seen['status']}")
        store_step(job_id, response_id, seen["output"])
        return polls

    DBOS.launch()
    polls: Counter[int] = Counter()
    try:
        # One warm-up job before the clock starts (in the baselines too, so the server-side
        # counts subtract it): DBOS's and the SDK's lazily imported modules and built models.
        DBOS.start_workflow(job_workflow, "warm-up", warm_body).get_result()
        calls.clear()
        idle_cpu0 = time.process_time()
        time.sleep(idle)  # the baseline's idle time: what DBOS's background threads cost
        idle_cpu = time.process_time() - idle_cpu0
        _window.set()
        cpu0, t0 = time.process_time(), time.perf_counter()
        handles = [DBOS.start_workflow(job_workflow, b["job_id"], b["body"]) for b in bodies]
        failed = 0
        for h in handles:
            try:
                polls[h.get_result()] += 1
            except Exception:  # counted; the run reports it
                failed += 1
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        _window.clear()
        with ds.engine.connect() as conn:
            stored = int(conn.execute(sa.select(sa.func.count()).select_from(outputs)).scalar_one())
    finally:
        DBOS.destroy()
        http.close()
        ds.engine.dispose()
    return {"wall": wall, "cpu": cpu, "idle": idle, "idle_cpu": idle_cpu, "creates": calls["create"],
            "retrieves": calls["retrieve"], "failed": failed, "stored": stored,
            "polls_per_job": {str(k): v for k, v in sorted(polls.items())},
            "client_commits": sql["COMMIT"], "client_rollbacks": sql["ROLLBACK"],
            "client_statements": sql["statement"]}


def main() -> None:
    notes = Path(__file__).resolve().parents[1] / "notes" / "peer_dbos.md"
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=notes.read_text(encoding="utf-8"),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pg", default=DEFAULT_PG, help=f"the PostgreSQL server (default {DEFAULT_PG})")
    ap.add_argument("--sim-url", required=True, help="the simulator's base URL (…/v1)")
    ap.add_argument("--bodies", required=True,
                    help="JSON list of {job_id, body}; the last one is also the warm-up job's body")
    ap.add_argument("--jobs", type=int, default=200, help="workflows (the first JOBS bodies; 0: launch only)")
    ap.add_argument("--sleep", type=float, default=1.0, help="durable sleep between polls, seconds")
    ap.add_argument("--max-connections", type=int, default=32)
    ap.add_argument("--idle", type=float, default=0.0,
                    help="seconds to stay launched before the workload (a baseline's idle time)")
    args = ap.parse_args()
    with open(args.bodies, encoding="utf-8") as f:
        every = json.load(f)
    bodies, warm_body = every[: args.jobs], every[-1]["body"]
    name = f"dbos_bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(args.pg, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
        server = str(conn.execute(sa.text("SHOW server_version")).scalar_one())
    try:
        url = sa.engine.make_url(args.pg).set(database=name).render_as_string(hide_password=False)
        result = run(url, args.sim_url, bodies, warm_body, args.sleep, args.max_connections, args.idle)
        stats = db_stats(admin, name)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()
    result.update(jobs=len(bodies), server=server, xact_commit=stats["xact_commit"],
                  xact_rollback=stats["xact_rollback"],
                  versions={p: metadata.version(p) for p in ("dbos", "openai", "httpx", "sqlalchemy", "psycopg")})
    print(json.dumps(result))


if __name__ == "__main__":
    main()
