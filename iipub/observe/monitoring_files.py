"""The monitoring files iipub ships as package data (`monitoring/`): the Prometheus alert rules
(`alert_rules.render()`) and the Grafana dashboard (`dashboard.render()`), read as the package
holds them. `iipub init` writes them; a test holds them equal to what their modules make."""

from __future__ import annotations

from importlib import resources

from iipub.observe import alert_rules, dashboard

FOLDER = "monitoring"  # beside this module


def _read(name: str) -> str:
    return (resources.files(__package__) / FOLDER / name).read_text(encoding="utf-8")


def alert_rules_text() -> str:
    """The shipped rule file (`iipub-alerts.yml`)."""
    return _read(alert_rules.FILE_NAME)


def dashboard_text() -> str:
    """The shipped dashboard (`iipub-dashboard.json`)."""
    return _read(dashboard.FILE_NAME)
