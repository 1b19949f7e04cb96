"""`iipub backfill`: the missing slots of past dates created at backfill priority."""

from __future__ import annotations

import datetime as dt

import click

from iipub.cli.common import App, pass_app, stderr
from iipub.core.errors import UsageError
from iipub.core.timefmt import parse_date
from iipub.machine import scheduling
from iipub.store import clock
from iipub.store.job_store import Store

# Longer ranges print one progress line per date.
PROGRESS_AFTER_DAYS = 30


def _date(text: str, option: str) -> dt.date:
    # Parsed here rather than by a click type so a bad date is one `iipub: error:` line.
    try:
        return parse_date(text)
    except ValueError as exc:
        raise UsageError(f"{option} {exc}") from None


@click.command("backfill")
@click.option("--product", required=True, help="The product to backfill (as configured).")
@click.option("--from", "from_text", required=True, metavar="YYYY-MM-DD", help="First edition date, inclusive.")
@click.option("--to", "to_text", required=True, metavar="YYYY-MM-DD",
              help="Last edition date, inclusive; at most today (database clock).")
@click.option("--dry-run", is_flag=True, help="Only report which slots would be created; write nothing.")
@pass_app
def backfill_command(app: App, product: str, from_text: str, to_text: str, dry_run: bool) -> None:
    """Create the missing slots for past dates at backfill priority (today's slots always
    go first). Idempotent: dates already present are left alone. Reports created vs.
    already present; ranges over 30 days print per-date progress to stderr. At most 366
    days per run: every slot created becomes a paid generation.
    """
    from_date, to_date = _date(from_text, "--from"), _date(to_text, "--to")
    configured = app.settings.product(product)  # an unknown product fails before the database is opened
    engine = app.engine()
    with engine.connect() as conn:
        today = clock.read_now(conn).date()
    verbose = (to_date - from_date).days + 1 > PROGRESS_AFTER_DAYS
    verb = "would create" if dry_run else "created"

    def progress(day: dt.date, created: bool) -> None:
        if verbose:
            stderr(f"{product} {day}: {verb if created else 'already present'}")

    report = scheduling.backfill(Store(engine, "operator:backfill"), configured, from_date, to_date, today,
                                 dry_run=dry_run, progress=progress)
    if not verbose:
        for day in sorted(report.created + report.present):
            click.echo(f"{product} {day}: {verb if day in report.created else 'already present'}")
    click.echo(f"{'dry run: would create' if dry_run else 'created'} {len(report.created)}, "
               f"already present {len(report.present)}")
