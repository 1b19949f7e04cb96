"""The relay against a real database, real files and a real webhook receiver."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.machine import sweep
from iipub.provider.openai.simulator import Simulator
from iipub.publish import relay
from iipub.settings.config import Settings, WebhookSinkSettings
from iipub.store import clock, db, tables
from iipub.store.outbox import Outbox
from tests.support.loopback import Receiver
from tests.support.ticks import drive_to_saved

DAY = dt.date(2026, 11, 28)
pytestmark = [pytest.mark.no_auto_schedule, pytest.mark.usefixtures("webhook_sink_secret")]


def with_webhook(settings: Settings, url: str) -> Settings:
    return replace(settings, webhook_sink=WebhookSinkSettings(url=url, timeout_seconds=2))


def saved(settings: Settings, engine: sa.Engine, sim: Simulator, days: int = 1) -> None:
    drive_to_saved(settings, engine, sim, DAY, days)


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".lock"}


def outbox_rows(engine: sa.Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(tables.outbox).order_by(tables.outbox.c.id)).mappings()]


def deliveries(engine: sa.Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(tables.outbox_deliveries)).mappings()]


def job_states(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(sa.select(tables.jobs.c.state)).scalars())


@pytest.mark.slow
def test_10_final_save_produces_a_verified_outbox_event(settings: Settings, engine: sa.Engine, sim: Simulator) -> None:
    saved(settings, engine, sim)
    rows = outbox_rows(engine)
    assert len(rows) == 4 and all(r["published_at"] is None for r in rows)
    with engine.connect() as conn:
        editions = {r.id: r for r in conn.execute(sa.select(tables.editions))}
    for r in rows:
        payload = json.loads(r["payload"])
        ed = editions[r["edition_id"]]
        assert payload["sha256"] == ed.sha256 == hashlib.sha256(ed.content.encode()).hexdigest()
        assert (payload["product"], payload["lang"]) == (ed.product, ed.lang)


@pytest.mark.slow
def test_relay_publishes_files_marks_events_and_publishes_the_job_then_cleanup(
    settings: Settings, engine: sa.Engine, sim: Simulator, tmp_path: Path
) -> None:
    saved(settings, engine, sim)
    report = relay.run(settings, engine)
    assert report.published == 4 and report.jobs_published == 2
    root = tmp_path / "public"
    for product in ("daily-brief", "revolution-watch"):
        for lang in ("en", "es"):
            assert (root / product / DAY.isoformat() / f"{lang}.html").is_file()
            assert (root / product / DAY.isoformat() / f"{lang}.json").is_file()
            assert (root / product / lang / "index.html").is_file()
            assert (root / product / lang / "feed.atom").is_file()
    assert all(r["published_at"] is not None for r in outbox_rows(engine))
    assert job_states(engine) == {"PUBLISHED"}
    sweep.run(settings, engine)
    assert job_states(engine) == {"DELETED"}
    assert sim.stats()["deletes"] == 2


def test_18_relay_deduplicates_identical_events(settings: Settings, engine: sa.Engine, sim: Simulator,
                                                hook: Receiver, tmp_path: Path) -> None:
    s = with_webhook(settings, hook.url)
    saved(s, engine, sim)
    relay.run(s, engine)
    first = tree(tmp_path / "public")
    # Re-arm every event as if a relay had died before marking it: each is delivered
    # again, the files stay byte-identical and the webhook sees the same keys.
    with engine.begin() as conn:
        conn.execute(tables.outbox.update().values(published_at=None, version=tables.outbox.c.version + 1))
        conn.execute(tables.outbox_deliveries.delete())
    relay.run(s, engine)
    assert tree(tmp_path / "public") == first
    keys = hook.keys()
    assert len(keys) == 4 and set(keys.values()) == {2}
    assert hook.verified() == 8
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(tables.editions)).scalar() == 4


def test_34_relay_network_failure_leaves_the_event_and_the_next_tick_succeeds(
    settings: Settings, engine: sa.Engine, sim: Simulator, hook: Receiver, tmp_path: Path
) -> None:
    saved(settings, engine, sim)
    with Simulator() as gone:
        dead_url = gone.url.replace("/v1", "/hooks")
    down = with_webhook(settings, dead_url)
    report = relay.run(down, engine)
    assert report.retried == 4 and report.published == 0
    rows = outbox_rows(engine)
    assert all(r["published_at"] is None and r["attempts"] == 1 and r["last_error"] for r in rows)
    assert job_states(engine) == {"SAVED_NOT_PUBLIC"}
    # The static sink was not held up by the failing webhook.
    assert sum(1 for d in deliveries(engine) if d["sink"] == "static" and d["delivered_at"]) == 4
    clock.advance_clock(engine, 3600)
    up = with_webhook(settings, hook.url)
    report = relay.run(up, engine)
    assert report.published == 4 and job_states(engine) == {"PUBLISHED"}
    assert len(hook.keys()) == 4 and set(hook.keys().values()) == {1}
    # The static sink is not asked again for what it already holds.
    assert all(d["attempts"] == 1 for d in deliveries(engine) if d["sink"] == "static")


@pytest.mark.slow
def test_webhook_down_for_hours_then_delivered(settings: Settings, engine: sa.Engine, sim: Simulator,
                                               hook: Receiver) -> None:
    saved(settings, engine, sim)
    with Simulator() as gone:
        dead_url = gone.url.replace("/v1", "/hooks")
    relay.run(with_webhook(settings, dead_url), engine)  # connection refused
    s = with_webhook(settings, hook.url)
    hook.mode = "503"
    for _ in range(6):  # six simulated hours of 503 with retry-after: 120
        clock.advance_clock(engine, 3600)
        report = relay.run(s, engine)
        assert report.published == 0
    rows = outbox_rows(engine)
    assert all(r["attempts"] == 7 for r in rows)
    hook.mode = "ok"
    relay.run(s, engine)  # retry-after 120 s has not passed by the database clock
    assert all(r["published_at"] is None for r in outbox_rows(engine))
    clock.advance_clock(engine, 121)
    report = relay.run(s, engine)
    assert report.published == 4 and job_states(engine) == {"PUBLISHED"}
    counts = hook.keys()
    assert len(counts) == 4 and all(n == 7 for n in counts.values())  # 6 x 503, then delivered once


def test_webhook_4xx_parks_for_an_operator_and_requeue_delivers(settings: Settings, engine: sa.Engine,
                                                                sim: Simulator, hook: Receiver) -> None:
    saved(settings, engine, sim)
    s = with_webhook(settings, hook.url)
    hook.mode = "400"
    report = relay.run(s, engine)
    assert report.parked == 4
    parked = [d for d in deliveries(engine) if d["sink"] == "webhook"]
    assert len(parked) == 4 and all(d["parked_at"] and "400" in d["last_error"] for d in parked)
    clock.advance_clock(engine, 7200)
    relay.run(s, engine)
    assert len(hook.requests) == 4  # parked: not retried by itself
    hook.mode = "ok"
    box = Outbox(engine, "operator", 60)
    for r in outbox_rows(engine):
        assert box.requeue_parked(r["event_id"]) == 1
    report = relay.run(s, engine)
    assert report.published == 4 and job_states(engine) == {"PUBLISHED"}


@pytest.mark.slow
def test_two_relays_at_once_over_120_events(settings: Settings, db_url: str, engine: sa.Engine, sim: Simulator,
                                            hook: Receiver) -> None:
    s = with_webhook(settings, hook.url)
    saved(s, engine, sim, days=30)  # 60 jobs, 120 events
    assert len(outbox_rows(engine)) == 120
    engines = [db.make_engine(db_url) for _ in range(2)]
    reports: list[relay.RelayReport] = []
    try:
        threads = [threading.Thread(target=lambda e=e: reports.append(relay.run(s, e))) for e in engines]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for e in engines:
            e.dispose()
    keys = hook.keys()
    assert len(keys) == 120 and set(keys.values()) == {1}
    assert sum(r.published for r in reports) == 120
    assert all(r["published_at"] is not None for r in outbox_rows(engine))
    assert len(deliveries(engine)) == 240 and {d["attempts"] for d in deliveries(engine)} == {1}
    assert job_states(engine) == {"PUBLISHED"}


def test_prune_removes_old_published_events_in_batches(settings: Settings, engine: sa.Engine, sim: Simulator) -> None:
    saved(settings, engine, sim)
    relay.run(settings, engine)
    box = Outbox(engine, "pruner", 60)
    assert box.prune(86400, batch=3) == 0  # too young
    clock.advance_clock(engine, 2 * 86400)
    assert box.prune(86400, batch=3) == 4
    assert outbox_rows(engine) == [] and deliveries(engine) == []
