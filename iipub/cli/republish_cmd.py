"""`iipub republish ID`: a job's editions may replace live pages with different content."""

from __future__ import annotations

import click

from iipub.cli.common import App, by_option, job_operator, pass_app, reason_option


@click.command("republish")
@click.argument("job_id")
@reason_option
@by_option
@pass_app
def republish_command(app: App, job_id: str, reason: str, by: str) -> None:
    """Let a job's editions replace pages that are already live with different content. The
    static sink never does that by itself (the delivery parks as `conflicting_republish`, e.g.
    after a restore); this records who allowed it and why, and re-queues the parked deliveries."""
    n = job_operator(app).republish(job_id, reason, by)
    click.echo(f"job {job_id}: republish allowed; {n} parked deliveries re-queued")
