"""`iipub doctor`'s checks, pure: what the configuration and the provider's free answers say
about whether a create would go through, one finding per check, before anything is paid for.

The command (`cli/doctor_cmd`) asks the provider what it says of each product's model
(`Provider.look_up`, free of charge) and how large each product's create would be
(`Provider.requested_tokens`, computed locally), then hands the answers here. Each check is a
`Finding`: passed or not, and one line naming what it checked and, when it fails, the remedy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from iipub.core.errors import ConfigError
from iipub.core.wording import plural
from iipub.provider.outcomes import ModelLookup, Standing
from iipub.settings.config import HEADER_SAFE, PLACEHOLDER_API_KEY, ModelTable, Product, Settings

# The checks, in the order they are printed.
KEY, SCOPE, MODEL, PARAMETERS, FLEX, REQUEST_SIZE, WEBHOOK_SECRET = (
    "key", "organization/project", "model", "parameters", "flex", "request size", "webhook secret")


@dataclass(frozen=True)
class Finding:
    check: str  # one of the checks above
    subject: str  # what it is about: OPENAI_API_KEY, a product, the webhook secret
    passed: bool
    text: str

    def line(self) -> str:
        return f"{'ok  ' if self.passed else 'FAIL'} {self.check} ({self.subject}): {self.text}"

    def to_dict(self) -> dict[str, object]:
        return {"check": self.check, "subject": self.subject, "passed": self.passed, "text": self.text}


def key_problem(api_key: str | None) -> str | None:
    """Why the key cannot be used at all, before anything is sent (None: it may be tried)."""
    if not api_key:
        return "OPENAI_API_KEY is not set: set it to the project's key"
    if api_key == PLACEHOLDER_API_KEY:
        return (f"OPENAI_API_KEY is the placeholder {PLACEHOLDER_API_KEY} that `iipub init` writes: set it to "
                "the project's key")
    if not HEADER_SAFE.fullmatch(api_key):
        return ("OPENAI_API_KEY cannot be sent in an HTTP header (whitespace or non-ASCII characters): copy the "
                "key again without them")
    return None


def shown_key(api_key: str) -> str:
    """The key as a line may show it: its kind and last four characters."""
    return f"{api_key[:3]}…{api_key[-4:]}" if len(api_key) > 12 else "a short key"


def key_finding(api_key: str | None, lookups: Mapping[str, ModelLookup]) -> Finding:
    problem = key_problem(api_key)
    if problem is not None:
        return Finding(KEY, "OPENAI_API_KEY", False, problem)
    assert api_key is not None
    refused = [lk for lk in lookups.values() if lk.standing is Standing.KEY_REFUSED]
    if refused:
        return Finding(KEY, "OPENAI_API_KEY", False,
                       f"the API refuses the key {shown_key(api_key)} ({refused[0].why}): set OPENAI_API_KEY to a "
                       "current key of the project (the API keys page of the project)")
    if not lookups:
        return Finding(KEY, "OPENAI_API_KEY", True, f"{shown_key(api_key)} (no product to ask the API about)")
    if all(lk.standing is Standing.UNANSWERED for lk in lookups.values()):
        first = next(iter(lookups.values()))
        return Finding(KEY, "OPENAI_API_KEY", False,
                       f"not checked: the API did not answer ({first.why}); run `iipub doctor` again")
    return Finding(KEY, "OPENAI_API_KEY", True, f"{shown_key(api_key)} accepted by the API")


def _format_problem(value: str, prefix: str, name: str, env: str) -> str | None:
    if not value.startswith(prefix) or len(value) <= len(prefix) or not HEADER_SAFE.fullmatch(value):
        return f"{env} {value!r} is not {name} id (they start with {prefix!r}): copy it from the settings page"
    return None


def scope_finding(settings: Settings, lookups: Mapping[str, ModelLookup]) -> Finding:
    p = settings.provider
    named = ", ".join(part for part in (f"organization {p.organization}" if p.organization else "",
                                        f"project {p.project}" if p.project else "") if part)
    subject = named or "the key's own"
    for value, prefix, name, env in ((p.organization, "org-", "an organization", "OPENAI_ORG_ID"),
                                     (p.project, "proj_", "a project", "OPENAI_PROJECT_ID")):
        problem = _format_problem(value, prefix, name, env) if value else None
        if problem is not None:
            return Finding(SCOPE, subject, False, problem)
    for lk in lookups.values():
        if lk.standing is Standing.SCOPE_REFUSED:
            return Finding(SCOPE, subject, False,
                           f"the API refuses {named or 'the scope'} with this key ({lk.why}): set OPENAI_ORG_ID and "
                           "OPENAI_PROJECT_ID to the key's own organization and project, or unset them")
        if lk.standing is Standing.ACCOUNT_REFUSED:
            return Finding(SCOPE, subject, False,
                           f"the API refuses this account ({lk.why}): nothing can be created from here; see the "
                           "account's standing and the supported countries")
    if named:
        return Finding(SCOPE, subject, True, f"{named}: accepted with the key")
    return Finding(SCOPE, subject, True, "none named: requests act in the key's own project")


def model_finding(product: Product, lookup: ModelLookup | None, settings: Settings) -> Finding:
    model, where = product.model, f"product {product.name}"
    if lookup is None:
        return Finding(MODEL, where, False, f"{model} not checked: the key cannot be used")
    project = settings.provider.project or "the key's project"
    if lookup.standing is Standing.AVAILABLE:
        return Finding(MODEL, where, True, f"{model}: exists, and {project} may use it")
    if lookup.standing is Standing.NO_ACCESS:
        return Finding(MODEL, where, False,
                       f"{model}: {project} has no access to it ({lookup.why}); allow the model in the project's "
                       "limits (model usage), or choose a model the project may use")
    if lookup.standing is Standing.UNKNOWN:
        return Finding(MODEL, where, False,
                       f"{model}: no such model for this account ({lookup.why}); check its spelling, or choose a "
                       "current model (a retired one is gone)")
    if lookup.standing is Standing.UNANSWERED:
        return Finding(MODEL, where, False, f"{model} not checked: the API did not answer ({lookup.why})")
    return Finding(MODEL, where, False, f"{model} not checked: the API refused the request ({lookup.why})")


def parameter_finding(product: Product, settings: Settings, table: ModelTable | None) -> Finding:
    where = f"product {product.name}"
    if table is None:
        return Finding(PARAMETERS, where, True, "this provider keeps no capability table: it checks the keys itself")
    sent = dataclasses.replace(product, max_output_tokens=product.output_token_cap())
    problems = table.refused_keys(sent, settings.models)
    if problems:
        return Finding(PARAMETERS, where, False, "; ".join(problems))
    governing = table.rule(product.model, settings.models)
    if governing is None:
        return Finding(PARAMETERS, where, True,
                       f"{product.model} is not in the capability table: its parameters are not checked here (the "
                       "API checks them; a refusal holds this product only)")
    pattern, rule = governing
    as_of = f", checked {rule.checked}" if rule.checked else ""
    return Finding(PARAMETERS, where, True,
                   f"{product.model} takes what the product sends ([models.\"{pattern}\"]: {rule.source}{as_of})")


def flex_finding(product: Product, settings: Settings, table: ModelTable | None) -> Finding | None:
    """Only for a product that asks for flex."""
    if product.service_tier != "flex":
        return None
    where = f"product {product.name}"
    governing = table.rule(product.model, settings.models) if table is not None else None
    offered = governing[1].flex if governing is not None else None
    if offered is False:
        return Finding(FLEX, where, False,
                       f"{product.model} is not offered at the flex tier: set service_tier = \"default\", or choose "
                       f"a model offered at flex (see [models.\"{governing[0] if governing else product.model}\"] "
                       "flex)")
    if offered is None:
        return Finding(FLEX, where, True, f"{product.model}: flex not known for it (the API decides; a capacity "
                                          f"refusal falls back to the default tier after "
                                          f"{product.flex_until_minutes} min)")
    return Finding(FLEX, where, True, f"{product.model} is offered at flex (the default tier after "
                                      f"{product.flex_until_minutes} min)")


def request_size_finding(product: Product, requested: int, settings: Settings) -> Finding:
    where = f"product {product.name}"
    cap = product.output_token_cap()
    limit = settings.provider.tokens_per_minute
    sized = f"a create asks about {requested:,} tokens ({cap:,} of them max_output_tokens)"
    if limit is None:
        return Finding(REQUEST_SIZE, where, True,
                       f"{sized}; no tokens-per-minute limit configured ([provider] tokens_per_minute) to hold it to")
    if requested > limit:
        return Finding(REQUEST_SIZE, where, False,
                       f"{sized}, more than the tokens-per-minute limit {limit:,}: the API would refuse every create "
                       "(429 Request too large); lower max_output_tokens, ask for fewer items or languages, or "
                       "move to a higher rate tier (then raise [provider] tokens_per_minute)")
    return Finding(REQUEST_SIZE, where, True, f"{sized}, within the tokens-per-minute limit {limit:,}")


def webhook_secret_finding(settings: Settings) -> Finding:
    subject = "OPENAI_WEBHOOK_SECRET"
    if not settings.provider_webhook_secret:
        if settings.webhooks.enabled:
            return Finding(WEBHOOK_SECRET, subject, False,
                           "not set, and [webhooks] enabled = true: set it to the endpoint's signing secret (whsec_…)")
        return Finding(WEBHOOK_SECRET, subject, True, "not set (no webhook receiver is configured)")
    try:
        settings.require_provider_webhook_secret()
    except ConfigError as exc:
        return Finding(WEBHOOK_SECRET, subject, False, f"{exc}: copy the endpoint's signing secret again")
    return Finding(WEBHOOK_SECRET, subject, True, "well formed")


def findings(settings: Settings, lookups: Mapping[str, ModelLookup] | None, requested: Mapping[str, int],
             table: ModelTable | None = None) -> list[Finding]:
    """Every check, in order. `lookups` is what the provider said of each model (lower case)
    (None: the key could not be used, nothing was asked); `requested`, each product's create size;
    `table`, the provider's capability table (None: it keeps none)."""
    asked = lookups or {}
    found = [key_finding(settings.api_key, asked), scope_finding(settings, asked)]
    for product in settings.products.values():
        lookup = asked.get(product.model.lower()) if lookups is not None else None
        found.append(model_finding(product, lookup, settings))
        found.append(parameter_finding(product, settings, table))
        flex = flex_finding(product, settings, table)
        if flex is not None:
            found.append(flex)
        found.append(request_size_finding(product, requested[product.name], settings))
    found.append(webhook_secret_finding(settings))
    return found


def summary(found: list[Finding]) -> str:
    failed = [f for f in found if not f.passed]
    if not failed:
        return f"all {len(found)} checks pass: nothing was paid for"
    return f"{plural(len(failed), 'check')} of {len(found)} failed: nothing was paid for"
