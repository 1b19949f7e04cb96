"""Taking a public edition back: `iipub withdraw` and `iipub correct` (PRODUCT.md section 26)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from iipub.cli.common import App, by_option, emit_json, json_option, pass_app, reason_option, stderr

if TYPE_CHECKING:
    from iipub.operate.correcting import Taken

_lang_option = click.option("--lang", default=None, metavar="L",
                            help="Only this language's edition (default: every language of the slot).")
_note_option = click.option("--public-note", default=None, metavar="TEXT",
                            help="Shown on the site and sent to the CMS (the --reason stays internal).")


@click.command("withdraw")
@click.argument("job_id")
@_lang_option
@reason_option
@_note_option
@by_option
@json_option
@pass_app
def withdraw_command(app: App, job_id: str, lang: str | None, reason: str, public_note: str | None, by: str,
                     as_json: bool) -> None:
    """Take a published edition (or every language of a slot) off the public site. The page is
    replaced by a notice (withdrawn, the date, the public note), its JSON marked withdrawn, the
    feed, index and month pages stop listing it, and the CMS webhook gets `edition.withdrawn`,
    all through the outbox on the next `iipub relay`. The database keeps the edition and its
    history; the spend ledger records the revision. Nothing is paid. Withdrawing twice does nothing."""
    from iipub.operate import correcting

    _report(correcting.withdraw(app.settings, app.engine(), job_id, lang, reason, by, public_note), as_json)


@click.command("correct")
@click.argument("job_id")
@click.option("--from-file", "path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The corrected output: the edition's JSON document keyed by language, as the model writes it "
                   "(or a response object, as `jobs import-payload` takes it); checked like a generation.")
@_lang_option
@reason_option
@_note_option
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

    _report(correcting.correct(app.settings, app.engine(), job_id, lang, path, reason, by, public_note), as_json)


def _report(taken: Taken, as_json: bool) -> None:
    job = taken.job
    done = "withdrawn" if taken.verb == "withdraw" else "corrected"
    if as_json:
        emit_json({"id": job.id, "product": job.product, "edition_date": job.edition_date.isoformat(),
                   "action": taken.verb, "changed": [{"lang": c.lang, "revision": c.revision, "event_id": c.event_id,
                                                      "sha256": c.payload.get("sha256")} for c in taken.changes],
                   "unchanged": list(taken.unchanged), "ledger_error": taken.ledger_error})
    else:
        for c in taken.changes:
            click.echo(f"job {job.id}: {job.product} {job.edition_date} {c.lang} {done} (revision {c.revision}, event "
                       f"{c.event_id}); the next `iipub relay` tells every sink")
        for lang in taken.unchanged:
            already = "already withdrawn" if taken.verb == "withdraw" else "already as corrected"
            click.echo(f"job {job.id}: {job.product} {job.edition_date} {lang} {already}; nothing to do")
    if taken.ledger_error:
        stderr(f"warning: the spend ledger did not record it: {taken.ledger_error}")
