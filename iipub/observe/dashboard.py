"""A Grafana dashboard over the metrics textfile (`observe.metrics`), as a value. Pure.

`render()` is the JSON shipped as package data (`observe/monitoring/iipub-dashboard.json`,
written by `iipub init`); a test holds the file equal to it and checks that every expression names
only metric families the textfile exports. The textfile holds the present (what `status` says
now); the days come from Prometheus keeping its samples, so "per day" panels are ranges over them.
Import: Grafana, Dashboards, New, Import, upload the file, pick the Prometheus data source.
"""

from __future__ import annotations

import json
from typing import Any

FILE_NAME = "iipub-dashboard.json"
UID = "iipub-overview"
_SEL = 'instance=~"$instance"'
_DONE = 'state=~"PUBLISHED|CLEANUP_PENDING|DELETED"'

# (title, unit, [(legend, expr)], description)
Panel = tuple[str, str, list[tuple[str, str]], str]


def panels() -> list[Panel]:
    """The panels, in the order the issue of operators asks for them."""
    return [
        ("Editions published and late per day", "short", [
            ("published {{product}}",
             f"delta((sum by (product) (iipub_jobs{{{_SEL}, {_DONE}}}))[1d:5m])"),
            ("late now", f"iipub_late_editions{{{_SEL}}}"),
            ("late, most in a day", f"max_over_time(iipub_late_editions{{{_SEL}}}[1d])"),
        ], ("Slots that reached PUBLISHED (or cleaned up after it) over the last day; editions unpublished past "
           "[status] late_after_minutes.")),
        ("Dwell p50 / p95 (custody)", "s", [
            ("p50", f'iipub_sli_p50_seconds{{{_SEL}, sli="unretrieved_dwell"}}'),
            ("p95", f'iipub_sli_p95_seconds{{{_SEL}, sli="unretrieved_dwell"}}'),
            ("SLO", f'iipub_sli_slo_seconds{{{_SEL}, sli="unretrieved_dwell"}}'),
        ], "How long a finished response waited at the provider before custody, over the status window."),
        ("Spend today against the ceilings", "short", [
            ("counted {{scope}}", f"iipub_spend_counted_today_tokens{{{_SEL}}}"),
            ("ceiling {{scope}}", f"iipub_spend_ceiling_tokens{{{_SEL}}}"),
            ("paid today", f'iipub_paid_tokens{{{_SEL}, window="today"}}'),
        ], "Tokens counted since the UTC midnight against each daily ceiling (overrides included)."),
        ("Quarantines by reason", "short", [
            ("{{reason}}", f"iipub_quarantined_jobs{{{_SEL}}} > 0"),
            ("parked tracks {{reason}}", f"sum by (reason) (iipub_parked_tracks{{{_SEL}}}) > 0"),
        ], "Jobs in QUARANTINED and language tracks parked, by reason."),
        ("Quarantines: oldest wait against its limit", "s", [
            ("{{kind}} {{reason}}", f"iipub_queue_oldest_seconds{{{_SEL}}}"),
            ("limit {{kind}} {{reason}}", f"iipub_queue_critical_after_seconds{{{_SEL}}}"),
        ], "Past its limit a wait is CRITICAL in `status --check` (IipubQuarantineOverdue)."),
        ("Create breaker and cool-downs", "s", [
            ("breaker open for", f"iipub_create_breaker_open_seconds{{{_SEL}}}"),
            ("creates cool down for", f"iipub_create_cooldown_seconds{{{_SEL}}}"),
            ("reads cool down for", f"iipub_read_cooldown_seconds{{{_SEL}}}"),
            ("breaker critical after", f"iipub_create_breaker_critical_after_seconds{{{_SEL}}}"),
        ], "0 while closed / not cooling down."),
        ("Idle and full runs", "short", [
            ("finished OK {{command}} (seconds since)", f"iipub_heartbeat_age_seconds{{{_SEL}}}"),
            ("died {{command}}", f"iipub_heartbeat_unfinished_runs{{{_SEL}}}"),
            ("unreachable reconcile runs in a row", f"iipub_provider_unreachable_ticks{{{_SEL}}}"),
        ], "Heartbeats of reconcile and relay; the split of idle and full runs per day is in `iipub report`."),
        ("Provider answers by kind (today)", "short", [
            ("paid creates", f'iipub_paid_creates{{{_SEL}, window="today"}}'),
            ("refused creates", f'iipub_refused_creates{{{_SEL}, window="today"}}'),
            ("expired or missing now", f"iipub_provider_expired_jobs{{{_SEL}}}"),
            ("webhook {{outcome}}", f"iipub_webhook_deliveries{{{_SEL}}} > 0"),
        ], ("Creates the provider accepted (paid) or provably refused; responses lost; webhook deliveries by "
           "outcome over the status window.")),
        ("Error budget left", "percentunit", [
            ("{{slo}}", f"iipub_error_budget_left_ratio{{{_SEL}}}"),
        ], "Below 0 the budget is overspent and changes are frozen."),
        ("status --check", "short", [
            ("0 OK, 1 WARNING, 2 CRITICAL", f"iipub_check_status{{{_SEL}}}"),
        ], "What `iipub status --check` says."),
    ]


def dashboard() -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    for i, (title, unit, targets, description) in enumerate(panels()):
        out.append({
            "id": i + 1,
            "type": "timeseries",
            "title": title,
            "description": description,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
            "targets": [{"refId": chr(ord("A") + j), "expr": expr, "legendFormat": legend,
                         "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                        for j, (legend, expr) in enumerate(targets)],
        })
    return {
        "uid": UID,
        "title": "iipub",
        "description": "iipub's metrics textfile (`iipub status --prometheus`), as the node_exporter collects it.",
        "tags": ["iipub"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-7d", "to": "now"},
        "refresh": "5m",
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
            {"name": "instance", "type": "query", "label": "host",
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "query": "label_values(iipub_check_status, instance)", "refresh": 2, "includeAll": True,
             "multi": True, "current": {"text": "All", "value": "$__all"}},
        ]},
        "panels": out,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2, sort_keys=True) + "\n"
