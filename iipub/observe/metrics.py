"""`iipub status --prometheus PATH`: the status report as node_exporter textfile-collector
metrics (`prometheus_client`'s text format), written atomically (a temp file in the same
directory, fsync, rename), so the collector never reads half a file.

Every metric is a gauge named `iipub_…`, built on a fresh registry per report (nothing of the
process's own default registry leaks in). Figures come from `iipub.observe.status_report.Status`, the same
ones `status --json` shows; a figure with no sample (an SLI with no interval in the window, a
command that never ran) is NaN.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from iipub.core.files import fsync_dir, replace_atomically
from iipub.core.timefmt import naive_utc
from iipub.model import deliveries
from iipub.model.states import QUARANTINE_REASONS, State
from iipub.model.track_views import Figures as TrackFigures
from iipub.model.track_views import parked_reason as _parked_reason
from iipub.money.breaker import BreakerReason
from iipub.money.budgets import GLOBAL, TIERS
from iipub.observe.status_report import Status
from iipub.settings.config import Product

NAN = math.nan


Products = Iterable[str] | Mapping[str, Product]


def registry_for(report: Status, products: Products = ()) -> CollectorRegistry:
    """A fresh registry holding the report's figures. `products` (the configured ones) get a
    zero for every state even before they have a job (and, given as configured `Product`s,
    every language of theirs a zero for every track state)."""
    reg = CollectorRegistry(auto_describe=True)

    def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
        return Gauge(f"iipub_{name}", doc, labelnames=labels, registry=reg)

    jobs = gauge("jobs", "Jobs (publication slots) by product and state.", ("product", "state"))
    for product in sorted(set(products) | set(report.counts)):
        by_state = report.counts.get(product, {})
        for state in State:
            jobs.labels(product=product, state=state.value).set(by_state.get(state.value, 0))

    _tracks(report, products, gauge)

    quarantined = gauge("quarantined_jobs", "Jobs in QUARANTINED, by quarantine reason.", ("reason",))
    by_reason = report.quarantine_reasons
    for reason in sorted(set(QUARANTINE_REASONS) | set(by_reason)):
        quarantined.labels(reason=reason).set(by_reason.get(reason, 0))

    _queues(report, gauge)
    _budgets(report, gauge)
    _host(report, gauge)

    within = gauge("sli_within_slo_ratio", "Share of the SLI's samples in the window within its SLO (NaN: none).",
                   ("sli",))
    p99 = gauge("sli_p99_seconds", "99th percentile of the SLI's durations in the window (NaN: none).", ("sli",))
    p50 = gauge("sli_p50_seconds", "Median of the SLI's durations in the window (NaN: none).", ("sli",))
    p95 = gauge("sli_p95_seconds", "95th percentile of the SLI's durations in the window (NaN: none).", ("sli",))
    samples = gauge("sli_samples", "Samples of the SLI in the window (breaches without a duration included).",
                    ("sli",))
    slo = gauge("sli_slo_seconds", "The SLI's objective: a sample within this is good.", ("sli",))
    target = gauge("sli_target_ratio", "The share of samples that must be within the SLO.", ("sli",))
    for sli in report.slis:
        share, p = sli.share, sli.percentile(99)
        within.labels(sli=sli.name).set(NAN if share is None else share)
        p99.labels(sli=sli.name).set(NAN if p is None else p)
        for gauge_p, rank in ((p50, 50), (p95, 95)):
            value = sli.percentile(rank)
            gauge_p.labels(sli=sli.name).set(NAN if value is None else value)
        samples.labels(sli=sli.name).set(sli.count)
        slo.labels(sli=sli.name).set(sli.slo_seconds)
        target.labels(sli=sli.name).set(sli.target)
    gauge("duplicate_publications", "Editions per product, date and language beyond the first (SLO 0).").set(
        report.duplicate_publications)
    gauge("stranded_jobs", "Unpublished jobs nobody is asked to act on, past stranded_after_seconds.").set(
        len(report.stranded))
    gauge("late_editions", "Editions unpublished past late_after_minutes after their slot opened.").set(
        len(report.late))
    _thresholds(report, gauge)
    gauge("parked_jobs", "Jobs parked for an operator outside quarantine (a validation failure, a suspension).").set(
        len(report.parked))
    gauge("immovable", "Slots and language tracks with no path forward (nothing due, leased, final or parked with "
          "a remedy).").set(len(report.immovable) + (len(report.tracks.immovable) if report.tracks else 0))
    gauge("provider_expired_jobs", "Jobs in PROVIDER_EXPIRED_OR_MISSING now.").set(report.expired_now)

    spend = gauge("spend_tokens", "Provider tokens of the editions DATED within the spend window, by product "
                  "(paid_tokens counts by payment time).",
                  ("product", "kind"))
    totals: dict[str, dict[str, int]] = {}
    for row in report.spend:
        t = totals.setdefault(row.product, {"input": 0, "output": 0, "total": 0})
        t["input"] += row.input_tokens
        t["output"] += row.output_tokens
        t["total"] += row.total_tokens
    for product in sorted(set(products) | set(totals)):
        for kind, n in totals.get(product, {"input": 0, "output": 0, "total": 0}).items():
            spend.labels(product=product, kind=kind).set(n)
    # Prometheus base units: the window in seconds (whole edition days, today included).
    gauge("spend_window_seconds", "The span of edition dates the spend figures cover, today included.").set(
        report.settings.spend_days * 86_400)

    _paid(report, gauge)

    gauge("outbox_lag_seconds", "Age of the oldest unpublished outbox event (0: none).").set(
        report.outbox_lag_seconds)
    gauge("outbox_unpublished_events", "Outbox events not yet delivered to every sink.").set(
        report.outbox_unpublished)
    gauge("outbox_parked_deliveries", "Sink deliveries parked until an operator acts.").set(report.outbox_parked)
    gauge("outbox_failing_events", "Outbox events failing for longer than relay.alert_after_seconds.").set(
        report.outbox_failing)

    g = report.gate
    gauge("create_breaker_open", "1 while the shared create circuit breaker is open.").set(
        int(bool(g and g.is_open)))
    gauge("creates_paused", "1 while an operator has paused new paid creates.").set(int(bool(g and g.paused)))
    _breaker(report, gauge)
    gauge("everything_paused", "1 while `pause --everything` holds every automated command.").set(
        int(bool(g and g.paused_everything)))
    c = report.cutover
    gauge("missing_slots", "Edition days of the window without a product's slot (no tick scheduled them).").set(
        len(c.missing) if c else 0)
    gauge("shadow_differences", "Shadow decisions in the window that differ from the legacy system's.").set(
        len(c.differences) if c else 0)

    w = report.webhooks
    gauge("orphan_responses", "Paid responses of this installation no job holds, awaiting adopt or discard "
          "(see `iipub orphans list`).").set(w.orphans if w else 0)
    gauge("foreign_webhook_deliveries", "Webhook deliveries about responses that are not this installation's "
          "(left alone: not read, copied, cancelled or deleted).").set(w.foreign if w else 0)
    gauge("webhooks_enabled", "1 when [webhooks] enabled is true.").set(int(bool(w and w.enabled)))
    gauge("webhooks_healthy", "1 while verified provider webhooks arrive (polling relaxed).").set(
        int(bool(w and w.enabled and w.health.healthy)))
    received = gauge("webhook_deliveries", "Verified webhook deliveries received in the status window, by outcome "
                     "(unknown_event: a type the receiver does not know, answered 200).", ("outcome",))
    by_outcome = w.outcomes if w else {}
    for outcome in sorted(set(deliveries.OUTCOMES) | set(by_outcome)):
        received.labels(outcome=outcome).set(by_outcome.get(outcome, 0))

    beats = report.heartbeats
    age = gauge("heartbeat_age_seconds", "Seconds since the command last finished OK (NaN: never).", ("command",))
    last_ok = gauge("heartbeat_last_ok_timestamp_seconds",
                    "When the command last finished OK, Unix time (NaN: never).", ("command",))
    last_run_ok = gauge("heartbeat_last_run_ok", "1 if the command's last finished run succeeded, 0 if it failed, "
                        "NaN if none finished.", ("command",))
    unfinished = gauge("heartbeat_unfinished_runs", "Runs started in the window that never finished (died).",
                       ("command",))
    if beats is not None:
        gauge("heartbeat_after_seconds", "Without an OK run this long, `status --check` is CRITICAL (0: off).").set(
            beats.after_seconds)
        gauge("heartbeat_awaiting_first_run", "1 while the heartbeat check is on, no run was ever recorded and no "
              "job exists yet (a WARNING: is cron installed?).").set(
            int(beats.after_seconds > 0 and not beats.recorded and not beats.any_jobs))
        gauge("provider_unreachable_after_ticks", "[status] unreachable_after_ticks: this many unreachable reconcile "
              "runs in a row make a WARNING (0: off).").set(beats.unreachable_after)
        for b in beats.commands:
            a = beats.age_seconds(b)
            age.labels(command=b.command).set(NAN if a is None else a)
            ts = b.last_ok.finished_at if b.last_ok else None
            last_ok.labels(command=b.command).set(NAN if ts is None else _unix(ts))
            last_run_ok.labels(command=b.command).set(NAN if b.last is None else int(bool(b.last.ok)))
            unfinished.labels(command=b.command).set(b.unfinished)

    code, _ = report.check()
    gauge("check_status", "What `iipub status --check` says: 0 OK, 1 WARNING, 2 CRITICAL.").set(code)
    gauge("status_generated_timestamp_seconds", "When this report was made (database clock), Unix time.").set(
        _unix(report.generated_at))
    return reg


def _tracks(report: Status, products: Products, gauge: Callable[..., Gauge]) -> None:
    """The language tracks by product, language and state; parked ones by language and reason;
    stranded ones and duplicate publications per language (SLIs 4 and 5 count editions)."""
    t = report.tracks or TrackFigures(counts={})
    languages = {name: set(p.languages) for name, p in products.items()} if isinstance(products, Mapping) else {}
    for product, langs in t.counts.items():
        languages.setdefault(product, set()).update(langs)
    tracks = gauge("tracks", "Language tracks by product, language and state.", ("product", "lang", "state"))
    for product in sorted(languages):
        for lang in sorted(languages[product]):
            by_state = t.counts.get(product, {}).get(lang, {})
            for state in State:
                tracks.labels(product=product, lang=lang, state=state.value).set(by_state.get(state.value, 0))
    every_lang = sorted({lang for langs in languages.values() for lang in langs} | set(t.duplicates_by_lang))
    parked = gauge("parked_tracks", "Tracks waiting for an operator (VALIDATION_FAILED_RETAINED, QUARANTINED), by "
                   "language and reason (the quarantine reason, or validation_failed_retained).", ("lang", "reason"))
    by_reason = Counter((r.lang, _parked_reason(r)) for r in t.parked)
    for lang in every_lang:
        for reason in sorted({"validation_failed_retained", *QUARANTINE_REASONS}):
            parked.labels(lang=lang, reason=reason).set(by_reason.get((lang, reason), 0))
    for (lang, reason), n in sorted(by_reason.items()):
        parked.labels(lang=lang, reason=reason).set(n)
    stranded = gauge("stranded_tracks", "Unpublished tracks nobody is asked to act on, past stranded_after_seconds, "
                     "by language.", ("lang",))
    duplicates = gauge("duplicate_publications_by_lang", "Editions per product and date beyond the first, by "
                       "language (SLO 0).", ("lang",))
    stranded_by_lang = t.stranded_by_lang()
    for lang in sorted(set(every_lang) | set(stranded_by_lang)):
        stranded.labels(lang=lang).set(stranded_by_lang.get(lang, 0))
        duplicates.labels(lang=lang).set(t.duplicates_by_lang.get(lang, 0))
    oldest = t.stranded[0].age_seconds if t.stranded else 0.0
    gauge("oldest_stranded_track_age_seconds", "Age since its slot opened of the oldest stranded track (0: none).").set(
        oldest)


def _paid(report: Status, gauge: Callable[..., Gauge]) -> None:
    """Spend by payment time (windows today, 7d, 30d), the daily ceilings, an unreachable provider."""
    p = report.paid
    beats = report.heartbeats
    gauge("provider_unreachable_ticks", "Reconcile runs in a row whose every provider call could not connect.").set(
        beats.unreachable_ticks if beats is not None else 0)
    if p is None:
        return
    tokens = gauge("paid_tokens", "Tokens paid for in the window, by payment time (reported, or estimated "
                   "while a paid create's usage is unknown).", ("window",))
    estimated = gauge("paid_estimated_tokens", "Of paid_tokens, those counted at the product's estimate.",
                      ("window",))
    creates = gauge("paid_creates", "Paid creates in the window (provable refusals not counted).", ("window",))
    refused = gauge("refused_creates", "Creates the provider provably refused in the window (not charged).",
                    ("window",))
    by_product = gauge("paid_tokens_by_product", "paid_tokens by product.", ("window", "product"))
    by_tier = gauge("paid_tokens_by_tier", "paid_tokens by the service tier the response ran at.", ("window", "tier"))
    cost = gauge("paid_cost", "What the window's tokens cost under [pricing] (NaN: no price).", ("window", "currency"))
    cost_by_product = gauge("paid_cost_by_product", "paid_cost by product (NaN: no price).",
                            ("window", "product", "currency"))
    saving = gauge("flex_saving", "What flex tokens saved against the default tier's price (NaN: no price).",
                   ("window", "currency"))
    currency = p.currency if p.priced else ""
    for w in p.windows:
        tokens.labels(window=w.name).set(w.total.tokens)
        estimated.labels(window=w.name).set(w.total.estimated_tokens)
        creates.labels(window=w.name).set(w.total.creates)
        refused.labels(window=w.name).set(w.total.refused)
        cost.labels(window=w.name, currency=currency).set(NAN if w.total.cost is None else w.total.cost)
        saving.labels(window=w.name, currency=currency).set(
            NAN if w.total.flex_saving is None else w.total.flex_saving)
        for name, t in sorted(w.by_product.items()):
            by_product.labels(window=w.name, product=name).set(t.tokens)
            cost_by_product.labels(window=w.name, product=name, currency=currency).set(
                NAN if t.cost is None else t.cost)
        for tier in TIERS:
            by_tier.labels(window=w.name, tier=tier).set(w.by_tier[tier].tokens if tier in w.by_tier else 0)
    limit = gauge("spend_ceiling_tokens", "A daily token ceiling with the overrides in force.", ("scope",))
    counted = gauge("spend_counted_today_tokens", "Tokens counted against the ceiling since the UTC midnight.",
                    ("scope",))
    reached = gauge("spend_ceiling_reached", "1 while the ceiling is reached: new creates wait.", ("scope",))
    for c in p.ceilings:
        scope = "global" if c.scope == GLOBAL else c.scope
        limit.labels(scope=scope).set(c.allowed)
        counted.labels(scope=scope).set(c.spent)
        reached.labels(scope=scope).set(int(c.reached))


def _queues(report: Status, gauge: Callable[..., Gauge]) -> None:
    """The operator's queue by reason: depth, the oldest one's wait, its limit, how many are past it."""
    labels = ("kind", "reason")
    depth = gauge("queue_depth", "Quarantined jobs / parked tracks waiting for an operator, by reason.", labels)
    oldest = gauge("queue_oldest_seconds", "How long the oldest of them has waited.", labels)
    limit = gauge("queue_critical_after_seconds", "[status] limit past which a wait is CRITICAL.", labels)
    overdue = gauge("queue_overdue", "How many waited past the limit.", labels)
    for q in report.queues():
        depth.labels(kind=q.kind, reason=q.reason).set(q.count)
        oldest.labels(kind=q.kind, reason=q.reason).set(q.oldest_seconds)
        limit.labels(kind=q.kind, reason=q.reason).set(q.critical_after_seconds)
        overdue.labels(kind=q.kind, reason=q.reason).set(q.overdue)


def _budgets(report: Status, gauge: Callable[..., Gauge]) -> None:
    """Each SLO's error budget left, its burn rates per window, and the change freeze."""
    left = gauge("error_budget_left_ratio", "Share of the SLO's error budget left over its window (< 0: overspent).",
                 ("slo",))
    events = gauge("error_budget_events", "SLO samples in the error budget's window.", ("slo",))
    bad = gauge("error_budget_bad_events", "SLO samples that missed it, in the window.", ("slo",))
    burn = gauge("error_budget_burn_rate", "Bad share over the window divided by (1 - target).", ("slo", "window"))
    for b in report.budgets:
        left.labels(slo=b.name).set(b.left)
        events.labels(slo=b.name).set(b.events)
        bad.labels(slo=b.name).set(b.bad)
        for window, rate in b.burn:
            burn.labels(slo=b.name, window=window).set(rate)
    window_bad = gauge("error_budget_window_bad_events", "SLO samples that missed it within each burn-rate window.",
                       ("slo", "window"))
    for b in report.budgets:
        for window, n in b.bad_by_window:
            window_bad.labels(slo=b.name, window=window).set(n)
    gauge("error_budget_page_min_bad_events", "[status] burn_page_min_bad_events: a fast burn pages (CRITICAL) once "
          "this many bad samples fell within its hour.").set(report.settings.burn_page_min_bad_events)
    gauge("change_freeze", "1 while an SLO's error budget is spent (changes frozen).").set(int(bool(report.freeze())))


