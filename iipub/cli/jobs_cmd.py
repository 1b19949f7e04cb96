"""`iipub jobs list|show|import-payload`."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from iipub.cli.common import (
    DATE,
    AnyCaseChoice,
    App,
    by_option,
    clip,
    emit_json,
    json_option,
    moved,
    pass_app,
    reason_option,
    table,
)
from iipub.core.timefmt import iso_z
from iipub.model import track_views
from iipub.model.jobs import Job
from iipub.model.states import State
from iipub.model.track_views import TrackView
from iipub.store import edition_changes


@click.group("jobs")
def jobs_group() -> None:
    """Inspect jobs."""


@jobs_group.command("list")
@click.option("--state", type=AnyCaseChoice([s.value for s in State], "state"),
              help="Only jobs in this state (any case: deleted = DELETED).")
@click.option("--product", help="Only this product (as configured: an unknown name is refused, like schedule).")
@click.option("--date", "day", type=DATE, help="Only this edition date.")
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(1, 100000),
              help="At most this many jobs.")
@json_option
@pass_app
def list_command(app: App, state: str | None, product: str | None, day: dt.date | None, limit: int,
                 as_json: bool) -> None:
    """One line per job, newest edition first. TRACKS sums up its language tracks (each
    language's state, e.g. `en:PUBLISHED es:VALIDATION_FAILED_RETAINED`; empty before the fork)."""
    if product:
        app.settings.product(product)  # an unknown product is a configuration error, as for `schedule`
    store = app.store()
    jobs = store.list_jobs(state=state, product=product, day=day, limit=limit)
    tracks = store.tracks_of([j.id for j in jobs])
    if as_json:
        emit_json([{**j.public(), "tracks": [t.public() for t in tracks.get(j.id, [])]} for j in jobs])
        return
    click.echo(table(
        [(j.id, j.product, j.edition_date, j.state.value, j.version, j.generation_attempts, j.poll_count,
          j.response_id or "-", j.quarantine_reason or "", track_views.summary(tracks.get(j.id, [])))
         for j in jobs],
        ["ID", "PRODUCT", "DATE", "STATE", "VER", "GEN", "POLLS", "RESPONSE", "QUARANTINE", "TRACKS"],
    ))


@jobs_group.command("show")
@click.argument("job_id")
@json_option
@pass_app
def show_command(app: App, job_id: str, as_json: bool) -> None:
    """One job: its columns, its language tracks and its full event history (oldest first;
    LANG names a track's entries, whose VER is the track's version). ID may be a unique prefix."""
    show_job(app, job_id, as_json)


def show_job(app: App, job_id: str, as_json: bool, more: Callable[[Job], dict[str, Any]] | None = None,
             lines: Callable[[Job], list[str]] | None = None) -> Job:
    """`jobs show` (and `quarantine show`, which adds `more` to the JSON object and `lines` after
    the columns): the job by id or unique prefix, its tracks and its journal."""
    store = app.store()
    job = store.lookup(job_id)
    events = store.events(job.id)
    tracks = store.tracks_of([job.id]).get(job.id, [])
    changes = edition_changes.changes_of(app.engine(), [job.id]).get(job.id, [])
    taken_back = edition_changes.statuses_of(app.engine(), [job.id]).get(job.id, {})
    from iipub.machine import revisions  # the ledger's readers load only where a job is shown

    correcting = revisions.pending(app.engine(), job.id)
    if as_json:
        emit_json({**job.public(), **(more(job) if more else {}), "tracks": [t.public() for t in tracks],
                   "editions_changed": {lang: {"status": st, "revision": rev} for lang, (st, rev) in
                                        sorted(taken_back.items())},
                   "edition_changes": [c.public() for c in changes],
                   "correction_in_progress": {"languages": list(correcting.languages), "by": correcting.by,
                                              "why": correcting.why, "public_note": correcting.public_note}
                   if correcting else None,
                   "events": [e.public() for e in events]})
        return job
    for key, value in job.public().items():  # operator and provider text: one line, no control characters
        click.echo(f"{key:<20} {'' if value is None else clip(str(value), VALUE_WIDTH)}")
    for line in lines(job) if lines else []:
        click.echo(line)
    if correcting is not None:
        click.echo(f"{'correcting':<20} {', '.join(correcting.languages)}: a paid generation (`correct --regenerate`, "
                   f"by {clip(correcting.by, 40)}: {clip(correcting.why, 80)}) is saved as the correction when it "
                   "is checked and composed; the editions stay as they are until then")
    if tracks:
        click.echo("")
        click.echo(_tracks_table(tracks))
    if changes:  # withdrawn or corrected editions: each change, newest revision last
        click.echo("")
        click.echo(table(
            [(c.at, c.lang, c.revision, c.kind.upper(), clip(c.changed_by, 40), clip(c.reason, 60),
              clip(c.public_note or "", 60), c.superseded_sha256[:12], (c.sha256 or "-")[:12]) for c in changes],
            ["AT", "LANG", "REV", "CHANGE", "BY", "WHY", "PUBLIC NOTE", "SUPERSEDES", "SHA256"],
        ))
    click.echo("")
    click.echo(table(
        [(e.at, e.lang or "-", e.version, e.from_state or "-", e.to_state, e.reason, e.worker, _brief(e.detail))
         for e in events],
        ["AT", "LANG", "VER", "FROM", "TO", "REASON", "WORKER", "DETAIL"],
    ))
    return job


@jobs_group.command("import-payload")
@click.argument("job_id")
@click.argument("file", type=click.Path(path_type=Path))
@reason_option
@by_option
@pass_app
def import_payload_command(app: App, job_id: str, file: Path, reason: str, by: str) -> None:
    """Take output you recovered (e.g. from the provider's dashboard) into custody for a job
    whose own copy is lost: QUARANTINED (any reason), COMPLETED_NOT_RETRIEVED or
    PROVIDER_EXPIRED_OR_MISSING, without a payload yet. The job goes to RETRIEVED_NOT_VALIDATED,
    due now; the next `iipub reconcile` validates it and publishes it if it passes. Free: nothing
    is sent to the provider.

    FILE is one of: the response JSON as the dashboard or API shows it (a Responses API object:
    the text of its output_text parts is taken; it must be completed or incomplete, and its
    metadata must not name another job); a JSON object with a string "output_text"; or the raw
    output text itself. It must be UTF-8 and the output at most the product's max_output_bytes.
    ID is the job id (a unique prefix of at least 4 characters is enough).
    """
    from iipub.operate.executor import Operator  # the remedies load only for operator commands

    with Operator(app.settings, app.engine()) as op:
        before = op.get(job_id)
        after = op.import_payload(job_id, file, reason, by)
    click.echo(f"{moved(before.state, after)}; payload sha256 "
               f"{after.payload_sha256} stored; the next `iipub reconcile` validates it")


DETAIL_WIDTH = 100
VALUE_WIDTH = 500  # a column of `jobs show` (last_error can be long; --json has it whole)
SHA_WIDTH = 12  # enough to tell hashes apart on screen; `--json` has them whole
ERROR_WIDTH = 80


def _tracks_table(tracks: list[TrackView]) -> str:
    def lease(t: TrackView) -> str:
        if t.lease_owner is None:
            return "-"
        return f"{t.lease_owner} until {iso_z(t.lease_expiry, 'seconds') if t.lease_expiry else '?'}"

    return table(
        [(t.lang, t.state, t.version, lease(t), iso_z(t.next_attempt_at, "seconds"),
          (t.payload_sha256 or "-")[:SHA_WIDTH], (t.composed_sha256 or "-")[:SHA_WIDTH],
          t.quarantine_reason or "-", clip(t.last_error, ERROR_WIDTH) or "-") for t in tracks],
        ["LANG", "STATE", "VER", "LEASE", "NEXT", "PAYLOAD", "COMPOSED", "QUARANTINE", "LAST ERROR"],
    )


def _brief(detail: dict[str, Any] | None) -> str:
    """An event's detail on one line: JSON escapes control characters in provider text;
    `--json` has it in full."""
    if not detail:
        return ""
    text = json.dumps(detail, sort_keys=True, ensure_ascii=True, default=str)
    return text if len(text) <= DETAIL_WIDTH else text[: DETAIL_WIDTH - 1] + "…"
