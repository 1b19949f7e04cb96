"""`iipub schedule`: the slots of a date created."""

from __future__ import annotations

import datetime as dt

import click

from iipub.cli.common import DATE, App, pass_app
from iipub.machine import scheduling
from iipub.store import clock


@click.command("schedule")
@click.option("--date", "day", type=DATE, help="Edition date (default: today, UTC by the database clock).")
@click.option("--product", help="Only this product (default: every configured product).")
@pass_app
def schedule_command(app: App, day: dt.date | None, product: str | None) -> None:
    """Create the publication slots (state NO_JOB) for a date. Idempotent. The date must be at
    most 366 days in the past (what a backfill reaches) and at most 366 days ahead, by the
    database clock; otherwise nothing is written (exit 2)."""
    store = app.store("schedule")
    with store.engine.connect() as conn:
        today = clock.read_now(conn).date()
    if day is None:
        day = today
    scheduling.check_schedule_date(day, today)
    products = [app.settings.product(product)] if product is not None else list(app.settings.products.values())
    report = scheduling.schedule_day(store, products, day)
    for name, created in report.items():
        click.echo(f"{name} {day}: {'created' if created else 'already present'}")
    click.echo(f"created {sum(report.values())}, already present {len(report) - sum(report.values())}")
