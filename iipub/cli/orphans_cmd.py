"""`iipub orphans list|show|adopt|discard`: paid responses of this installation no job holds."""

from __future__ import annotations

import json
from typing import Any

import click
import structlog

from iipub.cli.common import (
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

log = structlog.get_logger("iipub.webhook")


@click.group("orphans")
def orphans_group() -> None:
    """Paid responses of this installation no job holds (announced by a webhook): kept, never
    deleted automatically; adopt one for a job or discard it."""


@orphans_group.command("list")
@json_option
@pass_app
def orphans_list_command(app: App, as_json: bool) -> None:
    """Every orphan: what its metadata claims, why no job took it, whether its output is kept."""
    from iipub.store.deliveries import Deliveries

    rows = Deliveries(app.engine()).orphans()
    if as_json:
        emit_json({"orphans": rows})
        return
    if not rows:
        click.echo("no orphans")
        return
    click.echo(table(
        [(r["response_id"], r["status"], r["named_job_id"] or "-", r["slot"] or "-", r["attempt"] or "-",
          "kept" if r["output_kept"] else "-", iso_z(r["first_seen_at"], "seconds"),
          "deleted" if r["remote_deleted_at"] else "remote",
          r["fate"] or (f"held by job {r['held_by_job']}" if r["held_by_job"] else "kept"), clip(r["why"], 120))
         for r in rows],
        ["RESPONSE", "STATUS", "NAMES JOB", "SLOT", "ATTEMPT", "OUTPUT", "FIRST SEEN", "PROVIDER", "FATE", "WHY"]))


_PREVIEW = 400


def _orphan_doc(app: App, response_id: str) -> dict[str, Any]:
    from iipub.core.errors import UnknownId
    from iipub.store.deliveries import Deliveries
    from iipub.store.job_store import Store

    engine = app.engine()
    found = Deliveries(engine).orphan(response_id.strip())
    if found is None:
        raise UnknownId(f"no orphan {response_id!r} (see `iipub orphans list`)")
    output = found.pop("output")
    raw = output.encode("utf-8") if output is not None else None
    named = Store(engine, "cli").find(found["named_job_id"]) if found.get("named_job_id") else None
    return found | {
        "output_kept": output is not None,
        "output_bytes": len(raw) if raw is not None else None,
        "output": output,
        "named_job": None if named is None else {"id": named.id, "state": named.state.value,
                                                  "response_id": named.response_id,
                                                  "generation_attempts": named.generation_attempts,
                                                  "has_payload": named.payload is not None},
    }


@orphans_group.command("show")
@click.argument("response_id")
@json_option
@pass_app
def orphans_show_command(app: App, response_id: str, as_json: bool) -> None:
    """One orphan: its kept output (size, sha256 and the start of it; --json has all of it), the
    metadata it carried, the job it names (if this database has it) and what became of it."""
    doc = _orphan_doc(app, response_id)
    if as_json:
        emit_json(doc)
        return
    named = doc["named_job"]
    rows = [
        ("response", doc["response_id"]), ("status", doc["status"]),
        ("installation", doc.get("installation_id") or "- (made before installation ids)"),
        ("slot", doc["slot"] or "-"), ("attempt", doc["attempt"] or "-"),
        ("names job", f"{doc['named_job_id'] or '-'}"
         + (f" ({named['state']}{', payload in custody' if named['has_payload'] else ''})" if named
            else (" (not in this database)" if doc["named_job_id"] else ""))),
        ("output", f"{doc['output_bytes']} bytes, sha256 {doc['output_sha256']}" if doc["output_kept"]
         else "not kept"),
        ("first seen", iso_z(doc["first_seen_at"], "seconds")),
        ("provider", "deleted" if doc["remote_deleted_at"] else "still there"),
        ("fate", f"{doc['fate']} by {doc['fate_by']} at {iso_z(doc['fate_at'], 'seconds')}: {doc['fate_reason']}"
         if doc.get("fate") else "kept (awaiting adopt or discard)"),
        ("why", doc["why"]),
        ("metadata", json.dumps(doc.get("metadata") or {}, sort_keys=True, ensure_ascii=True)),
    ]
    click.echo(table([(k, clip(str(v), 160)) for k, v in rows], ["FIELD", "VALUE"]))
    if doc["output"] is not None:
        preview = json.dumps(doc["output"][:_PREVIEW], ensure_ascii=True)  # escapes control characters
        click.echo(f"\noutput (first {_PREVIEW} characters, JSON-escaped):\n{preview}")


@orphans_group.command("adopt")
@click.argument("response_id")
@click.argument("job_id")
@click.option("--other-slot", is_flag=True,
              help="Adopt it even though the orphan was made for another slot (or another config).")
@reason_option
@by_option
@pass_app
def orphans_adopt_command(app: App, response_id: str, job_id: str, other_slot: bool, reason: str, by: str) -> None:
    """Use an orphan's kept output for JOB_ID: it is stored as the job's payload through the fenced
    custody path (as `jobs import-payload` does), the job goes to RETRIEVED_NOT_VALIDATED and the
    next `iipub reconcile` validates and publishes it. Nothing is paid and nothing is sent to the
    provider. The job must be NO_JOB, CREATE_ELIGIBLE, QUARANTINED, COMPLETED_NOT_RETRIEVED or
    PROVIDER_EXPIRED_OR_MISSING, hold no payload, and its slot no edition; the orphan must be of
    this installation, have its output kept and be made for the job's slot (unless --other-slot).
    JOB_ID may be a unique prefix of at least 4 characters."""
    from iipub.operate.executor import Operator

    with Operator(app.settings, app.engine()) as op:
        before = op.get(job_id)
        after = op.adopt_orphan(response_id, job_id, reason, by, other_slot=other_slot)
    click.echo(f"{moved(before.state, after)}; orphan {response_id} adopted, payload sha256 "
               f"{after.payload_sha256} stored; the next `iipub reconcile` validates it")


@orphans_group.command("discard")
@click.argument("response_id")
@reason_option
@by_option
@pass_app
def orphans_discard_command(app: App, response_id: str, reason: str, by: str) -> None:
    """Drop an orphan: your explicit choice, recorded (who, why, when) before the response is
    deleted at the provider (an unfinished one is cancelled first). Its kept output stays in the
    `orphans` table. Refused for an orphan already adopted (its job's cleanup deletes it)."""
    from iipub.operate.executor import Operator

    with Operator(app.settings, app.engine()) as op:
        orphan = op.discard_orphan(response_id, reason, by)
    click.echo(f"orphan {orphan.response_id} discarded and deleted at the provider")
