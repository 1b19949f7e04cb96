"""Settings from the environment and an optional TOML file, validated once.

Secrets (the API key, the webhook secret) come only from the environment and are
never part of `Settings.describe()` or any log line.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from . import edition_schema
from .errors import ConfigError, MissingApiKey

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_Section = TypeVar("_Section", bound="DataclassInstance")

DEFAULT_DATABASE_URL = "sqlite:///iipub.sqlite3"
KNOWN_LANGUAGES = frozenset({"en", "es", "fr", "de", "pt", "it", "ar", "zh", "ru", "ja"})
# No product is authorised to give the model tools (web search, code, files): the
# output must come from the prompt alone, so a config that asks for tools is refused.
AUTHORISED_TOOLS: frozenset[str] = frozenset()
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_HEADER_SAFE = re.compile(r"[\x21-\x7e]+")

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


@dataclass(frozen=True)
class Product:
    name: str
    languages: tuple[str, ...] = ("en", "es")
    opens_at: dt.time = dt.time(5, 0)
    model: str = "gpt-5-mini"
    temperature: float = 0.2
    prompt: str = ""
    items: int = 14
    allowed_domains: tuple[str, ...] = ()
    priority: int = 10
    max_output_bytes: int = 512_000
    tools: tuple[str, ...] = ()

    def output_schema(self) -> dict[str, Any]:
        return edition_schema.json_schema(self.languages, self.items)

    def fingerprint(self) -> str:
        """SHA-256 of everything that shapes the generation: model, prompt, temperature, schema."""
        return _fingerprint(self)

    def opens_on(self, day: dt.date) -> dt.datetime:
        return dt.datetime.combine(day, self.opens_at)


@dataclass(frozen=True)
class Budgets:
    max_generation_attempts: int = 3
    max_poll_attempts: int = 30


@dataclass(frozen=True)
class ReconcileSettings:
    lease_seconds: float = 60.0
    tick_seconds: float = 50.0
    concurrency: int = 16
    max_in_flight: int = 100
    poll_interval_seconds: float = 30.0
    backoff_base_seconds: float = 2.0
    backoff_cap_seconds: float = 600.0
    batch_size: int = 500
    max_step_failures: int = 5  # a step failing this many times in a row parks the job (step_failing)


@dataclass(frozen=True)
class ProviderSettings:
    connect_timeout_seconds: float = 5.0
    timeout_seconds: float = 30.0
    max_connections: int = 32
    base_url: str | None = None  # from OPENAI_BASE_URL
    # A 404, an unrequested `cancelled` or a `failed` is a loss only once it held over this
    # many reads spread over at least this many seconds (well inside the ~10-minute retention).
    loss_confirm_reads: int = 3
    loss_confirm_seconds: float = 60.0
    # The shared create breaker: first cool-down after an unknown create outcome, doubling per
    # failed probe up to the cap; quota/billing problems start at the longer one.
    breaker_cooldown_seconds: float = 60.0
    breaker_quota_cooldown_seconds: float = 900.0
    breaker_cooldown_cap_seconds: float = 3600.0
    # Creates run one at a time (a probe) unless one succeeded this recently.
    healthy_for_seconds: float = 900.0
    max_creates_per_minute: int = 0  # 0: no global rate limit


@dataclass(frozen=True)
class StaticSink:
    root: Path = Path("public")
    site_title: str = "InternationalIntelligence.org"
    base_url: str = ""


@dataclass(frozen=True)
class WebhookSink:
    url: str
    secret_env: str = "IIPUB_WEBHOOK_SECRET"
    timeout_seconds: float = 10.0


@dataclass(frozen=True)
class RelaySettings:
    tick_seconds: float = 50.0
    lease_seconds: float = 60.0
    batch_size: int = 200
    backoff_base_seconds: float = 5.0
    backoff_cap_seconds: float = 1800.0
    alert_after_seconds: float = 3600.0
    prune_after_days: float = 30.0


@dataclass(frozen=True)
class StatusSettings:
    window_hours: float = 24.0
    dispatch_slo_seconds: float = 120.0
    dwell_slo_seconds: float = 180.0
    overdue_poll_slo_seconds: float = 90.0
    stranded_after_seconds: float = 7200.0
    late_after_minutes: float = 60.0  # an edition not published this long after its window opened: WARN
    breaker_crit_after_seconds: float = 1800.0  # the create breaker open this long: CRIT
    outbox_lag_warn_seconds: float = 600.0
    outbox_lag_crit_seconds: float = 3600.0
    # Share of samples that must fall within each SLO (the seed's 99 % / 99 % / 95 %).
    dispatch_slo_target: float = 0.99
    dwell_slo_target: float = 0.99
    overdue_poll_slo_target: float = 0.95
    spend_days: int = 7  # edition dates shown in the spend table, today included


@dataclass(frozen=True)
class Settings:
    database_url: str = DEFAULT_DATABASE_URL
    products: Mapping[str, Product] = field(default_factory=dict)
    budgets: Budgets = Budgets()
    reconcile: ReconcileSettings = ReconcileSettings()
    provider: ProviderSettings = ProviderSettings()
    relay: RelaySettings = RelaySettings()
    status: StatusSettings = StatusSettings()
    static_sink: StaticSink | None = StaticSink()
    webhook_sink: WebhookSink | None = None
    api_key: str | None = field(default=None, repr=False)
    config_path: Path | None = None

    def product(self, name: str) -> Product:
        try:
            return self.products[name]
        except KeyError:
            known = ", ".join(sorted(self.products)) or "none"
            raise ConfigError(f"unknown product {name!r} (configured: {known})") from None

    def require_api_key(self) -> str:
        if not self.api_key:
            raise MissingApiKey()
        # A key that cannot go into an HTTP header would fail inside the client after the
        # job is charged as in flight; refuse it before any lease.
        if not _HEADER_SAFE.fullmatch(self.api_key):
            raise ConfigError("OPENAI_API_KEY contains whitespace or non-ASCII characters")
        return self.api_key

    def webhook_secret(self) -> str:
        assert self.webhook_sink is not None
        secret = os.environ.get(self.webhook_sink.secret_env, "")
        if not secret:
            raise ConfigError(f"webhook sink configured but ${self.webhook_sink.secret_env} is not set")
        return secret


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


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Build the settings from `env` (default: os.environ) and `$IIPUB_CONFIG` if set."""
    env = os.environ if env is None else env
    data: dict[str, Any] = {}
    path: Path | None = None
    if env.get("IIPUB_CONFIG"):
        path = Path(env["IIPUB_CONFIG"])
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    settings = settings_from_dict(data, base_dir=path.parent if path else Path.cwd())
    return replace(
        settings,
        database_url=env.get("IIPUB_DATABASE_URL") or data.get("database_url") or DEFAULT_DATABASE_URL,
        api_key=env.get("OPENAI_API_KEY") or None,
        provider=replace(settings.provider, base_url=env.get("OPENAI_BASE_URL") or settings.provider.base_url),
        config_path=path,
    )


