"""`iipub demo`: the whole pipeline on one machine, on the embedded default.

A SQLite file and a static site in one directory, the simulator in-process on a free
loopback port, today's editions of both built-in products, then reconcile and relay ticks
until every job is published and cleaned up. Nothing from the user's environment is read
(no API key, no database URL, no config file), and nothing is left running afterwards.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from iipub.core.errors import ConfigError
from iipub.machine import scheduling, sweep
from iipub.model.jobs import new_worker_id
from iipub.model.states import SETTLED, State
from iipub.observe import heartbeat
from iipub.provider.factory import settings_from_dict
from iipub.provider.openai.simulator import Simulator, SimulatorOptions
from iipub.publish import relay
from iipub.settings.config import Product, Settings
from iipub.store import clock, db, job_queries, migrate
from iipub.store.handles import Engine
from iipub.store.job_store import Store

DEFAULT_DIR = Path("iipub-demo")
DB_FILE = "iipub.sqlite3"
SITE_DIR = "public"
LEDGER_FILE = "spend-ledger.jsonl"
API_KEY = "sk-demo-local"  # the simulator only checks that a key is present

# Short provider and tick timings: the demo is about the path, not the waiting.
_SETTINGS: dict[str, object] = {
    "reconcile": {"poll_interval_seconds": 0, "lease_seconds": 10, "tick_seconds": 10, "concurrency": 4,
                  "backoff_base_seconds": 0.5, "backoff_cap_seconds": 5},
    "provider": {"connect_timeout_seconds": 1, "timeout_seconds": 3},
    "relay": {"tick_seconds": 10, "backoff_base_seconds": 0.5, "backoff_cap_seconds": 5},
}
_SIMULATOR = SimulatorOptions(queued_seconds=0.3, in_progress_seconds=0.6, slow_seconds=2.0)


@dataclass(frozen=True)
class EditionRow:
    product: str
    edition_date: dt.date
    state: str
    generation_attempts: int
    poll_count: int
    total_tokens: int
    files: tuple[str, ...]  # the edition's pages, relative to the site root


@dataclass(frozen=True)
class DemoResult:
    directory: Path
    site_root: Path
    simulator_url: str
    day: dt.date
    ticks: int
    seconds: float
    rows: tuple[EditionRow, ...]

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.state == State.DELETED.value for r in self.rows)

    @property
    def unfinished(self) -> tuple[EditionRow, ...]:
        return tuple(r for r in self.rows if r.state != State.DELETED.value)

    def index_pages(self) -> list[Path]:
        return sorted(self.site_root.glob("*/*/index.html"))


def demo_settings(directory: Path, simulator_url: str) -> Settings:
    # The demo's spend ledger is its own, beside its database: a demo in another folder (or an
    # installation on this account) never reads this one's chain as its own.
    base = settings_from_dict({**_SETTINGS, "sinks": {"static": {"root": str(directory / SITE_DIR)}},
                               "ledger": {"path": str(directory / LEDGER_FILE)}})
    return replace(
        base,
        database_url=f"sqlite:///{directory / DB_FILE}",
        api_key=API_KEY,
        provider=replace(base.provider, base_url=simulator_url),
    )


def open_now(products: Mapping[str, Product], now: dt.datetime) -> dict[str, Product]:
    """Products whose slot for today has not opened yet open at midnight instead, so the
    demo runs at any hour."""
    return {
        name: p if p.opens_on(now.date()) <= now else replace(p, opens_at=dt.time(0, 0))
        for name, p in products.items()
    }


def run(directory: Path, *, max_seconds: float = 45.0, pause_seconds: float = 0.2,
        echo: Callable[[str], None] = print) -> DemoResult:
    """Run the demo in `directory` (created if missing). Stops when every job of today or
    earlier is DELETED or parked, or after `max_seconds` of ticking."""
    directory = directory.resolve()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the demo directory {directory}: {exc.strerror}") from None
    sim = Simulator(_SIMULATOR)
    engine: Engine | None = None
    try:
        sim.start()
        settings = demo_settings(directory, sim.url)
        echo(f"demo dir    {directory}")
        echo(f"database    {settings.database_url}")
        echo(f"ledger      {settings.ledger_path()}")
        echo(f"simulator   {sim.origin} (in-process, stopped on exit)")
        engine = db.make_engine(settings.database_url, pool_size=settings.reconcile.concurrency + 4)
        applied = migrate.migrate(engine)
        echo(f"migrations  {len(applied)} applied" if applied else "migrations  up to date")
        with engine.connect() as conn:
            now = clock.read_now(conn)
        day = now.date()
        settings = replace(settings, products=open_now(settings.products, now))
        created = scheduling.schedule_day(Store(engine, new_worker_id("demo")), settings.products.values(), day)
        for name, new in created.items():
            echo(f"schedule    {name} {day}: {'created' if new else 'already present'}")

        started = time.monotonic()
        ticks = 0
        while not _settled(engine, day) and time.monotonic() - started < max_seconds:
            ticks += 1
            # Recorded like the cron commands' runs, so `iipub status` on the demo sees them.
            worker = new_worker_id("reconcile")
            with heartbeat.recorded(engine, "reconcile", worker, settings.monitoring) as run:
                rec = sweep.run(settings, engine, worker=worker)
                run.summary = rec.summary()
            worker = new_worker_id("relay")
            with heartbeat.recorded(engine, "relay", worker, settings.monitoring) as run:
                rel = relay.run(settings, engine, worker=worker)
                run.summary = dict(rel.__dict__)
            echo(_progress(ticks, time.monotonic() - started, engine, day, rec, rel))
            if not _settled(engine, day):
                time.sleep(pause_seconds)
        if ticks == 0:
            echo("nothing to do: every edition is already published and cleaned up")
        return DemoResult(
            directory=directory, site_root=directory / SITE_DIR, simulator_url=sim.url, day=day, ticks=ticks,
            seconds=round(time.monotonic() - started, 2), rows=_rows(engine, directory / SITE_DIR, day),
        )
    finally:
        if engine is not None:
            engine.dispose()
        sim.stop()


def _jobs(engine: Engine, day: dt.date) -> list[Any]:
    # Slots after the demo's day (a tick past midnight schedules them) are not waited for.
    return job_queries.slots_until(engine, day)


def _settled(engine: Engine, day: dt.date) -> bool:
    done = {s.value for s in SETTLED}
    rows = _jobs(engine, day)
    return bool(rows) and all(r.state in done for r in rows)


def _progress(n: int, elapsed: float, engine: Engine, day: dt.date, rec: sweep.SweepReport,
              rel: relay.RelayReport) -> str:
    today = "  ".join(f"{r.product}={r.state}" for r in _jobs(engine, day) if r.edition_date == day)
    moves = sum(rec.transitions.values())
    delivered = sum(rel.deliveries.values())
    return (f"tick {n:>2}  {elapsed:5.1f}s  {today}  "
            f"(transitions {moves}, creates {rec.creates}, deliveries {delivered})")


def _rows(engine: Engine, site: Path, day: dt.date) -> tuple[EditionRow, ...]:
    rows = job_queries.slot_figures_until(engine, day)
    out = []
    for r in rows:
        pages = sorted(site.glob(f"{r.product}/{r.edition_date.isoformat()}/*.html"))
        out.append(EditionRow(r.product, r.edition_date, r.state, r.generation_attempts, r.poll_count,
                              r.total_tokens, tuple(str(p.relative_to(site)) for p in pages)))
    return tuple(out)
