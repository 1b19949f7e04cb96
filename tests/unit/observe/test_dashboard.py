"""The shipped Grafana dashboard: the file is what `observe.dashboard` makes, it holds the panels
operators asked for, and every expression names only metric families the textfile exports."""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from iipub.observe import dashboard, metrics, monitoring_files
from tests.unit.observe.test_alert_rules import PROMTOOL, SCENARIOS, needs_promtool


@functools.cache
def _labels_by_family() -> dict[str, frozenset[str]]:
    """Every family the textfile exports in any scenario, with the labels its samples carry
    (rendered once: each scenario's textfile takes a while to build and parse)."""
    found: dict[str, set[str]] = {}
    for status, _ in SCENARIOS.values():
        text = metrics.render(status, ["daily-brief"]).decode("utf-8")
        for family in text_string_to_metric_families(text):
            labels = found.setdefault(family.name, set())
            for sample in family.samples:
                labels |= set(sample.labels)
    return {name: frozenset(labels) for name, labels in found.items()}


def _exported() -> set[str]:
    return set(_labels_by_family())


def test_the_shipped_dashboard_is_the_module_s() -> None:
    # Regenerate the file after a change: iipub/observe/monitoring/ holds dashboard.render() as it is.
    assert monitoring_files.dashboard_text() == dashboard.render()


def test_every_panel_reads_families_the_textfile_exports() -> None:
    doc = json.loads(monitoring_files.dashboard_text())
    exported = _exported()
    titles = [p["title"] for p in doc["panels"]]
    for wanted in ("Editions published and late per day", "Dwell p50 / p95", "Spend today against the ceilings",
                   "Quarantines by reason", "Quarantines: oldest wait", "Create breaker and cool-downs",
                   "Idle and full runs", "Provider answers by kind"):
        assert any(t.startswith(wanted) for t in titles), wanted
    seen = 0
    for panel in doc["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            named = set(re.findall(r"\b(iipub_[a-z0-9_]+)", expr))
            assert named, (panel["title"], expr)
            assert named <= exported, (panel["title"], named - exported)
            seen += len(named)
            assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
            # every label a selector names is one the family carries (or the target's instance)
            for name, body in re.findall(r"(iipub_[a-z0-9_]+)\{([^}]*)\}", expr):
                labels = set(re.findall(r"([a-z_]+)\s*=~?", body)) - {"instance"}
                assert labels <= _labels_of(name), (name, labels)
    assert seen >= 20
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))


def _labels_of(family: str) -> set[str]:
    return set(_labels_by_family().get(family, ()))


@needs_promtool
def test_every_panel_expression_parses(tmp_path: Path) -> None:
    """promtool parses each expression (as a recording rule, the dashboard's variable filled in)."""
    assert PROMTOOL is not None
    doc = json.loads(monitoring_files.dashboard_text())
    exprs = [t["expr"].replace("$instance", ".*") for p in doc["panels"] for t in p["targets"]]
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"iipub:panel_{i}", "expr": e}
                                                        for i, e in enumerate(exprs)]}]}
    path = tmp_path / "panels.yml"
    path.write_text(json.dumps(rules), encoding="utf-8")  # JSON is YAML
    checked = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in checked.stdout
