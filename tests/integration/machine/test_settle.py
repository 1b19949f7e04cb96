"""End to end over real HTTP: the simulator signs and sends the provider's webhooks (with every
delivery fault), iipub's receiver settles them, cron-like ticks are the safety net. What is
asserted: the simulator's paid creates and reads, the receiver's delivery rows, the jobs."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.machine import sweep
from iipub.model.states import State
from iipub.observe import invariants
from iipub.provider.openai.simulator import Simulator
from iipub.publish import relay
from iipub.settings.config import Settings, WebhookSettings
from iipub.store import clock, tables
from iipub.store.job_store import Store
from iipub.webhooks import receiver as webhook
from iipub.webhooks import server as webhook_server
from tests.integration.webhooks.test_receiver import SECRET
from tests.support.rows import job_events, job_rows
from tests.support.settings import make_settings
from tests.support.simulator import simulator
from tests.support.suite import fast_first

pytestmark = pytest.mark.no_auto_schedule
DAYS = (dt.date(2026, 11, 29), dt.date(2026, 11, 30))
SAVED = {State.SAVED_NOT_PUBLIC.value, State.PUBLISHED.value, State.CLEANUP_PENDING.value, State.DELETED.value}


@dataclass
class World:
    settings: Settings
    engine: sa.Engine
    sim: Simulator

    def tick(self, n: int = 1) -> None:
        for _ in range(n):
            sweep.run(self.settings, self.engine)

    def jobs(self) -> list[dict[str, Any]]:
        return job_rows(self.engine)

    def deliveries(self) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(sa.select(tables.webhook_deliveries)).mappings()]


@pytest.fixture
def world(db_url: str, engine: sa.Engine, tmp_path: Any, request: pytest.FixtureRequest) -> Iterator[World]:
    """Receiver listening first (the simulator needs its URL), then the simulator sending to it."""
    # (provider timeout, lifecycle): the create-race test needs a response finished within a second.
    timeout, quick = getattr(request, "param", (4.0, False))
    hooks = WebhookSettings(enabled=True, poll_interval_seconds=300, lease_wait_seconds=1)
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(webhook_server.running(lambda e, s: [], hooks))
        # Otherwise a lifecycle longer than a tick on a loaded host: responses finish when a test
        # advances the clock, so its fault rules are in place before the webhook is sent.
        sim = stack.enter_context(simulator(
            queued_seconds=0.2 if quick else 1.0, in_progress_seconds=0.3 if quick else 1.5,
            webhook_url=f"http://127.0.0.1:{server.port}/", webhook_secret=SECRET, webhook_late_seconds=0.5))
        base = make_settings(db_url, sim.url, tmp_path / "public", reconcile={"auto_schedule": False},
                             provider={"timeout_seconds": timeout, "connect_timeout_seconds": 1})
        p = replace(base.products["daily-brief"], items=3, prompt="Write the brief.")
        settings = replace(
            base, products={"daily-brief": p}, webhook_sink=None, provider_webhook_secret=SECRET,
            reconcile=replace(base.reconcile, poll_interval_seconds=250), webhooks=hooks)
        receiver = webhook.Receiver(settings, engine=engine)
        server.set_app(receiver)
        store = Store(engine, "test")
        for day in DAYS:
            store.schedule(p, day)
        try:
            yield World(settings, engine, sim)
        finally:
            receiver.close()


def answers(sim: Simulator) -> list[tuple[str | None, int | None, bool]]:
    return [(w["fault"], w["answer"], bool(w["stale"])) for w in sim.stats()["webhooks"]]


def one_create_each(w: World) -> None:
    stats = w.sim.stats()
    assert sorted(stats["creates_by_job"].values()) == [1, 1], stats["creates_by_job"]


def settled(w: World) -> None:
    assert w.sim.flush_webhooks(10)


def test_completions_take_custody_by_webhook_without_a_single_poll(world: World) -> None:
    world.tick()
    assert {j["state"] for j in world.jobs()} == {State.ACCEPTED.value}
    world.sim.advance(5)
    settled(world)
    assert {j["state"] for j in world.jobs()} == {State.SAVED_NOT_PUBLIC.value}
    stats = world.sim.stats()
    assert stats["requests"]["retrieve"] == 2  # one read each, by the receiver; no poll was due
    assert Counter(d["outcome"] for d in world.deliveries()) == {"custody": 2}
    one_create_each(world)
    relay.run(world.settings, world.engine)
    world.tick()
    assert invariants.check(world.engine, settings=world.settings, sim_stats=world.sim.stats()) == []


@pytest.mark.parametrize("fault", fast_first(["webhook_bad_signature", "webhook_duplicate", "webhook_late",
                                              "webhook_out_of_order", "webhook_replayed"], fast=2))
def test_every_delivery_fault_ends_in_custody_once(world: World, fault: str) -> None:
    world.tick()
    first = world.jobs()[0]["id"]
    world.sim.add_faults([{"fault": fault, "op": "webhook", "job_id": first}])
    world.sim.advance(5)
    settled(world)
    assert {j["state"] for j in world.jobs()} == {State.SAVED_NOT_PUBLIC.value}
    rows = world.deliveries()
    assert len(rows) == 2 and {r["outcome"] for r in rows} == {"custody"}  # one row per delivery
    got = answers(world.sim)
    if fault == "webhook_bad_signature":
        assert (fault, 400, False) in got and sum(a == 200 for _, a, _ in got) == 2
    if fault == "webhook_replayed":
        assert (fault, 400, True) in got  # outside the ±5 minutes: refused
    if fault == "webhook_duplicate":
        assert sum(a == 200 for _, a, _ in got) == 3  # the copy is 200 and changed nothing
    assert world.sim.stats()["requests"]["retrieve"] == 2
    for job in world.jobs():
        reasons = [e["reason"] for e in job_events(world.engine, job["id"])]
        assert reasons.count("retrieved") == 1 and reasons.count("saved") == 1
    one_create_each(world)


def test_a_dropped_webhook_costs_one_safety_net_interval_and_tightens_polling(world: World) -> None:
    world.tick()
    first = world.jobs()[0]["id"]
    world.sim.add_faults([{"fault": "webhook_dropped", "op": "webhook", "job_id": first}])
    world.sim.advance(5)
    settled(world)
    states = {j["id"]: j["state"] for j in world.jobs()}
    assert states[first] == State.ACCEPTED.value  # nobody told it
    assert {s for k, s in states.items() if k != first} == {State.SAVED_NOT_PUBLIC.value}
    clock.advance_clock(world.engine, 251)  # the safety net's poll is due
    world.tick()
    assert all(j["state"] in SAVED for j in world.jobs())
    with world.engine.connect() as conn:
        missed = list(conn.execute(sa.select(tables.webhook_misses.c.job_id)).scalars())
    assert missed == [first]
    one_create_each(world)


def test_an_ambiguous_create_followed_by_its_webhook_is_published_with_one_paid_create(world: World) -> None:
    world.sim.add_faults([{"fault": "drop_after_accept", "op": "create", "times": 1}])
    world.tick()
    parked = [j for j in world.jobs() if j["state"] == State.QUARANTINED.value]
    assert len(parked) == 1 and parked[0]["quarantine_reason"] == "create_outcome_unknown"
    world.sim.advance(5)
    settled(world)
    job = next(j for j in world.jobs() if j["id"] == parked[0]["id"])
    assert job["state"] == State.SAVED_NOT_PUBLIC.value, job
    reasons = [e["reason"] for e in job_events(world.engine, job["id"])]
    assert "auto_linked" in reasons and not any(r.startswith("operator_") for r in reasons)
    assert Counter(d["outcome"] for d in world.deliveries())["auto_linked"] == 1
    # The breaker the unknown outcome opened lets the other slot go once its probe succeeds.
    for _ in range(6):
        clock.advance_clock(world.engine, 61)
        world.tick()
        world.sim.advance(5)
        settled(world)
        relay.run(world.settings, world.engine)
        if all(j["state"] in SAVED - {State.SAVED_NOT_PUBLIC.value} for j in world.jobs()):
            break
    published = SAVED - {State.SAVED_NOT_PUBLIC.value}
    assert all(j["state"] in published for j in world.jobs()), [j["state"] for j in world.jobs()]
    one_create_each(world)
    assert invariants.check(world.engine, settings=world.settings, sim_stats=world.sim.stats()) == []


@pytest.mark.parametrize("world", [(1.0, True)], indirect=True)
@pytest.mark.slow
def test_a_webhook_that_beats_the_create_answer_waits_and_the_next_tick_links_it(world: World) -> None:
    world.sim.add_faults([{"fault": "slow", "op": "create", "times": 1}])
    world.tick()  # the slow create times out after 1 s: outcome unknown
    settled(world)
    parked = [j for j in world.jobs() if j["state"] == State.QUARANTINED.value]
    assert len(parked) == 1
    outcomes = Counter(d["outcome"] for d in world.deliveries())
    assert outcomes["awaiting_create"] + outcomes["auto_linked"] == 1
    world.tick()
    job = next(j for j in world.jobs() if j["id"] == parked[0]["id"])
    assert job["state"] == State.SAVED_NOT_PUBLIC.value, job
    assert Counter(d["outcome"] for d in world.deliveries())["auto_linked"] == 1
    assert world.sim.stats()["creates_by_job"][job["id"]] == 1
