"""Prometheus alert rules over the metrics textfile (`observe.metrics`): the findings of
`iipub status --check`, with its thresholds, for operators who alert from Prometheus. Pure.

Two kinds of threshold, both taken from where `--check` takes them:

- the ones an operator configures (`[status]`: heartbeat, breaker, late, stranded, disk, clock,
  outbox limits) are exported beside the figures as gauges, and every rule compares against that
  gauge, never against a number written here: a rule fires where the check says so under any
  configuration;
- the ones written in the code (the workbook's burn-rate windows and factors,
  `error_budget.FAST` / `SLOW`; the breaker reasons that need an operator,
  `breaker.CRITICAL_REASONS`) are read from those constants when the rules are made.

`render()` is the YAML file shipped as package data (`observe/monitoring/iipub-alerts.yml`,
written by `iipub init`); a test holds the file equal to it, so the shipped thresholds are the
constants' own. Severities are the check's: `critical` where it says CRITICAL, `warning` where it
says WARNING; a pair that shares an alert name splits one finding by severity, the warning
`unless` the critical.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from iipub.money.breaker import CRITICAL_REASONS
from iipub.observe.error_budget import FAST, SLOW

FILE_NAME = "iipub-alerts.yml"
RUNBOOK = "runbook.md, \"What to look at\""
# The textfile is rewritten every minute by cron; older than this, every other rule reads stale figures.
STALE_AFTER_SECONDS = 600


@dataclass(frozen=True)
class Rule:
    alert: str
    severity: str  # "critical" | "warning"
    expr: str
    summary: str
    finding: str  # the finding of `status --check` it mirrors

    def annotations(self) -> dict[str, str]:
        return {"summary": self.summary,
                "description": f"`iipub status --check` says: {self.finding}. See `iipub status` and {RUNBOOK}."}


def _fast() -> str:
    long, short, factor = FAST
    return (f'(iipub_error_budget_burn_rate{{window="{long}"}} > {factor:g} and ignoring(window) '
            f'iipub_error_budget_burn_rate{{window="{short}"}} > {factor:g})')


def _slow() -> str:
    long, short, factor = SLOW
    return (f'(iipub_error_budget_burn_rate{{window="{long}"}} > {factor:g} and ignoring(window) '
            f'iipub_error_budget_burn_rate{{window="{short}"}} > {factor:g})')


def _paging() -> str:
    """Enough bad samples within the fast burn's long window to page."""
    return (f'(iipub_error_budget_window_bad_events{{window="{FAST[0]}"}} >= ignoring(slo, window) group_left '
            'iipub_error_budget_page_min_bad_events)')


def _breaker_critical() -> str:
    reasons = "|".join(sorted(CRITICAL_REASONS))
    return ("(iipub_create_breaker_open_seconds > iipub_create_breaker_critical_after_seconds or "
            f'max without(reason) (iipub_create_breaker_reason{{reason=~"{reasons}"}}) == 1)')


_HEARTBEAT_LATE = ("(iipub_heartbeat_age_seconds > ignoring(command) group_left iipub_heartbeat_after_seconds "
                   "or iipub_heartbeat_age_seconds != iipub_heartbeat_age_seconds)")
_HEARTBEAT_ON = "ignoring(command) (iipub_heartbeat_after_seconds > 0)"
_DISK_CRITICAL = ("(iipub_disk_free_ratio < ignoring(roles, path) group_left iipub_disk_critical_free_ratio "
                  "or iipub_disk_free_bytes < ignoring(roles, path) group_left iipub_disk_critical_free_bytes "
                  "or iipub_disk_full_seconds < ignoring(roles, path) group_left iipub_disk_full_critical_seconds)")
_DISK_WARNING = ("(iipub_disk_free_ratio < ignoring(roles, path) group_left iipub_disk_warn_free_ratio "
                 "or iipub_disk_full_seconds < ignoring(roles, path) group_left iipub_disk_full_warn_seconds)")
_LATE_CRITICAL = "(iipub_late_editions > 0 and iipub_oldest_late_edition_age_seconds > iipub_stranded_after_seconds)"


