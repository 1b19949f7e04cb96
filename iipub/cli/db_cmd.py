"""`iipub db migrate|status`."""

from __future__ import annotations

import click

from iipub.cli.common import App, emit_json, json_option, pass_app, table
from iipub.core.errors import SchemaNotReady
from iipub.store import installation, migrate


@click.group("db")
def db_group() -> None:
    """Database schema: apply and inspect migrations."""


@db_group.command("migrate")
@pass_app
def migrate_command(app: App) -> None:
    """Apply pending migrations from sql/ (idempotent; safe when two run at once). The one
    command that creates a missing SQLite file."""
    engine = app.engine(check_schema=False, may_create=True)
    done = migrate.migrate(engine)
    if not done:
        click.echo("schema up to date; nothing to apply")
    for m in done:
        click.echo(f"applied {m.version}_{m.name}")
    click.echo(f"installation {installation.read(engine)}")


@db_group.command("status")
@json_option
@pass_app
def status_command(app: App, as_json: bool) -> None:
    """List applied and pending migrations, and this database's installation id (the id every paid
    create's metadata carries; responses naming another are not this installation's). Read only:
    a SQLite file that does not exist is reported ("no database at PATH", exit 69), not created."""
    engine = app.engine(check_schema=False)
    rows = migrate.status(engine)
    if as_json:
        # A list, as before installation ids; `iipub status --json` carries installation_id.
        emit_json([{"version": r.version, "name": r.name, "applied_at": r.applied_at,
                    "checksum_ok": r.checksum_ok} for r in rows])
        return
    try:
        installation_id: str | None = installation.read(engine)
    except SchemaNotReady:
        installation_id = None
    click.echo(f"installation {installation_id or 'none (run `iipub db migrate`)'}")
    click.echo(table(
        [(r.version, r.name, "applied" if r.applied_at else "pending", r.applied_at or "",
          "" if r.checksum_ok else "CHANGED SINCE APPLIED") for r in rows],
        ["VERSION", "NAME", "STATUS", "APPLIED_AT", "NOTE"],
    ))
