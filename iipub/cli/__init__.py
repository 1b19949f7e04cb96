"""The `iipub` command line. Commands parse, call and format; this module alone turns
errors into one stderr line and an exit code."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from iipub import __version__
from iipub.cli.common import App, setup_logging
from iipub.core import logs
from iipub.core.errors import DatabaseRefused, DatabaseUnavailable, IipubError, Interrupted, UsageError
from iipub.core.logs import error_line
from iipub.settings import envfile
from iipub.store.db import describe_error
from iipub.store.handles import DatabaseError, DataError, OperationalError

# Where each command lives: its module is imported only when that command runs (or `--help`
# lists it), so a cron run of `iipub reconcile` loads the reconcile machinery and nothing else.
# Every command (or group) has a module named after it, `<name>_cmd`; an undo sits beside its
# command (`unpause` in `pause_cmd`, `resume` in `suspend_cmd`).
COMMANDS: dict[str, tuple[str, str]] = {
    **{name: (f"{name}_cmd", f"{name}_group") for name in (
        "db", "jobs", "quarantine", "webhook", "orphans", "outbox", "budget", "config", "ledger")},
    **{name: (f"{name}_cmd", f"{name}_command") for name in (
        "schedule", "reconcile", "relay", "status", "republish", "pause", "suspend", "cancel", "kill", "revalidate",
        "regenerate", "backfill", "simulator", "demo", "check", "doctor", "adopt", "export", "init", "report",
        "withdraw", "correct")},
    "unpause": ("pause_cmd", "unpause_command"),
    "resume": ("suspend_cmd", "resume_command"),
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
        _add_log_options(command)
        return command

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                             list[str]]:
        if args and args[0] not in COMMANDS and not args[0].startswith("-") and not ctx.resilient_parsing:
            # click suggests close names from `self.commands`, which a lazy group leaves empty
            raise click.exceptions.NoSuchCommand(args[0], possibilities=list(COMMANDS), ctx=ctx)
        return super().resolve_command(ctx, args)


def _relog(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """A subcommand's own --log-level / --log-format: logging again with it."""
    if value is None or ctx.resilient_parsing:
        return
    chosen = ctx.find_root().meta.setdefault("iipub.logging", {})
    chosen[param.name] = value
    setup_logging(chosen.get("log_level"), chosen.get("log_format"), force=True)


LOG_LEVEL_HELP = "Minimum level of the log lines on stderr (default: $IIPUB_LOG_LEVEL, else info)."
LOG_FORMAT_HELP = ("Log lines on stderr as JSON (one object per line) or for a person (default: "
                   "$IIPUB_LOG_FORMAT, else console at a terminal and json otherwise).")


def _log_options() -> list[click.Option]:
    return [
        click.Option(["--log-level"], type=click.Choice(logs.LEVELS, case_sensitive=False), default=None,
                     expose_value=False, callback=_relog, help=LOG_LEVEL_HELP),
        click.Option(["--log-format"], type=click.Choice(logs.FORMATS, case_sensitive=False), default=None,
                     expose_value=False, callback=_relog, help=LOG_FORMAT_HELP),
    ]


def _add_log_options(command: click.Command) -> None:
    """--log-level and --log-format after the subcommand too (`iipub reconcile --log-level debug`),
    at every level of the tree."""
    if not any(p.name == "log_level" for p in command.params):
        command.params.extend(_log_options())
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _add_log_options(sub)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="iipub")
@click.option("--env-file", type=click.Path(dir_okay=False, path_type=Path), envvar="IIPUB_ENV_FILE",
              help="Read KEY=value (or export KEY=value) lines into the environment first, without "
                   "overriding what is already set (default: $IIPUB_ENV_FILE).")
@click.option("--log-level", type=click.Choice(logs.LEVELS, case_sensitive=False), default=None,
              help=LOG_LEVEL_HELP)
@click.option("--log-format", type=click.Choice(logs.FORMATS, case_sensitive=False), default=None,
              help=LOG_FORMAT_HELP)
