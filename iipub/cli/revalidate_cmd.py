"""`iipub revalidate ID [--lang L]`: a kept payload validated again, free."""

from __future__ import annotations

import click

from iipub.cli.common import App, act, by_option, pass_app, reason_option


@click.command("revalidate")
@click.argument("job_id")
@click.option("--lang", metavar="LANG", default=None,
              help="Only this language's track (its kept part), e.g. es; the others are not touched.")
@reason_option
@by_option
@pass_app
def revalidate_command(app: App, job_id: str, lang: str | None, reason: str, by: str) -> None:
    """Validate a VALIDATION_FAILED_RETAINED job's kept payload again, after the product's
    rules (items, allowed_domains, …) were fixed. Free: nothing is sent to the provider.

    A slot whose payload forked into language tracks: --lang re-checks that language's track;
    without it every parked track is re-checked."""
    if lang is None:
        act(app, job_id, lambda op: op.revalidate(job_id, reason, by))
        return
    from iipub.operate.executor import Operator

    op = Operator(app.settings, app.engine())
    job = op.get(job_id)
    before = {t.lang: t.state for t in op.tracks_of(job.id)}
    op.revalidate(job.id, reason, by, lang=lang)
    after = op.get(job.id)
    slot = f"; the slot {job.state} -> {after.state}" if after.state != job.state else ""
    click.echo(f"job {job.id} {lang} track: {before.get(lang)} -> RETRIEVED_NOT_VALIDATED{slot} "
               "(validated again by the next reconcile; nothing paid)")
