"""What every command shares: the lazily opened app context, reusable options, output."""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
import sys
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

import click

from iipub.core import logs
from iipub.core.timefmt import parse_date
from iipub.core.wording import printable
from iipub.model.jobs import Job, new_worker_id
from iipub.model.states import State
from iipub.observe.idle_check import same_file
from iipub.provider.factory import load_settings
from iipub.settings.config import Settings
from iipub.store import db
from iipub.store.handles import Engine
from iipub.store.job_store import Store

F = TypeVar("F", bound=Callable[..., Any])


# Commands that only read: run with another configuration than the database's, they warn.
READ_ONLY = frozenset({"status", "jobs list", "jobs show", "quarantine list", "quarantine show", "outbox list",
                       "orphans list", "orphans show", "budget show", "check", "export", "config show", "db status",
                       "ledger show", "webhook test-delivery",
                       "report"})
# Commands that never compare configurations: the schema itself, the deliberate adoption.
UNGUARDED = frozenset({"db migrate", "config accept", "init", "simulator", "demo"})


def _command_name() -> str:
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return ""
    return " ".join(ctx.command_path.split()[1:])


def acting_user() -> str:
    try:
        return os.environ.get("USER") or os.environ.get("LOGNAME") or getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for the uid (a container)
        return f"uid {os.getuid()}"


class App:
    """Settings, engine and store, opened only when a command needs them."""

    def __init__(self) -> None:
        self._engines: list[Engine] = []
        self.identity: Any = None  # config_identity.Check, once the first engine is opened

    @cached_property
    def settings(self) -> Settings:
        return load_settings()

    def engine(self, *, check_schema: bool = True, may_create: bool = False) -> Engine:
        """The database's engine. Connecting would create a missing SQLite file, empty: only a
        command that makes the database (`may_create`: `db migrate`) may; every other one, read
        only or not, says "no database at PATH" first."""
        pool = self.settings.reconcile.concurrency + 4
        if not may_create:
            db.require_existing(self.settings.database_url)
        engine = db.make_engine(self.settings.database_url, pool_size=pool)
        self._engines.append(engine)
        if not check_schema:
            db.reach(engine)
        if check_schema:
            db.ping(engine)
            self._require_current(engine)
            if self.identity is None:
                self._guard(engine)
        return engine

    def _require_current(self, engine: Engine) -> None:
        """A release newer than the database's schema stops before it reads or writes (once per engine)."""
        from iipub.core.errors import SchemaNotReady
        from iipub.store import migrate

        problem = migrate.behind(engine)
        if problem is not None:
            raise SchemaNotReady(problem)

    def _guard(self, engine: Engine) -> None:
        """The database knows its configuration: a writing command with another one is refused
        (ConfigMismatch), a reading one warns on stderr (`status` also in its check)."""
        command = _command_name()
        if not command or command in UNGUARDED or command.split()[0] in UNGUARDED:
            return
        from iipub.core.errors import SchemaNotReady
        from iipub.store import config_identity

        write = command not in READ_ONLY
        try:
            self.identity = config_identity.verify(engine, self.settings, command=command, by=acting_user(),
                                                   write=write, frozen=self.spent_budgets)
        except SchemaNotReady:
            if write:
                raise
            return
        if self.identity.freeze:
            click.echo(logs.note_line(
                f"warning: configuration changed during a change freeze (error budget spent for "
                f"{', '.join(self.identity.freeze)}); journaled as such (`iipub config show`)", level="warning"),
                err=True)
        problem = self.identity.mismatch()
        if problem is not None:
            click.echo(logs.note_line(f"warning: {problem}", level="warning"), err=True)

    def spent_budgets(self, conn: Any) -> list[str]:
        """The SLOs whose error budget is spent (a change freeze), read when a change is recorded."""
        from iipub.observe.queries import spent_budgets

        return spent_budgets(conn, self.settings)

    def store(self, role: str = "cli", lease_seconds: float | None = None) -> Store:
        lease = lease_seconds if lease_seconds is not None else self.settings.reconcile.lease_seconds
        return Store(self.engine(), new_worker_id(role), lease)

    def close(self) -> None:
        for e in self._engines:
            e.dispose()


pass_app = click.make_pass_decorator(App, ensure=True)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document to stdout.")(f)


def by_option(f: F) -> F:
    return click.option(
        "--by", default=lambda: os.environ.get("USER") or getpass.getuser(), show_default="$USER",
        help="Who is acting (journaled).",
    )(f)


def reason_option(f: F) -> F:
    return click.option("--reason", required=True, help="Why (journaled with the action).")(f)


def lang_option(f: F) -> F:
    return click.option("--lang", default=None, metavar="L",
                        help="Only this language's edition (default: every language of the slot).")(f)


def public_note_option(f: F) -> F:
    return click.option("--public-note", default=None, metavar="TEXT",
                        help="Shown on the site and sent to the CMS (the --reason stays internal).")(f)


def print_taken(taken: Taken, as_json: bool) -> None:
    """What `withdraw` or `correct` did, one line per language (or one JSON document)."""
    job = taken.job
    done = "withdrawn" if taken.verb == "withdraw" else "corrected"
    if as_json:
        emit_json({"id": job.id, "product": job.product, "edition_date": job.edition_date.isoformat(),
                   "action": taken.verb, "changed": [{"lang": c.lang, "revision": c.revision, "event_id": c.event_id,
                                                      "sha256": c.payload.get("sha256")} for c in taken.changes],
                   "unchanged": list(taken.unchanged), "ledger_error": taken.ledger_error})
    else:
        for c in taken.changes:
            click.echo(f"job {job.id}: {job.product} {job.edition_date} {c.lang} {done} (revision {c.revision}, event "
                       f"{c.event_id}); the next `iipub relay` tells every sink")
        for lang in taken.unchanged:
            already = "already withdrawn" if taken.verb == "withdraw" else "already as corrected"
            click.echo(f"job {job.id}: {job.product} {job.edition_date} {lang} {already}; nothing to do")
    if taken.ledger_error:
        stderr(f"warning: the spend ledger did not record it: {taken.ledger_error}")