@click.pass_context
def cli(ctx: click.Context, env_file: Path | None, log_level: str | None, log_format: str | None) -> None:
    """iipub: run paid background AI generation jobs from cron, safely.

    Configuration: IIPUB_DATABASE_URL (default: SQLite file iipub.sqlite3 in the working
    directory), IIPUB_CONFIG (TOML file), OPENAI_API_KEY, OPENAI_BASE_URL; IIPUB_ENV_FILE
    (a file of KEY=value lines holding them), IIPUB_LOG_LEVEL, IIPUB_LOG_FORMAT.
    """
    if env_file is not None:
        source = ctx.get_parameter_source("env_file")
        envfile.load(env_file, named_by="IIPUB_ENV_FILE" if source == click.core.ParameterSource.ENVIRONMENT
                     else "--env-file")
    ctx.meta["iipub.logging"] = {"log_level": log_level, "log_format": log_format}
    setup_logging(log_level, log_format)
    app = ctx.ensure_object(App)
    ctx.call_on_close(app.close)


def _monitoring(argv: list[str] | None) -> bool:
    args = sys.argv[1:] if argv is None else argv
    return "status" in args and "--check" in args


def main(argv: list[str] | None = None) -> None:
    if _monitoring(argv):
        _monitored(argv)
    try:
        rv = cli.main(args=argv, prog_name="iipub", standalone_mode=False)
    except click.exceptions.Abort:
        _fail(Interrupted("aborted"))
    except click.exceptions.NoArgsIsHelpError as exc:  # bare `iipub`, `iipub jobs`: the help, as click shows it
        exc.show()
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        if logs.human():  # at a terminal: click's own `Usage: … Error: …`
            exc.show()
            sys.exit(exc.exit_code)
        # One line, like every other expected error; `--help` has the details.
        cmd = exc.ctx.command_path if exc.ctx else "iipub"
        _fail(UsageError(f"{' '.join(exc.format_message().split())} (see `{cmd} --help`)"), code=exc.exit_code)
    except click.ClickException as exc:
        _fail(IipubError(" ".join(exc.format_message().split())), code=exc.exit_code)
    except IipubError as exc:
        _fail(exc)
    except OperationalError as exc:
        _fail(DatabaseUnavailable(f"database unavailable: {describe_error(exc)}"))
    except DataError as exc:  # too long, out of range: refused whole, nothing written
        _fail(DatabaseRefused(f"the database refused a value: {describe_error(exc)}"))
    except DatabaseError as exc:  # e.g. a SQLite file that is not a database
        _fail(DatabaseUnavailable(f"database unusable: {describe_error(exc)}"))
    except KeyboardInterrupt:
        _fail(Interrupted())
    sys.exit(rv if isinstance(rv, int) else 0)


def _monitored(argv: list[str] | None) -> NoReturn:
    """`status --check` under the monitoring-plugin rules: whatever stops the check before it can
    run (the env file missing or malformed, a bad log setting or configuration, the database
    unreachable or unmigrated, a usage error, a bug) is one `IIPUB UNKNOWN - …` line on stdout
    (the JSON document with --json) and exit 3, never a silent exit 78 a monitor misreads."""
    from iipub.cli.status_cmd import unknown
    from iipub.core.severity import Severity

    as_json = "--json" in (sys.argv[1:] if argv is None else argv)
    try:
        rv = cli.main(args=argv, prog_name="iipub", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        unknown(UsageError(f"usage: {exc.format_message()}"), as_json)
        sys.exit(Severity.UNKNOWN)
    except click.ClickException as exc:
        unknown(IipubError(exc.format_message()), as_json)
        sys.exit(Severity.UNKNOWN)
    except (Exception, click.exceptions.Abort, KeyboardInterrupt) as exc:  # UNKNOWN, whatever it was
        unknown(exc if isinstance(exc, Exception) else Interrupted(), as_json)
        sys.exit(Severity.UNKNOWN)
    sys.exit(rv if isinstance(rv, int) else 0)


def _fail(exc: IipubError, code: int | None = None, **fields: Any) -> NoReturn:
    """Every error the command line reports itself: one line per problem on stderr (a
    configuration can have several), as JSON like every log line (`kind` is the error's type
    in `iipub.core.errors`) or `Error: …` in the console format, then the exit code."""
    code = exc.exit_code if code is None else code
    for line in str(exc).splitlines() or [type(exc).__doc__ or "error"]:
        click.echo(error_line(line, exit_code=code, kind=type(exc).__name__, **fields), err=True)
    sys.exit(code)
