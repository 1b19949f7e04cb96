"""The shipped Prometheus alert rules say what `iipub status --check` says.

Each scenario is a status report (`observe.report.Status`, the value `--check` judges), written as
the textfile `status --prometheus` writes (`observe.metrics.render`); its samples become
`promtool test rules` input series (with the target labels node_exporter adds), and the alerts that
fire at the evaluation time must be exactly the scenario's: a rule of the check's severity where
`--check` says CRITICAL or WARNING, nothing where it says OK.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from iipub.core.severity import Severity
from iipub.model.track_views import Figures, TrackRef
from iipub.money import breaker
from iipub.money.breaker import GateState
from iipub.money.budgets import GLOBAL, Ceiling
from iipub.money.payment_values import SpendReport, Window
from iipub.observe import alert_rules, error_budget, metrics, monitoring_files
from iipub.observe.heartbeat_values import CommandBeat, HeartbeatSummary, RunRow
from iipub.observe.status_report import ClockCheck, Disk, JobRef, Sli, Status
from iipub.settings.config import StatusSettings

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian: apt-get install prometheus); .ci/run installs it")

NOW = dt.datetime(2026, 3, 7, 12, 0, 0)
AFTER = 900.0  # [monitoring] heartbeat_after_seconds in these scenarios
GIB = 1024**3
CATCH_ALL = "IipubCheckNotOK"


def _run(command: str, ago: float, ok: bool = True, error: str | None = None) -> RunRow:
    at = NOW - dt.timedelta(seconds=ago)
    return RunRow(1, command, "host", 1, "w", at - dt.timedelta(seconds=2), at, ok, None, error)


def _beats(**changes: object) -> HeartbeatSummary:
    commands = tuple(CommandBeat(c, _run(c, 30), _run(c, 30), ok=60) for c in ("reconcile", "relay"))
    base = HeartbeatSummary(NOW, AFTER, 24.0, True, True, commands, unreachable_after=3)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _gate(**changes: object) -> GateState:
    base = GateState(version=1, breaker=breaker.CLOSED, breaker_reason=None, breaker_detail=None, opened_at=None,
                     open_count=0, probe_after=None, probe_owner=None, probe_expiry=None, last_ok_at=NOW,
                     cooldown_until=None, paused=False, paused_reason=None, paused_by=None, paused_at=None,
                     window_start=None, window_creates=0)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _budget(rates: dict[str, float], bad_1h: int = 0) -> error_budget.Budget:
    burn = tuple((name, rates.get(name, 0.0)) for name, _ in error_budget.WINDOWS)
    bad = tuple((name, bad_1h if name in ("1h", "6h") else 0) for name, _ in error_budget.WINDOWS)
    return error_budget.Budget("unretrieved_dwell", 0.99, 30 * 86400.0, 1000, bad_1h, burn, bad)


def _ref(age: float, reason: str | None = None, state: str = "IN_PROGRESS") -> JobRef:
    return JobRef("0123456789abcdef", "daily-brief", NOW.date(), state, age, reason)


def _paid(spent: int, limit: int = 1_000_000) -> SpendReport:
    windows = tuple(Window(name, NOW) for name in ("today", "7d", "30d"))
    return SpendReport("USD", False, windows, (Ceiling(GLOBAL, limit, 0, spent), Ceiling("daily-brief", limit, 0, 10)))


def ok_status(settings: StatusSettings | None = None) -> Status:
    """A healthy installation: every check OK."""
    s = settings or StatusSettings()
    return Status(
        generated_at=NOW, settings=s, counts={"daily-brief": {"PUBLISHED": 3}},
        dispatch=Sli("time_to_dispatch", 120, 0.99, (5.0, 7.0)), dwell=Sli("unretrieved_dwell", 180, 0.99, (20.0,)),
        overdue_polls=Sli("overdue_polls", 90, 0.95, (1.0,)), duplicate_publications=0, stranded=(),
        quarantined=(), expired_now=0, expired_in_window=0, outbox_unpublished=0, outbox_lag_seconds=0.0,
        outbox_problems=(), spend=(), gate=_gate(), heartbeats=_beats(), paid=_paid(5_000),
        budgets=(_budget({"5m": 0.0, "30m": 0.0, "1h": 0.0, "6h": 0.0}),),
        disks=(Disk(("ledger", "database"), "/var/lib/iipub", 60 * GIB, 100 * GIB, 10**6, 2 * 10**6),),
        clock_check=ClockCheck(0.2, 0.01))


def _with(**changes: object) -> Status:
    return dataclasses.replace(ok_status(), **changes)  # type: ignore[arg-type]


def _track(age: float, state: str, reason: str | None = None) -> TrackRef:
    return TrackRef("0123456789abcdef", "daily-brief", NOW.date(), "es", state, age, reason)


def _disk(free_gib: float, filling_gib_per_hour: float | None = None, error: str | None = None) -> Disk:
    return Disk(("static_root",), "/srv/iipub/public", int(free_gib * GIB), 100 * GIB,
                filling_bytes_per_hour=None if filling_gib_per_hour is None else filling_gib_per_hour * GIB,
                error=error)


C, W = "critical", "warning"
# name -> (the report, the alerts besides the check's catch-all that must fire: (alert, severity))
SCENARIOS: dict[str, tuple[Status, set[tuple[str, str]]]] = {
    "ok": (ok_status(), set()),
    # runs not finishing
    "reconcile silent past the limit": (_with(heartbeats=_beats(commands=(
        CommandBeat("reconcile", _run("reconcile", AFTER + 60), _run("reconcile", AFTER + 60)),
        CommandBeat("relay", _run("relay", 30), _run("relay", 30))))), {("IipubRunsNotFinishing", C)}),
    "reconcile silent within the limit": (_with(heartbeats=_beats(commands=(
        CommandBeat("reconcile", _run("reconcile", AFTER - 60), _run("reconcile", AFTER - 60)),
        CommandBeat("relay", _run("relay", 30), _run("relay", 30))))), set()),
    "never an OK run, jobs waiting": (_with(heartbeats=_beats(commands=(
        CommandBeat("reconcile", _run("reconcile", 30, ok=False, error="boom"), None),
        CommandBeat("relay", None, None)))), {("IipubRunsNotFinishing", C)}),
    "nothing ever ran, no jobs": (_with(counts={}, heartbeats=_beats(recorded=False, any_jobs=False, commands=(
        CommandBeat("reconcile", None, None), CommandBeat("relay", None, None)))), {("IipubNoRunRecorded", W)}),
    "the last run failed": (_with(heartbeats=_beats(commands=(
        CommandBeat("reconcile", _run("reconcile", 20, ok=False, error="db gone"), _run("reconcile", 80)),
        CommandBeat("relay", _run("relay", 30), _run("relay", 30))))), {("IipubLastRunFailed", W)}),
    "runs died": (_with(heartbeats=_beats(commands=(
        CommandBeat("reconcile", _run("reconcile", 30), _run("reconcile", 30), unfinished=2),
        CommandBeat("relay", _run("relay", 30), _run("relay", 30))))), {("IipubRunsDied", W)}),
    "provider unreachable": (_with(heartbeats=_beats(unreachable_ticks=3)), {("IipubProviderUnreachable", W)}),
    "provider unreachable, fewer ticks": (_with(heartbeats=_beats(unreachable_ticks=2)), set()),
    # the create breaker
    "breaker open briefly": (_with(gate=_gate(breaker=breaker.OPEN, breaker_reason="create_outcome_unknown",
                                              opened_at=NOW - dt.timedelta(minutes=10))),
                             {("IipubCreateBreakerOpen", W)}),
    "breaker open long": (_with(gate=_gate(breaker=breaker.OPEN, breaker_reason="create_outcome_unknown",
                                           opened_at=NOW - dt.timedelta(minutes=31))),
                          {("IipubCreateBreakerOpen", C)}),
    "breaker open on quota": (_with(gate=_gate(breaker=breaker.OPEN, breaker_reason="quota_exhausted",
                                               opened_at=NOW - dt.timedelta(minutes=1))),
                              {("IipubCreateBreakerOpen", C)}),
    "creates paused": (_with(gate=_gate(paused=True, paused_by="op", paused_reason="drill", paused_at=NOW)),
                       {("IipubCreatesPaused", W)}),
    "a spend ceiling reached": (_with(paid=_paid(1_000_000)), {("IipubSpendCeilingReached", C)}),
    "a spend ceiling nearly reached": (_with(paid=_paid(999_999)), set()),
    # quarantines by reason and age
    "quarantined recently": (_with(quarantined=(_ref(3600, "create_outcome_unknown", "QUARANTINED"),)),
                             {("IipubQuarantined", W)}),
    "quarantined too long": (_with(quarantined=(_ref(4 * 3600 + 60, "create_outcome_unknown", "QUARANTINED"),)),
                             {("IipubQuarantined", W), ("IipubQuarantineOverdue", C)}),
    "parked outside quarantine": (_with(parked=(_ref(600, None, "VALIDATION_FAILED_RETAINED"),)),
                                  {("IipubJobsParked", W)}),
    # error budgets, multiwindow
    "fast burn, enough bad samples": (_with(budgets=(_budget({"5m": 50, "30m": 20, "1h": 20, "6h": 8}, 3),)),
                                      {("IipubErrorBudgetFastBurn", C)}),
    "fast burn, one bad sample": (_with(budgets=(_budget({"5m": 50, "30m": 20, "1h": 20, "6h": 8}, 1),)),
                                  {("IipubErrorBudgetFastBurn", W)}),
    "fast burn over 1h only": (_with(budgets=(_budget({"5m": 10, "30m": 2, "1h": 20, "6h": 3}, 3),)), set()),
    "slow burn": (_with(budgets=(_budget({"5m": 7, "30m": 7, "1h": 7, "6h": 7}, 1),)),
                  {("IipubErrorBudgetSlowBurn", W)}),
    "slow burn over 6h only": (_with(budgets=(_budget({"5m": 1, "30m": 5, "1h": 7, "6h": 7}, 1),)), set()),
    # disk headroom
    "disk below the warning share": (_with(disks=(_disk(10),)), {("IipubDiskHeadroom", W)}),
    "disk below the critical share": (_with(disks=(_disk(4),)), {("IipubDiskHeadroom", C)}),
    "disk full within two days": (_with(disks=(_disk(40, 1.0),)), {("IipubDiskHeadroom", W)}),
    "disk full within six hours": (_with(disks=(_disk(40, 8.0),)), {("IipubDiskHeadroom", C)}),
    "disk filling slowly": (_with(disks=(_disk(40, 0.1),)), set()),
    "disk not measurable": (_with(disks=(_disk(0, error="permission denied"),)), {("IipubDiskHeadroom", W)}),
    # clock offset
    "clock apart": (_with(clock_check=ClockCheck(-7.0, 0.05)), {("IipubClockOffset", W)}),
    "clock apart within the uncertainty": (_with(clock_check=ClockCheck(5.04, 0.05)), set()),
    # language tracks
    "a track stranded": (_with(tracks=Figures(counts={}, stranded=(_track(3 * 3600, "READY_TO_COMPOSE"),))),
                         {("IipubStrandedTracks", C)}),
    "a track parked": (_with(tracks=Figures(counts={}, parked=(_track(600, "VALIDATION_FAILED_RETAINED",
                                                                      "missing field"),))),
                       {("IipubTracksParked", W)}),
    # stranded slots, late editions
    "a slot stranded": (_with(stranded=(_ref(3 * 3600),)), {("IipubStrandedSlots", C)}),
    "an edition late": (_with(late=(_ref(90 * 60),)), {("IipubLateEditions", W)}),
    "an edition very late": (_with(late=(_ref(2 * 3600 + 60),)), {("IipubLateEditions", C)}),
    "outbox lagging": (_with(outbox_lag_seconds=700.0, outbox_unpublished=1), {("IipubOutboxLag", W)}),
    "outbox stuck": (_with(outbox_lag_seconds=4000.0, outbox_unpublished=1), {("IipubOutboxLag", C)}),
    # the configuration's thresholds, not the defaults', are the rules' too
    "clock apart under a stricter limit": (dataclasses.replace(
        ok_status(StatusSettings(clock_warn_seconds=1.0)), clock_check=ClockCheck(1.5, 0.05)),
        {("IipubClockOffset", W)}),
    "an edition late under a longer limit": (dataclasses.replace(
        ok_status(StatusSettings(late_after_minutes=120)), late=()), set()),
}


def _series(status: Status) -> list[dict[str, str]]:
    """The textfile's samples as promtool input series, each constant over the test."""
    out = []
    text = metrics.render(status, ["daily-brief"]).decode("utf-8")
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {**sample.labels, "instance": "host:9100", "job": "node"}
            body = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
            value = sample.value
            shown = "NaN" if math.isnan(value) else repr(float(value))
            assert not math.isinf(value), sample
            out.append({"series": f"{sample.name}{{{body}}}", "values": f"{shown}+0x10"})
    return out


