"""`iipub config show` / `iipub config accept`: the configuration a database runs with."""

from __future__ import annotations

import click

from iipub.cli.common import App, by_option, emit_json, json_option, pass_app, reason_option, table
from iipub.core.timefmt import iso_z


@click.group("config")
def config_group() -> None:
    """The configuration this database runs with (its identity: file, ledger, static root)."""


@config_group.command("show")
@json_option
@pass_app
def show_command(app: App, as_json: bool) -> None:
    """The identity in force, this command's, and the journal of adoptions and edits (newest first)."""
    from iipub.store import config_identity

    engine = app.engine()
    with engine.connect() as conn:
        rows = config_identity.history(conn)
    mine = config_identity.of(app.settings)
    recorded = config_identity.resolved(rows[0].identity) if rows else None
    verdict = config_identity.compare(recorded, mine, config_identity.left_at(recorded))
    if as_json:
        emit_json({
            "in_force": vars(rows[0].identity) if rows else None,
            "this_command": vars(mine),
            "verdict": verdict.value,
            "history": [{**vars(r.identity), "kind": r.kind, "at": iso_z(r.at), "command": r.command, "by": r.by,
                         "host": r.host, "reason": r.reason, "during_freeze": r.during_freeze} for r in rows],
        })
        return
    click.echo(f"in force:     {rows[0].identity.describe() if rows else 'none recorded yet'}")
    click.echo(f"this command: {mine.describe()} ({verdict.value})")
    click.echo(table([(iso_z(r.at, 'seconds'), r.kind, r.identity.config_path or "(defaults)",
                       (r.identity.config_sha256 or "-")[:12], r.command, r.by, "FREEZE" if r.during_freeze else "",
                       r.reason or "") for r in rows],
                     ["AT", "KIND", "CONFIG", "SHA256", "COMMAND", "BY", "", "REASON"]))


@config_group.command("accept")
@reason_option
@by_option
@pass_app
def accept_command(app: App, reason: str, by: str) -> None:
    """Adopt this command's configuration (IIPUB_CONFIG with its ledger and static root) as the
    database's, on purpose: journaled with who and why. Writing commands with the previous
    identity are refused from then on."""
    from iipub.store import config_identity

    check = config_identity.accept(app.engine(), app.settings, by=by, reason=reason, frozen=app.spent_budgets)
    before = check.recorded.describe() if check.recorded else "none recorded"
    click.echo(f"accepted: {check.current.describe()} (was: {before})")
    if check.freeze:
        click.echo(f"note: accepted during a change freeze (error budget spent for {', '.join(check.freeze)}); "
                   "journaled as such")