def settings_from_dict(data: Mapping[str, Any], base_dir: Path = Path(".")) -> Settings:
    known = {"database_url", "budgets", "reconcile", "provider", "relay", "status", "products", "sinks"}
    _no_unknown("top level", data, known)
    budgets = _section(Budgets, data.get("budgets"), "budgets")
    reconcile = _section(ReconcileSettings, data.get("reconcile"), "reconcile")
    provider = _section(ProviderSettings, data.get("provider"), "provider")
    relay = _section(RelaySettings, data.get("relay"), "relay")
    status = _section(StatusSettings, data.get("status"), "status")
    products = default_products()
    if "products" in data:
        if not isinstance(data["products"], list) or not data["products"]:
            raise ConfigError("[[products]] must be a non-empty array of tables")
        products = {}
        for raw in data["products"]:
            p = _product(raw, base_dir)
            if p.name in products:
                raise ConfigError(f"product {p.name!r} is declared twice")
            products[p.name] = p
    sinks = data.get("sinks", {})
    if not isinstance(sinks, dict):
        raise ConfigError("[sinks] must be a table")
    _no_unknown("[sinks]", sinks, {"static", "webhook"})
    static: StaticSink | None = StaticSink()
    if "static" in sinks:
        raw = dict(sinks["static"])
        if raw.pop("enabled", True) is False:
            static = None
        else:
            if "root" in raw:
                root = Path(str(raw["root"]))
                raw["root"] = root if root.is_absolute() else base_dir / root
            static = _section(StaticSink, raw, "sinks.static")
    webhook = None
    if "webhook" in sinks:
        raw = dict(sinks["webhook"])
        if not str(raw.get("url", "")).startswith(("http://", "https://")):
            raise ConfigError("[sinks.webhook] url must be an http(s) URL")
        webhook = _section(WebhookSink, raw, "sinks.webhook")
    settings = Settings(
        products=products,
        budgets=budgets,
        reconcile=reconcile,
        provider=provider,
        relay=relay,
        status=status,
        static_sink=static,
        webhook_sink=webhook,
    )
    _check(settings)
    return settings


