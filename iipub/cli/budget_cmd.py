"""`iipub budget show|override`: the daily spend ceilings and an operator's audited raise of one."""

from __future__ import annotations

import datetime as dt

import click

from iipub.cli.common import App, by_option, clip, emit_json, json_option, pass_app, reason_option
from iipub.core.errors import UsageError
from iipub.core.timefmt import iso_z, parse_utc_time
from iipub.money import budgets, payments
from iipub.store import clock


@click.group("budget")
def budget_group() -> None:
    """Daily token ceilings ([budgets] and [[products]] max_tokens_per_day), counted by payment
    time: what is counted today, and raising a reached ceiling with an audited reason."""


@budget_group.command("show")
@json_option
@pass_app
def show_command(app: App, as_json: bool) -> None:
    """Each configured ceiling with the tokens counted today (reported usage, or the product's
    estimated_tokens while a paid create's usage is unknown) and the overrides in force."""
    with app.engine().connect() as conn:
        now = clock.read_now(conn)
        found, overrides = payments.ceilings_now(conn, app.settings.budgets, app.settings.products, now)
    if as_json:
        emit_json({"generated_at": iso_z(now),
                   "ceilings": [{"scope": "global" if c.scope == budgets.GLOBAL else c.scope, "name": c.name,
                                 "max_tokens_per_day": c.limit, "override_tokens": c.extra, "allowed": c.allowed,
                                 "counted_today": c.spent, "reached": c.reached} for c in found],
                   "overrides": [o.to_dict() for o in overrides]})
        return
    if not found:
        click.echo("no daily token ceiling configured ([budgets] / [[products]] max_tokens_per_day)")
    for c in found:
        click.echo(f"{'REACHED' if c.reached else 'ok'}: {c.describe()}")
    for o in overrides:
        click.echo(f"override: {o.to_dict()['scope']} +{o.extra_tokens:,} tokens until {iso_z(o.until, 'seconds')} "
                   f"by {clip(o.granted_by, 80)}: {clip(o.reason, 300)}")


def _until(ctx: click.Context, param: click.Parameter, value: str | None) -> dt.datetime | None:
    if value is None:
        return None
    try:
        return parse_utc_time(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


@budget_group.command("override")
@click.option("--tokens", required=True, type=int, help="Tokens to add to the ceiling while the override holds.")
@click.option("--product", default=None, metavar="NAME",
              help="Raise this product's max_tokens_per_day (default: the global [budgets] one).")
@click.option("--until", default=None, callback=_until, metavar="YYYY-MM-DDTHH:MM[Z]",
              help="When the override ends, UTC (default: the next UTC midnight, the end of today's count).")
@reason_option
@by_option
@pass_app
def override_command(app: App, tokens: int, product: str | None, until: dt.datetime | None, reason: str,
                     by: str) -> None:
    """Raise a reached daily spend ceiling so new creates go out again. Journaled with who and
    why (`gate_events` kind budget_override); `status` shows it while it holds."""
    from iipub.operate.executor import Operator

    if tokens < 1:
        raise UsageError(f"--tokens must be a positive number of tokens (got {tokens})")
    granted = Operator(app.settings, app.engine()).budget_override(tokens, reason, by, product=product, until=until)
    scope = "global ceiling" if granted.scope == budgets.GLOBAL else f"product {granted.scope}'s ceiling"
    click.echo(f"{scope} raised by {granted.extra_tokens:,} tokens until {iso_z(granted.until, 'seconds')} "
               f"(by {clip(granted.granted_by, 80)}: {clip(granted.reason, 300)})")
