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
from .webhook_cmd import orphans_group, webhook_group


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
                 *OPERATOR_COMMANDS, simulator_command, demo_command, check_command, webhook_group, orphans_group):
    cli.add_command(_command)


def _monitoring(argv: list[str] | None) -> bool:
    args = sys.argv[1:] if argv is None else argv
    return "status" in args and "--check" in args


def main(argv: list[str] | None = None) -> None:
    try:
        rv = cli.main(args=argv, prog_name="iipub", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("iipub: aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        # One line, like every other expected error; `--help` has the details.
        cmd = exc.ctx.command_path if exc.ctx else "iipub"
        message = " ".join(exc.format_message().split())
        if _monitoring(argv):  # monitoring-plugin rules: a usage error is UNKNOWN, on stdout
            click.echo(f"IIPUB UNKNOWN - usage: {message}")
            sys.exit(3)
        click.echo(f"iipub: error: {message} (see `{cmd} --help`)", err=True)
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
    except sa.exc.DataError as exc:  # too long, out of range: refused whole, nothing written
        click.echo(f"iipub: error: the database refused a value: {describe_error(exc)}", err=True)
        sys.exit(65)  # EX_DATAERR
    except sa.exc.DatabaseError as exc:  # e.g. a SQLite file that is not a database
        click.echo(f"iipub: error: database unusable: {describe_error(exc)}", err=True)
        sys.exit(69)
    except KeyboardInterrupt:
        click.echo("iipub: interrupted", err=True)
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)
