"""`iipub correct`: replace a published edition by a corrected revision (PRODUCT.md section 26)."""

from __future__ import annotations

from pathlib import Path

import click

from iipub.cli.common import (
    App,
    by_option,
    json_option,
    lang_option,
    pass_app,
    print_taken,
    public_note_option,
    reason_option,
)


@click.command("correct")
@click.argument("job_id")
@click.option("--from-file", "path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The corrected output: the edition's JSON document keyed by language, as the model writes it "
                   "(or a response object, as `jobs import-payload` takes it); checked like a generation.")
@lang_option
@reason_option
@public_note_option
@by_option
@json_option
@pass_app
def correct_command(app: App, job_id: str, path: Path, lang: str | None, reason: str, public_note: str | None,
                    by: str, as_json: bool) -> None:
    """Replace a published edition, live or withdrawn, by a corrected one: a new revision with a
    visible correction notice on its page and in the feed, and `edition.corrected` (naming the
    sha256 it supersedes) to the CMS, through the outbox. This is the operator's consent, journaled
    with who and why, for the static sink to write over the live page. Nothing is paid."""
    from iipub.operate import correcting

    print_taken(correcting.correct(app.settings, app.engine(), job_id, lang, path, reason, by, public_note), as_json)
