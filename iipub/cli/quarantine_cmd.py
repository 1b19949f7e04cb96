"""`iipub quarantine list|show|release`: the jobs parked for an operator, and their release."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

import click

from iipub.cli.common import (
    App,
    act,
    by_option,
    clip,
    emit_json,
    job_operator,
    json_option,
    pass_app,
    pay_again_option,
    stderr,
    table,
)
from iipub.core.errors import UsageError
from iipub.core.timefmt import duration, parse_date
from iipub.model.jobs import Job
from iipub.model.states import State

if TYPE_CHECKING:
    from iipub.operate.executor import Operator


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
    items = job_operator(app).quarantine_list()
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
        from iipub.machine import revisions

        tracks = {t.lang: State(t.state) for t in app.store().tracks_of([job.id]).get(job.id, [])}
        correcting = revisions.pending(app.engine(), job.id) is not None
        return parked.of(job, s.budgets.max_generation_attempts, s.reconcile.custody_watch_seconds, tracks,
                         correcting=correcting)

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
        results = job_operator(app).release_all(
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

    after = act(app, job_id, release, needs_provider=mode == ReleaseMode.LINK)
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