def _host(report: Status, gauge: Callable[..., Gauge]) -> None:
    """Disk headroom of the filesystems iipub writes to; the host clock against the database's."""
    labels = ("roles", "path")
    free = gauge("disk_free_bytes", "Bytes free (to an unprivileged writer) on a filesystem iipub writes to.", labels)
    size = gauge("disk_size_bytes", "Size of that filesystem.", labels)
    ratio = gauge("disk_free_ratio", "Share free (space or inodes, the lower).", labels)
    full = gauge("disk_full_seconds", "At the rate it filled over the last day, seconds until the CRITICAL floor "
                 "(NaN: not filling, or unknown).", labels)
    unmeasured = gauge("disk_unmeasured", "1 when the filesystem could not be measured (a WARNING).", labels)
    s = report.settings
    for d in report.disks:
        key = {"roles": ",".join(d.roles), "path": d.path}
        unmeasured.labels(**key).set(int(d.error is not None))
        if d.error is not None:
            continue
        free.labels(**key).set(d.free_bytes)
        size.labels(**key).set(d.size_bytes)
        ratio.labels(**key).set(d.free_share)
        hours = d.hours_to_full(s)
        full.labels(**key).set(NAN if hours is None else hours * 3600)
    gauge("disk_warn_free_ratio", "[status] disk_warn_free_percent as a share: less free is a WARNING.").set(
        s.disk_warn_free_percent / 100)
    gauge("disk_critical_free_ratio", "[status] disk_crit_free_percent as a share: less free is CRITICAL.").set(
        s.disk_crit_free_percent / 100)
    gauge("disk_critical_free_bytes", "[status] disk_crit_free_bytes: fewer bytes free is CRITICAL.").set(
        s.disk_crit_free_bytes)
    gauge("disk_full_warn_seconds", "[status] disk_full_warn_hours in seconds: full sooner is a WARNING.").set(
        s.disk_full_warn_hours * 3600)
    gauge("disk_full_critical_seconds", "[status] disk_full_crit_hours in seconds: full sooner is CRITICAL.").set(
        s.disk_full_crit_hours * 3600)
    if report.clock_check is not None:
        gauge("clock_offset_seconds", "The database's clock minus this host's (positive: the host is behind).").set(
            report.clock_check.offset_seconds)
        gauge("clock_uncertainty_seconds", "Half the round trip of the query that read the database's clock.").set(
            report.clock_check.uncertainty_seconds)
    gauge("clock_warn_seconds", "[status] clock_warn_seconds: the clocks further apart (beyond the uncertainty) "
          "is a WARNING.").set(s.clock_warn_seconds)


