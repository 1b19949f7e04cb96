"""Operator commands: `quarantine list|release`, `suspend`, `resume`, `cancel`, `kill`, `backfill`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from iipub.cli.common import (
    App,
    by_option,
    clip,
    emit_json,
    json_option,
    moved,
    pass_app,
    reason_option,
    stderr,
    table,
)
from iipub.core.errors import UsageError
from iipub.core.timefmt import duration, parse_date
from iipub.machine import scheduling
from iipub.model.jobs import Job
from iipub.model.states import TRACK_SAVED, State
from iipub.store import clock
from iipub.store.job_store import Store

if TYPE_CHECKING:
    from iipub.operate.executor import Operator


def _operator(app: App) -> Operator:
    from iipub.operate.executor import Operator  # the remedies and their provider calls load only for these commands

    return Operator(app.settings, app.engine())


# Longer ranges print one progress line per date.
PROGRESS_AFTER_DAYS = 30


def _act(app: App, job_id: str, action: Callable[[Operator], Job], *, needs_provider: bool = False) -> Job:
    """Run one job action and print the move it made."""
    settings = app.settings
    # A missing key is a configuration error raised before the job is even read.
    from iipub.operate.executor import Operator
    from iipub.provider.adapter import OpenAIAdapter

    provider = OpenAIAdapter(settings.provider, settings.require_api_key()) if needs_provider else None
    try:
        op = Operator(settings, app.engine(), provider)
        before = op.get(job_id)
        after = action(op)
    finally:
        if provider is not None:
            provider.close()
    click.echo(moved(before.state, after))
    return after


def _date(text: str, option: str) -> dt.date:
    # Parsed here rather than by a click type so a bad date is one `iipub: error:` line.
    try:
        return parse_date(text)
    except ValueError as exc:
        raise UsageError(f"{option} {exc}") from None


# -- quarantine -----------------------------------------------------------------------


@click.group("quarantine")
def quarantine_group() -> None:
    """Jobs parked for an operator: list them, and release them one of three ways."""


@quarantine_group.command("list")
@json_option
@pass_app
def quarantine_list_command(app: App, as_json: bool) -> None:
    """Quarantined jobs, longest waiting first: reason, age (database clock), response id,
    both budgets (paid creates used/max, polls used/max), where the output is (OUTPUT: custody =
    stored, safe; watched = its response is read by the custody watch and stored when it
    finishes; none) and the last error. `iipub quarantine show ID` lists the remedies.

    --json prints a list of job objects (as `jobs list --json`) with `age_seconds` added.
    """
    items = _operator(app).quarantine_list()
    if as_json:
        emit_json([q.public() for q in items])
        return
    if not items:
        click.echo("no quarantined jobs")
        return
    b = app.settings.budgets
    click.echo(table(
        [(q.job.id, q.job.product, q.job.edition_date, q.job.quarantine_reason or "-", duration(q.age_seconds),
          q.job.response_id or "-", f"{q.job.generation_attempts}/{b.max_generation_attempts}",
          f"{q.job.poll_count}/{b.max_poll_attempts}", _output(q.job), clip(q.job.last_error, 60)) for q in items],
        ["ID", "PRODUCT", "DATE", "REASON", "AGE", "RESPONSE", "GEN", "POLLS", "OUTPUT", "LAST ERROR"],
    ))


def _output(job: Job) -> str:
    """Where a quarantined job's output is, in a word (`quarantine show` says it in full)."""
    if job.payload_sha256 is not None:
        return "custody"
    return "watched" if job.owes_custody else "none"


@quarantine_group.command("show")
@click.argument("job_id")
@json_option
@pass_app
def quarantine_show_command(app: App, job_id: str, as_json: bool) -> None:
    """One parked job: what `jobs show` shows, then where its output is (in custody, or its
    response watched at the provider) and the commands that apply to it now, each with what it
    does and whether it pays. ID may be a unique prefix.

    --json prints the `jobs show --json` object with `output` (one line) and `remedies` (a list
    of {command, effect}) added; both are null for a job that is not parked."""
    from iipub.cli.jobs_cmd import show_job
    from iipub.operate import parked

    s = app.settings

    def facts(job: Job) -> parked.ParkedHelp | None:
        tracks = {t.lang: State(t.state) for t in app.store().tracks_of([job.id]).get(job.id, [])}
        return parked.of(job, s.budgets.max_generation_attempts, s.reconcile.custody_watch_seconds, tracks)

    def more(job: Job) -> dict[str, object]:
        found = facts(job)
        return {"output": found.output if found else None,
                "remedies": [r.public() for r in found.remedies] if found else None,
                "not_now": list(found.not_now) if found else None}

    def lines(job: Job) -> list[str]:
        found = facts(job)
        if found is None:
            return ["", f"not parked: {job.state.value} (no remedy needed)"]
        return ["", f"{'output':<20} {found.output}", "", "remedies:",
                *(f"  {r.command:<60} {r.effect}" for r in found.remedies),
                *(["", "not now:", *(f"  {line}" for line in found.not_now)] if found.not_now else [])]

    show_job(app, job_id, as_json, more, lines)