if TYPE_CHECKING:
    from iipub.operate.correcting import Taken
    from iipub.operate.executor import Operator
    _DateParam = click.ParamType[dt.date]
else:  # click < 8.5: ParamType is not subscriptable at run time
    _DateParam = click.ParamType


class DateType(_DateParam):
    name = "YYYY-MM-DD"

    def convert(self, value: Any, param: Any, ctx: Any) -> dt.date:
        if isinstance(value, dt.date):
            return value
        try:
            return parse_date(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DATE = DateType()


class AnyCaseChoice(click.Choice):  # type: ignore[type-arg]  # click < 8.2 is not generic
    """A case-insensitive choice whose refusal lists the choices as they are written."""

    def __init__(self, choices: Sequence[str], noun: str = "value") -> None:
        super().__init__(list(choices), case_sensitive=False)
        self.noun = noun

    def get_invalid_choice_message(self, value: Any, ctx: click.Context | None) -> str:
        return f"unknown {self.noun} {value!r}; one of (any case) {', '.join(map(str, self.choices))}"

    def shell_complete(self, ctx: click.Context, param: click.Parameter,
                       incomplete: str) -> list[click.shell_completion.CompletionItem]:
        from click.shell_completion import CompletionItem

        return [CompletionItem(c) for c in map(str, self.choices) if c.lower().startswith(incomplete.lower())]


def emit_json(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, sort_keys=False, default=str))


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """Aligned columns; a cell is one line whatever it holds (`wording.printable`: operator and
    provider text never moves the cursor, colours the terminal or breaks a row)."""
    cells = [[str(h) for h in headers]] + [["" if v is None else printable(str(v)) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def setup_logging(level: str | None, fmt: str | None = None, *, force: bool = False) -> None:
    """Logging as asked on the command line, else as $IIPUB_LOG_LEVEL / $IIPUB_LOG_FORMAT say."""
    logs.configure(logs.resolve_level(level), logs.resolve_format(fmt), force=force)


def stderr(message: str) -> None:
    """A line for the operator on stderr, in the shape of every other stderr line (JSON, or the
    bare message in the console format)."""
    click.echo(logs.note_line(message), err=True)


def is_tty() -> bool:
    return sys.stderr.isatty()


def clip(text: str | None, width: int) -> str:
    """Untrusted or long text for one table cell: control characters and runs of white space
    become one space, and it is cut to `width` characters."""
    return printable(text, width)


def moved(before: State, job: Job) -> str:
    """What an operator command did to a job, in one line."""
    return f"job {job.id}: {before} -> {job.state} (version {job.version})"


# -- what the operator commands share --------------------------------------------


def job_operator(app: App) -> Operator:
    from iipub.operate.executor import Operator  # the remedies and their provider calls load only for these commands

    return Operator(app.settings, app.engine())


def act(app: App, job_id: str, action: Callable[[Operator], Job], *, needs_provider: bool = False) -> Job:
    """Run one job action and print the move it made."""
    settings = app.settings
    # A missing key is a configuration error raised before the job is even read.
    from iipub.operate.executor import Operator
    from iipub.provider import factory

    provider = factory.build(settings) if needs_provider else None
    try:
        op = Operator(settings, app.engine(), provider)
        before = op.get(job_id)
        after = action(op)
    finally:
        if provider is not None:
            provider.close()
    click.echo(moved(before.state, after))
    return after


pay_again_option = click.option(
    "--pay-again", is_flag=True,
    help="Buy again although the payment authority found the slot paid for or its output held (custody, the "
         "ledger, the legacy system, the live site): journaled with --reason and the evidence it overrides.")


# -- what the cron commands share ------------------------------------------------


def leave_wakeup(engine: Engine, settings: Settings, command: str, report: Any, started: int) -> None:
    """What the next cron run's wake-up check compares with (`iipub.observe.wakeup`). A run that did
    anything, or pings a URL each run, leaves "due": the next run is a full one. `started`: the
    run's start (`wakeup_store.run_started`), taken before the settings were read."""
    from iipub.observe import wakeup_store

    busy = wakeup_store.did_work(report) or settings.monitoring.ping_url is not None
    if command == "reconcile":
        wakeup_store.record(engine, command, settings, busy=busy, started_ns=started,
                            due_now=lambda: wakeup_store.reconcile_due(engine, settings),
                            future=wakeup_store.reconcile_future, idle_summary=wakeup_store.idle_report(report))
    else:
        wakeup_store.record(engine, command, settings, busy=busy, started_ns=started,
                            due_now=lambda: wakeup_store.relay_due(engine),
                            future=wakeup_store.relay_future, idle_summary=wakeup_store.idle_report(report))


def print_summary(summary: dict[str, Any]) -> None:
    """The run's one-line JSON summary on stdout, unless stdout is the very file stderr is (cron's
    `>>log 2>&1`): the stderr event (tick_done, relay_done) already holds it with time and level,
    and a log must say each run once."""
    if same_file(sys.stdout, sys.stderr):
        return
    click.echo(json.dumps(summary, sort_keys=True))
