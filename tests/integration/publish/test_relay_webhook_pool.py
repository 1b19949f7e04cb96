"""A hung CMS cannot stall the relay: webhook deliveries run in a small pool beside the static
sink, under their own deadline. Real database, real files, a real receiver on loopback that
accepts the POST and never answers."""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.core.errors import ConfigError
from iipub.core.timefmt import naive_utc
from iipub.provider.factory import settings_from_dict
from iipub.provider.openai.simulator import Simulator
from iipub.publish import relay
from iipub.settings.config import Settings, WebhookSinkSettings
from iipub.store import clock, tables
from tests.support.loopback import Receiver
from tests.support.ticks import drive_to_saved

DAY = dt.date(2026, 11, 28)
pytestmark = [pytest.mark.no_auto_schedule, pytest.mark.usefixtures("webhook_sink_secret")]


def saved(settings: Settings, engine: sa.Engine, sim: Simulator, days: int = 1) -> None:
    drive_to_saved(settings, engine, sim, DAY, days)


def deliveries(engine: sa.Engine, sink: str) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(tables.outbox_deliveries)
                                              .where(tables.outbox_deliveries.c.sink == sink)).mappings()]


def outbox_rows(engine: sa.Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(tables.outbox).order_by(tables.outbox.c.id)).mappings()]


def job_states(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(sa.select(tables.jobs.c.state)).scalars())


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".lock"}


@pytest.mark.slow
def test_a_hung_webhook_delays_neither_the_static_site_nor_the_tick_and_is_delivered_later(
    settings: Settings, engine: sa.Engine, sim: Simulator, hook: Receiver, tmp_path: Path
) -> None:
    timeout = 2.0
    s = replace(settings, webhook_sink=WebhookSinkSettings(url=hook.url, timeout_seconds=timeout, concurrency=2,
                                                   deadline_seconds=1.0))
    saved(s, engine, sim, days=2)  # 2 products x 2 languages x 2 days: 8 events
    hook.mode, hook.hang_seconds = "hang", 5.0  # accepts the POST, never answers in time

    t0 = time.monotonic()
    report = relay.run(s, engine)
    took = time.monotonic() - t0
    # One round of two hung requests, then the deadline: not 8 timeouts one after another.
    assert took < 4 * timeout, took  # eight timeouts one after another would be 16 s
    assert len(hook.requests) == 2 and hook.most_answering == 2
    assert (report.claimed, report.published, report.retried, report.deferred) == (8, 0, 2, 6)
    # Every static page was published in this tick, without waiting for any webhook answer.
    static = deliveries(engine, "static")
    assert len(static) == 8 and all(d["delivered_at"] and d["attempts"] == 1 for d in static)
    times = sorted(naive_utc(d["delivered_at"]) for d in static)
    assert (times[-1] - times[0]).total_seconds() < hook.hang_seconds  # no page waited for a webhook
    root = tmp_path / "public"
    pages = tree(root)
    for product in ("daily-brief", "revolution-watch"):
        for i in range(2):
            for lang in ("en", "es"):
                assert f"{product}/{(DAY - dt.timedelta(days=i)).isoformat()}/{lang}.html" in pages
    # The webhook's share stays pending: two timed out (backing off), six never tried (due now).
    rows = outbox_rows(engine)
    assert all(r["published_at"] is None and r["lease_owner"] is None for r in rows)
    tried = [r for r in rows if r["attempts"]]
    assert len(tried) == 2 and all("timeout" in r["last_error"] for r in tried)
    assert all(r["last_error"] is None and r["first_failed_at"] is None for r in rows if not r["attempts"])
    assert {d["event_id"] for d in deliveries(engine, "webhook")} == {r["event_id"] for r in tried}
    assert job_states(engine) == {"SAVED_NOT_PUBLIC"}

    # The receiver recovers: the untried six go on the next run, the two others after their backoff.
    hook.mode = "ok"
    report = relay.run(s, engine)
    assert (report.published, report.deferred, report.deliveries) == (6, 0, {"webhook": 6})
    clock.advance_clock(engine, 120)
    report = relay.run(s, engine)
    assert report.published == 2 and job_states(engine) == {"PUBLISHED"}
    # Exactly once per sink: the static sink was never asked again, each event reached the CMS
    # once successfully (the two hung ones were sent twice, same key: the receiver deduplicates).
    assert all(d["attempts"] == 1 for d in deliveries(engine, "static"))
    assert tree(root) == pages
    keys = hook.keys()
    assert len(keys) == 8 and sorted(keys.values()) == [1] * 6 + [2] * 2
    assert hook.verified() == 10


@pytest.mark.slow
def test_webhook_deliveries_run_concurrently_up_to_the_limit(
    settings: Settings, engine: sa.Engine, sim: Simulator, hook: Receiver
) -> None:
    s = replace(settings, webhook_sink=WebhookSinkSettings(url=hook.url, timeout_seconds=5, concurrency=4))
    saved(s, engine, sim, days=2)
    hook.mode, hook.hang_seconds = "hang", 0.5  # slow, but answers 200
    report = relay.run(s, engine)
    assert report.published == 8 and job_states(engine) == {"PUBLISHED"}
    # Four at a time, never more: the receiver saw four requests waiting at once (a count, not a
    # duration, which a busy host would stretch).
    assert hook.most_answering == 4, hook.most_answering
    assert len(hook.keys()) == 8 and set(hook.keys().values()) == {1}


@pytest.mark.parametrize(("toml", "needle"), [
    ("concurrency = 0\n", "[sinks.webhook] concurrency"),
    ("concurrency = 33\n", "[sinks.webhook] concurrency"),
    ('concurrency = "4"\n', "[sinks.webhook] concurrency"),
    ("concurrency = true\n", "[sinks.webhook] concurrency"),
    ("deadline_seconds = 0\n", "[sinks.webhook] deadline_seconds"),
    ("deadline_seconds = 50\n", "must be below [relay] tick_seconds"),
    ("deadline_seconds = 45\ntimeout_seconds = 20\n", "must be below [relay] lease_seconds"),
])
def test_webhook_pool_settings_are_strict(toml: str, needle: str) -> None:
    import tomllib

    data = tomllib.loads('[sinks.webhook]\nurl = "https://cms.example/hooks"\n' + toml)
    with pytest.raises(ConfigError) as info:
        settings_from_dict(data)
    assert needle in str(info.value)


def test_webhook_pool_defaults() -> None:
    w = settings_from_dict({"sinks": {"webhook": {"url": "https://cms.example/hooks"}}}).webhook_sink
    assert w is not None and (w.concurrency, w.deadline_seconds) == (4, 20.0)
