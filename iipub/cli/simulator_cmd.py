"""`iipub simulator`: run the local Responses API simulator until SIGTERM/SIGINT."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

import click

from iipub.cli.common import setup_logging, stderr
from iipub.core.errors import ConfigError
from iipub.provider.openai.simulator.faults import (
    ALLOWED_OPS,
    DESCRIPTIONS,
    FAULTS,
    FaultRule,
    parse_fault_spec,
    parse_outage_spec,
)

_FAULT_HELP = "\n".join(f"  {name} [{'|'.join(ALLOWED_OPS[name])}]: {DESCRIPTIONS[name]}" for name in FAULTS)


def _parse_faults(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[FaultRule, ...]:
    try:
        return tuple(parse_fault_spec(v) for v in values)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def _parse_outages(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[FaultRule, ...]:
    try:
        return tuple(parse_outage_spec(v) for v in values)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


_SPEC_HELP = """\b
Fault specs: NAME[@OP][:PROBABILITY][*TIMES][~START..END], parts in that order.
  rate_limit                    every create answers 429
  slow@retrieve:0.25            a quarter of retrieves answer late
  server_error@create*3         the first three creates answer 500
  rate_limit@create~30..90      creates answer 429 from simulated second 30 until 90
  quota_exhausted:0.1*5~60..    after second 60, a tenth of creates answer 429 quota, five times at most
  flex_unavailable*2            the first two flex creates answer 429 resource_unavailable
