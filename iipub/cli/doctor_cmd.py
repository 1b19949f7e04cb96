"""`iipub doctor`: a preflight that pays for nothing (`iipub.operate.doctor` holds its checks)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import click

from iipub.cli.common import App, emit_json, pass_app
from iipub.core.errors import IipubError


class DoctorFound(IipubError):
    """A check of `iipub doctor` failed (each is printed on its own line)."""

    exit_code = 1


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document to stdout.")
@pass_app
def doctor_command(app: App, as_json: bool) -> None:
    """Check, without paying for anything, that the configured products can be created: the
    API key (not the placeholder, usable in a header, accepted), the organization and project,
    each product's model (`GET /v1/models/{model}`: it exists and the project may use it), its
    parameters against the capability table and flex where asked, its create's size against
    [provider] tokens_per_minute where given, and the webhook secret's format.

    One line per check. Exit 0 only when every check passes, 1 otherwise.
    """
    from iipub.operate import doctor
    from iipub.provider import factory
    from iipub.provider.outcomes import CreateRequest, ModelLookup

    settings = app.settings
    day = dt.datetime.now(dt.UTC).date()  # only sizes the request: any day serves
    lookups: dict[str, ModelLookup] | None = None
    requested: dict[str, int] = {}
    usable = doctor.key_problem(settings.api_key) is None
    # Built with a stand-in key when the key cannot be sent: then it only sizes the creates.
    provider = factory.build(settings if usable else dataclasses.replace(settings, api_key="unusable"))
    try:
        if usable:
            lookups = {}
            for product in settings.products.values():
                model = product.model.lower()
                if model not in lookups:  # one free request per model
                    lookups[model] = provider.look_up(product.model)
        for product in settings.products.values():
            req = CreateRequest("doctor", product, day, 1, product.fingerprint(),
                                tier="flex" if product.service_tier == "flex" else "default")
            requested[product.name] = provider.requested_tokens(req)
    finally:
        provider.close()
    found = doctor.findings(settings, lookups, requested, factory.model_table(settings.provider.kind))
    passed = all(f.passed for f in found)
    if as_json:
        emit_json({"ok": passed, "checks": [f.to_dict() for f in found], "summary": doctor.summary(found)})
    else:
        for finding in found:
            click.echo(finding.line())
        click.echo(doctor.summary(found))
    if not passed:
        raise DoctorFound(doctor.summary(found))

