"""The configuration as read: the TOML file named by $IIPUB_CONFIG and the environment, turned
into `config`'s sections (paths resolved against the file's folder, prompt files read, the
default spend ledger placed). The only module that reads either; `config` stays a pure schema.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import structlog

from iipub.core.errors import ConfigError
from iipub.core.strict import InvalidValues
from iipub.model.states import QUARANTINE_REASONS, TRACK_PARKED
from iipub.settings import environment
from iipub.settings.config import (
    DEFAULT_CRITICAL_AFTER,
    DEFAULT_DATABASE_URL,
    HEADER_SAFE,
    NAME_RE,
    REASONING_EFFORTS,
    TITLE_MAX,
    Budgets,
    LedgerSettings,
    ModelPrice,
    ModelRule,
    ModelTable,
    MonitoringSettings,
    Pricing,
    Product,
    ProviderSettings,
    ReconcileSettings,
    RelaySettings,
    Settings,
    StaticSinkSettings,
    StatusSettings,
    WebhookSettings,
    WebhookSinkSettings,
    check_model_keys,
    check_product,
    check_settings,
    default_products,
    fit_output_cap,
    unknown_model_warning,
)

log = structlog.get_logger("iipub.settings")

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_Section = TypeVar("_Section", bound="DataclassInstance")

LEDGER_FILE = "spend-ledger.jsonl"


def default_ledger_path(config_path: Path | None, env: Mapping[str, str]) -> Path:
    """Where the spend ledger lives when `[ledger] path` is not set, always absolute and never
    next to a SQLite file (a backup of the database's directory must not take it along):

    1. `<the configuration file's directory>/state/spend-ledger.jsonl` when IIPUB_CONFIG is set;
    2. `$XDG_STATE_HOME/iipub/spend-ledger.jsonl` when XDG_STATE_HOME is an absolute path;
    3. `/var/lib/iipub/spend-ledger.jsonl` when /var/lib/iipub is a writable directory;
    4. `~/.local/state/iipub/spend-ledger.jsonl`.
    """
    if config_path is not None:
        return Path(os.path.abspath(config_path)).parent / "state" / LEDGER_FILE
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "iipub" / LEDGER_FILE
    system = Path("/var/lib/iipub")
    if system.is_dir() and os.access(system, os.W_OK | os.X_OK):
        return system / LEDGER_FILE
    return Path(os.path.expanduser("~")) / ".local" / "state" / "iipub" / LEDGER_FILE


def _ledger_outside_public(settings: Settings) -> None:
    """A ledger inside the static sink's public tree would be served to anyone: refused."""
    static = settings.static_sink
    if static is None:
        return
    for key, path in (("path", settings.ledger_path()), ("mirror_path", settings.ledger_mirror_path())):
        if path is None:
            continue
        real_path, real_root = Path(os.path.realpath(path)), Path(os.path.realpath(static.root))
        if _inside(path, static.root) or real_root == real_path or real_root in real_path.parents:
            raise ConfigError(f"[ledger] {key} ({path}) must be outside [sinks.static] root ({static.root}): "
                              "the public tree is served to anyone")
    if settings.ledger_mirror_path() is not None and settings.ledger_mirror_path() == settings.ledger_path():
        raise ConfigError("[ledger] mirror_path must be another file than [ledger] path (a second copy)")


# A provider kind's capability table (`provider.factory.model_table`), or None: keys not checked.
ModelTables = Callable[[str], "ModelTable | None"]


def load_settings(env: Mapping[str, str] | None = None, *, models: ModelTables | None = None) -> Settings:
    """Build the settings from `env` (default: os.environ) and `$IIPUB_CONFIG` if set; each
    product's keys are checked against `models` of the configured provider kind."""
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
    # Relative paths (defaults included) are the configuration file's folder's, whatever the
    # working directory: cron, an operator's shell and the WSGI server see the same files.
    base_dir = Path(os.path.abspath(path)).parent if path else Path.cwd()
    settings = settings_from_dict(data, base_dir=base_dir, config_path=path, env=env,
                                  models=models)
    in_file = data.get("database_url")
    if in_file is not None and (not isinstance(in_file, str) or not in_file.strip()):
        raise ConfigError(f"database_url in {path} must be a database URL in quotes, e.g. "
                          '"mysql+pymysql://user:pass@host/db" or "sqlite:////var/lib/iipub/iipub.sqlite3"')
    return replace(
        settings,
        database_url=env.get("IIPUB_DATABASE_URL") or in_file or DEFAULT_DATABASE_URL,
        api_key=env.get(environment.API_KEY) or None,
        provider_webhook_secret=env.get(environment.WEBHOOK_SECRET) or None,
        provider=replace(settings.provider, base_url=env.get(environment.BASE_URL) or settings.provider.base_url,
                         organization=env.get(environment.ORGANIZATION) or settings.provider.organization,
                         project=env.get(environment.PROJECT) or settings.provider.project),
        config_path=path,
    )


def settings_from_dict(data: Mapping[str, Any], base_dir: Path = Path("."), *, config_path: Path | None = None,
                       env: Mapping[str, str] | None = None, models: ModelTables | None = None) -> Settings:
    """The settings a TOML document describes, relative paths under `base_dir`. The default spend
    ledger is placed once, here, from `config_path` and `env` (default: os.environ)."""
    known = {"database_url", "budgets", "reconcile", "provider", "relay", "status", "products", "sinks", "ledger",
             "webhooks", "monitoring", "pricing", "models"}
    _no_unknown("top level", data, known)
    budgets = _section(Budgets, data.get("budgets"), "budgets")
    reconcile_raw = data.get("reconcile")
    if isinstance(reconcile_raw, dict) and "legacy_decisions_file" in reconcile_raw:
        reconcile_raw = {**reconcile_raw, "legacy_decisions_file": _path(
            reconcile_raw["legacy_decisions_file"], "[reconcile] legacy_decisions_file", "a file path", base_dir)}
    reconcile = _section(ReconcileSettings, reconcile_raw, "reconcile")
    provider = _section(ProviderSettings, data.get("provider"), "provider")
    relay = _section(RelaySettings, data.get("relay"), "relay")
    status = _section(StatusSettings, _status_raw(data.get("status"), base_dir), "status")
    webhooks = _webhooks(data.get("webhooks"))
    monitoring = _monitoring(data.get("monitoring"), status)
    ledger_raw = data.get("ledger")
    if isinstance(ledger_raw, dict):
        for key in ("path", "mirror_path"):
            if key in ledger_raw:
                ledger_raw = {**ledger_raw, key: _path(ledger_raw[key], f"[ledger] {key}", "a file path", base_dir)}
    ledger = _section(LedgerSettings, ledger_raw, "ledger")
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
    model_rules = _models(data.get("models"))
    table = models(provider.kind) if models is not None else None
    if table is not None:
        for p in products.values():
            check_model_keys(p, f"product {p.name!r}", table, model_rules)
        for model in dict.fromkeys(p.model for p in products.values()):
            if table.rule(model, model_rules) is None:
                # Allowed: the API checks its parameters. Said once per model and load.
                log.warning("model_unknown", model=model, message=unknown_model_warning(model))
        products = {name: fit_output_cap(p, table, model_rules) for name, p in products.items()}
    sinks = data.get("sinks", {})
    if not isinstance(sinks, dict):
        raise ConfigError("[sinks] must be a table")
    _no_unknown("[sinks]", sinks, {"static", "webhook"})
    static: StaticSinkSettings | None = StaticSinkSettings()
    for name in ("static", "webhook"):
        if name in sinks and not isinstance(sinks[name], dict):
            raise ConfigError(f"[sinks.{name}] must be a table, got {type(sinks[name]).__name__} "
                              f"{_shown(sinks[name])}")
    if "static" in sinks:
        raw = dict(sinks["static"])
        enabled = raw.pop("enabled", True)
        if not isinstance(enabled, bool):
            raise ConfigError(f"[sinks.static] enabled must be true or false (got {_shown(enabled)})")
        if not enabled:
            static = None
        else:
            for key in ("root", "state_dir"):
                if key in raw:
                    raw[key] = _path(raw[key], f"[sinks.static] {key}", "a directory path", base_dir)
            if "base_url" in raw and raw["base_url"] != "" and not _is_base_url(raw["base_url"]):
                raise ConfigError(f"[sinks.static] base_url must be an http(s) URL without query or fragment "
                                  f"(got {_shown(raw['base_url'])})")
            static = _section(StaticSinkSettings, raw, "sinks.static")
    if static is not None and not static.root.is_absolute():  # the default `public` too
        static = replace(static, root=base_dir / static.root)
    if static is not None and static.state_dir is not None and _inside(static.state_dir, static.root):
        raise ConfigError(f"[sinks.static] state_dir ({static.state_dir}) must be outside root "
                          f"({static.root}): the public tree holds pages, feeds and editions only")
    webhook = None
    if "webhook" in sinks:
        raw = dict(sinks["webhook"])
        if not isinstance(raw.get("url"), str) or not raw["url"].startswith(("http://", "https://")):
            raise ConfigError(f"[sinks.webhook] url must be an http(s) URL (got {_shown(raw.get('url'))})")
        webhook = _section(WebhookSinkSettings, raw, "sinks.webhook")
    settings = Settings(
        products=products,
        budgets=budgets,
        reconcile=reconcile,
        provider=provider,
        relay=relay,
        status=status,
        static_sink=static,
        webhook_sink=webhook,
        ledger=ledger,
        webhooks=webhooks,
        monitoring=monitoring,
        pricing=_pricing(data.get("pricing")),
        models=model_rules,
    )
    check_settings(settings)
    if settings.ledger.path is None:
        default = default_ledger_path(config_path, os.environ if env is None else env)
        settings = replace(settings, ledger=replace(settings.ledger, path=default))
    _ledger_outside_public(settings)
    return settings


def _webhooks(raw: Any) -> WebhookSettings:
    """[webhooks], with trusted_proxies read as IP addresses or networks."""
    if isinstance(raw, dict) and "trusted_proxies" in raw:
        proxies = raw["trusted_proxies"]
        if not isinstance(proxies, list) or not all(isinstance(p, str) for p in proxies):
            raise ConfigError(f"[webhooks] trusted_proxies must be a list of IP addresses or networks "
                              f"(got {_shown(proxies)})")
        for p in proxies:
            try:
                ipaddress.ip_network(p, strict=False)
            except ValueError:
                raise ConfigError(f"[webhooks] trusted_proxies: {_shown(p)} is not an IP address or network") from None
        raw = {**raw, "trusted_proxies": tuple(proxies)}
    webhooks = _section(WebhookSettings, raw, "webhooks")
    if webhooks.threads > webhooks.connection_limit:
        raise ConfigError(f"[webhooks] threads ({webhooks.threads}) must not exceed connection_limit "
                          f"({webhooks.connection_limit})")
    return webhooks


def _models(raw: Any) -> dict[str, ModelRule]:
    """`[models."gpt-5-mini"] sampling = false, reasoning_efforts = [...], verbosity = true`: the
    operator's entries of the provider's model-capability table (`ModelTable`)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"[models] must be a table of model = {{ capabilities }} (got {_shown(raw)})")
    rules: dict[str, ModelRule] = {}
    for pattern, entry in raw.items():
        label = f'[models."{pattern}"]'
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}\*?", pattern):
            raise ConfigError(f"{label}: a model name, or a prefix ending in * (got {_shown(pattern)})")
        if not isinstance(entry, dict):
            raise ConfigError(f"{label} must be a table (got {_shown(entry)})")
        _no_unknown(label, entry, {"sampling", "reasoning_efforts", "verbosity", "max_output_tokens", "flex"})
        ceiling = entry.get("max_output_tokens")
        if ceiling is not None and (isinstance(ceiling, bool) or not isinstance(ceiling, int)
                                    or not 16 <= ceiling <= 10_000_000):
            raise ConfigError(f"{label} max_output_tokens must be a whole number from 16 (got {_shown(ceiling)})")
        for key in ("sampling", "verbosity", "flex"):
            if key in entry and not isinstance(entry[key], bool):
                raise ConfigError(f"{label} {key} must be true or false (got {_shown(entry[key])})")
        efforts = entry.get("reasoning_efforts", [])
        if not isinstance(efforts, list) or any(e not in REASONING_EFFORTS for e in efforts):
            raise ConfigError(f"{label} reasoning_efforts must be a list of {', '.join(REASONING_EFFORTS)} "
                              f"(got {_shown(efforts)})")
        rules[pattern] = ModelRule(sampling=entry.get("sampling", True), reasoning_efforts=tuple(efforts),
                                   verbosity=entry.get("verbosity", False), max_output_tokens=ceiling,
                                   flex=entry.get("flex"))
    return rules


def _pricing(raw: Any) -> Pricing:
    """`[pricing] currency = "USD"` and `[pricing.models."<model>"] input_per_million = …`."""
    if raw is None:
        return Pricing()
    if not isinstance(raw, dict):
        raise ConfigError(f"[pricing] must be a table, got {type(raw).__name__} {_shown(raw)}")
    _no_unknown("[pricing]", raw, {"currency", "models"})
    currency = raw.get("currency", "USD")
    if not isinstance(currency, str) or not re.fullmatch(r"[A-Za-z$€£¥]{1,8}", currency):
        raise ConfigError(f"[pricing] currency must be a short currency code such as USD (got {_shown(currency)})")
    models = raw.get("models", {})
    if not isinstance(models, dict):
        raise ConfigError(f"[pricing.models] must be a table of model = {{ prices }} (got {_shown(models)})")
    for name, prices in models.items():
        missing = [k for k in ("input_per_million", "output_per_million")
                   if not isinstance(prices, dict) or k not in prices]
        if isinstance(prices, dict) and missing:
            raise ConfigError(f"[pricing.models.{name}] needs {' and '.join(missing)}")
    return Pricing(currency, {str(name): _section(ModelPrice, prices, f"pricing.models.{name}")
                              for name, prices in models.items()})


def _monitoring(raw: Any, status: StatusSettings) -> MonitoringSettings:
    """[monitoring], with [status] heartbeat_after_seconds (PRODUCT.md's name) folded in."""
    if isinstance(raw, dict) and "ping_url" in raw:
        problem = _ping_url_problem(raw["ping_url"])
        if problem:
            raise ConfigError(f"[monitoring] ping_url {problem} (got {_shown(raw['ping_url'])})")
    monitoring = _section(MonitoringSettings, raw, "monitoring")
    alias = status.heartbeat_after_seconds
    if alias is None:
        return monitoring
    if isinstance(raw, dict) and "heartbeat_after_seconds" in raw and raw["heartbeat_after_seconds"] != alias:
        raise ConfigError("[status] heartbeat_after_seconds and [monitoring] heartbeat_after_seconds disagree: "
                          "set one of them")
    return replace(monitoring, heartbeat_after_seconds=alias)


def _ping_url_problem(url: Any) -> str | None:
    """Why `url` cannot be the dead-man's-switch URL, or None."""
    if not isinstance(url, str):
        return "must be an http(s) URL"
    if not url.startswith(("http://", "https://")) or not HEADER_SAFE.fullmatch(url):
        return "must be an http(s) URL without spaces or non-ASCII characters"
    try:
        parts = urlsplit(url.replace("{command}", "command"))
        parts.port  # noqa: B018 - parsing the port validates it
    except ValueError:
        return "is not a valid URL"
    if not parts.hostname:
        return "has no host"
    if "{" in parts.geturl() or "}" in parts.geturl():
        return "may hold only the placeholder {command}"
    if parts.username or parts.password:
        return "must not carry credentials"
    return None


def _product(raw: Any, base_dir: Path) -> Product:
    if not isinstance(raw, dict):
        raise ConfigError("each [[products]] entry must be a table")
    raw = dict(raw)
    name = str(raw.get("name", ""))
    where = f"product {name!r}" if name else "a [[products]] entry"
    if not NAME_RE.fullmatch(name):
        raise ConfigError(f"{where}: name must be lower-case letters, digits and dashes")
    if "prompt_file" in raw:
        if not isinstance(raw["prompt_file"], str) or not raw["prompt_file"]:
            raise ConfigError(f"{where}: prompt_file must be a path (got {_shown(raw['prompt_file'])})")
        pf = base_dir / raw.pop("prompt_file")
        try:
            raw["prompt"] = pf.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{where}: prompt_file {pf} is not UTF-8 text") from None
        except OSError as exc:
            raise ConfigError(f"{where}: cannot read prompt_file {pf}: {exc.strerror or exc}") from None
    if "opens_at" in raw:
        text = raw["opens_at"]
        try:
            if not isinstance(text, str) or not re.fullmatch(r"\d{2}:\d{2}", text):
                raise ValueError
            raw["opens_at"] = dt.time.fromisoformat(text)
        except ValueError:
            raise ConfigError(f"{where}: opens_at must be HH:MM, a UTC time without an offset "
                              f"(got {_shown(text)})") from None
    for key in ("languages", "allowed_domains", "tools"):
        if key in raw:
            if not isinstance(raw[key], list) or not all(isinstance(v, str) for v in raw[key]):
                raise ConfigError(f"{where}: {key} must be a list of strings")
            raw[key] = tuple(raw[key])
    if "titles" in raw:
        raw["titles"] = _titles(raw["titles"], where)
    p = _section(Product, raw, where)
    check_product(p, where)
    return p


def _path(value: Any, label: str, kind: str, base_dir: Path) -> Path:
    """A path setting: non-blank text, relative to the config file's folder unless absolute."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{label} must be {kind} (got {_shown(value)})")
    given = Path(value)
    return given if given.is_absolute() else base_dir / given


def _inside(path: Path, folder: Path) -> bool:
    path, folder = Path(os.path.abspath(path)), Path(os.path.abspath(folder))
    return path == folder or folder in path.parents


def _is_base_url(url: Any) -> bool:
    if not isinstance(url, str) or not HEADER_SAFE.fullmatch(url) or not url.startswith(("http://", "https://")):
        return False
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port validates it
    except ValueError:
        return False
    return bool(parts.hostname) and not parts.query and not parts.fragment and "#" not in url and "?" not in url


def _status_raw(raw: Any, base_dir: Path) -> Any:
    """`[status] log_dir` resolved like every path; `[status.critical_after_by_reason]` (reason =
    seconds) over the defaults, as sorted pairs."""
    if isinstance(raw, dict) and "log_dir" in raw:
        raw = {**raw, "log_dir": str(_path(raw["log_dir"], "[status] log_dir", "a folder path", base_dir))}
    if not isinstance(raw, dict) or "critical_after_by_reason" not in raw:
        return raw
    table = raw["critical_after_by_reason"]
    where = "[status.critical_after_by_reason]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table of reason = seconds (got {_shown(table)})")
    known = {r.value for r in QUARANTINE_REASONS} | {s.value.lower() for s in TRACK_PARKED}
    merged = dict(DEFAULT_CRITICAL_AFTER)
    for reason, seconds in table.items():
        if reason not in known:
            raise ConfigError(f"{where}: unknown reason {_shown(reason)} (one of {', '.join(sorted(known))})")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds <= 366 * 86400:
            raise ConfigError(f"{where} {reason}: seconds between 0 and a year (got {_shown(seconds)})")
        merged[reason] = float(seconds)
    return {**raw, "critical_after_by_reason": tuple(sorted(merged.items()))}


def _titles(raw: Any, where: str) -> tuple[tuple[str, str], ...]:
    """`titles = { en = "Daily Brief", es = "Resumen diario" }` as sorted (lang, title) pairs."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: titles must be a table of language = \"title\" (got {_shown(raw)})")
    for lang, text in raw.items():
        if not re.fullmatch(r"[a-z]{2,3}(?:-[a-z0-9]{2,8})*", lang):
            raise ConfigError(f"{where}: titles names {_shown(lang)}, not a language code")
        if (not isinstance(text, str) or not text.strip() or len(text) > TITLE_MAX
                or re.search(r"[\x00-\x1f\x7f]", text)):
            raise ConfigError(f"{where}: titles.{lang} must be one line of 1 to {TITLE_MAX} characters "
                              f"(got {_shown(text)})")
    return tuple(sorted(raw.items()))


def _section(cls: type[_Section], raw: Any, where: str) -> _Section:
    if raw is None:
        return cls()
    label = where if where.startswith(("product", "[")) else f"[{where}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{label} must be a table, got {type(raw).__name__} {_shown(raw)}")
    _no_unknown(label, raw, {f.name for f in dataclasses.fields(cls)})
    try:
        return cls(**raw)
    except InvalidValues as exc:  # `[section] key: what is wrong (got …)`: one line per problem
        raise ConfigError("\n".join(f"{label} {p.key}: {p.message} (got {_shown(p.value)})"
                                     for p in exc.problems)) from None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def _no_unknown(where: str, raw: Mapping[str, Any], known: set[str]) -> None:
    extra = sorted(set(raw) - known)
    if extra:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(extra)}")
