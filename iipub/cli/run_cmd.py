"""The two cron commands: `iipub reconcile` and `iipub relay`."""

from __future__ import annotations

import gc
import json
import signal
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

from iipub.cli.common import App, pass_app
from iipub.observe.idle_check import same_file

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from iipub.settings.config import Settings


@click.command("reconcile")
@click.option("--tick-seconds", type=click.FloatRange(1, 3600), help="Override reconcile.tick_seconds.")
@click.option("--shadow", is_flag=True,
              help="Shadow mode for this run ([reconcile] mode = \"shadow\"): polls and custody as usual, but no "
                   "create, save/publication, delete or cancel; journals shadow_would_* instead.")
@pass_app
def reconcile_command(app: App, tick_seconds: float | None, shadow: bool) -> None:
    """The cron command: one bounded sweep that advances every due job as far as is safe.

    Checks the configuration (including OPENAI_API_KEY) before any lease is taken, then
    exits. Prints a one-line JSON summary to stdout; transitions are logged to stderr. Each
    run is recorded in the `runs` table (heartbeats for `iipub status`); after a successful
    one, [monitoring] ping_url is fetched. Under `pause --everything` it records its heartbeat
    and does nothing else.
    """
    from iipub.machine import sweep  # each cron command imports only its own machinery
    from iipub.model.jobs import new_worker_id
    from iipub.observe import heartbeat, wakeup_store

    started = wakeup_store.run_started()  # before the settings and the files they name are read
    settings = app.settings
    settings.require_api_key()
    if tick_seconds is not None or shadow:
        from dataclasses import replace

        r = settings.reconcile
        settings = replace(settings, reconcile=replace(
            r, tick_seconds=tick_seconds or r.tick_seconds, mode="shadow" if shadow else r.mode))
    engine = app.engine()

    def stop(_signum: int, _frame: FrameType | None) -> None:
        sweep.STOP.set()  # stop taking work; what is in hand finishes and lets go of its lease

    signal.signal(signal.SIGTERM, stop)
    _collect_less()
    worker = new_worker_id("reconcile")
    with heartbeat.recorded(engine, "reconcile", worker, settings.monitoring) as run:
        report = sweep.run(settings, engine, worker=worker)
        run.summary = report.summary()
    if tick_seconds is None and not shadow:
        _leave_wakeup(engine, settings, "reconcile", report, started)
    print_summary(run.summary)


def _leave_wakeup(engine: Engine, settings: Settings, command: str, report: Any, started: int) -> None:
    """What the next cron run's wake-up check compares with (`iipub.observe.wakeup`). A run that did
    anything, or pings a URL each run, leaves "due": the next run is a full one."""
    from iipub.observe import wakeup_store

    busy = wakeup_store.did_work(report) or settings.monitoring.ping_url is not None
    if command == "reconcile":
        wakeup_store.record(engine, command, settings, busy=busy, started_ns=started,
                            due_now=lambda: wakeup_store.reconcile_due(engine, settings),
                            future=wakeup_store.reconcile_future, idle_summary=wakeup_store.idle_report(report))
    else:
        wakeup_store.record(engine, command, settings, busy=busy, started_ns=started,
                            due_now=lambda: wakeup_store.relay_due(engine),
                            future=wakeup_store.relay_future, idle_summary=wakeup_store.idle_report(report))


def _collect_less() -> None:
    """What start-up built (modules, settings, tables: most of the heap) is left out of every
    later collection, and a young collection runs every 20,000 allocations instead of 700: a
    tick of 10,000 polls otherwise spent about 6 % of its CPU in the cycle collector, which
    found almost nothing (reference counting frees a poll's objects)."""
    gc.freeze()
    gc.set_threshold(20_000, 10, 10)


@click.command("relay")
@click.option("--prune", is_flag=True, help="Instead of delivering, delete published outbox rows older than "
              "relay.prune_after_days, and webhook deliveries and misses older than webhooks.keep_days (in "
              "primary-key batches; orphans only once resolved).")
@pass_app
def relay_command(app: App, prune: bool) -> None:
    """The second cron command: deliver due outbox events to every configured sink, then exit.

    Each delivering run is recorded in the `runs` table (heartbeats for `iipub status`; a
    --prune run is not); after a successful one, [monitoring] ping_url is fetched. In shadow
    mode ([reconcile] mode = "shadow") and under `pause --everything` it delivers nothing.
    """
    from iipub.model.jobs import new_worker_id
    from iipub.observe import heartbeat, wakeup_store
    from iipub.publish import relay

    started = wakeup_store.run_started()  # before the settings and the files they name are read
    settings = app.settings
    engine = app.engine()
    if prune:
        from iipub.store.deliveries import Deliveries
        from iipub.store.outbox import Outbox

        n = Outbox(engine, "relay-prune", settings.relay.lease_seconds).prune(settings.relay.prune_after_days * 86400)
        hooks = Deliveries(engine).prune(settings.webhooks.keep_days)
        import structlog

        structlog.get_logger("iipub.relay").info("relay_pruned", pruned=n, webhooks=hooks)
        print_summary({"pruned": n, "webhooks": hooks})
        return
    worker = new_worker_id("relay")
    with heartbeat.recorded(engine, "relay", worker, settings.monitoring) as run:
        report = relay.run(settings, engine, worker=worker)
        run.summary = dict(report.__dict__)
    _sample_disks(engine, settings)
    _leave_wakeup(engine, settings, "relay", report, started)
    print_summary(run.summary)


def _sample_disks(engine: Any, settings: Any) -> None:
    """Every ten minutes (database clock, from the newest sample), the free space of the
    filesystems iipub writes to (`status` reads how fast they fill). Never fails the run: a sample
    lost is a warning."""
    from iipub.observe import disk_samples

    try:
        if not disk_samples.due(engine):
            return
        from iipub.observe import queries

        disk_samples.record(engine, [(d.path, d.free_bytes, d.size_bytes)
                                     for d in queries.disks(settings) if d.error is None])
    except Exception as exc:  # a recording problem, never the run's
        import structlog

        structlog.get_logger("iipub.relay").warning("disk_sample_failed", error=f"{type(exc).__name__}: {exc}")


def print_summary(summary: dict[str, Any]) -> None:
    """The run's one-line JSON summary on stdout, unless stdout is the very file stderr is (cron's
    `>>log 2>&1`): the stderr event (tick_done, relay_done) already holds it with time and level,
    and a log must say each run once."""
    if same_file(sys.stdout, sys.stderr):
        return
    click.echo(json.dumps(summary, sort_keys=True))
