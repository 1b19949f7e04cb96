"""`iipub report [--days N] [--html FILE]`: the history of the last days as one self-contained HTML
page with charts (`observe.history` reads it, `observe.report_page` makes the page)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from iipub.cli.common import App, pass_app
from iipub.core.errors import CannotWrite

MAX_DAYS = 366  # observe.history.MAX_DAYS (a test holds the two equal): a year and a leap day


@click.command("report")
@click.option("--days", type=click.IntRange(1, MAX_DAYS), default=30, show_default=True,
              help=f"UTC days to show, today included (1 to {MAX_DAYS}).")
@click.option("--html", "html_path", type=click.Path(path_type=Path), default=None,
              help="Write the page to this file (atomically: a temporary file beside it, then a rename); "
                   "default: stdout. Keep it outside the public site: it shows spend and quarantines.")
@pass_app
def report_command(app: App, days: int, html_path: Path | None) -> None:
    """One HTML page of what happened in the last days, from the database: spend per day against
    the ceilings, editions published and late, dwell p50/p95, quarantines by reason and age, idle
    and full runs, provider answers by kind. Each chart is inline SVG with its numbers in a table
    under it; no script, stylesheet, font or image is fetched; light and dark follow the reader's
    setting. Every query is bounded by the range on an indexed column.

    Exit 0 when written; 2 for a --days out of range; 73 when the file cannot be written.
    """
    from iipub.core.files import fsync_dir, replace_atomically
    from iipub.observe import history, report_page

    page = report_page.render(history.collect(app.engine(), app.settings, days)).encode("utf-8")
    if html_path is None:
        sys.stdout.buffer.write(page)
        sys.stdout.flush()
        return
    try:
        replace_atomically(html_path, page)
    except OSError as exc:
        raise CannotWrite(f"cannot write the report to {html_path}: {exc.strerror or exc}") from None
    with contextlib.suppress(OSError):  # the rename is done; this only makes it durable sooner
        fsync_dir(html_path.parent)
    click.echo(f"wrote {html_path} ({len(page):,} bytes, {days} days)")