def _expected_severity(alerts: set[tuple[str, str]]) -> Severity:
    if any(sev == C for _, sev in alerts):
        return Severity.CRITICAL
    return Severity.WARNING if alerts else Severity.OK


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_scenario_is_what_the_check_says(name: str) -> None:
    """The scenario's expected alerts agree with `--check` (severity) on the same report."""
    status, alerts = SCENARIOS[name]
    code, line = status.check()
    assert code == _expected_severity(alerts), line


def test_the_shipped_rules_are_made_from_the_check_s_constants() -> None:
    # Regenerate the file after a change: iipub/observe/monitoring/ holds alert_rules.render() as it is.
    assert monitoring_files.alert_rules_text() == alert_rules.render()
    shipped = "\n".join(r.expr for r in alert_rules.every_rule())
    long, short, factor = error_budget.FAST
    assert f'iipub_error_budget_burn_rate{{window="{long}"}} > {factor:g}' in shipped
    assert f'iipub_error_budget_burn_rate{{window="{short}"}} > {factor:g}' in shipped
    long, short, factor = error_budget.SLOW
    assert f'iipub_error_budget_burn_rate{{window="{long}"}} > {factor:g}' in shipped
    assert f'iipub_error_budget_burn_rate{{window="{short}"}} > {factor:g}' in shipped
    (reasons,) = set(re.findall(r'iipub_create_breaker_reason\{reason=~"([^"]+)"\}', shipped))
    assert set(reasons.split("|")) == set(breaker.CRITICAL_REASONS)
    # Every threshold an operator configures is a gauge of the textfile that equals [status]'s value.
    s = StatusSettings(clock_warn_seconds=2.5, late_after_minutes=75, stranded_after_seconds=5000,
                       breaker_crit_after_seconds=900, disk_warn_free_percent=20, disk_crit_free_percent=3,
                       disk_crit_free_bytes=10**9, disk_full_warn_hours=24, disk_full_crit_hours=3,
                       outbox_lag_warn_seconds=100, outbox_lag_crit_seconds=200, burn_page_min_bad_events=5)
    values = {sample.name: sample.value for family in text_string_to_metric_families(
        metrics.render(ok_status(s)).decode("utf-8")) for sample in family.samples if not sample.labels}
    assert {k: values[k] for k in (
        "iipub_clock_warn_seconds", "iipub_late_after_seconds", "iipub_stranded_after_seconds",
        "iipub_create_breaker_critical_after_seconds", "iipub_disk_warn_free_ratio", "iipub_disk_critical_free_ratio",
        "iipub_disk_critical_free_bytes", "iipub_disk_full_warn_seconds", "iipub_disk_full_critical_seconds",
        "iipub_outbox_lag_warn_seconds", "iipub_outbox_lag_critical_seconds",
        "iipub_error_budget_page_min_bad_events", "iipub_heartbeat_after_seconds")} == {
        "iipub_clock_warn_seconds": 2.5, "iipub_late_after_seconds": 4500, "iipub_stranded_after_seconds": 5000,
        "iipub_create_breaker_critical_after_seconds": 900, "iipub_disk_warn_free_ratio": 0.2,
        "iipub_disk_critical_free_ratio": 0.03, "iipub_disk_critical_free_bytes": 10**9,
        "iipub_disk_full_warn_seconds": 24 * 3600, "iipub_disk_full_critical_seconds": 3 * 3600,
        "iipub_outbox_lag_warn_seconds": 100, "iipub_outbox_lag_critical_seconds": 200,
        "iipub_error_budget_page_min_bad_events": 5, "iipub_heartbeat_after_seconds": AFTER}


