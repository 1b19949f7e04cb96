"""`iipub ledger show|acknowledge`: the spend ledger against what the database remembers of it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from iipub.cli.common import App, by_option, emit_json, json_option, pass_app, reason_option
from iipub.core.errors import UsageError

if TYPE_CHECKING:
    from iipub.money.ledger import SpendLedger


@click.group("ledger")
def ledger_group() -> None:
    """The spend ledger this database writes to: its identity and position as the database
    remembers them, and an operator's acknowledgement of a ledger missing, replaced, truncated
    or behind the database (which holds new creates until then)."""


def _book(app: App) -> SpendLedger:
    from iipub.money import restore

    book = restore.ledger_of(app.settings, app.engine())
    if book is None:
        raise UsageError("the spend ledger is off ([ledger] enabled = false)")
    return book


@ledger_group.command("show")
@json_option
@pass_app
def show_command(app: App, as_json: bool) -> None:
    """The ledger (and its mirror), the identity the database opened, and any problem."""
    from iipub.money import ledger_book

    book = _book(app)
    with app.engine().connect() as conn:
        known = ledger_book.books(conn)
    fold, _ = book.load_fold()
    opened = ledger_book.mine(known, book, fold if book.exists() else None)
    found = ledger_book.problem(app.engine(), book)
    doc = {"path": str(book.path), "mirror_path": str(book.mirror) if book.mirror else None,
           "installation": book.installation, "ledger_id": opened.ledger_id if opened else None,
           "opened_at_path": opened.path if opened else None, "problem": found.kind if found else None,
           "detail": found.line() if found else None,
           "ledgers": [{"ledger_id": b.ledger_id, "host": b.host, "path": b.path, "this_one": b == opened}
                       for b in known]}
    if as_json:
        emit_json(doc)
        return
    for key, value in doc.items():
        if key != "ledgers":
            click.echo(f"{key:<15} {value if value is not None else '-'}")
    click.echo(f"{'ledgers known':<15} {len(known)} (one per host, or one shared file)")
    for b in known:
        click.echo(f"  {'*' if b == opened else ' '} {b.ledger_id}  {b.host or '(host not recorded)'}  {b.path}")


@ledger_group.command("acknowledge")
@click.option("--accept", required=True, type=click.Choice(["missing", "replaced", "behind"]),
              help="The problem you accept (it must be the one found): the ledger missing, another file (or one "
                   "truncated before its first line), or fewer intent lines than the paid creates recorded.")
@reason_option
@by_option
@pass_app
def acknowledge_command(app: App, accept: str, reason: str, by: str) -> None:
    """Accept the ledger as it is and open a new identity in it (journaled in the gate's events):
    creates resume. Paid creates the old ledger no longer shows can be paid again by a database
    restored from before now; restore the ledger (or copy the mirror) first when you can."""
    from iipub.money import ledger_book
    from iipub.operate import remedies

    remedies.check_input(by, reason)
    click.echo(ledger_book.acknowledge(app.engine(), _book(app), accept, by, reason, f"operator:{by}"))
