"""What each cron command costs against years of history: 20 products x 2 languages, 0, 1 and 10
years of really published slots (one slot driven NO_JOB -> DELETED through the simulator, then
copied for every product and past day by `tests/support/history.py`), on SQLite and on a MariaDB
server of this script's own (its CPU read from /proc/<pid>/stat through its pid file). Each
command runs as cron starts it (cold process, JSON logs appended to a file), in rounds that go
through every size's database, beside `import sqlalchemy` and the lean floor
(bench/cost/idle_floor.py). What each figure is: bench/notes/history.md.

    .venv/bin/python bench/cost/history.py [--years 0,1,10] [--runs 5] [--no-sqlite] [--no-mariadb] [--no-doc]
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))  # bench/support: the shared modules
import benchdb
import harness
import metering
import simproc
from iipub.machine import sweep
from iipub.model.states import State
from iipub.publish import relay
from iipub.store import clock, db, migrate, tables
from tests.support import history
from tests.support.databases import private_mariadbd

KEY, TITLE = "history", "Measured against years of history: every cron command at 0, 1 and 10 years"
PRODUCTS = ["daily-brief", "revolution-watch", *(f"edition-{i:02d}" for i in range(3, 21))]
FLOOR = str(Path(__file__).resolve().parent / "idle_floor.py")
PROGRAMS = ("import sqlalchemy", "lean floor", "idle reconcile", "idle relay", "working tick",
            "working tick, check off", "status --check", "status --prometheus", "relay --prune")
POLLS = 10  # the working tick's due polls


def _config(workdir: Path) -> Path:
    """20 products in two languages, opening through the morning; polls every five minutes (the working
    tick's polls are made due again by the script, not by time); no catch-up days."""
    lines = ["[reconcile]", "catch_up_days = 0", "poll_interval_seconds = 300", "",
             f'[sinks.static]\nroot = "{workdir / "public"}"', f'[ledger]\npath = "{workdir / "spend-ledger.jsonl"}"']
    for i, name in enumerate(PRODUCTS):
        lines += ["", "[[products]]", f'name = "{name}"', 'languages = ["en", "es"]',
                  f'opens_at = "{5 + i // 4:02d}:{(i % 4) * 15:02d}"', 'model = "gpt-5-mini"',
                  'reasoning_effort = "low"', f'prompt = "Write the {name} edition: {{items}} items."',
                  "items = 8", f"priority = {10 + i}"]
    cfg = workdir / "iipub.toml"
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


def published_template(url: str, sim: simproc.SimProc) -> history.Template:
    """One real slot of `daily-brief`, driven in process from NO_JOB to DELETED against the
    simulator (create, polls, custody, validation, tracks, save, static delivery, cleanup)."""
    sections = {"reconcile": {"catch_up_days": 0, "poll_interval_seconds": 0}}
    with harness.bed(url, "tpl", sim, sections=sections) as bed:
        engine, settings = bed.engine, bed.settings
        with engine.connect() as conn:
            now = clock.read_now(conn)
        clock.advance_clock(engine, (dt.datetime.combine(now.date(), dt.time(7)) - now).total_seconds())
        for _ in range(60):
            sweep.run(settings, engine)
            relay.run(settings, engine)
            with engine.connect() as conn:
                rows = conn.execute(sa.select(tables.jobs.c.id, tables.jobs.c.product, tables.jobs.c.state)).all()
            done = [r.id for r in rows if r.product == "daily-brief" and r.state == State.DELETED.value]
            if done:
                return history.template_of(engine, done[0])
            clock.advance_clock(engine, 120)
            time.sleep(0.2)
    raise RuntimeError("the template slot was not published and cleaned up")


@contextlib.contextmanager
def database(backend: str, workdir: Path) -> Iterator[tuple[str, int | None]]:
    """A migrated database and its server's pid (None for SQLite)."""
    if backend == "sqlite":
        url = f"sqlite:///{workdir / 'iipub.sqlite3'}"
        migrate.migrate(db.make_engine(url))
        yield url, None
        return
    with private_mariadbd(workdir / "mariadb", "--innodb-buffer-pool-size=256M") as url:
        engine = db.make_engine(url)
        migrate.migrate(engine)
        engine.dispose()
        yield url, int((workdir / "mariadb" / "pid").read_text().split()[0])


def build(url: str, template: history.Template, years: int) -> dict[str, int]:
    """Today's slots (published) and `years` x 365 days of them before, for every product; a week
    of heartbeats."""
    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            now = clock.read_now(conn)
        days = [now.date() - dt.timedelta(days=d) for d in range(years * 365 + 1)]
        t0 = time.monotonic()
        written = history.fill(engine, template, PRODUCTS, days, trimmed=True, today=now.date(),
                               batch_slots=500 if url.startswith("mysql") else 2000)
        written["runs"] = history.fill_runs(engine, 7 if years else 0, now)
        if url.startswith("mysql"):
            with engine.connect() as conn:
                for name in history.SLOT_TABLES:
                    conn.exec_driver_sql(f"ANALYZE TABLE {name}").all()
        print(f"  built {years} years in {time.monotonic() - t0:.0f} s: {written}", file=sys.stderr, flush=True)
        return written
    finally:
        engine.dispose()


def seed_polls(url: str, sim: simproc.SimProc) -> list[str]:
    """The working tick's work: POLLS slots of tomorrow and after in flight on the simulator."""
    from iipub.settings.loading import load_settings

    engine = db.make_engine(url)
    try:
        settings = load_settings()
        with engine.connect() as conn:
            now = clock.read_now(conn)
        products = [settings.products[name] for name in PRODUCTS]
        chosen = [(products[i % len(products)], now.date() + dt.timedelta(days=1 + i // len(products)))
                  for i in range(POLLS)]
        ids = [str(uuid.uuid4()) for _ in chosen]
        responses = sim.precreate([benchdb.create_body(p, day, job_id) for (p, day), job_id in zip(chosen, ids,
                                                                                                    strict=True)])
        rows = [benchdb.job_row(job_id=job_id, product=p.name, priority=p.priority, day=day, state=State.IN_PROGRESS,
                                now=now, opens_at=p.opens_on(day), version=4, generation_attempts=1, response_id=rid,
                                config_fingerprint=p.fingerprint(), poll_count=1)
                for (p, day), job_id, rid in zip(chosen, ids, responses, strict=True)]
        benchdb.insert_rows(engine, tables.jobs, rows)
        return ids
    finally:
        engine.dispose()


def rearm(url: str, ids: list[str]) -> None:
    """Make the working tick's polls due again (outside the measured process)."""
    engine = db.make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(tables.jobs.update().where(tables.jobs.c.id.in_(ids))
                         .values(next_attempt_at=clock.now(conn, -1)))
    finally:
        engine.dispose()


@contextlib.contextmanager
def prepared(backend: str, years: int, template: history.Template,
             sim: simproc.SimProc) -> Iterator[tuple[Callable[[], None], dict[str, list[dict[str, Any]]]]]:
    """A database of `years` of history, its working tick's polls seeded, and one round of every
    program against it (each call appends to the results)."""
    results: dict[str, list[dict[str, Any]]] = {p: [] for p in PROGRAMS}
    with tempfile.TemporaryDirectory(prefix="iipub_history_") as d:
        workdir = Path(d)
        with database(backend, workdir) as (url, server_pid):
            cfg = _config(workdir)
            env = harness.clean_env(IIPUB_DATABASE_URL=url, IIPUB_CONFIG=str(cfg), OPENAI_API_KEY="sk-bench",
                                    OPENAI_BASE_URL=sim.url, IIPUB_LOG_FORMAT="json")
            written = build(url, template, years)
            results["_rows"] = [dict(written)]
            with _environ(env):
                ids = seed_polls(url, sim)
            log = workdir / "cron.log"
            exe = harness.iipub_exe()

            def run(cmd: list[str], extra: Mapping[str, str] | None = None) -> dict[str, Any]:
                before = metering.cpu_seconds(server_pid) if server_pid else 0.0
                m = harness.run_process(cmd, env={**env, **(extra or {})}, cwd=workdir, log=log, ok=(0, 1, 2, 3))
                m["server_cpu"] = (metering.cpu_seconds(server_pid) - before) if server_pid else 0.0
                return m

            def prime(command: str) -> None:
                harness.run_process([*exe, command], env=env, cwd=workdir, log=log)

            commands: dict[str, tuple[list[str], dict[str, str] | None]] = {
                "import sqlalchemy": ([sys.executable, "-c", "import sqlalchemy"], None),
                "lean floor": ([sys.executable, FLOOR, url], None),
                "status --check": ([*exe, "status", "--check"], None),
                "status --prometheus": ([*exe, "status", "--prometheus", str(workdir / "iipub.prom")], None),
                "relay --prune": ([*exe, "relay", "--prune"], None),
            }

            def one_round() -> None:
                order = list(PROGRAMS)
                random.shuffle(order)
                for name in order:
                    if name.startswith("working tick"):
                        rearm(url, ids)
                        extra = {"IIPUB_WAKEUP_CHECK": "off"} if "off" in name else None
                        m = run([*exe, "reconcile"], extra)
                        m["worked"] = bool((m.get("result") or {}).get("transitions"))
                    elif name.startswith("idle "):
                        command = name.split()[1]
                        prime(command)  # the minute before: a full run that found nothing (another
                        m = run([*exe, command])  # command's work since wakes this one once)
                        m["idle_answer"] = bool((m.get("result") or {}).get("idle"))
                    else:
                        cmd, extra = commands[name]
                        m = run(cmd, extra)
                    m.pop("result", None)
                    results[name].append(m)

            yield one_round, results


def measure(backend: str, sizes: list[int], runs: int, template: history.Template,
            sim: simproc.SimProc) -> dict[int, dict[str, list[dict[str, Any]]]]:
    """Every size's database open at once, and each round of `runs` going through them all in a
    random order: a change of the shared host's load between rounds reaches every size alike."""
    with contextlib.ExitStack() as stack:
        opened = {y: stack.enter_context(prepared(backend, y, template, sim)) for y in sizes}
        for r in range(runs):
            for y in random.sample(sizes, len(sizes)):
                opened[y][0]()
            print(f"  {backend} round {r + 1}/{runs}", file=sys.stderr, flush=True)
        return {y: opened[y][1] for y in sizes}


@contextlib.contextmanager
def _environ(env: Mapping[str, str]) -> Iterator[None]:
    import os

    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def table(backend: str, by_years: Mapping[int, Mapping[str, list[dict[str, Any]]]]) -> tuple[str, dict[str, Any]]:
    """One row per program: client CPU (median), server CPU (mean: /proc counts in 10 ms ticks),
    client + server over `import sqlalchemy` per size, and each size over the new database."""
    sizes = sorted(by_years)
    head = ["program"]
    for y in sizes:
        head += [f"{y} y: client + server CPU s", f"{y} y: ÷ import sqlalchemy"]
    head += [f"{y} y ÷ new" for y in sizes if y]
    # The same, each size's cost first taken over `import sqlalchemy` in its own rounds: the sizes
    # run minutes apart on a shared host, and this cancels a change of its load between them.
    head += [f"{y} y ÷ new, over import sqlalchemy" for y in sizes if y]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    summary: dict[str, Any] = {}
    for name in PROGRAMS:
        cells = [name]
        totals: dict[int, float] = {}
        shares: dict[int, float] = {}
        for y in sizes:
            ms = by_years[y][name]
            ref = _median([m["cpu"] for m in by_years[y]["import sqlalchemy"]])
            total = _median([m["cpu"] for m in ms]) + _mean([m.get("server_cpu", 0.0) for m in ms])
            totals[y] = total
            shares[y] = total / ref
            cells += [f"{total:.3f} (server {_mean([m.get('server_cpu', 0.0) for m in ms]):.3f})",
                      f"{total / ref:.2f}"]
            summary[f"{name} @{y}y ÷ import sqlalchemy"] = round(total / ref, 3)
        base = totals.get(sizes[0], float("nan"))
        for y in sizes:
            if y:
                cells.append(f"{totals[y] / base:.2f}" if base > 0 else "–")
                summary[f"{name} @{y}y ÷ new"] = round(totals[y] / base, 3) if base > 0 else None
        base_share = shares[sizes[0]]
        for y in sizes:
            if y:
                share = shares[y]
                cells.append(f"{share / base_share:.2f}" if base_share > 0 else "–")
                summary[f"{name} @{y}y ÷ new, over import sqlalchemy"] = (
                    round(share / base_share, 3) if base_share > 0 else None)
        rows.append("| " + " | ".join(cells) + " |")
    counts = ", ".join(f"{y} y: {by_years[y]['_rows'][0].get('jobs', 0):,} jobs / "
                       f"{by_years[y]['_rows'][0].get('job_events', 0):,} journal rows" for y in sizes)
    def answered(y: int, name: str) -> str:
        ms = by_years[y][name]
        return f"{sum(bool(m.get('idle_answer')) for m in ms)}/{len(ms)}"

    idle = [f"{y} y: reconcile {answered(y, 'idle reconcile')}, relay {answered(y, 'idle relay')}" for y in sizes]
    worked = [f"{y} y: {sum(m.get('worked', False) for m in by_years[y]['working tick'])}/"
              f"{len(by_years[y]['working tick'])}" for y in sizes]
    text = (f"### {backend}\n\nHistory copied: {counts}.\n\n" + "\n".join(rows) +
            f"\n\nAnswered idle: {'; '.join(idle)}. Working ticks that polled: {'; '.join(worked)}.\n")
    return text, summary


def main() -> None:
    ap = harness.parser(__doc__ or "", runs=5)
    ap.add_argument("--years", default="0,1,10", help="history sizes in years, comma-separated")
    ap.add_argument("--no-sqlite", action="store_true")
    ap.add_argument("--no-mariadb", action="store_true")
    ap.add_argument("--json", type=Path, help="write the raw figures here too")
    run = harness.start(ap, production_logs=False)
    args = run.args
    sizes = [int(y) for y in args.years.split(",")]
    backends = ([] if args.no_sqlite else ["sqlite"]) + ([] if args.no_mariadb else ["mariadb"])
    parts: list[str] = []
    summary: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    with simproc.SimProc(latency_seconds=0.0) as fast:
        template = published_template("sqlite", fast)
    with harness.polling_simulator(0.0) as sim:
        for backend in backends:
            by_years = measure(backend, sizes, args.runs, template, sim)
            raw[backend] = by_years
            text, figures = table("SQLite" if backend == "sqlite" else "MariaDB (a server of its own)", by_years)
            parts.append(text)
            summary[backend] = figures
            print(text, flush=True)
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps(raw, default=str, indent=1))
    body = (harness.note(KEY) + "\n" + run.header(f"{args.runs} rounds per database, each through every size") + "\n"
            + "\n".join(parts))
    run.write_section(KEY, TITLE, body)


if __name__ == "__main__":
    main()
