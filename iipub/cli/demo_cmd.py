"""`iipub demo [--dir PATH] [--keep-going-seconds N]`."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import click
import structlog

from iipub.cli.common import table


@click.command("demo")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=Path("iipub-demo"),
              show_default=True, help="Where the SQLite file and the static site go (created if missing).")
@click.option("--keep-going-seconds", type=click.FloatRange(1, 3600), default=45, show_default=True,
              help="Give up if the editions are not all published and cleaned up after this long.")
@click.pass_context
def demo_command(ctx: click.Context, directory: Path, keep_going_seconds: float) -> None:
    """The whole pipeline on the embedded default: SQLite file + simulator + static site.

    Starts the provider simulator in-process on a free loopback port, schedules today's
    editions of the built-in products, and runs reconcile and relay ticks until every job is
    published and cleaned up (DELETED). Needs no API key, database or config file, and
    ignores IIPUB_* and OPENAI_* settings. Re-running in the same directory reports the
    editions already published.
    """
    from iipub.operate import demo  # the pipeline (and the provider SDK) only when the demo runs

    chosen = ctx.find_root().meta.get("iipub.logging", {})
    if not chosen.get("log_level") and not os.environ.get("IIPUB_LOG_LEVEL"):
        # Progress goes to stdout; per-transition log lines would drown it.
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    result = demo.run(directory, max_seconds=keep_going_seconds, echo=click.echo)

    click.echo("")
    click.echo(f"static site {result.site_root}")
    for page in result.index_pages():
        click.echo(f"  {page}")
    click.echo("")
    click.echo(table(
        [(r.product, r.edition_date, r.state, r.generation_attempts, r.poll_count, r.total_tokens,
          " ".join(r.files) or "-") for r in result.rows],
        ["PRODUCT", "DATE", "STATE", "GEN", "POLLS", "TOKENS", "FILES"],
    ))
    if result.ok:
        click.echo(f"\ndone: {len(result.rows)} editions published and cleaned up "
                   f"({result.ticks} ticks, {result.seconds:g}s)")
        return
    waiting = ", ".join(f"{r.product} {r.edition_date} {r.state}" for r in result.unfinished)
    raise click.ClickException(f"demo did not finish within {keep_going_seconds:g}s: {waiting}")
