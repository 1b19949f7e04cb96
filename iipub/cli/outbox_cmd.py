"""`iipub outbox list|requeue`: the outbox events the relay delivers, and the operator's way to
send a parked or failing one again once its sink is fixed."""

from __future__ import annotations

from typing import Any

import click

from iipub.cli.common import App, clip, emit_json, json_option, pass_app, table
from iipub.store.outbox import LIST_STATES


@click.group("outbox")
def outbox_group() -> None:
    """Outbox events (one per saved edition and language) and their per-sink deliveries."""


@outbox_group.command("list")
@click.option("--state", type=click.Choice(LIST_STATES), default="unpublished", show_default=True,
              help="unpublished: every event not yet published (pending, failing, parked); parked: a sink "
                   "refused it and only an operator moves it; failing: a delivery failed and is retried with "
                   "backoff; all: published ones too.")
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(1, 100000),
              help="At most this many events (oldest first).")
@json_option
@pass_app
def outbox_list_command(app: App, state: str, limit: int, as_json: bool) -> None:
    """One line per outbox event, oldest first: its job and edition, status, attempts, when the
    relay tries it next, each sink's delivery (delivered, failing, parked) and the last error (a
    parked sink's refusal first).

    --json prints a list of objects: event_id, job_id, product, edition_date, lang, status,
    attempts, next_attempt_at, first_failed_at, published_at, last_error, lease_owner,
    lease_expiry, created_at and sinks (sink, state, attempts, delivered_at, parked_at, last_error).
    """
    from iipub.store.outbox import list_events

    events = list_events(app.engine(), state, limit)
    if as_json:
        emit_json(events)
        return
    if not events:
        click.echo(f"no outbox events ({state})")
        return
    click.echo(table(
        [(e["event_id"], e["job_id"], e["product"] or "-", e["edition_date"] or "-", e["lang"] or "-", e["status"],
          e["attempts"], "-" if e["status"] == "published" else e["next_attempt_at"], _sinks(e["sinks"]),
          clip(_error(e), 70)) for e in events],
        ["EVENT", "JOB", "PRODUCT", "DATE", "LANG", "STATUS", "ATTEMPTS", "NEXT ATTEMPT", "SINKS", "LAST ERROR"],
    ))


@outbox_group.command("requeue")
@click.argument("event_id")
@click.option("--sink", metavar="NAME", help="Only this sink's delivery (static, webhook); default: every sink "
              "that has not delivered the event.")
@pass_app
def outbox_requeue_command(app: App, event_id: str, sink: str | None) -> None:
    """Clear a parked delivery (the sink refused the event, e.g. a webhook answered 400) and make
    the event due now, so the next `iipub relay` tries again every sink that has not delivered it.
    Do it after fixing the receiver. EVENT_ID is the event id (a unique prefix of at least 4
    characters is enough; `iipub outbox list --state parked` shows them).

    Refused for an unknown id, an event already published, a sink that already delivered it, and
    an event a relay is delivering right now. Delivery stays exactly once: each sink's receipt is
    recorded, and a sink that has the event is not asked again.
    """
    from iipub.store.outbox import requeue

    settings = app.settings
    done = requeue(app.engine(), event_id, sink, settings.sink_names())
    cleared = f"parked delivery cleared for {', '.join(done.cleared)}" if done.cleared else "nothing was parked"
    tries = ", ".join(done.pending) or "no sink"
    click.echo(f"outbox event {done.event_id}: re-queued ({cleared}); the next `iipub relay` tries {tries}")


def _sinks(sinks: list[dict[str, Any]]) -> str:
    return " ".join(f"{d['sink']}={d['state']}" for d in sinks) or "-"


def _error(event: dict[str, Any]) -> str | None:
    parked = [f"{d['sink']}: {d['last_error']}" for d in event["sinks"] if d["state"] == "parked" and d["last_error"]]
    return "; ".join(parked) if parked else event["last_error"]


