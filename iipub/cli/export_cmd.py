"""The rollback: `iipub export --in-flight`, the hand-over file `iipub adopt` reads."""

from __future__ import annotations

import click

from iipub.cli.common import App, pass_app, stderr


@click.command("export")
@click.option("--in-flight", "in_flight", is_flag=True, required=True,
              help="Every job between CREATE_IN_FLIGHT and custody (suspended or quarantined ones whose response "
                   "may still finish included), with response id, attempts and state.")
@click.option("--format", "fmt", type=click.Choice(["csv", "json"]), default="csv", show_default=True,
              help="CSV with a header, or JSON lines: both are what `iipub adopt` reads.")
@pass_app
def export_command(app: App, in_flight: bool, fmt: str) -> None:
    """The rollback hand-back: print the in-flight jobs to stdout in the format `iipub adopt`
    reads, so a legacy system (or another iipub) picks up what this one started. Run `iipub
    pause --everything` first so nothing moves while the file is taken. A create still in flight
    has no response id yet: its row has an empty response_id (adopt refuses it; check the
    provider's dashboard for it)."""
    from iipub.operate import adoption, handover

    rows = adoption.in_flight(app.engine())
    click.echo(handover.render(rows, fmt), nl=False)
    stderr(f"iipub: {len(rows)} in-flight jobs exported")
