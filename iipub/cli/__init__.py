"""The `iipub` command line. Commands parse, call and format; this module alone turns
errors into one stderr line and an exit code."""

from __future__ import annotations

import importlib
import sys
from typing import NoReturn

import click
import sqlalchemy as sa

from .. import __version__
from ..db import describe_error
from ..errors import IipubError
from ..logs import error_line
from .common import App, setup_logging

# Where each command lives: its module is imported only when that command runs (or `--help`
# lists it), so a cron run of `iipub reconcile` loads the reconcile machinery and nothing else.
COMMANDS: dict[str, tuple[str, str]] = {
    "db": ("db_cmd", "db_group"),
    "schedule": ("jobs_cmd", "schedule_command"),
    "jobs": ("jobs_cmd", "jobs_group"),
    "reconcile": ("run_cmd", "reconcile_command"),
    "relay": ("run_cmd", "relay_command"),
    "status": ("status_cmd", "status_command"),
    "quarantine": ("operator_cmd", "quarantine_group"),
    **{name: ("operator_cmd", f"{name}_command") for name in (
        "republish", "pause", "unpause", "suspend", "resume", "cancel", "kill", "revalidate", "regenerate",
        "backfill")},
    "simulator": ("simulator_cmd", "simulator_command"),
    "demo": ("demo_cmd", "demo_command"),
    "check": ("check_cmd", "check_command"),
    "webhook": ("webhook_cmd", "webhook_group"),
    "orphans": ("webhook_cmd", "orphans_group"),
    "outbox": ("outbox_cmd", "outbox_group"),
}


class _LazyGroup(click.Group):
    """The top-level group, each subcommand loaded from `COMMANDS` when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = COMMANDS.get(cmd_name)
        if where is None:
            return None
        command: click.Command = getattr(importlib.import_module(f"{__name__}.{where[0]}"), where[1])
        return command

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                             list[str]]:
        if args and args[0] not in COMMANDS and not args[0].startswith("-") and not ctx.resilient_parsing:
            # click suggests close names from `self.commands`, which a lazy group leaves empty
            raise click.exceptions.NoSuchCommand(args[0], possibilities=list(COMMANDS), ctx=ctx)
        return super().resolve_command(ctx, args)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="iipub")
@click.option("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]),
              help="Minimum level of the JSON log lines written to stderr.")
@click.pass_context
def cli(ctx: click.Context, log_level: str) -> None:
    """iipub: run paid background AI generation jobs from cron, safely.

    Configuration: IIPUB_DATABASE_URL (default: SQLite file iipub.sqlite3 in the working
    directory), IIPUB_CONFIG (TOML file), OPENAI_API_KEY, OPENAI_BASE_URL.
    """
    setup_logging(log_level)
    app = ctx.ensure_object(App)
    ctx.call_on_close(app.close)


def _monitoring(argv: list[str] | None) -> bool:
    args = sys.argv[1:] if argv is None else argv
    return "status" in args and "--check" in args


def main(argv: list[str] | None = None) -> None:
    try:
        rv = cli.main(args=argv, prog_name="iipub", standalone_mode=False)
    except click.exceptions.Abort:
        _fail(130, "aborted")
    except click.UsageError as exc:
        # One line, like every other expected error; `--help` has the details.
        cmd = exc.ctx.command_path if exc.ctx else "iipub"
        message = " ".join(exc.format_message().split())
        if _monitoring(argv):  # monitoring-plugin rules: a usage error is UNKNOWN, on stdout
            click.echo(f"IIPUB UNKNOWN - usage: {message}")
            sys.exit(3)
        _fail(exc.exit_code, f"{message} (see `{cmd} --help`)", kind="usage")
    except click.ClickException as exc:
        _fail(exc.exit_code, " ".join(exc.format_message().split()))
    except IipubError as exc:
        # One line per problem (a configuration can have several), each a complete error line.
        _fail(exc.exit_code, *(str(exc).splitlines() or [type(exc).__doc__ or "error"]), kind=type(exc).__name__)
    except sa.exc.OperationalError as exc:
        _fail(69, f"database unavailable: {describe_error(exc)}", kind="database")
    except sa.exc.DataError as exc:  # too long, out of range: refused whole, nothing written
        _fail(65, f"the database refused a value: {describe_error(exc)}", kind="database")  # EX_DATAERR
    except sa.exc.DatabaseError as exc:  # e.g. a SQLite file that is not a database
        _fail(69, f"database unusable: {describe_error(exc)}", kind="database")
    except KeyboardInterrupt:
        _fail(130, "interrupted")
    sys.exit(rv if isinstance(rv, int) else 0)


def _fail(code: int, *lines: str, kind: str | None = None) -> NoReturn:
    """Every error the command line reports itself: one JSON object per line on stderr (like every
    log line), then the exit code."""
    for line in lines:
        click.echo(error_line(line, exit_code=code, kind=kind), err=True)
    sys.exit(code)
