"""`iipub pause [--everything]` and its undo, `iipub unpause`: the whole provider held."""

from __future__ import annotations

import click

from iipub.cli.common import App, by_option, clip, job_operator, pass_app, reason_option


@click.command("pause")
@click.option("--everything", is_flag=True,
              help="The immediate abort: every automated command (reconcile, relay, the webhook receiver) does "
                   "nothing but record its heartbeat, polls and custody included. `status --check` is CRITICAL "
                   "while responses finish unretrieved. Widens a creates-only pause.")
@reason_option
@by_option
@pass_app
def pause_command(app: App, everything: bool, reason: str, by: str) -> None:
    """Stop new paid creates in every reconcile process (journaled; `status` shows it and
    `--check` is WARN while paused). Polls, custody, cleanup and the relay go on, unless
    --everything. `iipub unpause` restores either."""
    g = job_operator(app).pause(by, reason, everything=everything)
    what = "everything" if g.paused_everything else "creates"
    click.echo(f"{what} paused by {clip(g.paused_by, 80)}: {clip(g.paused_reason, 300)}")


@click.command("unpause")
@click.option("--reason", default=None, help="Why (journaled with the action; optional).")
@by_option
@pass_app
def unpause_command(app: App, reason: str | None, by: str) -> None:
    """Let paid creates go out again (after `pause --everything`: every automated command too)."""
    job_operator(app).unpause(by, reason)
    click.echo("unpaused")
