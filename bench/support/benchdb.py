"""Databases, settings and seeded rows for the iipub benchmarks (bench/README.md, "Shared
modules"). Every benchmark imports this module before iipub: it puts this checkout on `sys.path`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[2]

if str(ROOT) not in sys.path:  # running from a checkout without the editable install
    sys.path.insert(0, str(ROOT))

import sqlalchemy as sa

from iipub.model.jobs import slot_row
from iipub.model.states import State
from iipub.provider.factory import settings_from_dict
from iipub.provider.openai.adapter import create_body as provider_create_body
from iipub.provider.outcomes import CreateRequest
from iipub.settings.config import Product, Settings
from iipub.store import clock, db, migrate, tables
from iipub.store.job_store import Store

if TYPE_CHECKING:
    from simproc import SimProc


@contextlib.contextmanager
def fresh_database(base_url: str, tag: str) -> Iterator[str]:
    """An empty database: `iipub_bench_<tag>_<random>` on the MariaDB server of `base_url`
    (dropped afterwards), or a temporary SQLite file when `base_url` is "sqlite"."""
    if base_url == "sqlite":
        with tempfile.TemporaryDirectory(prefix=f"iipub_bench_{tag}_") as d:
            yield f"sqlite:///{d}/iipub.sqlite3"
        return
    name = f"iipub_bench_{tag}_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(base_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    try:
        yield sa.engine.make_url(base_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name}"))
        admin.dispose()


def open_db(url: str, pool_size: int = 8) -> sa.Engine:
    engine = db.make_engine(url, pool_size=pool_size)
    migrate.migrate(engine)
    return engine


@contextlib.contextmanager
def server_probe(base_url: str) -> Iterator[sa.Engine]:
    """A short-lived engine on the server itself (for its version string and variables)."""
    engine = sa.create_engine(base_url)
    try:
        yield engine
    finally:
        engine.dispose()


def db_now(engine: sa.Engine) -> dt.datetime:
    with engine.connect() as conn:
        return clock.read_now(conn).replace(tzinfo=None)


def server_version(engine: sa.Engine) -> str:
    if db.dialect_family(engine) == "mysql":
        with engine.connect() as conn:
            return str(conn.execute(sa.text("SELECT VERSION()")).scalar_one())
    import sqlite3

    return f"SQLite {sqlite3.sqlite_version}"


# -- settings --------------------------------------------------------------------------


def bench_settings(db_url: str, sim_url: str, static_root: Path, **sections: Mapping[str, Any]) -> Settings:
    """Production defaults (`iipub.settings.config`) plus the given section overrides, the default two
    products, a static sink under `static_root`, the spend ledger beside it (a run's own: the
    default path would carry one run's paid creates into the next run's fresh database), and the
    simulator as the provider."""
    data: dict[str, Any] = {"sinks": {"static": {"root": str(static_root)}},
                            "ledger": {"path": str(static_root.parent / "spend-ledger.jsonl")}}
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    base = settings_from_dict(data)
    return replace(base, database_url=db_url, api_key="sk-bench",
                   provider=replace(base.provider, base_url=sim_url))


def brief_only(settings: Settings, product: str = "daily-brief") -> Settings:
    """`settings` with one product (3 items, a short prompt, open from midnight), no webhook
    sink, and ticks that make no slots of their own (`[reconcile] auto_schedule = false`): the
    drills' workload, which schedules its own slots."""
    p = replace(settings.products[product], items=3, prompt="Write the brief.", opens_at=dt.time(0, 0))
    return replace(settings, products={product: p}, webhook_sink=None,
                   reconcile=replace(settings.reconcile, auto_schedule=False))


def settings_toml(static_root: Path, **sections: Mapping[str, Any]) -> str:
    """The same overrides as a TOML file for `iipub reconcile` subprocesses."""
    lines: list[str] = []
    for name, values in sections.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    lines += ["[sinks.static]", f"root = {_toml_value(str(static_root))}"]
    return "\n".join(lines) + "\n"


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))


# -- rows -------------------------------------------------------------------------------


