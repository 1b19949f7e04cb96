"""`iipub webhook serve` (the receiver, standalone behind the site's web server) and
`iipub orphans list` (paid responses no job owns)."""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click
import structlog

from ..timefmt import iso_z
from .common import App, emit_json, json_option, pass_app, stderr, table

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
    """Receive provider webhooks (POST at /) until SIGTERM or Ctrl-C.

    Needs OPENAI_WEBHOOK_SECRET (whsec_…) and OPENAI_API_KEY besides the usual settings."""
    from ..webhook import Receiver, make_wsgi_server

    app.settings.require_provider_webhook_secret()  # before the database: the likelier mistake
    receiver = Receiver(app.settings, engine=app.engine())
    try:
        server = make_wsgi_server(host, port, receiver)
    except OSError as exc:
        receiver.close()
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    log.info("webhook_listening", url=f"http://{host}:{server.server_port}/")
    stderr(f"iipub: webhook receiver listening on http://{host}:{server.server_port}/")
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        receiver.close()


@click.group("orphans")
def orphans_group() -> None:
    """Paid responses no job owns (announced by a webhook)."""


@orphans_group.command("list")
@json_option
@pass_app
def orphans_list_command(app: App, as_json: bool) -> None:
    """Every orphan: what its metadata claims, why no job took it, whether its output is kept."""
    from ..deliveries import Deliveries

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
          "deleted" if r["remote_deleted_at"] else "remote", r["why"]) for r in rows],
        ["RESPONSE", "STATUS", "NAMES JOB", "SLOT", "ATTEMPT", "OUTPUT", "FIRST SEEN", "PROVIDER", "WHY"]))
