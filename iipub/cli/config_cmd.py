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
        members = config_identity.members(conn)
    mine = config_identity.of(app.settings)
    verdict, _ = config_identity.judge(members, mine)
    if as_json:
        emit_json({
            "in_force": vars(members[-1]) if members else None,
            "members": [vars(m) for m in members],
            "this_command": vars(mine),
            "verdict": verdict.value,
            "history": [{**vars(r.identity), "kind": r.kind, "at": iso_z(r.at), "command": r.command, "by": r.by,
                         "host": r.host, "reason": r.reason, "during_freeze": r.during_freeze} for r in rows],
        })
        return
    click.echo(f"in force:     {members[-1].describe() if members else 'none recorded yet'}")
    for other in members[:-1]:
        click.echo(f"              {other.describe()}")
    click.echo(f"this command: {mine.describe()} ({verdict.value})")
    click.echo(table([(iso_z(r.at, 'seconds'), r.kind, r.identity.config_path or "(defaults)",
                       (r.identity.config_sha256 or "-")[:12], r.command, r.by, "FREEZE" if r.during_freeze else "",
                       r.reason or "") for r in rows],
                     ["AT", "KIND", "CONFIG", "SHA256", "COMMAND", "BY", "", "REASON"]))


@config_group.command("accept")
@click.option("--join", is_flag=True, help="Add this configuration beside the ones in force (another host of the "
                                           "installation, docs/scale-out.md) instead of replacing them.")
@click.option("--leave", is_flag=True, help="Remove this configuration from the ones in force (a host taken out).")
@reason_option
@by_option
@pass_app
def accept_command(app: App, join: bool, leave: bool, reason: str, by: str) -> None:
    """Adopt this command's configuration (IIPUB_CONFIG with its ledger and static root) as the
    database's, on purpose: journaled with who and why. Writing commands with the previous
    identity are refused from then on; with --join the previous ones stay in force beside it
    (another host), with --leave it is removed from them."""
    from iipub.core.errors import UsageError
    from iipub.store import config_identity

    if join and leave:
        raise UsageError("config accept: give --join or --leave, not both")
    kind = "joined" if join else "left" if leave else "accepted"
    check = config_identity.accept(app.engine(), app.settings, by=by, reason=reason, frozen=app.spent_budgets,
                                   kind=kind)
    before = check.recorded.describe() if check.recorded else "none recorded"
    verb = {"joined": "joined", "left": "removed", "accepted": "accepted"}[kind]
    click.echo(f"{verb}: {check.current.describe()} (" + ("beside" if join else "was") + f": {before})")
    if check.freeze:
        click.echo(f"note: accepted during a change freeze (error budget spent for {', '.join(check.freeze)}); "
                   "journaled as such")