def job_row(*, job_id: str, product: str, priority: int, day: dt.date, state: State | str, now: dt.datetime,
            opens_at: dt.datetime | None = None, **overrides: Any) -> dict[str, Any]:
    """A complete, valid `jobs` row (every NOT NULL column set) in `state`, due now."""
    row = slot_row(job_id=job_id, product=product, day=day, priority=priority,
                   opens_at=opens_at or dt.datetime.combine(day, dt.time(5)), now=now)
    row.update(state=State(state).value, next_attempt_at=now - dt.timedelta(seconds=1))
    row.update(overrides)
    return row


def slots(products: Sequence[Product], n: int, last_day: dt.date) -> list[tuple[Product, dt.date]]:
    """n distinct (product, day) slots, products interleaved, days going back from `last_day`."""
    return [(products[i % len(products)], last_day - dt.timedelta(days=i // len(products))) for i in range(n)]


def create_body(product: Product, day: dt.date, job_id: str, attempt: int = 1) -> dict[str, Any]:
    """The JSON body `OpenAIAdapter.create` sends for this slot (same helpers, same shape)."""
    return provider_create_body(CreateRequest(job_id=job_id, product=product, edition_date=day, attempt=attempt,
                                              fingerprint=product.fingerprint()))


def polling_rows(settings: Settings, sim: SimProc, n: int, now: dt.datetime,
                 states: Sequence[State] = (State.ACCEPTED, State.IN_PROGRESS)) -> list[dict[str, Any]]:
    """n jobs due for a poll, alternating between `states`, each holding the id of a real
    response created on the simulator (still in progress if the simulator's lifecycle is
    long), with the product's current fingerprint (so no config_drift)."""
    products = list(settings.products.values())
    chosen = slots(products, n, now.date() - dt.timedelta(days=1))
    ids = [str(uuid.uuid4()) for _ in chosen]
    bodies = [create_body(p, day, job_id) for (p, day), job_id in zip(chosen, ids, strict=True)]
    response_ids = sim.precreate(bodies)
    fingerprints = {p.name: p.fingerprint() for p in products}
    rows = []
    for i, ((p, day), job_id, rid) in enumerate(zip(chosen, ids, response_ids, strict=True)):
        st = states[i % len(states)]
        rows.append(job_row(
            job_id=job_id, product=p.name, priority=p.priority, day=day, state=st, now=now,
            opens_at=p.opens_on(day), version=4, generation_attempts=1, response_id=rid,
            config_fingerprint=fingerprints[p.name], poll_count=0 if st == State.ACCEPTED else 1,
        ))
    return rows


def park_today(engine: sa.Engine, settings: Settings) -> None:
    """Insert today's slots (by the database clock) as DELETED, so a tick's own scheduling
    finds them present and has nothing to dispatch: the measured tick does only the
    seeded work."""
    now = db_now(engine)
    rows = [job_row(job_id=str(uuid.uuid4()), product=p.name, priority=p.priority, day=now.date(),
                    state=State.DELETED, now=now, opens_at=p.opens_on(now.date()), version=12)
            for p in settings.products.values()]
    insert_rows(engine, tables.jobs, rows)


def seed_polls(engine: sa.Engine, settings: Settings, sim: SimProc, n: int) -> None:
    """Today's slots parked (`park_today`) and n jobs due for a poll (`polling_rows`)."""
    park_today(engine, settings)
    insert_rows(engine, tables.jobs, polling_rows(settings, sim, n, db_now(engine)))


def terminal_rows(start: int, n: int, now: dt.datetime, products: int = 200) -> Iterator[dict[str, Any]]:
    """DELETED jobs with the columns a finished slot has. Ids are UUID-shaped but ascending
    (cheap InnoDB appends); 200 synthetic products so a million slots fit in ~14 years."""
    for i in range(start, start + n):
        day = now.date() - dt.timedelta(days=1 + i // products)
        opened = dt.datetime.combine(day, dt.time(5))
        yield job_row(
            job_id=f"00000000-0000-4000-8000-{i:012x}", product=f"bench-{i % products:03d}", priority=10,
            day=day, state=State.DELETED, now=now, opens_at=opened, next_attempt_at=opened, version=14,
            generation_attempts=1, poll_count=2, response_id=f"resp_{i:048x}", config_fingerprint="f" * 64,
            payload_sha256="a" * 64, composed_sha256="b" * 64, input_tokens=700, output_tokens=9000,
            total_tokens=9700, created_at=opened, updated_at=opened, state_entered_at=opened,
        )


def terminal_events(start: int, n: int, now: dt.datetime, per_job: int = 1) -> Iterator[dict[str, Any]]:
    """The last `per_job` journal rows of each terminal job (…, CLEANUP_PENDING -> DELETED)."""
    trail = [("PUBLISHED", "CLEANUP_PENDING", "cleanup_start", None),
             ("SAVED_NOT_PUBLIC", "PUBLISHED", "all_events_delivered", None),
             ("COMPOSED_NOT_SAVED", "SAVED_NOT_PUBLIC", "saved", '{"editions": ["en", "es"]}')]
    for i in range(start, start + n):
        job_id = f"00000000-0000-4000-8000-{i:012x}"
        rows: list[tuple[str, str, str, str | None]] = [
            ("CLEANUP_PENDING", "DELETED", "remote_deleted", '{"response_id": "resp_x", "was_missing": false}')
        ]
        rows += trail[: per_job - 1]
        for k, (src, dst, reason, detail) in enumerate(rows):
            yield {"job_id": job_id, "from_state": src, "to_state": dst, "version": 14 - k,
                   "worker": "reconcile:bench:1:00000000", "reason": reason, "detail": detail, "at": now}


def insert_rows(engine: sa.Engine, table: sa.Table, rows: Iterable[dict[str, Any]], chunk: int = 2000) -> int:
    """executemany in chunks, one transaction per chunk; returns the row count."""
    it = iter(rows)
    total = 0
    while True:
        batch = list(itertools.islice(it, chunk))
        if not batch:
            return total
        with engine.begin() as conn:
            conn.execute(table.insert(), batch)
        total += len(batch)


def schedule_backfill(engine: sa.Engine, settings: Settings, k: int) -> list[str]:
    """Today's slots parked (`park_today`) and k NO_JOB slots through `Store.schedule` (as
    `iipub schedule --backfill` does), dated before yesterday so they are all due; returns the
    job ids."""
    park_today(engine, settings)
    store = Store(engine, "bench-scheduler")
    last = db_now(engine).date() - dt.timedelta(days=2)
    for p, day in slots(list(settings.products.values()), k, last):
        store.schedule(p, day, backfill=True)
    with engine.connect() as conn:
        return list(conn.execute(sa.select(tables.jobs.c.id)
            .where(tables.jobs.c.state == State.NO_JOB.value)).scalars())


def drive(settings: Settings, engine: sa.Engine, sim: SimProc, done: Callable[[Counter[str]], bool], *,
          relay_too: bool, max_loops: int = 30, advance: float = 5.0) -> dict[str, Any]:
    """Loop reconcile (and relay) ticks, moving the simulator's clock `advance` seconds after
    each, until `done(state counts)`. Returns the time spent in each and the loop count."""
    from iipub.machine import sweep
    from iipub.publish import relay

    spent: dict[str, Any] = {"reconcile_s": 0.0, "relay_s": 0.0, "loops": 0, "reconcile_reports": [],
                             "relay_reports": []}
    while True:
        counts = state_counts(engine)
        if done(counts):
            return spent
        if spent["loops"] >= max_loops:
            raise RuntimeError(f"not done after {spent['loops']} loops: {dict(counts)}")
        t0 = time.perf_counter()
        spent["reconcile_reports"].append(sweep.run(settings, engine))
        spent["reconcile_s"] += time.perf_counter() - t0
        if relay_too:
            t0 = time.perf_counter()
            spent["relay_reports"].append(relay.run(settings, engine))
            spent["relay_s"] += time.perf_counter() - t0
        sim.advance(advance)
        spent["loops"] += 1


def state_counts(engine: sa.Engine) -> Counter[str]:
    return count_by(engine, tables.jobs.c.state)


def count_by(engine: sa.Engine, column: Any, *where: Any) -> Counter[Any]:
    """Rows by the value of `column`, `where` applied."""
    with engine.connect() as conn:
        rows = conn.execute(sa.select(column, sa.func.count()).where(*where).group_by(column)).all()
    return Counter({value: int(n) for value, n in rows})


def count_rows(engine: sa.Engine, table: sa.Table, *where: Any) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table).where(*where)).scalar_one())


def max_event_id(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(tables.job_events.c.id), 0))).scalar_one())