pay_again_option = click.option(
    "--pay-again", is_flag=True,
    help="Buy again although the payment authority found the slot paid for or its output held (custody, the "
         "ledger, the legacy system, the live site): journaled with --reason and the evidence it overrides.")


@quarantine_group.command("release")
@click.argument("job_id", required=False)
@click.option("--verified-lost", is_flag=True,
              help="You checked the provider and no response for this job exists: make it eligible for a new "
                   "paid create (only if the generation budget allows).")
@click.option("--link", "link", metavar="RESP_ID",
              help="Adopt this provider response (its metadata must name the job): poll it if still running, "
                   "take its output now if finished.")
@click.option("--resume-polling", is_flag=True,
              help="Go back to polling the recorded response id, with the poll count reset to 0.")
@click.option("--all", "release_all", is_flag=True,
              help="Release every job quarantined with --quarantine-reason instead of one ID.")
@click.option("--quarantine-reason", metavar="R", help="With --all: the quarantine reason to release.")
@click.option("--since", metavar="YYYY-MM-DD[THH:MM[:SS]]",
              help="With --all: only jobs quarantined at or after this time (UTC).")
@click.option("--dry-run", is_flag=True, help="With --all: list what would happen; write nothing.")
@pay_again_option
@json_option
@click.option("--reason", help="Why (journaled with the action); required.")
@by_option
@pass_app
def release_command(app: App, job_id: str | None, verified_lost: bool, link: str | None, resume_polling: bool,
                    release_all: bool, quarantine_reason: str | None, since: str | None, dry_run: bool,
                    pay_again: bool, as_json: bool, reason: str | None, by: str) -> None:
    """Take a QUARANTINED job out of quarantine. Give exactly one of --verified-lost,
    --link RESP_ID or --resume-polling. See runbook.md for which to use per quarantine reason.

    ID is the job id (a unique prefix of at least 4 characters is enough). After an incident,
    `--all --quarantine-reason R [--since T] (--verified-lost | --resume-polling)` applies one
    remedy to every such job, each through the fenced path, refusing those the single-job
    command would refuse, and lists the outcome per job (`--dry-run` first).
    """
    from iipub.operate.executor import ReleaseMode

    chosen = [m for m, on in ((ReleaseMode.VERIFIED_LOST, verified_lost), (ReleaseMode.LINK, link is not None),
                              (ReleaseMode.RESUME_POLLING, resume_polling)) if on]
    # Everything missing is named at once, in the order the command line reads.
    missing = [what for what, gone in (
        ("a job ID (or --all --quarantine-reason R)", job_id is None and not release_all),
        ("--quarantine-reason R (with --all)", release_all and not quarantine_reason),
        ("a remedy: one of --verified-lost, --link RESP_ID, --resume-polling", not chosen),
        ("--reason TEXT", reason is None)) if gone]
    if missing:
        raise UsageError(f"quarantine release: missing {'; '.join(missing)} (see `iipub quarantine show ID` for the "
                         "remedies that apply)")
    assert reason is not None
    if len(chosen) != 1:
        raise UsageError("quarantine release: give exactly one of --verified-lost, --link RESP_ID, --resume-polling")
    mode = chosen[0]
    if release_all:
        if job_id is not None:
            raise UsageError("quarantine release: give a job ID or --all, not both")
        if not quarantine_reason:
            raise UsageError("quarantine release --all needs --quarantine-reason R")
        since_at = _since(since) if since else None
        results = _operator(app).release_all(
            quarantine_reason, mode, reason, by, since=since_at, dry_run=dry_run, pay_again=pay_again)
        if as_json:
            emit_json([r.public() for r in results])
        elif not results:
            click.echo(f"no job quarantined as {quarantine_reason}" + (f" since {since}" if since else ""))
        else:
            click.echo(table([(r.job.id, r.job.product, r.job.edition_date, r.outcome, r.state, clip(r.message, 90))
                              for r in results], ["ID", "PRODUCT", "DATE", "OUTCOME", "STATE", "WHY"]))
        refused = sum(r.outcome == "refused" for r in results)
        if refused:
            stderr(f"iipub: {refused} of {len(results)} jobs refused (see WHY)")
            raise SystemExit(3)
        return
    if job_id is None:
        raise UsageError("quarantine release: give a job ID, or --all --quarantine-reason R")
    if quarantine_reason or since or dry_run:
        raise UsageError("quarantine release: --quarantine-reason, --since and --dry-run go with --all")
    before: list[Job] = []

    def release(op: Operator) -> Job:
        before.append(op.get(job_id))
        return op.release(job_id, mode, reason, by, link_response_id=link, pay_again=pay_again)

    after = _act(app, job_id, release, needs_provider=mode == ReleaseMode.LINK)
    charged = after.generation_attempts - before[0].generation_attempts
    if charged > 0:  # a restored job: the creates the ledger recorded count against its budget
        click.echo(f"charged {charged} paid create(s) the spend ledger recorded for this slot: "
                   f"{after.generation_attempts} of the generation budget used")


