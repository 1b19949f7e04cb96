"""`iipub db migrate|status`."""

from __future__ import annotations

import click

from .. import migrate
from .common import App, emit_json, json_option, pass_app, table


@click.group("db")
def db_group() -> None:
    """Database schema: apply and inspect migrations."""


@db_group.command("migrate")
@pass_app
def migrate_command(app: App) -> None:
    """Apply pending migrations from sql/ (idempotent; safe when two run at once)."""
    done = migrate.migrate(app.engine(check_schema=False))
    if not done:
        click.echo("schema up to date; nothing to apply")
    for m in done:
        click.echo(f"applied {m.version}_{m.name}")


@db_group.command("status")
@json_option
@pass_app
def status_command(app: App, as_json: bool) -> None:
    """List applied and pending migrations."""
    rows = migrate.status(app.engine(check_schema=False))
    if as_json:
        emit_json([{"version": r.version, "name": r.name, "applied_at": r.applied_at,
                    "checksum_ok": r.checksum_ok} for r in rows])
        return
    click.echo(table(
        [(r.version, r.name, "applied" if r.applied_at else "pending", r.applied_at or "",
          "" if r.checksum_ok else "CHANGED SINCE APPLIED") for r in rows],
        ["VERSION", "NAME", "STATUS", "APPLIED_AT", "NOTE"],
    ))
