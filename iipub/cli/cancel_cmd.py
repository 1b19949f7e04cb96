"""`iipub cancel ID`: a best-effort cancel of a job's running generation."""

from __future__ import annotations

import click

from iipub.cli.common import App, act, by_option, pass_app, reason_option
from iipub.model.states import State


@click.command("cancel")
@click.argument("job_id")
@reason_option
@by_option
@pass_app
def cancel_command(app: App, job_id: str, reason: str, by: str) -> None:
    """Best-effort cancel of a job's running generation (ACCEPTED, QUEUED, IN_PROGRESS).

    If the provider finished anyway, the output is taken into custody and goes on to be
    validated and published (paid work is never discarded). If it was cancelled, failed or
    is gone, the job is QUARANTINED (operator_cancelled). If the cancel call fails, nothing
    changes. Needs OPENAI_API_KEY. ID is the job id or a unique prefix.
    """
    job = act(app, job_id, lambda op: op.cancel(job_id, reason, by), needs_provider=True)
    if job.state != State.QUARANTINED:
        click.echo("the provider finished before the cancel took effect: its output is kept and goes on to "
                   "validation and publication (use `iipub kill` to stop that)")