def _since(text: str) -> dt.datetime:
    try:
        if len(text) == 10:
            return dt.datetime.combine(parse_date(text), dt.time(0, 0))
        when = dt.datetime.fromisoformat(text.removesuffix("Z"))
    except ValueError:
        raise UsageError(f"--since {text!r} is not a UTC time (YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS])") from None
    if when.tzinfo is not None:
        when = when.astimezone(dt.UTC).replace(tzinfo=None)
    return when


@click.command("republish")
@click.argument("job_id")
@reason_option
@by_option
@pass_app
def republish_command(app: App, job_id: str, reason: str, by: str) -> None:
    """Let a job's editions replace pages that are already live with different content. The
    static sink never does that by itself (the delivery parks as `conflicting_republish`, e.g.
    after a restore); this records who allowed it and why, and re-queues the parked deliveries."""
    n = _operator(app).republish(job_id, reason, by)
    click.echo(f"job {job_id}: republish allowed; {n} parked deliveries re-queued")


# -- the whole provider ------------------------------------------------------------------


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
    g = _operator(app).pause(by, reason, everything=everything)
    what = "everything" if g.paused_everything else "creates"
    click.echo(f"{what} paused by {clip(g.paused_by, 80)}: {clip(g.paused_reason, 300)}")


@click.command("unpause")
@click.option("--reason", default=None, help="Why (journaled with the action; optional).")
@by_option
@pass_app
def unpause_command(app: App, reason: str | None, by: str) -> None:
    """Let paid creates go out again (after `pause --everything`: every automated command too)."""
    _operator(app).unpause(by, reason)
    click.echo("unpaused")


# -- one job --------------------------------------------------------------------------


@click.command("suspend")
@click.argument("job_id")
@reason_option
@by_option
@pass_app
def suspend_command(app: App, job_id: str, reason: str, by: str) -> None:
    """Park a job during an incident: reconcile will not touch it until `iipub resume`.

    The state it was in is remembered. Refused while a create is in flight.
    ID is the job id (a unique prefix of at least 4 characters is enough).
    """
    _act(app, job_id, lambda op: op.suspend(job_id, reason, by))


@click.command("resume")
@click.argument("job_id")
@click.option("--reason", default=None, help="Why (journaled with the action; optional).")
@by_option
@pass_app
def resume_command(app: App, job_id: str, reason: str | None, by: str) -> None:
    """Return a suspended job to the state it was suspended from, due now.

    ID is the job id (a unique prefix of at least 4 characters is enough).
    """
    _act(app, job_id, lambda op: op.resume(job_id, by, reason))


@click.command("cancel")
@click.argument("job_id")
@reason_option
@by_option
@pass_app
def cancel_command(app: App, job_id: str, reason: str, by: str) -> None:
    """Best-effort cancel of a job's running generation (ACCEPTED, QUEUED, IN_PROGRESS).

    If the provider finished anyway, the output is taken into custody and goes on to be
    validated and published (paid work is never discarded). If it was cancelled, failed or
    is gone, the job is QUARANTINED (operator_cancelled). If the cancel call fails, nothing
    changes. Needs OPENAI_API_KEY. ID is the job id or a unique prefix.
    """
    job = _act(app, job_id, lambda op: op.cancel(job_id, reason, by), needs_provider=True)
    if job.state != State.QUARANTINED:
        click.echo("the provider finished before the cancel took effect: its output is kept and goes on to "
                   "validation and publication (use `iipub kill` to stop that)")