def _thresholds(report: Status, gauge: Callable[..., Gauge]) -> None:
    """The limits `status --check` holds late editions and the outbox to, and the oldest late edition."""
    s = report.settings
    gauge("oldest_late_edition_age_seconds", "Seconds since its slot opened of the oldest late edition (0: none).").set(
        report.late[0].age_seconds if report.late else 0.0)
    gauge("late_after_seconds", "[status] late_after_minutes in seconds: an edition unpublished this long after its "
          "slot opened is late (a WARNING).").set(s.late_after_minutes * 60)
    gauge("stranded_after_seconds", "[status] stranded_after_seconds: a slot stranded (or an edition late) this long "
          "is CRITICAL.").set(s.stranded_after_seconds)
    gauge("outbox_lag_warn_seconds", "[status] outbox_lag_warn_seconds.").set(s.outbox_lag_warn_seconds)
    gauge("outbox_lag_critical_seconds", "[status] outbox_lag_crit_seconds.").set(s.outbox_lag_crit_seconds)


def _breaker(report: Status, gauge: Callable[..., Gauge]) -> None:
    """How long the create breaker has been open and why, its CRITICAL limit, the cool-downs."""
    g = report.gate
    is_open = bool(g and g.is_open)
    opened = g.opened_at if g is not None and is_open else None
    gauge("create_breaker_open_seconds", "How long the create breaker has been open (0: closed).").set(
        max(0.0, (report.generated_at - opened).total_seconds()) if opened is not None else 0.0)
    gauge("create_breaker_critical_after_seconds", "[status] breaker_crit_after_seconds: open this long is "
          "CRITICAL.").set(report.settings.breaker_crit_after_seconds)
    why = gauge("create_breaker_reason", "1 for the reason the create breaker is open (all 0 when closed).",
                ("reason",))
    for reason in BreakerReason:
        why.labels(reason=reason.value).set(int(is_open and g is not None and g.breaker_reason == reason.value))
    cool = g.cooldown_until if g is not None else None
    gauge("create_cooldown_seconds", "Seconds until the rate-limit cool-down of creates ends (0: none).").set(
        max(0.0, (cool - report.generated_at).total_seconds()) if cool is not None else 0.0)
    read = report.read_cooldown_until
    gauge("read_cooldown_seconds", "Seconds until the cool-down of provider reads ends (0: none).").set(
        max(0.0, (read - report.generated_at).total_seconds()) if read is not None else 0.0)


def render(report: Status, products: Products = ()) -> bytes:
    """The text exposition format of `registry_for`."""
    return generate_latest(registry_for(report, products))


def write_textfile(path: Path, report: Status, products: Products = ()) -> None:
    """Write the metrics to `path` atomically: a hidden temp file beside it (which the textfile
    collector ignores: it reads `*.prom` only), fsync, rename, fsync of the directory. Raises
    OSError when the directory is missing or not writable."""
    replace_atomically(path, render(report, products))
    with contextlib.suppress(OSError):  # the rename is done; this only makes it durable sooner
        fsync_dir(path.parent)


def _unix(value: dt.datetime) -> float:
    """A naive UTC time (the database clock) as Unix time."""
    return naive_utc(value).replace(tzinfo=dt.UTC).timestamp()
