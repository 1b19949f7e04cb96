"""`iipub check`: verify the invariants of the configured database (see `iipub.observe.invariants`)."""

from __future__ import annotations

from pathlib import Path

import click

from iipub.cli.common import App, emit_json, pass_app, table
from iipub.core.errors import IipubError
from iipub.model.jobs import STRANDED_AFTER_SECONDS


class CheckFailed(IipubError):
    """Invariant violations were found."""

    exit_code = 1


@click.command("check")
@click.option("--simulator", "simulator_url", metavar="URL",
              help="Also compare paid creates with this `iipub simulator`'s own counts (its origin or /v1 URL).")
@click.option("--settled", is_flag=True,
              help="Also require a settled system (after a drill or a chaos run, with nothing running): every "
                   "slot published or parked, every outbox event published, no lease held past its expiry.")
@click.option("--static-root", type=click.Path(file_okay=False, path_type=Path),
              help="Static site to verify (default: [sinks.static] root of the configuration).")
@click.option("--stranded-after", default=STRANDED_AFTER_SECONDS, show_default=True,
              type=click.FloatRange(min=0), help="Seconds a job may stay live before it counts as stranded.")
@click.option("--ledger", "with_ledger", is_flag=True,
              help="Also compare the database with the spend ledger ([ledger] path): slots it paid for, or "
                   "output it kept or published, that the database has forgotten (a restore); torn lines; a "
                   "missing or unreadable ledger once any create was recorded.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document to stdout.")
@pass_app
def check_command(app: App, simulator_url: str | None, settled: bool, static_root: Path | None,
                  stranded_after: float, with_ledger: bool, as_json: bool) -> None:
    """Check the invariants iipub promises against the database: journal versions and
    transitions, one publication per slot and language (or a parked job with its reason),
    paid creates explained by the journal, no output lost without a journaled expiry, every
    published event delivered to every sink, no stranded job.

    Reads only. Exit 0 when every invariant holds, 1 when any is violated.
    """
    import httpx

    from iipub.money import restore
    from iipub.observe import invariants

    stats = None
    notes: list[str] = []
    if simulator_url:
        try:
            stats = invariants.sim_stats_from(simulator_url)
        except (httpx.HTTPError, ValueError) as exc:
            raise click.ClickException(f"cannot read simulator stats from {simulator_url}: {exc}") from None
    engine = app.engine()
    found = invariants.check(engine, settings=app.settings, sim_stats=stats, static_root=static_root,
                             settled=settled, stranded_after_seconds=stranded_after)
    if with_ledger:
        book = restore.ledger_of(app.settings, engine)
        if book is None:
            raise click.ClickException("the spend ledger is off ([ledger] enabled = false)")
        fold, missing = book.load_fold()
        found += invariants.check_ledger(engine, fold.slots, fold.bad, missing=missing)
        from iipub.money import ledger_book

        lost = ledger_book.problem(engine, book)
        if lost is not None:
            found.append(invariants.Violation("ledger_lost", None, lost.line()))
        if fold.foreign or fold.foreign_legacy:
            notes.append(f"note: the spend ledger {book.path} also holds {fold.foreign} line(s) of other "
                         f"installations and {fold.foreign_legacy} old line(s) without an installation id that "
                         "this database does not know; they are not this installation's evidence")
    if as_json:
        emit_json({"ok": not found, "counts": invariants.summarize(found), "violations": [v.to_dict() for v in found]})
    elif found:
        click.echo(table([(v.kind, v.job_id or "-", v.detail) for v in found], ["KIND", "JOB", "DETAIL"]))
    else:
        click.echo("all invariants hold")
    for note in notes:
        click.echo(note, err=as_json)
    if found:
        raise CheckFailed(f"{len(found)} invariant violation(s): "
                          + ", ".join(f"{k}={n}" for k, n in invariants.summarize(found).items()))

