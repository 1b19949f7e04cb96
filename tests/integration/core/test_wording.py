"""What a monitoring system reads from `status --check` and `--prometheus`: perfdata thresholds
that alert under the monitoring-plugins range rules, text cut at word boundaries with counts
that agree with their nouns, and Prometheus figures in base units."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from iipub.core.severity import Severity
from iipub.core.wording import clip_words, plural
from iipub.machine import sweep
from iipub.money.gate import CreateGate
from iipub.observe import queries
from iipub.provider.factory import settings_from_dict
from iipub.provider.openai.simulator import Simulator
from iipub.settings.config import Settings
from iipub.store.job_store import Store
from tests.support.cli import run_cli
from tests.support.rows import record_heartbeats, utc_today
from tests.support.settings import open_at_midnight

pytestmark = pytest.mark.no_auto_schedule


def alerts(value: float, spec: str) -> bool:
    """Whether `value` is outside a threshold range, as the monitoring plugins' development
    guidelines define it: `10` = alert outside 0..10, `10:` outside 10..inf, `~:10` outside
    -inf..10, `10:20` outside 10..20, `@10:20` inside 10..20. An empty spec never alerts."""
    if spec == "":
        return False
    inside = spec.startswith("@")
    spec = spec.lstrip("@")
    low_text, _, high_text = spec.rpartition(":") if ":" in spec else ("0", "", spec)
    low = float("-inf") if low_text == "~" else float(low_text or 0)
    high = float("inf") if high_text == "" else float(high_text)
    within = low <= value <= high
    return within if inside else not within


def perfdata(line: str) -> dict[str, tuple[float, str, str]]:
    """label -> (value, warn, crit)."""
    out = {}
    for item in line.split("|", 1)[1].split():
        label, _, rest = item.partition("=")
        fields = [*rest.split(";"), "", ""]
        value = float(re.match(r"-?[0-9.]+", fields[0]).group(0))  # type: ignore[union-attr]
        out[label] = (value, fields[1], fields[2])
    return out


def test_the_range_rules_as_the_guidelines_state_them() -> None:
    assert alerts(11, "10") and not alerts(10, "10") and alerts(-1, "10")
    assert alerts(9, "10:") and not alerts(10, "10:")
    assert alerts(11, "~:10") and not alerts(-5, "~:10")
    assert alerts(15, "@10:20") and not alerts(5, "@10:20")
    assert alerts(1, "0") and not alerts(0, "0") and not alerts(1, "1")  # `breaker_open=1;;1` never alerted


def test_breaker_and_pause_perfdata_alert_when_the_check_does(s: Settings, engine: sa.Engine, sim: Simulator) -> None:
    store = Store(engine, "test")
    for p in s.products.values():
        store.schedule(p, utc_today())
    record_heartbeats(engine)
    ok_line = queries.collect(engine, s).check()[1]
    assert not any(alerts(v, w) or alerts(v, c) for v, w, c in perfdata(ok_line).values()), ok_line
    sim.add_faults([{"op": "create", "fault": "drop_after_accept"}])  # the breaker opens
    sweep.run(s, engine)
    CreateGate(engine, "ops", s.provider, 60).pause("ops", "provider incident")
    code, line = queries.collect(engine, s).check()
    assert code >= Severity.WARNING
    figures = perfdata(line)
    for flag in ("breaker_open", "paused", "quarantined"):
        value, warn, crit = figures[flag]
        assert value == 1 and (alerts(value, warn) or alerts(value, crit)), (flag, line)


def test_check_text_cuts_at_a_word_and_counts_agree(s: Settings, engine: sa.Engine, sim: Simulator) -> None:
    store = Store(engine, "test")
    for p in s.products.values():
        store.schedule(p, utc_today())
    record_heartbeats(engine)
    sim.add_faults([{"op": "create", "fault": "drop_after_accept"}])
    sweep.run(s, engine)
    report = queries.collect(engine, s)
    detail = report.gate.breaker_detail if report.gate else None
    assert detail and len(detail) > 20
    line = report.check()[1]
    text = line.split("|", 1)[0]
    for clipped in re.findall(r"([^ ]*)…", text):  # every cut ends on a whole word of the original
        assert clipped == "" or f"{clipped} " in detail + " " or clipped.rstrip(",;:") in detail.split(), text
    assert "1 quarantined" in text and " 1 jobs" not in text and "1 orphan responses" not in text


@pytest.mark.parametrize(("text", "width", "expected"), [
    ("short", 20, "short"),
    ("the create timed out without sending a response back", 40, "the create timed out without sending a…"),
    ("the create timed out without sending a response back", 38, "the create timed out without sending…"),
    ("words,   spaced\nout", 50, "words, spaced out"),
    ("onelongwordwithoutspaces", 10, "onelongwo…"),
    ("cut after a comma, then more", 19, "cut after a comma…"),
])
def test_clip_words(text: str, width: int, expected: str) -> None:
    assert clip_words(text, width) == expected and len(clip_words(text, width)) <= width


def test_plural() -> None:
    assert [plural(n, "orphan response") for n in (0, 1, 2)] == ["0 orphan responses", "1 orphan response",
                                                                   "2 orphan responses"]
    assert plural(1, "parked sink delivery", "parked sink deliveries") == "1 parked sink delivery"
    assert plural(3, "parked sink delivery", "parked sink deliveries") == "3 parked sink deliveries"


def test_prometheus_spend_window_is_in_seconds(engine: sa.Engine, cli_env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "iipub.prom"
    run_cli("status", "--prometheus", str(path), env=cli_env, cwd=tmp_path)
    names = {f.name: f for f in text_string_to_metric_families(path.read_text(encoding="utf-8"))}
    assert "iipub_spend_window_days" not in names
    (sample,) = names["iipub_spend_window_seconds"].samples
    assert sample.value == settings_from_dict({}).status.spend_days * 86_400


@pytest.fixture
def s(settings: Settings) -> Settings:
    return open_at_midnight(settings)
