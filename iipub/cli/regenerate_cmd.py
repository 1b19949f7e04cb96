"""`iipub regenerate ID`: a new paid generation of a job whose output failed validation."""

from __future__ import annotations

import click

from iipub.cli.common import App, act, by_option, pass_app, pay_again_option, reason_option
from iipub.model.states import TRACK_SAVED


@click.command("regenerate")
@click.argument("job_id")
@pay_again_option
@reason_option
@by_option
@pass_app
def regenerate_command(app: App, job_id: str, reason: str, by: str, pay_again: bool) -> None:
    """Pay for a new generation of a VALIDATION_FAILED_RETAINED job (e.g. after fixing the
    prompt), within the slot's generation budget. Refused when the budget is spent.

    A slot waiting on a parked language track is generated again for its unpublished languages
    only (named in the output); a saved or published edition is kept, never replaced."""
    from iipub.operate.executor import Operator

    job = act(app, job_id, lambda op: op.regenerate(job_id, reason, by, pay_again=pay_again))
    found = {t.lang: t.state for t in Operator(app.settings, app.engine()).tracks_of(job.id)}
    if found:
        new = sorted(lang for lang, s in found.items() if s not in TRACK_SAVED)
        kept = sorted(lang for lang, s in found.items() if s in TRACK_SAVED)
        click.echo(f"new paid generation for: {', '.join(new)}" + (f"; kept: {', '.join(kept)} (already saved, "
                                                                   "never replaced)" if kept else ""))
