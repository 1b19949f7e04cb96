"""`iipub suspend ID` and its undo, `iipub resume ID`: one job parked during an incident."""

from __future__ import annotations

import click

from iipub.cli.common import App, act, by_option, pass_app, reason_option


@click.command("suspend")
@click.argument("job_id")
@reason_option
@by_option
@pass_app
def suspend_command(app: App, job_id: str, reason: str, by: str) -> None:
    """Park a job during an incident: reconcile will not touch it until `iipub resume`.

    The state it was in is remembered. Refused while a create is in flight.
    ID is the job id (a unique prefix of at least 4 characters is enough).
    """
    act(app, job_id, lambda op: op.suspend(job_id, reason, by))


@click.command("resume")
@click.argument("job_id")
@click.option("--reason", default=None, help="Why (journaled with the action; optional).")
@by_option
@pass_app
def resume_command(app: App, job_id: str, reason: str | None, by: str) -> None:
    """Return a suspended job to the state it was suspended from, due now.

    ID is the job id (a unique prefix of at least 4 characters is enough).
    """
    act(app, job_id, lambda op: op.resume(job_id, by, reason))