START/END are simulated seconds since the simulator started (the --time-scale clock plus
POST /_sim/advance); a rule fires while START <= now < END. --outage START:END is
service_unavailable@create~START..END: every create answers 503 in that window."""


@click.command(
    "simulator",
    epilog=_SPEC_HELP + "\n\n\b\nFaults [ops they apply to; the first is the default]:\n" + _FAULT_HELP,
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (loopback only by default).")
@click.option("--port", default=8089, show_default=True, type=click.IntRange(0, 65535),
              help="Port; 0 picks a free one.")
@click.option(
    "--allow-non-loopback",
    is_flag=True,
    help="Allow binding a non-loopback address. The simulator has no real authentication.",
)
@click.option("--queued-seconds", default=2.0, show_default=True, type=click.FloatRange(min=0),
              help="Simulated seconds a new response stays 'queued'.")
@click.option("--in-progress-seconds", default=5.0, show_default=True, type=click.FloatRange(min=0),
              help="Simulated seconds it then stays 'in_progress' before finishing.")
@click.option("--retention-seconds", default=600.0, show_default=True, type=click.FloatRange(min=0),
              help="Simulated seconds a finished response created with store false, or in a --zdr project, stays "
              "retrievable before answering 404 (the real API: about ten minutes).")
@click.option("--stored-retention-seconds", default=30 * 86_400.0, show_default=True, type=click.FloatRange(min=0),
              help="Simulated seconds a finished response created with store true (what iipub sends) stays "
              "retrievable (the real API: 30 days).")
@click.option("--key-project", "key_projects", metavar="KEY=PROJECT", multiple=True,
              help="The project an API key acts in when a request names none (repeatable; keys not listed share "
              "the default project). A response is read only in the organization and project it was created in.")
@click.option("--zdr/--no-zdr", default=False, show_default=True,
              help="A zero-data-retention project: every response is gone --retention-seconds after it finishes, "
              "store true or not.")
@click.option("--time-scale", default=1.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Simulated seconds per real second (e.g. 60 makes a minute pass every second).")
@click.option("--slow-seconds", default=35.0, show_default=True, type=click.FloatRange(min=0),
              help="Real seconds the 'slow' fault holds an answer back.")
@click.option("--seed", type=int, default=None, help="Seed for fault probabilities and generated text.")
@click.option(
    "--fault",
    "faults",
    multiple=True,
    callback=_parse_faults,
    metavar="NAME[@OP][:PROBABILITY][*TIMES][~START..END]",
    help="Inject a fault into matching requests for the whole run (repeatable). "
    "OP is create, retrieve, cancel, delete or webhook (the webhook_* faults); PROBABILITY defaults to 1; "
    "TIMES (how often it fires) to unlimited; START..END (simulated seconds since start) to always. "
    "See the spec examples below.",
)
@click.option(
    "--outage",
    "outages",
    multiple=True,
    callback=_parse_outages,
    metavar="START:END",
    help="A provider outage: every create answers 503 (service_unavailable) from simulated second START "
    "until END (repeatable).",
)
@click.option("--webhook-url", "webhook_urls", metavar="URL", multiple=True,
              help="Send OpenAI's signed webhooks (response.completed, ...) here when a background response "
              "finishes. Loopback only unless --allow-non-loopback. Repeatable: every endpoint gets every event "
              "(one provider project, several receivers).")
@click.option("--webhook-secret", metavar="whsec_…", envvar="IIPUB_SIM_WEBHOOK_SECRET", show_envvar=True,
              help="The Standard Webhooks secret the webhooks are signed with (required with --webhook-url).")
@click.option("--webhook-late-seconds", default=2.0, show_default=True, type=click.FloatRange(min=0),
              help="Real seconds the webhook_late fault holds an event back (at most, for webhook_out_of_order).")
@click.option("--flex-refusal-rate", default=0.0, show_default=True, type=click.FloatRange(0, 1),
              help="Flex mode: the share of creates asking for service_tier flex answered 429 resource_unavailable "
              "(no flex capacity, nothing created or charged).")
@click.option("--flex-slowdown", default=3.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Flex mode: a flex response stays queued and in progress this many times longer.")
@click.option("--corrupt-lang", metavar="LANG", default=None,
              help="Corrupt one language of every generated edition (e.g. es): its sources link to hosts that are "
              "never public, so only that language fails validation; the others publish.")
@click.option("--corrupt-domain", metavar="HOST", default=None,
              help="With --corrupt-lang: link that language's sources to HOST instead (it fails where the product's "
              "allowed_domains lacks HOST; adding HOST fixes it, then `iipub revalidate ID --lang LANG`).")
@click.option("--output-shape", "output_shapes", multiple=True,
              type=click.Choice(["output_reasoning", "output_phases", "output_parts", "output_refusal", "realistic"]),
              help="Write every response's output in this shape (repeatable): a reasoning item first, commentary "
              "and final_answer phases, the answer in several parts, a refusal; `realistic` is the first three "
              "(what a reasoning model answers). Per response: the fault of the same name.")
@click.option("--no-access-model", "no_access_models", metavar="MODEL", multiple=True,
              help="The project may not use MODEL (repeatable): creates and GET /v1/models/MODEL answer 403 "
              "model_not_found, as OpenAI does.")
@click.option("--unknown-model", "unknown_models", metavar="MODEL", multiple=True,
              help="MODEL does not exist (repeatable): creates and GET /v1/models/MODEL answer 404 model_not_found.")
@click.option("--tokens-per-minute", type=click.IntRange(min=1), default=None,
              help="The organization's tokens-per-minute limit: a create asking more (input and max_output_tokens "
              "together) answers 429 'Request too large', every time.")
@click.option("--port-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the bound port to this file once listening.")
@click.option("--log-requests/--no-log-requests", default=True, show_default=True,
              help="Log one line per API request to stderr.")
def simulator_command(
    host: str,
    port: int,
    allow_non_loopback: bool,
    queued_seconds: float,
    in_progress_seconds: float,
    retention_seconds: float,
    stored_retention_seconds: float,
    zdr: bool,
    key_projects: tuple[str, ...],
    time_scale: float,
    slow_seconds: float,
    seed: int | None,
    faults: tuple[FaultRule, ...],
    outages: tuple[FaultRule, ...],
    webhook_urls: tuple[str, ...],
    webhook_secret: str | None,
    webhook_late_seconds: float,
    flex_refusal_rate: float,
    flex_slowdown: float,
    corrupt_lang: str | None,
    corrupt_domain: str | None,
    output_shapes: tuple[str, ...],
    no_access_models: tuple[str, ...],
    unknown_models: tuple[str, ...],
    tokens_per_minute: int | None,
    port_file: Path | None,
    log_requests: bool,
) -> None:
    """Serve a local imitation of the OpenAI Responses API for tests and demos.

    It speaks POST /v1/responses, GET /v1/responses/{id}, POST /v1/responses/{id}/cancel,
    DELETE /v1/responses/{id} and GET /v1/models/{model} with the official SDK's wire shapes,
    moves each response through queued -> in_progress -> completed, forgets it after the
    retention period, and counts every request. Point OPENAI_BASE_URL at the printed URL.
    Control endpoints under /_sim/ add faults (POST/DELETE /_sim/faults), move the clock
    (POST /_sim/advance), report counts (GET /_sim/stats) and start over (POST /_sim/reset).
    With --webhook-url it POSTs one signed event per finished background response, as OpenAI
    does (retried on failure).
    """
    from iipub.provider.openai.simulator import Simulator, SimulatorOptions  # the server loads only for this command
    from iipub.provider.openai.simulator.server import REALISTIC_OUTPUT

    if corrupt_domain and not corrupt_lang:
        raise click.UsageError("--corrupt-domain needs --corrupt-lang (the language whose sources it replaces)")

    setup_logging(None)  # run on its own (`python -m iipub.cli.simulator_cmd`) too: one logger, on stderr

    options = SimulatorOptions(
        queued_seconds=queued_seconds,
        in_progress_seconds=in_progress_seconds,
        retention_seconds=retention_seconds,
        stored_retention_seconds=stored_retention_seconds,
        zdr=zdr,
        key_projects=tuple(_key_project(kp) for kp in key_projects),
        time_scale=time_scale,
        slow_seconds=slow_seconds,
        seed=seed,
        faults=faults + outages,
        log_requests=log_requests,
        webhook_url=webhook_urls[0] if webhook_urls else None,
        webhook_also=tuple(webhook_urls[1:]),
        webhook_secret=webhook_secret,
        webhook_late_seconds=webhook_late_seconds,
        flex_refusal_rate=flex_refusal_rate,
        flex_slowdown=flex_slowdown,
        corrupt_lang=corrupt_lang,
        corrupt_domain=corrupt_domain,
        output_shapes=tuple(dict.fromkeys(shape for given in output_shapes
                                          for shape in (REALISTIC_OUTPUT if given == "realistic" else (given,)))),
        no_access_models=no_access_models,
        unknown_models=unknown_models,
        tokens_per_minute=tokens_per_minute,
    )
    try:
        sim = Simulator(options, host=host, port=port, allow_non_loopback=allow_non_loopback)
        sim.start()
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None

    done = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        done.set()

    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        if port_file is not None:
            tmp = port_file.with_name(port_file.name + ".tmp")
            tmp.write_text(f"{sim.port}\n", encoding="utf-8")
            os.replace(tmp, port_file)  # readers never see a half-written file
        click.echo(f"iipub simulator listening on {sim.url}")
        if webhook_urls:
            stderr(f"iipub simulator sending webhooks to {', '.join(webhook_urls)}")
        sys.stdout.flush()
        while not done.wait(1.0):
            pass
    finally:
        sim.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    stderr("iipub simulator stopped")


if __name__ == "__main__":  # pragma: no cover - `python -m iipub.cli.simulator_cmd`
    simulator_command()


def _key_project(text: str) -> tuple[str, str]:
    key, sep, project = text.partition("=")
    if not sep or not key.strip() or not project.strip():
        raise click.BadParameter(f"{text!r}: expected KEY=PROJECT", param_hint="--key-project")
    return key.strip(), project.strip()
