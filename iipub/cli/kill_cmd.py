"""`iipub kill ID`: a job terminated; it will not publish."""

from __future__ import annotations

import click

from iipub.cli.common import App, act, by_option, pass_app, reason_option


@click.command("kill")
@click.argument("job_id")
@reason_option
@by_option
@pass_app
def kill_command(app: App, job_id: str, reason: str, by: str) -> None:
    """Terminate a job: it will not publish. The next `iipub reconcile` cancels and deletes
    its remote data, then marks it DELETED.

    Refused once the edition is saved (SAVED_NOT_PUBLIC and later) and while a create is in
    flight. ID is the job id (a unique prefix of at least 4 characters is enough).
    """
    act(app, job_id, lambda op: op.kill(job_id, reason, by))