def _check(s: Settings) -> None:
    if s.budgets.max_generation_attempts < 1 or s.budgets.max_poll_attempts < 1:
        raise ConfigError("budgets must be at least 1")
    r = s.reconcile
    if r.concurrency < 1 or r.max_in_flight < 1 or r.batch_size < 1 or r.max_step_failures < 1:
        raise ConfigError("reconcile.concurrency, max_in_flight, batch_size and max_step_failures must be at least 1")
    if r.tick_seconds <= 0 or r.poll_interval_seconds < 0:
        raise ConfigError("reconcile.tick_seconds must be positive")
    # A create must finish (or time out) well inside the lease, or a live worker's
    # POST could be mistaken for a crash and its job quarantined needlessly.
    worst_call = s.provider.connect_timeout_seconds + s.provider.timeout_seconds
    if r.lease_seconds < worst_call + 5:
        raise ConfigError(
            f"reconcile.lease_seconds ({r.lease_seconds:g}) must exceed the provider's connect + read "
            f"timeout ({worst_call:g} s) by at least 5 s"
        )
    if s.relay.lease_seconds <= 0 or s.relay.tick_seconds <= 0:
        raise ConfigError("relay lease and tick must be positive")
    p = s.provider
    if p.loss_confirm_reads < 1 or not 0 <= p.loss_confirm_seconds <= 300:
        raise ConfigError("[provider] loss_confirm_reads must be at least 1 and loss_confirm_seconds between 0 "
                          "and 300 (a finished response must still be in custody well inside its retention)")
    if min(p.breaker_cooldown_seconds, p.breaker_quota_cooldown_seconds, p.healthy_for_seconds) < 0 \
            or p.breaker_cooldown_cap_seconds < p.breaker_cooldown_seconds or p.max_creates_per_minute < 0:
        raise ConfigError("[provider] breaker cool-downs must be non-negative (cap >= base) and "
                          "max_creates_per_minute at least 0")


def _product(raw: Any, base_dir: Path) -> Product:
    if not isinstance(raw, dict):
        raise ConfigError("each [[products]] entry must be a table")
    raw = dict(raw)
    name = str(raw.get("name", ""))
    where = f"product {name!r}" if name else "a [[products]] entry"
    if not _NAME_RE.match(name):
        raise ConfigError(f"{where}: name must be lower-case letters, digits and dashes")
    if "prompt_file" in raw:
        pf = base_dir / str(raw.pop("prompt_file"))
        try:
            raw["prompt"] = pf.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{where}: cannot read prompt_file {pf}: {exc.strerror}") from None
    if "opens_at" in raw:
        try:
            raw["opens_at"] = dt.time.fromisoformat(str(raw["opens_at"]))
        except ValueError:
            raise ConfigError(f"{where}: opens_at must be HH:MM (UTC)") from None
    for key in ("languages", "allowed_domains", "tools"):
        if key in raw:
            if not isinstance(raw[key], list) or not all(isinstance(v, str) for v in raw[key]):
                raise ConfigError(f"{where}: {key} must be a list of strings")
            raw[key] = tuple(raw[key])
    p = _section(Product, raw, where)
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
    if not 0 <= p.temperature <= 2:
        raise ConfigError(f"{where}: temperature must be between 0 and 2")
    if not 1 <= p.items <= edition_schema.MAX_ITEMS:
        raise ConfigError(f"{where}: items must be between 1 and {edition_schema.MAX_ITEMS}")
    return p


def _section(cls: type[_Section], raw: Any, where: str) -> _Section:
    if raw is None:
        return cls()
    if not isinstance(raw, dict):
        raise ConfigError(f"[{where}] must be a table")
    fields = cls.__dataclass_fields__
    _no_unknown(f"[{where}]", raw, set(fields))
    values = {}
    for key, value in raw.items():
        default = fields[key].default
        expected = type(default) if default is not None and not isinstance(default, (tuple, Path)) else None
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(default, Path):
            value = Path(value)
        if expected in (int, float, str, bool) and not isinstance(value, expected):
            raise ConfigError(f"[{where}] {key} must be a {expected.__name__}, got {value!r}")
        if expected in (int, float) and isinstance(value, bool):
            raise ConfigError(f"[{where}] {key} must be a number")
        values[key] = value
    try:
        return cls(**values)
    except TypeError as exc:
        raise ConfigError(f"[{where}] {exc}") from None


def _no_unknown(where: str, raw: Mapping[str, Any], known: set[str]) -> None:
    extra = sorted(set(raw) - known)
    if extra:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(extra)}")


@functools.lru_cache(maxsize=64)
def _fingerprint(product: Product) -> str:
    # Cached: a product is frozen, and every poll checks its job against it.
    doc = {
        "model": product.model,
        "prompt": product.prompt,
        "temperature": product.temperature,
        "schema": product.output_schema(),
        "items": product.items,
        "languages": list(product.languages),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
