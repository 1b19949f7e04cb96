"""The one severity type: the monitoring-plugin codes and words every check speaks, unchanged on
the check line, in the JSON document and as the exit code."""

from __future__ import annotations

import json

from iipub.core.severity import Severity


def test_the_codes_and_words_are_the_monitoring_plugin_ones() -> None:
    assert [(s.value, s.name) for s in Severity] == [(0, "OK"), (1, "WARNING"), (2, "CRITICAL"), (3, "UNKNOWN")]


def test_a_severity_prints_and_serialises_as_its_number() -> None:
    assert json.dumps({"code": Severity.CRITICAL}) == '{"code": 2}'
    assert f"{Severity.WARNING}" == "1" and str(Severity.UNKNOWN) == "3"
    assert sorted([Severity.WARNING, Severity.CRITICAL, Severity.OK], key=lambda s: -s) == [
        Severity.CRITICAL, Severity.WARNING, Severity.OK]