def test_every_family_a_rule_names_is_in_the_textfile() -> None:
    exported = {family.name for family in text_string_to_metric_families(
        metrics.render(SCENARIOS["breaker open long"][0], ["daily-brief"]).decode("utf-8"))}
    for rule in alert_rules.every_rule():
        named = set(re.findall(r"\b(iipub_[a-z0-9_]+)", rule.expr))
        assert named and named <= exported, (rule.alert, named - exported)


@needs_promtool
def test_promtool_checks_the_rules_and_the_textfile(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    rules = tmp_path / alert_rules.FILE_NAME
    rules.write_text(monitoring_files.alert_rules_text(), encoding="utf-8")
    checked = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_rules.every_rule())} rules found" in checked.stdout
    for name in ("ok", "breaker open long", "disk not measurable", "quarantined too long"):
        text = metrics.render(SCENARIOS[name][0], ["daily-brief"])
        linted = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, timeout=60)
        assert linted.returncode == 0, (name, linted.stdout + linted.stderr)
        assert not linted.stdout.strip() and not linted.stderr.strip(), linted.stdout + linted.stderr


@needs_promtool
@pytest.mark.slow  # promtool plays every scenario's series through every rule
def test_promtool_fires_each_rule_where_the_check_says_so(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    rules = tmp_path / alert_rules.FILE_NAME
    rules.write_text(monitoring_files.alert_rules_text(), encoding="utf-8")
    tests = []
    for name, (status, alerts) in sorted(SCENARIOS.items()):
        code, _ = status.check()
        firing = set(alerts)
        if code != Severity.OK:
            firing.add((CATCH_ALL, code.name.lower()))
        tests.append({
            "name": name,
            "interval": "1m",
            "input_series": _series(status),
            "promql_expr_test": [{
                "expr": 'group by (alertname, severity) (ALERTS{alertstate="firing"})',
                "eval_time": "5m",
                "exp_samples": [{"labels": f'{{alertname="{a}", severity="{s}"}}', "value": 1}
                                for a, s in sorted(firing)],
            }],
        })
    spec = tmp_path / "iipub-alerts.test.yml"
    # JSON is YAML: promtool reads the file as it is.
    spec.write_text(json.dumps({"rule_files": [rules.name], "evaluation_interval": "1m", "tests": tests}),
                    encoding="utf-8")
    result = subprocess.run([PROMTOOL, "test", "rules", spec.name], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    assert "SUCCESS" in result.stdout


@needs_promtool
def test_promtool_says_when_the_textfile_stops_changing(tmp_path: Path) -> None:
    """`IipubMetricsStale`: silent while the file is younger than its limit, firing after."""
    assert PROMTOOL is not None
    rules = tmp_path / alert_rules.FILE_NAME
    rules.write_text(monitoring_files.alert_rules_text(), encoding="utf-8")
    limit_minutes = alert_rules.STALE_AFTER_SECONDS // 60
    firing = 'group by (alertname) (ALERTS{alertname="IipubMetricsStale", alertstate="firing"})'
    spec = {"rule_files": [rules.name], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        # written at Unix time 0, then never again (the last sample stays while node_exporter serves the file)
        "input_series": [{"series": 'iipub_status_generated_timestamp_seconds{instance="h", job="node"}',
                          "values": f"0+0x{limit_minutes + 5}"}],
        "promql_expr_test": [
            {"expr": firing, "eval_time": f"{limit_minutes - 1}m", "exp_samples": []},
            {"expr": firing, "eval_time": f"{limit_minutes + 1}m",
             "exp_samples": [{"labels": '{alertname="IipubMetricsStale"}', "value": 1}]},
        ]}]}
    (tmp_path / "stale.test.yml").write_text(json.dumps(spec), encoding="utf-8")
    result = subprocess.run([PROMTOOL, "test", "rules", "stale.test.yml"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