def rules() -> tuple[tuple[str, tuple[Rule, ...]], ...]:
    """(group name, rules) in the order of the file."""
    runs = (
        Rule("IipubRunsNotFinishing", "critical",
             f"{_HEARTBEAT_LATE} and {_HEARTBEAT_ON} "
             "unless ignoring(command) (iipub_heartbeat_awaiting_first_run == 1)",
             "no iipub {{ $labels.command }} run finished OK within heartbeat_after_seconds",
             "no reconcile (relay) run finished OK in [monitoring] heartbeat_after_seconds: CRITICAL"),
        Rule("IipubNoRunRecorded", "warning", "iipub_heartbeat_awaiting_first_run == 1",
             "no reconcile or relay run recorded yet: is cron installed?",
             "no reconcile or relay run recorded yet: WARNING"),
        Rule("IipubLastRunFailed", "warning",
             "iipub_heartbeat_last_run_ok == 0 and iipub_heartbeat_age_seconds <= ignoring(command) group_left "
             f"iipub_heartbeat_after_seconds and {_HEARTBEAT_ON}",
             "the last iipub {{ $labels.command }} run failed",
             "the command's last run failed (an earlier one within the limit was OK): WARNING"),
        Rule("IipubRunsDied", "warning", "iipub_heartbeat_unfinished_runs > 0",
             "iipub {{ $labels.command }} runs started and never finished (timeout, OOM killer, reboot?)",
             "runs that did not finish in the window: WARNING"),
        Rule("IipubProviderUnreachable", "warning",
             "iipub_provider_unreachable_ticks >= iipub_provider_unreachable_after_ticks "
             "and iipub_provider_unreachable_after_ticks > 0",
             "the provider could not be reached by the last reconcile runs",
             "[status] unreachable_after_ticks reconcile runs in a row could not connect: WARNING"),
    )
    gate = (
        Rule("IipubCreateBreakerOpen", "critical", f"iipub_create_breaker_open == 1 and {_breaker_critical()}",
             "the create breaker is open for a reason that needs an operator, or too long",
             "create breaker open for quota or credentials, or longer than breaker_crit_after_seconds: CRITICAL"),
        Rule("IipubCreateBreakerOpen", "warning",
             f"iipub_create_breaker_open == 1 unless {_breaker_critical()}",
             "the create breaker is open: new paid creates wait for its probe",
             "create breaker open: WARNING"),
        Rule("IipubSpendCeilingReached", "critical", "iipub_spend_ceiling_reached == 1",
             "the daily spend ceiling of {{ $labels.scope }} is reached: new creates wait",
             "spend ceiling reached: CRITICAL"),
        Rule("IipubCreatesPaused", "warning", "iipub_creates_paused == 1 unless iipub_everything_paused == 1",
             "an operator paused new paid creates", "creates paused: WARNING"),
    )
    queues = (
        Rule("IipubQuarantineOverdue", "critical",
             "iipub_queue_oldest_seconds > iipub_queue_critical_after_seconds",
             "{{ $labels.kind }} {{ $labels.reason }} waited longer than its limit for an operator",
             "a quarantined job (parked track) unreleased past its reason's critical_after: CRITICAL"),
        Rule("IipubQuarantined", "warning", "sum without(reason) (iipub_quarantined_jobs) > 0",
             "jobs are quarantined: see `iipub quarantine list`", "jobs quarantined: WARNING"),
        Rule("IipubTracksParked", "warning", "sum without(lang, reason) (iipub_parked_tracks) > 0",
             "language tracks are parked for an operator", "parked tracks: WARNING"),
        Rule("IipubJobsParked", "warning", "iipub_parked_jobs > 0",
             "jobs are parked for an operator outside quarantine", "jobs parked for an operator: WARNING"),
    )
    budgets = (
        Rule("IipubErrorBudgetFastBurn", "critical", f"{_fast()} and ignoring(window) {_paging()}",
             "the {{ $labels.slo }} error budget burns fast",
             f"fast burn ({FAST[0]} and {FAST[1]} above {FAST[2]:g}x) with burn_page_min_bad_events bad samples "
             f"in {FAST[0]}: CRITICAL"),
        Rule("IipubErrorBudgetFastBurn", "warning", f"{_fast()} unless ignoring(window) {_paging()}",
             "the {{ $labels.slo }} error budget burns fast (few samples yet)",
             f"fast burn ({FAST[0]} and {FAST[1]} above {FAST[2]:g}x), fewer bad samples: WARNING"),
        Rule("IipubErrorBudgetSlowBurn", "warning", f"{_slow()} unless ignoring(window) {_fast()}",
             "the {{ $labels.slo }} error budget burns",
             f"slow burn ({SLOW[0]} and {SLOW[1]} above {SLOW[2]:g}x): WARNING"),
    )
    host = (
        Rule("IipubDiskHeadroom", "critical", _DISK_CRITICAL,
             "the filesystem of {{ $labels.roles }} is (nearly) full",
             "disk below disk_crit_free_percent / disk_crit_free_bytes, or full within disk_full_crit_hours: "
             "CRITICAL"),
        Rule("IipubDiskHeadroom", "warning", f"{_DISK_WARNING} unless {_DISK_CRITICAL} or iipub_disk_unmeasured == 1",
             "the filesystem of {{ $labels.roles }} runs out of room",
             "disk below disk_warn_free_percent, full within disk_full_warn_hours, or not measurable: WARNING"),
        Rule("IipubClockOffset", "warning",
             "abs(iipub_clock_offset_seconds) - iipub_clock_uncertainty_seconds > iipub_clock_warn_seconds",
             "this host's clock and the database's disagree: check NTP",
             "host clock apart from the database's by more than clock_warn_seconds: WARNING"),
    )
    editions = (
        Rule("IipubStrandedSlots", "critical", "iipub_stranded_jobs > 0",
             "slots are stranded: nothing moves them", "stranded > stranded_after_seconds: CRITICAL"),
        Rule("IipubStrandedTracks", "critical", "sum without(lang) (iipub_stranded_tracks) > 0",
             "language tracks are stranded", "tracks stranded > stranded_after_seconds: CRITICAL"),
        Rule("IipubLateEditions", "critical", _LATE_CRITICAL,
             "an edition is unpublished past stranded_after_seconds",
             "editions late, the oldest past stranded_after_seconds: CRITICAL"),
        Rule("IipubLateEditions", "warning", f"iipub_late_editions > 0 unless {_LATE_CRITICAL}",
             "editions are unpublished past late_after_minutes", "editions late > late_after_minutes: WARNING"),
        Rule("IipubDuplicatePublications", "critical", "iipub_duplicate_publications > 0",
             "an edition was published twice", "duplicate publication: CRITICAL"),
        Rule("IipubOutboxLag", "critical", "iipub_outbox_lag_seconds > iipub_outbox_lag_critical_seconds",
             "the outbox lags", "outbox lag > outbox_lag_crit_seconds: CRITICAL"),
        Rule("IipubOutboxLag", "warning",
             "iipub_outbox_lag_seconds > iipub_outbox_lag_warn_seconds "
             "unless iipub_outbox_lag_seconds > iipub_outbox_lag_critical_seconds",
             "the outbox lags", "outbox lag > outbox_lag_warn_seconds: WARNING"),
    )
    check = (
        Rule("IipubCheckNotOK", "critical", "iipub_check_status == 2",
             "`iipub status --check` is CRITICAL",
             "CRITICAL (any finding, also those without a rule of their own here)"),
        Rule("IipubCheckNotOK", "warning", "iipub_check_status == 1",
             "`iipub status --check` is WARNING",
             "WARNING (any finding, also those without a rule of their own here)"),
        Rule("IipubMetricsStale", "warning",
             f"time() - iipub_status_generated_timestamp_seconds > {STALE_AFTER_SECONDS}",
             "the iipub textfile is not being refreshed (cron's `status --prometheus` line)",
             "nothing: the textfile itself is older than the cron line that writes it every minute"),
    )
    return (("iipub-runs", runs), ("iipub-create-gate", gate), ("iipub-queues", queues),
            ("iipub-error-budgets", budgets), ("iipub-host", host), ("iipub-editions", editions),
            ("iipub-check", check))


def every_rule() -> tuple[Rule, ...]:
    return tuple(r for _, group in rules() for r in group)


def render() -> str:
    """The rules as a Prometheus rule file (YAML; every string JSON-quoted, which YAML reads as is)."""
    out = ["# iipub's alert rules, as `iipub init` writes them (generated from iipub.observe.alert_rules:",
           "# edit the thresholds in iipub.toml's [status], which the textfile exports; not here).",
           "# Load: add this file to rule_files in prometheus.yml; `promtool check rules` it first.",
           "groups:"]
    for name, group in rules():
        out.append(f"  - name: {json.dumps(name)}")
        out.append("    rules:")
        for r in group:
            out.append(f"      - alert: {json.dumps(r.alert)}")
            out.append(f"        expr: {json.dumps(r.expr)}")
            out.append("        labels:")
            out.append(f"          severity: {json.dumps(r.severity)}")
            out.append("        annotations:")
            for key, value in r.annotations().items():
                out.append(f"          {key}: {json.dumps(value)}")
    return "\n".join(out) + "\n"
