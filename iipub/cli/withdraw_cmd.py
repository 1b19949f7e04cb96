"""`iipub withdraw`: take a published edition off the public site (PRODUCT.md section 26)."""

from __future__ import annotations

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


@click.command("withdraw")
@click.argument("job_id")
@lang_option
@reason_option
@public_note_option
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

    print_taken(correcting.withdraw(app.settings, app.engine(), job_id, lang, reason, by, public_note), as_json)
