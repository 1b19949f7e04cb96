"""The cutover from a legacy system: `iipub adopt FILE` (its undo is `iipub export --in-flight`)."""

from __future__ import annotations

from pathlib import Path

import click

from iipub.cli.common import App, by_option, emit_json, json_option, pass_app, reason_option, stderr
from iipub.core.errors import UsageError

REFUSED_EXIT = 3


@click.command("adopt")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="Check every row and say what would be adopted; write nothing.")
@json_option
@reason_option
@by_option
@pass_app
def adopt_command(app: App, file: Path, dry_run: bool, as_json: bool, reason: str, by: str) -> None:
    """Take over responses a legacy system started (and paid for): each row becomes its slot's
    job in ACCEPTED with the response id, charged with the creates already spent, polled from the
    next tick. Nothing is paid; the spend ledger records each as an adopted create.

    \b
    FILE: CSV with the header product,edition_date,response_id[,started_at,attempts][,state],
    or JSON lines with the same keys (what `iipub export --in-flight` writes). attempts = paid
    creates the slot already cost (default 1).

    A row is refused, with one line saying why, for an unknown product, a bad date, a malformed
    or missing response id, a bad attempts count, a duplicate slot or response in the file, a
    slot that already has a job (past NO_JOB, or holding a response) or a response another job
    holds; the other rows go on. A second run of the same file changes nothing (its rows are
    reported as already adopted). Exit 0 when no row was refused, 3 when some were, 2 for a file
    that is not a hand-over file.
    """
    from iipub.operate import adoption, handover

    try:
        with file.open("rb") as f:
            raw = f.read(handover.MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {file}: {exc.strerror or exc}") from None
    report = adoption.adopt(app.settings, app.engine(), raw, reason=reason, by=by, dry_run=dry_run)
    if as_json:
        emit_json({
            "dry_run": dry_run,
            "adopted": [{**r.fields(), "line": r.line, "job_id": job_id} for r, job_id in report.adopted],
            "already_adopted": [{**r.fields(), "line": r.line, "job_id": job_id} for r, job_id in report.already],
            "refused": [{"line": r.line, "slot": r.slot, "why": r.why} for r in report.refused],
            "warnings": report.warnings,
        })
    else:
        for line in report.lines() + [r.text() for r in report.refused]:
            click.echo(line)
        click.echo(report.summary())
    for warning in report.warnings:
        stderr(f"iipub: {warning}")
    if report.refused:
        stderr(f"iipub: {len(report.refused)} rows refused (see above)")
        raise SystemExit(REFUSED_EXIT)