@click.command("kill")
@click.argument("job_id")
@reason_option
@by_option
@pass_app
def kill_command(app: App, job_id: str, reason: str, by: str) -> None:
    """Terminate a job: it will not publish. The next `iipub reconcile` cancels and deletes
    its remote data, then marks it DELETED.

    Refused once the edition is saved (SAVED_NOT_PUBLIC and later) and while a create is in
    flight. ID is the job id (a unique prefix of at least 4 characters is enough).
    """
    _act(app, job_id, lambda op: op.kill(job_id, reason, by))


@click.command("revalidate")
@click.argument("job_id")
@click.option("--lang", metavar="LANG", default=None,
              help="Only this language's track (its kept part), e.g. es; the others are not touched.")
@reason_option
@by_option
@pass_app
def revalidate_command(app: App, job_id: str, lang: str | None, reason: str, by: str) -> None:
    """Validate a VALIDATION_FAILED_RETAINED job's kept payload again, after the product's
    rules (items, allowed_domains, …) were fixed. Free: nothing is sent to the provider.

    A slot whose payload forked into language tracks: --lang re-checks that language's track;
    without it every parked track is re-checked."""
    if lang is None:
        _act(app, job_id, lambda op: op.revalidate(job_id, reason, by))
        return
    from iipub.operate.executor import Operator

    op = Operator(app.settings, app.engine())
    job = op.get(job_id)
    before = {t.lang: t.state for t in op.tracks_of(job.id)}
    op.revalidate(job.id, reason, by, lang=lang)
    after = op.get(job.id)
    slot = f"; the slot {job.state} -> {after.state}" if after.state != job.state else ""
    click.echo(f"job {job.id} {lang} track: {before.get(lang)} -> RETRIEVED_NOT_VALIDATED{slot} "
               "(validated again by the next reconcile; nothing paid)")


@click.command("regenerate")
@click.argument("job_id")
@pay_again_option
@reason_option
@by_option
@pass_app
def regenerate_command(app: App, job_id: str, reason: str, by: str, pay_again: bool) -> None:
    """Pay for a new generation of a VALIDATION_FAILED_RETAINED job (e.g. after fixing the
    prompt), within the slot's generation budget. Refused when the budget is spent.

    A slot waiting on a parked language track is generated again for its unpublished languages
    only (named in the output); a saved or published edition is kept, never replaced."""
    from iipub.operate.executor import Operator

    job = _act(app, job_id, lambda op: op.regenerate(job_id, reason, by, pay_again=pay_again))
    found = {t.lang: t.state for t in Operator(app.settings, app.engine()).tracks_of(job.id)}
    if found:
        new = sorted(lang for lang, s in found.items() if s not in TRACK_SAVED)
        kept = sorted(lang for lang, s in found.items() if s in TRACK_SAVED)
        click.echo(f"new paid generation for: {', '.join(new)}" + (f"; kept: {', '.join(kept)} (already saved, "
                                                                   "never replaced)" if kept else ""))


# -- backfill -------------------------------------------------------------------------


@click.command("backfill")
@click.option("--product", required=True, help="The product to backfill (as configured).")
@click.option("--from", "from_text", required=True, metavar="YYYY-MM-DD", help="First edition date, inclusive.")
@click.option("--to", "to_text", required=True, metavar="YYYY-MM-DD",
              help="Last edition date, inclusive; at most today (database clock).")
@click.option("--dry-run", is_flag=True, help="Only report which slots would be created; write nothing.")
@pass_app
def backfill_command(app: App, product: str, from_text: str, to_text: str, dry_run: bool) -> None:
    """Create the missing slots for past dates at backfill priority (today's slots always
    go first). Idempotent: dates already present are left alone. Reports created vs.
    already present; ranges over 30 days print per-date progress to stderr. At most 366
    days per run: every slot created becomes a paid generation.
    """
    from_date, to_date = _date(from_text, "--from"), _date(to_text, "--to")
    configured = app.settings.product(product)  # an unknown product fails before the database is opened
    engine = app.engine()
    with engine.connect() as conn:
        today = clock.read_now(conn).date()
    verbose = (to_date - from_date).days + 1 > PROGRESS_AFTER_DAYS
    verb = "would create" if dry_run else "created"

    def progress(day: dt.date, created: bool) -> None:
        if verbose:
            stderr(f"{product} {day}: {verb if created else 'already present'}")

    report = scheduling.backfill(Store(engine, "operator:backfill"), configured, from_date, to_date, today,
                                 dry_run=dry_run, progress=progress)
    if not verbose:
        for day in sorted(report.created + report.present):
            click.echo(f"{product} {day}: {verb if day in report.created else 'already present'}")
    click.echo(f"{'dry run: would create' if dry_run else 'created'} {len(report.created)}, "
               f"already present {len(report.present)}")
