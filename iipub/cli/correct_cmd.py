"""`iipub correct`: replace a published edition by a corrected revision (PRODUCT.md section 26)."""

from __future__ import annotations

from pathlib import Path

import click

from iipub.cli.common import (
    App,
    by_option,
    emit_json,
    json_option,
    lang_option,
    pass_app,
    pay_again_option,
    print_taken,
    public_note_option,
    reason_option,
)
from iipub.core.errors import UsageError


@click.command("correct")
@click.argument("job_id")
@click.option("--from-file", "path", type=click.Path(dir_okay=False, path_type=Path),
              help="The corrected output: the edition's JSON document keyed by language, as the model writes it "
                   "(or a response object, as `jobs import-payload` takes it); checked like a generation. "
                   "Nothing is paid.")
@click.option("--regenerate", is_flag=True,
              help="PAID: a new generation of the slot replaces the edition(s); needs --pay-again. The editions "
                   "stay as they are (live or withdrawn) until its output is saved as their correction.")
@pay_again_option
@lang_option
@reason_option
@public_note_option
@by_option
@json_option
@pass_app
def correct_command(app: App, job_id: str, path: Path | None, regenerate: bool, pay_again: bool, lang: str | None,
                    reason: str, public_note: str | None, by: str, as_json: bool) -> None:
    """Replace a published edition, live or withdrawn, by a corrected one: a new revision with a
    visible correction notice on its page and in the feed, and `edition.corrected` (naming the
    sha256 it supersedes) to the CMS, through the outbox. This is the operator's consent, journaled
    with who and why, for the static sink to write over the live page.

    Give exactly one of --from-file FILE (the corrected output; nothing is paid) or --regenerate
    --pay-again (PAID: one new generation of the slot, within its generation budget and asked of
    the payment authority; `iipub reconcile` creates it, and saves its checked and composed output
    as the correction; `iipub jobs show ID` follows it)."""
    from iipub.operate import correcting

    if path is not None and regenerate:
        raise UsageError("correct: give --from-file FILE or --regenerate, not both")
    if path is None and not regenerate:
        raise UsageError("correct: give --from-file FILE (nothing paid) or --regenerate --pay-again (a paid "
                         "generation)")
    if pay_again and not regenerate:
        raise UsageError("--pay-again goes with --regenerate (the correction that pays)")
    if path is not None:
        print_taken(correcting.correct(app.settings, app.engine(), job_id, lang, path, reason, by, public_note),
                    as_json)
        return
    done = correcting.regenerate(app.settings, app.engine(), job_id, lang, reason, by, public_note,
                                 pay_again=pay_again)
    job = done.job
    if as_json:
        emit_json({"id": job.id, "product": job.product, "edition_date": job.edition_date.isoformat(),
                   "action": "correct --regenerate", "state": job.state.value, "replacing": done.revisions,
                   "generation_attempts": job.generation_attempts, "max_generation_attempts": done.attempts_max})
        return
    for one, revision in sorted(done.revisions.items()):
        click.echo(f"job {job.id}: {job.product} {job.edition_date} {one}: a paid generation will replace revision "
                   f"{revision} (kept as it is until then); the next `iipub reconcile` creates it")
    click.echo(f"job {job.id}: {job.state.value}, {job.generation_attempts} of {done.attempts_max} paid creates used "
               "so far; `iipub jobs show` follows the correction")
