"""The configuration's schema: every section as a frozen, `strict`-checked dataclass, the rules
that span keys, and the built-in products. Pure: no file, no environment.

`loading` reads the TOML file and the environment into these sections (the only place
either is read). Secrets (the API key, the webhook secrets) come only from the environment and
are never part of the settings' repr or any log line.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Protocol

from iipub.core.errors import ConfigError, MissingApiKey, UsageError
from iipub.core.strict import Bounds, Checked
from iipub.settings import fingerprint
from iipub.settings.edition_limits import MAX_ITEMS

# Every section is validated when it is built (and again by `dataclasses.replace`, see
# `strict`): strict types (a string is not a number, a bool is not an integer), finite numbers,
# no unknown keys, and bounds that keep every value inside the database's column types and the
# clock arithmetic.
_WEEK = 7 * 86_400.0
Seconds = Annotated[float, Bounds(ge=0, le=_WEEK)]
PositiveSeconds = Annotated[float, Bounds(gt=0, le=_WEEK)]
Timeout = Annotated[float, Bounds(gt=0, le=600)]
Count = Annotated[int, Bounds(ge=1, le=1_000_000)]
Share = Annotated[float, Bounds(gt=0, le=1)]
Text = Annotated[str, Bounds(min_length=1, max_length=10_000)]

DEFAULT_DATABASE_URL = "sqlite:///iipub.sqlite3"
KNOWN_LANGUAGES = frozenset({"en", "es", "fr", "de", "pt", "it", "ar", "zh", "ru", "ja"})
# No product is authorised to give the model tools (web search, code, files): the
# output must come from the prompt alone, so a config that asks for tools is refused.
AUTHORISED_TOOLS: frozenset[str] = frozenset()
NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"  # product names: in paths, URLs and metadata
NAME_RE = re.compile(NAME_PATTERN)
HEADER_SAFE = re.compile(r"[\x21-\x7e]+")

_DEFAULT_PROMPTS = {
    "daily-brief": (
        "Write today's Daily Brief of international affairs: {items} items, each with a "
        "headline, a short factual summary and at least one source link to a reputable "
        "outlet. Produce the edition in every requested language; translations must be "
        "written for native readers, not copied."
    ),
    "revolution-watch": (
        "Write today's Revolution Watch: {items} items on political unrest, protest movements "
        "and regime change around the world, each with a headline, a short factual summary and "
        "at least one source link. Produce the edition in every requested language."
    ),
}
# The static site's product names per language when `[[products]] titles` does not give one.
DEFAULT_TITLES: Mapping[str, Mapping[str, str]] = {
    "daily-brief": {"en": "Daily Brief", "es": "Resumen diario"},
    "revolution-watch": {"en": "Revolution Watch", "es": "Observatorio de revoluciones"},
}
TITLE_MAX = 200
# The values the installed SDK's types allow (openai/types/shared/reasoning_effort.py and
# responses/response_text_config_param.py): a configured value outside them is refused at load.
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
VERBOSITIES = ("low", "medium", "high")
_EFFORT_PATTERN = "^(" + "|".join(REASONING_EFFORTS) + ")$"
_VERBOSITY_PATTERN = "^(" + "|".join(VERBOSITIES) + ")$"


@dataclass(frozen=True)
class ModelRule:
    """What one model (family) accepts: an entry of the model-capability table, built in
    (the provider's) or configured (`[models."<name or prefix*>"]`)."""

    sampling: bool = True  # `temperature` and `top_p`
    reasoning_efforts: tuple[str, ...] = ()  # the `reasoning.effort` values taken; () not taken
    verbosity: bool = False  # `text.verbosity`
    max_output_tokens: int | None = None  # the most a create may ask for (None: not known)
    flex: bool | None = None  # the flex service tier is offered for it (None: not known)
    source: str = "configuration"  # where these values come from
    checked: str | None = None  # the date (ISO) they were last checked against the source

    @property
    def reasons(self) -> bool:
        return bool(self.reasoning_efforts)


class ModelTable(Protocol):
    """Which request keys a provider's models take (the provider's capability table, the
    configured `[models]` entries laid over it): what the configuration is checked against at
    load, so a create the provider would refuse for a parameter never goes out."""

    def refused_keys(self, p: Product, configured: Mapping[str, ModelRule]) -> list[str]:
        """Why the provider would refuse the keys `p` sends, one phrase per key (empty: none)."""

    def output_ceiling(self, model: str, configured: Mapping[str, ModelRule]) -> int | None:
        """The most output tokens `model` takes, when the table knows it."""

    def rule(self, model: str, configured: Mapping[str, ModelRule]) -> tuple[str, ModelRule] | None:
        """The (pattern, entry) that governs `model`, or None for a model the table does not know
        (allowed: the provider checks its keys)."""
# Default output-token cap: about 250 tokens per item and 200 per language's title and summary
# visible, four times that for a reasoning model's hidden tokens plus 8,000, within 16,000..128,000
# (the GPT-5 family's largest output).
_TOKENS_PER_ITEM, _TOKENS_PER_LANGUAGE = 250, 200
OUTPUT_CAP_MIN, OUTPUT_CAP_MAX = 16_000, 128_000


def default_output_token_cap(languages: int, items: int) -> int:
    visible = languages * (_TOKENS_PER_LANGUAGE + items * _TOKENS_PER_ITEM)
    return max(OUTPUT_CAP_MIN, min(OUTPUT_CAP_MAX, 4 * visible + 8_000))


def display_title(name: str, lang: str, titles: Mapping[str, str] | None = None) -> str:
    """A product's name for readers in `lang`: the configured title, else the built-in default,
    else one made from the product name (`world-report` -> `World Report`)."""
    return ((titles or {}).get(lang) or DEFAULT_TITLES.get(name, {}).get(lang)
            or " ".join(part.capitalize() for part in name.split("-") if part) or name)


@dataclass(frozen=True)
class Product(Checked):
    name: Annotated[str, Bounds(pattern=NAME_PATTERN)]
    languages: tuple[str, ...] = ("en", "es")
    opens_at: dt.time = dt.time(5, 0)
    model: Annotated[str, Bounds(min_length=1, max_length=128, pattern=r"^\S+$")] = "gpt-5-mini"
    # Sampling and reasoning keys, each sent only when set (`models` says which models take
    # which: GPT-5 family and o-series models refuse temperature/top_p, chat models refuse
    # reasoning_effort; a product asking a model for a key it refuses is refused at load).
    temperature: Annotated[float, Bounds(ge=0, le=2)] | None = None
    top_p: Annotated[float, Bounds(ge=0, le=1)] | None = None
    reasoning_effort: Annotated[str, Bounds(pattern=_EFFORT_PATTERN)] | None = None
    verbosity: Annotated[str, Bounds(pattern=_VERBOSITY_PATTERN)] | None = None
    prompt: Annotated[str, Bounds(max_length=200_000)] = ""
    items: Annotated[int, Bounds(ge=1, le=MAX_ITEMS)] = 14
    allowed_domains: tuple[str, ...] = ()
    priority: Annotated[int, Bounds(ge=-1_000_000, le=1_000_000)] = 10  # INT column; backfills add 1000
    max_output_bytes: Annotated[int, Bounds(ge=100, le=16_000_000)] = 512_000
    tools: tuple[str, ...] = ()
    # Display only (the static site's headings, per language, as sorted (lang, title) pairs): not
    # part of the fingerprint, so renaming a product never makes a job's generation drift.
    titles: tuple[tuple[str, str], ...] = ()
    # Money (none of it shapes the output, so none of it is in the fingerprint): the service tier
    # asked for until `flex_until_minutes` after the slot opens (then the default tier, so the
    # edition stays on time), the product's own daily token ceiling (None: none) and what a paid
    # create whose usage is not known yet counts for against the ceilings.
    service_tier: Annotated[str, Bounds(pattern=r"^(flex|default)$")] = "default"
    flex_until_minutes: Annotated[int, Bounds(ge=0, le=1440)] = 30
    max_tokens_per_day: Annotated[int, Bounds(ge=1, le=10**12)] | None = None
    estimated_tokens: Annotated[int, Bounds(ge=1, le=10**9)] = 20_000
    # The per-call cost cap sent with every create (`max_output_tokens`: visible and reasoning
    # tokens alike); None: sized from the product's output (`output_token_cap`). Money, not the
    # generation's shape: not in the fingerprint, so raising it never parks a job in flight.
    max_output_tokens: Annotated[int, Bounds(ge=16, le=1_000_000)] | None = None

    def output_token_cap(self) -> int:
        """`max_output_tokens` as configured, else sized from the edition this product asks for."""
        return self.max_output_tokens if self.max_output_tokens is not None else default_output_token_cap(
            len(self.languages), self.items)

    def title(self, lang: str) -> str:
        """The product's name for readers in `lang` (`display_title`)."""
        return display_title(self.name, lang, dict(self.titles))

    def output_schema(self) -> dict[str, Any]:
        from iipub.settings import edition_schema  # pydantic, only once a generation is in question

        return edition_schema.json_schema(self.languages, self.items)

    def fingerprint(self) -> str:
        """SHA-256 of everything that shapes the generation (`fingerprint.document`)."""
        return fingerprint.current(self)

    def fingerprint_matches(self, recorded: str) -> bool:
        """Whether a job's recorded fingerprint names this product as deployed (any version)."""
        return fingerprint.matches(self, recorded)

    def opens_on(self, day: dt.date) -> dt.datetime:
        return dt.datetime.combine(day, self.opens_at)


@dataclass(frozen=True)
class Budgets(Checked):
    max_generation_attempts: Annotated[int, Bounds(ge=1, le=100)] = 3
    max_poll_attempts: Annotated[int, Bounds(ge=1, le=1_000_000)] = 30
    # Tokens paid per UTC day (by payment time) across every product; None: no global ceiling.
    max_tokens_per_day: Annotated[int, Bounds(ge=1, le=10**12)] | None = None


@dataclass(frozen=True)
class ReconcileSettings(Checked):
    lease_seconds: Annotated[float, Bounds(ge=1, le=3600)] = 60.0
    tick_seconds: Annotated[float, Bounds(gt=0, le=3600)] = 50.0
    # The cron wrapper's budget: `timeout -k 5 58` in crontab.example TERMs the run at 58 s (and
    # KILLs it 5 s later). A create starts only while it can still be answered (connect + read
    # timeout) and recorded before then (`Settings.create_window`); 0: no wrapper (tick_seconds only).
    wrapper_seconds: Annotated[float, Bounds(ge=0, le=86400)] = 58.0
    concurrency: Annotated[int, Bounds(ge=1, le=1024)] = 16
    max_in_flight: Count = 100
    # A finished response must be polled well inside its ~10-minute retention.
    poll_interval_seconds: Annotated[float, Bounds(ge=0, le=300)] = 30.0
    # Flex responses run slower: polled less often (still well inside the retention).
    flex_poll_interval_seconds: Annotated[float, Bounds(ge=0, le=300)] = 60.0
    # A parked job (quarantined, suspended) that holds a response and no payload has it read this
    # often by the custody watch, whatever its poll budget: output that finishes is stored.
    custody_watch_seconds: Annotated[float, Bounds(ge=0, le=300)] = 60.0
    backoff_base_seconds: Seconds = 2.0
    backoff_cap_seconds: Seconds = 600.0
    batch_size: Annotated[int, Bounds(ge=1, le=100_000)] = 500
    # A step failing this many times in a row parks the job (step_failing).
    max_step_failures: Annotated[int, Bounds(ge=1, le=1000)] = 5
    # "shadow": observe (polls and custody as usual) and journal what would be done, but no create,
    # no save/publication, no delete, no cancel (the cutover's shadow phase; `reconcile --shadow`).
    mode: Annotated[str, Bounds(pattern=r"^(normal|shadow)$")] = "normal"
    # Every tick makes sure the slots of this many past days exist (backfill priority), so a day
    # on which cron was down is not skipped; 0 turns it off.
    catch_up_days: Annotated[int, Bounds(ge=0, le=31)] = 2
    # false: ticks make no slots (neither today's nor the catch-up days'); only `iipub schedule`
    # and `iipub backfill` do, and the sweep advances the slots that exist.
    auto_schedule: bool = True
    # An idle cron run (nothing can be due) is answered by the wake-up check alone, before the
    # rest of iipub loads; a full run still comes at least this often. 0 turns the check off.
    idle_check_max_seconds: Annotated[float, Bounds(ge=0, le=3600)] = 300.0
    # JSON lines a legacy system writes, one decision each, for `status` to compare shadow
    # decisions with: {"product": P, "edition_date": "YYYY-MM-DD", "action": "create" | "publish"
    # | "delete" | "cancel", "at": ISO time (optional), "response_id": (optional)}.
    legacy_decisions_file: Path | None = None

    @property
    def shadow(self) -> bool:
        return self.mode == "shadow"


@dataclass(frozen=True)
class ProviderSettings(Checked):
    # Which provider `provider.factory` builds: "openai", or "fake" (the in-memory one, for tests).
    kind: Annotated[str, Bounds(pattern=r"^(openai|fake)$")] = "openai"
    connect_timeout_seconds: Timeout = 5.0
    timeout_seconds: Timeout = 30.0
    flex_timeout_seconds: Timeout = 45.0  # a create asked at the flex tier is answered more slowly
    max_connections: Annotated[int, Bounds(ge=1, le=1024)] = 32
    base_url: str | None = None  # from OPENAI_BASE_URL
    # From OPENAI_ORG_ID and OPENAI_PROJECT_ID: sent with creates and reads alike.
    organization: str | None = None
    project: str | None = None
    # A 404, an unrequested `cancelled` or a `failed` is a loss only once it held over this
    # many reads spread over at least this many seconds (well inside the ~10-minute retention).
    loss_confirm_reads: Annotated[int, Bounds(ge=1, le=20)] = 3
    loss_confirm_seconds: Annotated[float, Bounds(ge=0, le=300)] = 60.0
    # The shared create breaker: first cool-down after an unknown create outcome, doubling per
    # failed probe up to the cap; quota/billing problems start at the longer one.
    breaker_cooldown_seconds: Seconds = 60.0
    breaker_quota_cooldown_seconds: Seconds = 900.0
    breaker_cooldown_cap_seconds: Seconds = 3600.0
    # Creates run one at a time (a probe) unless one succeeded this recently.
    healthy_for_seconds: Seconds = 900.0
    max_creates_per_minute: Annotated[int, Bounds(ge=0, le=100_000)] = 0  # 0: no global rate limit
    # The organization's tokens-per-minute limit for the products' models, as its rate tier says
    # (None: not known). `iipub doctor` holds each product's create to it, and raising it lifts a
    # product held for a request too large (the request fingerprint includes it).
    tokens_per_minute: Annotated[int, Bounds(ge=1, le=10**10)] | None = None


@dataclass(frozen=True)
class StaticSinkSettings(Checked):
    root: Path = Path("public")
    site_title: Annotated[str, Bounds(min_length=1, max_length=200)] = "InternationalIntelligence.org"
    base_url: Annotated[str, Bounds(max_length=2000)] = ""  # "" = relative links only
    # The sink's manifest, lock and temporary files, never inside the public tree
    # (default: `default_state_dir(root)`).
    state_dir: Path | None = None


def max_output_bytes(product: Product | None) -> int:
    """The largest output a job's product takes; a product no longer configured keeps the default."""
    return product.max_output_bytes if product is not None else Product.max_output_bytes


def default_state_dir(root: Path) -> Path:
    """Where the static sink keeps its state by default: `<root's parent>/.iipub-state/<root's name>`."""
    root = Path(os.path.abspath(root))
    return root.parent / ".iipub-state" / (root.name or "root")


@dataclass(frozen=True)
class WebhookSinkSettings(Checked):
    url: Annotated[str, Bounds(min_length=1, max_length=2000)]
    secret_env: Annotated[str, Bounds(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")] = "IIPUB_WEBHOOK_SECRET"
    timeout_seconds: Timeout = 10.0
    concurrency: Annotated[int, Bounds(ge=1, le=32)] = 4  # deliveries in flight at once, beside the static sink's
    deadline_seconds: Annotated[float, Bounds(gt=0, le=3600)] = 20.0  # no new delivery starts later in a relay run


@dataclass(frozen=True)
class WebhookSettings(Checked):
    """The provider's webhooks (`iipub.webhooks.receiver`). `enabled` says a receiver is deployed: polls
    of in-flight jobs then relax to `poll_interval_seconds` while verified deliveries keep
    arriving (a completion found by a poll first, or no delivery for `healthy_for_seconds`,
    puts polling back to [reconcile] poll_interval_seconds)."""

    enabled: bool = False
    # A safety net: a lost webhook costs at most this much delay, well inside the provider's
    # ~10-minute retention of a finished response (the same bound as [reconcile]'s).
    poll_interval_seconds: Annotated[float, Bounds(ge=0, le=300)] = 240.0
    # Deliveries are as rare as completions (a few a day): a window of two days keeps the day's
    # first batch relaxed; a completion found by a poll first tightens polling at once anyway.
    healthy_for_seconds: Annotated[float, Bounds(gt=0, le=_WEEK)] = 172_800.0
    max_body_bytes: Annotated[int, Bounds(ge=1024, le=10 * 1024 * 1024)] = 256 * 1024
    # One delivery's time budget, provider reads included: past it the answer is 503 (delivered again).
    request_seconds: Annotated[float, Bounds(ge=1, le=120)] = 20.0
    lease_wait_seconds: Annotated[float, Bounds(ge=0, le=60)] = 3.0  # for a worker's lease to end
    # `iipub webhook serve` (waitress): deliveries settled at once; open connections (more wait in
    # the listen backlog); a request's line, headers and body must all arrive within `read_seconds`
    # (else 408 and closed, however slowly the bytes trickle); an idle keep-alive connection is
    # closed after `keepalive_seconds` and any connection after `keepalive_requests` requests.
    threads: Annotated[int, Bounds(ge=1, le=64)] = 8
    connection_limit: Annotated[int, Bounds(ge=16, le=10_000)] = 500
    backlog: Annotated[int, Bounds(ge=128, le=65_535)] = 1024
    read_seconds: Annotated[float, Bounds(ge=1, le=120)] = 10.0
    keepalive_seconds: Annotated[float, Bounds(ge=1, le=300)] = 15.0
    keepalive_requests: Annotated[int, Bounds(ge=1, le=10_000)] = 100
    # Peers whose X-Forwarded-For is believed (logged beside the peer's own address): addresses or
    # networks, e.g. ["127.0.0.1"] behind a local nginx.
    trusted_proxies: tuple[str, ...] = ()
    # `iipub webhook prune` / `relay --prune`: deliveries and misses older than this are deleted
    # (orphans only once resolved). At least a day: far past the ±5-minute replay window.
    keep_days: Annotated[float, Bounds(ge=1, le=3650)] = 30.0


@dataclass(frozen=True)
class LedgerSettings(Checked):
    # The spend ledger's file, outside the database (so a restored backup cannot forget a paid
    # create), never inside the static sink's public tree. Default: `default_ledger_path`, always
    # absolute; `enabled = false` turns it off (not recommended).
    path: Path | None = None
    enabled: bool = True
    # An optional second copy on another file system (the backup mount), written before the
    # first for every line: a restore that takes the host's copy back with the database leaves
    # this one ahead, and the tick holds creates until the copies agree (runbook.md).
    mirror_path: Path | None = None


@dataclass(frozen=True)
class RelaySettings(Checked):
    tick_seconds: Annotated[float, Bounds(gt=0, le=3600)] = 50.0
    lease_seconds: Annotated[float, Bounds(ge=1, le=3600)] = 60.0
    batch_size: Annotated[int, Bounds(ge=1, le=100_000)] = 200
    backoff_base_seconds: Seconds = 5.0
    backoff_cap_seconds: Seconds = 1800.0
    alert_after_seconds: Seconds = 3600.0
    prune_after_days: Annotated[float, Bounds(ge=0, le=3650)] = 30.0


# Reasons that cannot wait half a day: output may be lost or paid twice if nobody looks.
DEFAULT_CRITICAL_AFTER: tuple[tuple[str, float], ...] = (
    ("crashed_during_create", 3600.0),
    ("create_outcome_unknown", 3600.0),
    ("edition_conflict", 3600.0),
    ("restored_behind_ledger", 3600.0),
    ("operator_cancelled", 7 * 86400.0),  # an operator's own decision: a reminder after a week
)


@dataclass(frozen=True)
class StatusSettings(Checked):
    window_hours: Annotated[float, Bounds(gt=0, le=24 * 366)] = 24.0
    dispatch_slo_seconds: PositiveSeconds = 120.0
    dwell_slo_seconds: PositiveSeconds = 180.0
    overdue_poll_slo_seconds: PositiveSeconds = 90.0
    stranded_after_seconds: PositiveSeconds = 7200.0
    # An edition not published this long after its window opened: WARN.
    late_after_minutes: Annotated[float, Bounds(gt=0, le=_WEEK / 60)] = 60.0
    breaker_crit_after_seconds: PositiveSeconds = 1800.0  # the create breaker open this long: CRIT
    outbox_lag_warn_seconds: PositiveSeconds = 600.0
    outbox_lag_crit_seconds: PositiveSeconds = 3600.0
    # Share of samples that must fall within each SLO (the seed's 99 % / 99 % / 95 %).
    dispatch_slo_target: Share = 0.99
    dwell_slo_target: Share = 0.99
    overdue_poll_slo_target: Share = 0.95
    spend_days: Annotated[int, Bounds(ge=1, le=366)] = 7  # edition dates shown in the spend table, today included
    # This many reconcile runs in a row whose every provider call could not connect: WARNING.
    unreachable_after_ticks: Annotated[int, Bounds(ge=1, le=1000)] = 3
    # The name PRODUCT.md gives [monitoring] heartbeat_after_seconds; either spelling is accepted.
    heartbeat_after_seconds: Seconds | None = None
    # Escalation: a quarantined job (a parked track) unreleased this long is CRITICAL, not a WARNING;
    # `critical_after_by_reason` ([status.critical_after_by_reason] reason = seconds) per reason.
    quarantine_critical_after_seconds: PositiveSeconds = 4 * 3600.0
    parked_critical_after_seconds: PositiveSeconds = 8 * 3600.0
    critical_after_by_reason: tuple[tuple[str, float], ...] = DEFAULT_CRITICAL_AFTER
    # Each SLO's error budget is counted over this rolling window (burn rates over 5m to 6h).
    error_budget_days: Annotated[float, Bounds(gt=0, le=366)] = 30.0
    # A fast burn pages (CRITICAL) once this many bad samples fell within its hour; a WARNING before.
    burn_page_min_bad_events: Annotated[int, Bounds(ge=1, le=10_000)] = 3
    # Disk headroom of the filesystems holding the ledger, the static site, the SQLite database
    # and `log_dir` (cron's logs; unset: not watched): free space (and inodes) below these shares.
    disk_warn_free_percent: Annotated[float, Bounds(gt=0, le=100)] = 15.0
    disk_crit_free_percent: Annotated[float, Bounds(gt=0, le=99)] = 5.0
    disk_crit_free_bytes: Annotated[int, Bounds(ge=0)] = 256 * 1024 * 1024  # and below this: CRITICAL
    log_dir: Annotated[str, Bounds(min_length=1, max_length=4096)] | None = None
    # Growth (from the relay's samples over the last day): full within this many hours at the
    # rate it fills: WARNING, then CRITICAL.
    disk_full_warn_hours: PositiveSeconds = 48.0
    disk_full_crit_hours: PositiveSeconds = 6.0
    # The host clock against the database's (leases and ages use the database's; cron, logs and
    # the ledger's lines the host's): WARNING past this many seconds apart.
    clock_warn_seconds: PositiveSeconds = 5.0

    def critical_after(self, reason: str | None, *, track: bool = False) -> float:
        """How long a job quarantined (a track parked) for `reason` may wait for an operator."""
        for name, seconds in self.critical_after_by_reason:
            if name == reason:
                return seconds
        return self.parked_critical_after_seconds if track else self.quarantine_critical_after_seconds


@dataclass(frozen=True)
class ModelPrice(Checked):
    """What one model's tokens cost per million, at the default tier and at flex (flex prices
    left out are half the default ones: flex is billed at batch rates)."""

    input_per_million: Annotated[float, Bounds(ge=0, le=1_000_000)]
    output_per_million: Annotated[float, Bounds(ge=0, le=1_000_000)]
    flex_input_per_million: Annotated[float, Bounds(ge=0, le=1_000_000)] | None = None
    flex_output_per_million: Annotated[float, Bounds(ge=0, le=1_000_000)] | None = None

    def per_million(self, tier: str) -> tuple[float, float]:
        """(input, output) price per million tokens at `tier`."""
        if tier != "flex":
            return self.input_per_million, self.output_per_million
        return (self.input_per_million / 2 if self.flex_input_per_million is None else self.flex_input_per_million,
                self.output_per_million / 2 if self.flex_output_per_million is None
                else self.flex_output_per_million)


@dataclass(frozen=True)
class Pricing:
    """`[pricing]`: the currency money figures are shown in, and each model's prices."""

    currency: str = "USD"
    models: Mapping[str, ModelPrice] = field(default_factory=dict)


@dataclass(frozen=True)
class MonitoringSettings(Checked):
    """Heartbeats (`iipub.observe.heartbeat`): `status --check` is CRITICAL when no `reconcile` (or no
    `relay`) run finished OK within `heartbeat_after_seconds` (0 turns that check off). After each
    successful run, `ping_url` (optional; `{command}` in it becomes `reconcile` or `relay`) is
    fetched with a GET: a dead-man's switch watched from outside the host."""

    heartbeat_after_seconds: Seconds = 300.0
    ping_url: Annotated[str, Bounds(min_length=1, max_length=2000)] | None = None
    ping_timeout_seconds: Annotated[float, Bounds(gt=0, le=30)] = 5.0


@dataclass(frozen=True)
class Settings:
    database_url: str = DEFAULT_DATABASE_URL
    products: Mapping[str, Product] = field(default_factory=dict)
    budgets: Budgets = Budgets()
    reconcile: ReconcileSettings = ReconcileSettings()
    provider: ProviderSettings = ProviderSettings()
    relay: RelaySettings = RelaySettings()
    status: StatusSettings = StatusSettings()
    static_sink: StaticSinkSettings | None = StaticSinkSettings()
    webhook_sink: WebhookSinkSettings | None = None
    ledger: LedgerSettings = LedgerSettings()
    webhooks: WebhookSettings = WebhookSettings()
    monitoring: MonitoringSettings = MonitoringSettings()
    pricing: Pricing = Pricing()
    # `[models."<name or prefix*>"]`: the operator's entries over the built-in capability table.
    models: Mapping[str, ModelRule] = field(default_factory=dict)
    api_key: str | None = field(default=None, repr=False)
    provider_webhook_secret: str | None = field(default=None, repr=False)  # OPENAI_WEBHOOK_SECRET
    config_path: Path | None = None

    def product(self, name: str) -> Product:
        """The product a command line names (`--product`): an unknown name is a usage error."""
        try:
            return self.products[name]
        except KeyError:
            known = ", ".join(sorted(self.products)) or "none"
            raise UsageError(f"unknown product {name!r} (configured: {known})") from None

    def ledger_path(self) -> Path | None:
        """Where the spend ledger lives, or None when it is off."""
        if not self.ledger.enabled:
            return None
        if self.ledger.path is None:  # `loading` resolves the default when it builds the settings
            raise ConfigError("[ledger] path was never resolved: build settings with iipub.settings.loading")
        return Path(os.path.abspath(self.ledger.path))

    def create_window(self, flex: bool = False) -> float | None:
        """How many seconds after a reconcile run starts a create may still start: the wrapper's
        budget less the start-up before the run, the create's worst case (connect + read timeout,
        flex's when it asks for flex) and the time to record its outcome. None without a wrapper."""
        wrapper = self.reconcile.wrapper_seconds
        if not wrapper:
            return None
        p = self.provider
        worst = p.connect_timeout_seconds + (p.flex_timeout_seconds if flex else p.timeout_seconds)
        return wrapper - CREATE_STARTUP_SECONDS - worst - CREATE_RECORD_SECONDS

    def ledger_mirror_path(self) -> Path | None:
        """The spend ledger's second copy, or None (none configured, or the ledger off)."""
        if not self.ledger.enabled or self.ledger.mirror_path is None:
            return None
        return Path(os.path.abspath(self.ledger.mirror_path))

    def sink_names(self) -> list[str]:
        """The sinks this configuration delivers to, by name."""
        return [name for name, on in (("static", self.static_sink), ("webhook", self.webhook_sink)) if on]

    @property
    def api_key_is_placeholder(self) -> bool:
        """The key is the placeholder `iipub init` writes: nothing can be created with it."""
        return self.api_key == PLACEHOLDER_API_KEY

    def require_api_key(self) -> str:
        if not self.api_key:
            raise MissingApiKey()
        # A key that cannot go into an HTTP header would fail inside the client after the
        # job is charged as in flight; refuse it before any lease.
        if not HEADER_SAFE.fullmatch(self.api_key):
            raise ConfigError("OPENAI_API_KEY contains whitespace or non-ASCII characters")
        return self.api_key

    def heartbeat_limit(self) -> float:
        """How long without an OK reconcile/relay run before `status --check` is CRITICAL (0: off):
        the configured limit, and never less than a tick plus a minute."""
        beat = self.monitoring.heartbeat_after_seconds
        return max(beat, self.reconcile.tick_seconds + 60.0, self.relay.tick_seconds + 60.0) if beat else 0.0

    def require_provider_webhook_secret(self) -> str:
        """The secret the provider signs its webhooks with (`whsec_` + base64, or raw text)."""
        secret = self.provider_webhook_secret
        if not secret:
            raise ConfigError("OPENAI_WEBHOOK_SECRET is not set: the webhook receiver cannot verify deliveries")
        if not HEADER_SAFE.fullmatch(secret):
            raise ConfigError("OPENAI_WEBHOOK_SECRET contains whitespace or non-ASCII characters")
        if secret.startswith("whsec_"):
            try:
                key = base64.b64decode(secret[len("whsec_"):], validate=True)
            except binascii.Error:
                raise ConfigError("OPENAI_WEBHOOK_SECRET: the part after whsec_ is not base64") from None
            if len(key) < 16:
                raise ConfigError("OPENAI_WEBHOOK_SECRET is too short (under 16 bytes of key)")
        return secret

    def webhook_secret(self, env: Mapping[str, str]) -> str:
        """The webhook sink's signing secret, from `env` (the process environment, which the
        caller reads: this module stays a pure description of the configuration)."""
        assert self.webhook_sink is not None
        secret = env.get(self.webhook_sink.secret_env, "")
        if not secret:
            raise ConfigError(f"webhook sink configured but ${self.webhook_sink.secret_env} is not set")
        return secret


# What `iipub init` writes for OPENAI_API_KEY until the operator sets the project's key.
PLACEHOLDER_API_KEY = "sk-CHANGE-ME"
PLACEHOLDER_KEY_LINE = (f"OPENAI_API_KEY is the placeholder {PLACEHOLDER_API_KEY} that `iipub init` writes: creates "
                        "are held until it is set to the project's key (the environment file, then `iipub doctor`)")


def unknown_model_warning(model: str) -> str:
    return (f"model {model!r} is not in the capability table: its parameters are not checked before a create (the "
            f"API checks them; a refused parameter holds that product's creates). Add [models.\"{model}\"] to the "
            f"configuration to check them here")


def default_products() -> dict[str, Product]:
    return {
        "daily-brief": Product(
            name="daily-brief",
            opens_at=dt.time(5, 0),
            prompt=_DEFAULT_PROMPTS["daily-brief"].format(items=14),
            items=14,
            priority=10,
        ),
        "revolution-watch": Product(
            name="revolution-watch",
            opens_at=dt.time(6, 0),
            prompt=_DEFAULT_PROMPTS["revolution-watch"].format(items=8),
            items=8,
            priority=20,
        ),
    }


def check_model_keys(p: Product, where: str, table: ModelTable,
                     configured: Mapping[str, ModelRule] | None = None) -> None:
    """The keys the product sends must be ones its model takes (`table`): one line, at load."""
    problems = table.refused_keys(p, configured or {})
    if problems:
        raise ConfigError(f"{where}: {problems[0]}")


def fit_output_cap(p: Product, table: ModelTable, configured: Mapping[str, ModelRule] | None = None) -> Product:
    """The product with its default output cap held to what its model takes (a gpt-4o product's
    default would otherwise ask for more than the model's 16,384 and be refused)."""
    ceiling = table.output_ceiling(p.model, configured or {})
    if p.max_output_tokens is not None or ceiling is None or p.output_token_cap() <= ceiling:
        return p
    return dataclasses.replace(p, max_output_tokens=ceiling)


def check_product(p: Product, where: str) -> None:
    """Rules on one product that its keys' own bounds do not say."""
    if not p.prompt.strip():
        raise ConfigError(f"{where}: prompt (or prompt_file) is required")
    if len(p.languages) < 1 or len(set(p.languages)) != len(p.languages):
        raise ConfigError(f"{where}: languages must be distinct and non-empty")
    unknown = [lang for lang in p.languages if lang not in KNOWN_LANGUAGES]
    if unknown:
        raise ConfigError(f"{where}: unknown language code(s) {', '.join(unknown)}")
    bad_tools = [t for t in p.tools if t not in AUTHORISED_TOOLS]
    if bad_tools:
        raise ConfigError(f"{where}: tools not authorised for this product: {', '.join(bad_tools)}")
    stray = [lang for lang, _ in p.titles if lang not in p.languages]
    if stray:
        raise ConfigError(f"{where}: titles names language(s) the product does not publish: {', '.join(stray)}")
    if p.temperature is not None and not 0 <= p.temperature <= 2:
        raise ConfigError(f"{where}: temperature must be between 0 and 2")
    if not 1 <= p.items <= MAX_ITEMS:
        raise ConfigError(f"{where}: items must be between 1 and {MAX_ITEMS}")
    not_hosts = [d for d in p.allowed_domains if not _DOMAIN.fullmatch(d.removesuffix("."))]
    if not_hosts:
        # Such an entry matches no source URL, so every paid edition would fail validation.
        raise ConfigError(f"{where}: allowed_domains entries must be bare domain names such as reuters.com (no scheme, "
                          f"path, port or wildcard; a domain allows its subdomains): "
                          f"{', '.join(repr(d[:80]) for d in not_hosts[:5])}")


# A domain name as written in allowed_domains: dot-separated labels (IDN letters allowed), nothing
# a URL would add around it.
_DOMAIN = re.compile(r"(?!-)(?:[^\s/:*?#@\[\]\\.%]+\.)*[^\s/:*?#@\[\]\\.%]+")


# From the wrapper's start to the run's (the interpreter and the framework load), and from a
# create's answer to its outcome recorded (the ledger line and the fenced transition).
CREATE_STARTUP_SECONDS = 3.0
CREATE_RECORD_SECONDS = 2.0


def check_settings(s: Settings) -> None:
    """Rules that span keys (each key's own bounds are checked when its section is built)."""
    problems: list[str] = []
    r, p = s.reconcile, s.provider
    flex = any(product.service_tier == "flex" for product in s.products.values())
    window = s.create_window(flex)
    if window is not None and window <= 0:
        timeout = "flex_timeout_seconds" if flex else "timeout_seconds"
        problems.append(f"[reconcile] wrapper_seconds ({r.wrapper_seconds:g}) leaves no time for a create: the "
                        f"provider's connect_timeout_seconds + {timeout}, {CREATE_STARTUP_SECONDS:g} s to start and "
                        f"{CREATE_RECORD_SECONDS:g} s to record it must fit before the cron wrapper stops the run")
    # A create must finish (or time out) well inside the lease, or a live worker's
    # POST could be mistaken for a crash and its job quarantined needlessly.
    worst_call = p.connect_timeout_seconds + p.timeout_seconds
    if r.lease_seconds < worst_call + 5:
        problems.append(f"[reconcile] lease_seconds ({r.lease_seconds:g}) must exceed the provider's connect + "
                        f"read timeout ({worst_call:g} s) by at least 5 s")
    worst_flex = p.connect_timeout_seconds + p.flex_timeout_seconds
    if any(product.service_tier == "flex" for product in s.products.values()) and r.lease_seconds < worst_flex + 5:
        problems.append(f"[reconcile] lease_seconds ({r.lease_seconds:g}) must exceed the provider's connect + "
                        f"flex_timeout_seconds ({worst_flex:g} s) by at least 5 s: a product asks for flex")
    if r.backoff_cap_seconds < r.backoff_base_seconds:
        problems.append("[reconcile] backoff_cap_seconds must be at least backoff_base_seconds")
    if s.relay.backoff_cap_seconds < s.relay.backoff_base_seconds:
        problems.append("[relay] backoff_cap_seconds must be at least backoff_base_seconds")
    if p.breaker_cooldown_cap_seconds < max(p.breaker_cooldown_seconds, p.breaker_quota_cooldown_seconds):
        problems.append("[provider] breaker_cooldown_cap_seconds must be at least breaker_cooldown_seconds and "
                        "breaker_quota_cooldown_seconds")
    if s.webhooks.enabled and s.webhooks.poll_interval_seconds < r.poll_interval_seconds:
        problems.append(f"[webhooks] poll_interval_seconds ({s.webhooks.poll_interval_seconds:g}) is the relaxed "
                        f"safety-net interval: it must be at least [reconcile] poll_interval_seconds "
                        f"({r.poll_interval_seconds:g})")
    st = s.status
    if st.outbox_lag_crit_seconds < st.outbox_lag_warn_seconds:
        problems.append("[status] outbox_lag_crit_seconds must be at least outbox_lag_warn_seconds")
    if st.disk_crit_free_percent > st.disk_warn_free_percent:
        problems.append("[status] disk_crit_free_percent must be at most disk_warn_free_percent")
    if st.stranded_after_seconds < st.late_after_minutes * 60:
        problems.append("[status] stranded_after_seconds (CRITICAL) must be at least late_after_minutes (WARNING)")
    beat = s.monitoring.heartbeat_after_seconds
    # A limit shorter than a tick is raised to the tick (status uses `heartbeat_limit`), not refused.
    if beat and beat < 60.0:
        problems.append(f"[monitoring] heartbeat_after_seconds ({beat:g}) must be 0 (off) or at least 60 s (cron runs "
                        f"every minute)")
    w = s.webhook_sink
    if w is not None and w.deadline_seconds >= s.relay.tick_seconds:
        problems.append(f"[sinks.webhook] deadline_seconds ({w.deadline_seconds:g}) must be below [relay] "
                        f"tick_seconds ({s.relay.tick_seconds:g})")
    if w is not None and w.deadline_seconds + w.timeout_seconds >= s.relay.lease_seconds:
        problems.append(f"[sinks.webhook] deadline_seconds + timeout_seconds "
                        f"({w.deadline_seconds + w.timeout_seconds:g}) must be below [relay] lease_seconds "
                        f"({s.relay.lease_seconds:g}): a delivery must end while its event is leased")
    if problems:
        raise ConfigError("\n".join(problems))
