"""`iipub reconcile`: the cron command, one bounded sweep."""

from __future__ import annotations

import gc
import signal
from types import FrameType

import click

from iipub.cli.common import App, leave_wakeup, pass_app, print_summary


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
        leave_wakeup(engine, settings, "reconcile", report, started)
    print_summary(run.summary)


def _collect_less() -> None:
    """What start-up built (modules, settings, tables: most of the heap) is left out of every
    later collection, and a young collection runs every 20,000 allocations instead of 700: a
    tick of 10,000 polls otherwise spent about 6 % of its CPU in the cycle collector, which
    found almost nothing (reference counting frees a poll's objects)."""
    gc.freeze()
    gc.set_threshold(20_000, 10, 10)
