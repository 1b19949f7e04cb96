"""The `iipub` command line. Commands parse, call and format; this module alone turns
errors into one stderr line and an exit code."""

from __future__ import annotations

import sys

import click
import sqlalchemy as sa

from .. import __version__
from ..db import describe_error
from ..errors import IipubError
from .check_cmd import check_command
from .common import App, setup_logging
from .db_cmd import db_group
from .demo_cmd import demo_command
from .jobs_cmd import jobs_group, schedule_command
from .operator_cmd import COMMANDS as OPERATOR_COMMANDS
from .run_cmd import reconcile_command, relay_command
from .simulator_cmd import simulator_command
from .status_cmd import status_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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


for _command in (db_group, schedule_command, jobs_group, reconcile_command, relay_command, status_command,
                 *OPERATOR_COMMANDS, simulator_command, demo_command, check_command):
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> None:
    try:
        rv = cli.main(args=argv, prog_name="iipub", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("iipub: aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        # One line, like every other expected error; `--help` has the details.
        cmd = exc.ctx.command_path if exc.ctx else "iipub"
        click.echo(f"iipub: error: {exc.format_message()} (see `{cmd} --help`)", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except IipubError as exc:
        # One line per problem (a configuration can have several), each a complete error line.
        for line in str(exc).splitlines() or [type(exc).__doc__ or "error"]:
            click.echo(f"iipub: error: {line}", err=True)
        sys.exit(exc.exit_code)
    except sa.exc.OperationalError as exc:
        click.echo(f"iipub: error: database unavailable: {describe_error(exc)}", err=True)
        sys.exit(69)
    except KeyboardInterrupt:
        click.echo("iipub: interrupted", err=True)
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)
