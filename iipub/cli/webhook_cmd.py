"""`iipub webhook serve` (the receiver, standalone behind the site's web server) and
`iipub orphans list|show|adopt|discard` (paid responses of this installation no job holds)."""

from __future__ import annotations

import json
import signal
import threading
from types import FrameType
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
    stderr,
    table,
)
from iipub.core.timefmt import iso_z

log = structlog.get_logger("iipub.webhook")


@click.group("webhook")
def webhook_group() -> None:
    """The provider's webhooks: verified deliveries take custody in seconds."""


@webhook_group.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; the site's web server proxies the public URL here.")
@click.option("--port", default=8091, show_default=True, type=click.IntRange(0, 65535),
              help="Port to listen on (0: any free port, printed at start).")
@pass_app
def serve_command(app: App, host: str, port: int) -> None:
    """Receive provider webhooks (POST at any path) until SIGTERM or Ctrl-C, on waitress.

    Threads, connection limit, listen backlog, the whole-request deadline and keep-alive come
    from [webhooks]. Needs OPENAI_WEBHOOK_SECRET (whsec_…) and OPENAI_API_KEY besides the usual
    settings. The receiver is warmed (provider client, database) before it listens."""
    from iipub.webhooks.receiver import Receiver
    from iipub.webhooks.server import Server

    settings = app.settings
    settings.require_provider_webhook_secret()  # before the database: the likelier mistake
    app.engine()  # the schema is checked (one error line if the database is not migrated)
    receiver = Receiver(settings)
    try:
        receiver.warm()
        server = Server(receiver, settings.webhooks, host, port)
    except OSError as exc:
        receiver.close()
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    except BaseException:
        receiver.close()
        raise
    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()
        server.wake()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    w = settings.webhooks
    log.info("webhook_listening", url=f"http://{host}:{server.port}/", threads=w.threads,
             connection_limit=w.connection_limit, backlog=w.backlog, read_seconds=w.read_seconds,
             request_seconds=w.request_seconds)
    stderr(f"iipub: webhook receiver listening on http://{host}:{server.port}/")
    try:
        server.serve(stop)
    finally:
        receiver.close()


@webhook_group.command("test-delivery")
@click.argument("url")
@click.option("--timeout", "timeout_seconds", default=30.0, show_default=True, type=click.FloatRange(1, 120),
              help="Seconds to wait for the answer.")
@pass_app
def test_delivery_command(app: App, url: str, timeout_seconds: float) -> None:
    """Send one signed test delivery to URL (the public endpoint, e.g.
    https://example.org/hooks/openai) and say whether iipub's receiver verified it.

    Signed with OPENAI_WEBHOOK_SECRET like a provider delivery (event type iipub.test_delivery).
    A 200 from the receiver proves the chain end to end: the URL reaches iipub through the web
    server and proxy (path, body size and headers intact), the secret matches, this host's
    clock agrees with the receiver's, and the receiver reached its database. It records and
    changes nothing. Exit 0 when verified, 1 otherwise (with the answer)."""
    import httpx

    from iipub.provider import factory
    from iipub.webhooks.receiver import TEST_ANSWER

    if not url.startswith(("http://", "https://")):
        raise click.BadParameter(f"must be an http(s) URL (got {url[:80]!r})", param_hint="URL")
    body, headers = factory.webhook_verifier(app.settings).test_delivery()
    try:
        answer = httpx.post(url, content=body, headers=headers, timeout=timeout_seconds)
    except httpx.HTTPError as exc:
        raise click.ClickException(f"test delivery to {url} not answered: {type(exc).__name__}: {exc}") from None
    try:
        message = answer.json().get("message")
    except ValueError:
        message = None
    if answer.status_code == 200 and message == TEST_ANSWER:
        click.echo(f"ok: {url} answered 200: {message} (webhook-id {headers['webhook-id']})")
        return
    shown = clip(message if isinstance(message, str) else answer.text, 200)
    raise click.ClickException(f"test delivery to {url} answered HTTP {answer.status_code}, not by a verifying "
                               f"iipub receiver: {shown}")


@webhook_group.command("prune")
@pass_app
def prune_command(app: App) -> None:
    """Delete webhook deliveries and misses older than [webhooks] keep_days (default 30), and
    orphans keep_days after an operator resolved them (unresolved ones are kept), in batches.
    Prints the rows deleted per table as JSON (`iipub relay --prune` does the same beside the
    outbox)."""
    from iipub.store.deliveries import Deliveries

    emit_json({"pruned": Deliveries(app.engine()).prune(app.settings.webhooks.keep_days)})


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
