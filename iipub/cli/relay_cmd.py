"""`iipub relay`: the second cron command, the outbox to every sink."""

from __future__ import annotations

from typing import Any

import click

from iipub.cli.common import App, leave_wakeup, pass_app, print_summary


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
    leave_wakeup(engine, settings, "relay", report, started)
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
