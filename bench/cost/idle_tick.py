"""The cost of a tick with nothing to do, as finished history piles up (0, 100,000 and
1,000,000 DELETED jobs): wall time, statements, and `EXPLAIN` / `ANALYZE` of the tick's
SELECTs. Set-up: bench/notes/idle_tick.md.

    .venv/bin/python bench/cost/idle_tick.py [--mysql URL] [--quick] [--events-per-job E]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))  # bench/support: the shared modules
import benchdb
import harness
import metering
import reporting
import simproc
from iipub.machine import sweep
from iipub.store import tables
from iipub.store.job_store import Store


def explain(engine: sa.Engine, statement: str, params: Any) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        res = conn.exec_driver_sql("EXPLAIN " + statement, params)
        return [dict(r._mapping) for r in res]


def analyze(engine: sa.Engine, statement: str, params: Any) -> dict[str, Any]:
    """MariaDB `ANALYZE FORMAT=JSON`: runs the query, reports rows actually read per table."""
    with engine.connect() as conn:
        raw = conn.exec_driver_sql("ANALYZE FORMAT=JSON " + statement, params).scalar_one()
    doc = json.loads(raw)
    found: dict[str, Any] = {"r_total_time_ms": doc.get("query_block", {}).get("r_total_time_ms")}
    tables = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "table_name" in node and "access_type" in node:
                tables.append({k: node.get(k) for k in ("table_name", "access_type", "key", "rows", "r_rows",
                                                        "r_total_time_ms", "filtered", "r_filtered")})
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(doc)
    found["tables"] = tables
    return found


def explain_table(rows: list[dict[str, Any]]) -> str:
    cols = ["table", "type", "possible_keys", "key", "key_len", "rows", "Extra"]
    return reporting.table(cols, [[str(r.get(c) if r.get(c) is not None else "") for c in cols] for r in rows])


def short_sql(statement: str, limit: int = 150) -> str:
    """A statement as `metering.statement_key` folds it, cut to `limit` characters."""
    s = metering.statement_key(statement, limit=len(statement))
    return s if len(s) <= limit else s[: limit - 1] + "…"


def main() -> None:
    ap = harness.parser(__doc__.split("\n\n")[0])
    ap.add_argument("--events-per-job", type=int, default=1,
                    help="journal rows inserted per terminal job (default 1; the idle tick reads none)")
    ap.add_argument("--sizes", default=None, help="comma-separated row counts (default 0,100000,1000000)")
    run = harness.start(ap)
    args = run.args
    sizes = [int(x) for x in (args.sizes or ("0,100000" if args.quick else "0,100000,1000000")).split(",")]
    runs = args.runs or (3 if args.quick else 5)
    sections: list[str] = []
    summary: list[list[str]] = []
    with simproc.SimProc(latency_seconds=0.0) as sim, \
            harness.bed(args.mysql, "idle", sim, pool_size=20, seed=harness.park_today,
                        sections={"reconcile": {"tick_seconds": 3600.0}}) as bed:
        engine, settings = bed.engine, bed.settings
        now = benchdb.db_now(engine)
        have = 0
        for size in sizes:
            t0 = time.perf_counter()
            added = benchdb.insert_rows(engine, tables.jobs, benchdb.terminal_rows(have, size - have, now),
                chunk=5000)
            ev = benchdb.insert_rows(engine, tables.job_events,
                                     benchdb.terminal_events(have, size - have, now, args.events_per_job),
                                     chunk=10000)
            load_s = time.perf_counter() - t0
            have = size
            with engine.connect() as conn:
                conn.exec_driver_sql("ANALYZE TABLE jobs, job_events").all()
            if added:
                print(f"inserted {added:,} jobs + {ev:,} events in {load_s:.0f} s "
                      f"({(added + ev) / load_s:,.0f} rows/s)", flush=True)
            counter = metering.RoundTrips(engine)
            walls, stmts, wires = [], [], []
            t0 = time.perf_counter()
            sweep.run(settings, engine)  # warm-up (not counted)
            warm = time.perf_counter() - t0
            # A tick that takes many seconds is measured once more, not `runs` times (bounded run).
            k = runs if warm < 10 else 1
            per_stmt: dict[str, list[float]] = {}
            tick_sql: list[tuple[str, Any]] = []
            for i in range(k):
                counter.reset()
                counter.record_sql = i == k - 1  # keep the last run's statements for EXPLAIN
                t0 = time.perf_counter()
                report = sweep.run(settings, engine)
                walls.append(time.perf_counter() - t0)
                counter.record_sql = False
                snap = counter.snapshot()
                stmts.append(snap["statement_total"])
                wires.append(snap["wire_total"])
                for key, v in counter.statement_seconds.items():
                    per_stmt.setdefault(key, []).append(v)
                assert report.leased == 0 and not report.transitions, report.summary()
            tick_sql = list(counter.sql)
            print(f"{size:>9,} terminal rows: idle tick {reporting.median(walls) * 1000:.1f} ms "
                  f"(warm-up {warm * 1000:.0f} ms; runs {', '.join(f'{w * 1000:.0f}' for w in walls)})",
                  flush=True)
            counter.reset()
            counter.record_sql = True
            Store(engine, "bench-explain").due_candidates(500)
            counter.close()
            statement, params = counter.sql[-1]
            plan = explain(engine, statement, params)
            an = analyze(engine, statement, params)
            key_used = ", ".join(str(r.get("key")) for r in plan)
            summary.append([f"{size:,}", f"{args.events_per_job * size:,}", str(k), reporting.spread(
                [w * 1000 for w in walls]), f"{warm * 1000:,.0f}",
                f"{reporting.median(stmts):.0f} / {reporting.median(wires):.0f}",
                key_used, str(sum(int(t.get("r_rows") or 0) for t in an["tables"])),
                f"{load_s:.0f}" if added else "–"])
            others = []
            seen: set[str] = set()
            for st, prm in tick_sql:
                if not st.lstrip().upper().startswith("SELECT") or st in seen or st == statement:
                    continue
                seen.add(st)
                t_ms = reporting.median(per_stmt.get(metering.statement_key(st), [0.0])) * 1000
                if t_ms < 5000:
                    read = [(t["table_name"], t["r_rows"]) for t in analyze(engine, st, prm)["tables"]]
                    how = f"ANALYZE rows read {read}"
                else:
                    how = "not ANALYZEd (that would run it again)"
                others.append(f"- `{short_sql(st)}` — {t_ms:,.1f} ms per tick; {how}\n\n"
                              + explain_table(explain(engine, st, prm)))
            cand_ms = reporting.median(per_stmt.get(metering.statement_key(statement), [0.0])) * 1000
            sections.append(
                f"**{size:,} terminal rows** — candidate query ({cand_ms:.1f} ms per tick, ANALYZE: "
                f"{an['r_total_time_ms']} ms, rows read {[(t['table_name'], t['r_rows']) for t in an['tables']]}):"
                f"\n\n{explain_table(plan)}\n\nOther SELECTs of the idle tick:\n\n" + "\n\n".join(others)
            )
    head = run.header(f"{runs} idle ticks per size after one warm-up (median, min–max); "
                      "one when the warm-up tick took over 10 s")
    statement_text = short_sql(statement, 1200)
    prose = harness.note("idle_tick", events_per_job=args.events_per_job, buffer_pool=buffer_pool(args.mysql),
                         statement=statement_text)
    body = f"""{head}
{prose}
{reporting.table(["terminal rows", "journal rows", "runs", "idle tick ms", "warm-up tick ms",
                  "statements / wire round trips", "candidate query key", "candidate rows read (ANALYZE)",
                  "insert s"], summary)}

""" + "\n\n".join(sections) + "\n"
    run.write_section("idle_tick", "3. Idle tick over terminal history", body)


def buffer_pool(url: str) -> str:
    try:
        with benchdb.server_probe(url) as probe, probe.connect() as conn:
            size = int(conn.execute(sa.text("SELECT @@innodb_buffer_pool_size")).scalar_one())
        return f"{size // (1024 * 1024)} MiB"
    except Exception:  # the figure is only informative: "?" whatever went wrong
        return "?"


if __name__ == "__main__":
    main()
