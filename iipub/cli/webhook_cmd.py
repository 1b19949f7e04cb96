"""`iipub webhook serve|test-delivery|prune`: the receiver, standalone behind the site's web server."""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click
import structlog

from iipub.cli.common import (
    App,
    clip,
    emit_json,
    pass_app,
    stderr,
)

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
