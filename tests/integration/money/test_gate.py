"""Money controls against a real database and the simulator over real HTTP: the flex tier with
its deadline (the simulator's flex mode), daily token ceilings in the create gate with their
audited override, spend counted by payment time, and an unreachable provider reported as such."""

from __future__ import annotations

import datetime as dt
import json
import socket
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.core.severity import Severity
from iipub.core.timefmt import naive_utc
from iipub.machine import sweep
from iipub.model.states import Reason, State
from iipub.observe import queries
from iipub.provider.factory import load_settings
from iipub.provider.openai.simulator import Simulator
from iipub.provider.openai.simulator.faults import FaultRule
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import clock, db, tables
from iipub.store.job_store import Store
from tests.support.cli import one_line_error, run_cli
from tests.support.rows import job_events, job_rows
from tests.support.settings import sim_env

DAY = dt.date(2026, 11, 20)
pytestmark = pytest.mark.no_auto_schedule  # ticks work on the slots a test schedules, not today's as well


def flex(settings: Settings, minutes: int = 10, **product: Any) -> Settings:
    """One flex product (daily-brief, 3 items), polled at once at flex as at the default tier."""
    p = replace(settings.products["daily-brief"], items=3, prompt="Write the brief.", service_tier="flex",
                flex_until_minutes=minutes, **product)
    return replace(settings, products={"daily-brief": p}, webhook_sink=None,
                   reconcile=replace(settings.reconcile, flex_poll_interval_seconds=0))


def backfill(settings: Settings, engine: sa.Engine, *days: dt.date) -> None:
    """A backfilled slot opens when it is made: its flex deadline runs from now."""
    store = Store(engine, "test-scheduler")
    for day in days or (DAY,):
        for p in settings.products.values():
            store.schedule(p, day, backfill=True)


def tick(settings: Settings, engine: sa.Engine, sim: Simulator, *, db_seconds: float = 0) -> sweep.SweepReport:
    """One tick after moving the simulated and database clocks on (past any backoff)."""
    if db_seconds:
        clock.advance_clock(engine, db_seconds)
    sim.advance(5)
    return sweep.run(settings, engine)


def spend_rows(engine: sa.Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(tables.spend).order_by(tables.spend.c.id)).mappings()]


def gate_events(engine: sa.Engine, kind: str) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(tables.gate_events).where(tables.gate_events.c.kind == kind)).mappings()
        return [{**r, "detail": json.loads(r["detail"] or "{}")} for r in rows]


def details(engine: sa.Engine, job_id: str, reason: Reason) -> list[dict[str, Any]]:
    return [json.loads(e["detail"] or "{}") for e in job_events(engine, job_id) if e["reason"] == reason.value]


# -- flex -----------------------------------------------------------------------------------------


def test_flex_refusals_are_refunded_and_retried_at_flex_one_create_reaches_the_provider(
        settings: Settings, engine: sa.Engine, sim: Simulator) -> None:
    s = flex(settings)
    sim.add_faults([FaultRule("create", "flex_unavailable", times=2)])
    backfill(s, engine)
    first = tick(s, engine, sim)
    assert first.refused == 1 and first.creates == 0  # reported as refused, not as a create
    job = job_rows(engine)[0]
    assert job["state"] == State.CREATE_ELIGIBLE.value and job["generation_attempts"] == 0  # refunded
    with engine.connect() as conn:
        g = conn.execute(sa.select(tables.create_gate)).mappings().one()
    assert g["breaker"] == "closed" and g["cooldown_until"] is None  # no breaker, no shared cool-down
    for _ in range(8):
        if job_rows(engine)[0]["state"] == State.SAVED_NOT_PUBLIC.value:
            break
        tick(s, engine, sim, db_seconds=120)
    job = job_rows(engine)[0]
    assert job["state"] == State.SAVED_NOT_PUBLIC.value and job["generation_attempts"] == 1
    stats = sim.stats()
    assert stats["flex_refused"] == 2
    assert stats["creates_total"] == 1 and stats["creates_by_tier"] == {"flex": 1}  # one paid create, at flex
    dispatches = details(engine, job["id"], Reason.DISPATCH)
    assert [d["service_tier"] for d in dispatches] == ["flex", "flex", "flex"]
    refusals = details(engine, job["id"], Reason.CREATE_REFUSED)
    assert len(refusals) == 2 and all(r["capacity"] and r["service_tier_asked"] == "flex" for r in refusals)
    accepted = details(engine, job["id"], Reason.ACCEPTED)
    assert accepted[0]["service_tier_asked"] == "flex" and accepted[0]["service_tier"] == "flex"
    rows = spend_rows(engine)
    assert [r["state"] for r in rows] == ["refused", "refused", "settled"]
    assert rows[-1]["tier_reported"] == "flex" and rows[-1]["total_tokens"] == job["total_tokens"] > 0


def test_past_the_flex_deadline_the_create_goes_out_at_the_default_tier(
        settings: Settings, engine: sa.Engine, sim: Simulator) -> None:
    s = flex(settings, minutes=10)
    sim.add_faults([FaultRule("create", "flex_unavailable")])  # flex never has capacity
    backfill(s, engine)
    for _ in range(3):  # inside the window: refused at flex, retried at flex
        tick(s, engine, sim, db_seconds=60)
    assert job_rows(engine)[0]["state"] == State.CREATE_ELIGIBLE.value
    tick(s, engine, sim, db_seconds=600)  # past the deadline
    for _ in range(4):
        if job_rows(engine)[0]["state"] == State.SAVED_NOT_PUBLIC.value:
            break
        tick(s, engine, sim, db_seconds=5)
    job = job_rows(engine)[0]
    assert job["state"] == State.SAVED_NOT_PUBLIC.value and job["generation_attempts"] == 1
    tiers = [d["service_tier"] for d in details(engine, job["id"], Reason.DISPATCH)]
    assert tiers[-1] == "default" and set(tiers[:-1]) == {"flex"} and len(tiers) >= 4
    stats = sim.stats()
    assert stats["creates_total"] == 1 and stats["creates_by_tier"] == {"default": 1}
    assert details(engine, job["id"], Reason.ACCEPTED)[0]["service_tier"] == "default"
    # Every refused retry inside the window was due before the deadline.
    assert all(r["delay"] <= 600 for r in details(engine, job["id"], Reason.CREATE_REFUSED))


def test_a_flex_refusal_does_not_hold_a_default_tier_product(
        settings: Settings, engine: sa.Engine, sim: Simulator) -> None:
    s = flex(settings)
    other = replace(settings.products["revolution-watch"], items=3, prompt="Watch.")
    s = replace(s, products={**s.products, "revolution-watch": other})
    sim.add_faults([FaultRule("create", "flex_unavailable")])
    backfill(s, engine)
    report = tick(s, engine, sim)
    assert report.refused == 1 and report.creates == 1
    assert sim.stats()["creates_by_tier"] == {"default": 1}
    by_product = {r["product"]: r for r in job_rows(engine)}
    assert by_product["revolution-watch"]["state"] != State.CREATE_ELIGIBLE.value


def test_a_flex_response_is_polled_at_the_flex_cadence(settings: Settings, engine: sa.Engine,
                                                        sim: Simulator) -> None:
    s = flex(settings)
    s = replace(s, reconcile=replace(s.reconcile, flex_poll_interval_seconds=200))
    backfill(s, engine)
    tick(s, engine, sim)
    job = job_rows(engine)[0]
    assert job["state"] == State.ACCEPTED.value
    with engine.connect() as conn:
        now = clock.read_now(conn)
    assert (naive_utc(job["next_attempt_at"]) - now).total_seconds() > 150  # not [reconcile]'s 0 s
    clock.advance_clock(engine, 250)
    sweep.run(s, engine)  # a poll while the (slower) flex response still runs
    job = job_rows(engine)[0]
    assert details(engine, job["id"], Reason.POLL), [e["reason"] for e in job_events(engine, job["id"])]
    with engine.connect() as conn:
        now = clock.read_now(conn)
    assert (naive_utc(job["next_attempt_at"]) - now).total_seconds() > 150


# -- ceilings -------------------------------------------------------------------------------------


CEILING = """
[budgets]
max_tokens_per_day = 100
[[products]]
name = "daily-brief"
prompt = "Write the brief."
items = 3
opens_at = "00:00"
"""


def test_at_the_ceiling_creates_wait_everything_else_goes_on_and_the_override_is_journaled(
        cli_env: dict[str, str], engine: sa.Engine, sim: Simulator, tmp_path: Path) -> None:
    env = sim_env(cli_env, sim, tmp_path, CEILING, auto_schedule=False)
    loaded = load_settings(env)
    s = replace(loaded, reconcile=replace(loaded.reconcile, concurrency=1))  # one create at a time
    store = Store(engine, "test-scheduler")
    product = s.products["daily-brief"]
    for day in (DAY, DAY + dt.timedelta(days=1)):
        store.schedule(product, day)
    first = tick(s, engine, sim)
    # The first create is counted at its estimate (20,000) from its dispatch: the second waits.
    assert first.creates == 1 and first.held_by_ceiling == 1
    for _ in range(4):
        tick(s, engine, sim)
    relay.run(s, engine)
    states = sorted(r["state"] for r in job_rows(engine))
    # Custody, validation, save and publication went on; the second slot never reached the provider.
    assert states == [State.CREATE_ELIGIBLE.value, State.CLEANUP_PENDING.value] or states == [
        State.CREATE_ELIGIBLE.value, State.PUBLISHED.value] or states == [
        State.CREATE_ELIGIBLE.value, State.DELETED.value]
    assert sim.stats()["creates_total"] == 1
    assert len(gate_events(engine, "ceiling_reached")) == 1  # journaled once, not once per tick
    check = run_cli("status", "--check", env=env)
    assert check.returncode == 2 and "spend ceiling reached: [budgets] max_tokens_per_day 100" in check.stdout
    # A restart keeps the count: it lives in the database (a new engine, a new process's view).
    engine.dispose()
    again = db.make_engine(env["IIPUB_DATABASE_URL"])
    try:
        assert tick(s, again, sim).held_by_ceiling == 1
        counted = queries.collect(again, s).paid
        assert counted is not None and counted.ceilings[0].reached
        assert counted.ceilings[0].spent == sum(r["total_tokens"] for r in job_rows(again))
        override = run_cli("budget", "override", "--tokens", "1000000", "--reason", "editor approved the backfill",
                           "--by", "ops", env=env)
        assert override.returncode == 0, override.stderr
        journaled = gate_events(again, "budget_override")
        assert len(journaled) == 1 and journaled[0]["detail"]["why"] == "editor approved the backfill"
        assert journaled[0]["detail"]["by"] == "ops" and journaled[0]["detail"]["extra_tokens"] == 1_000_000
        assert tick(s, again, sim).creates == 1  # the waiting slot goes out now
        assert sim.stats()["creates_total"] == 2
        doc = json.loads(run_cli("status", "--json", env=env).stdout)
        assert doc["paid"]["overrides"][0]["reason"] == "editor approved the backfill"
        assert not doc["paid"]["ceilings"][0]["reached"]
        assert all("spend ceiling" not in p["text"] for p in doc["check"]["problems"])
    finally:
        again.dispose()


def test_a_product_ceiling_holds_that_product_only(settings: Settings, engine: sa.Engine, sim: Simulator) -> None:
    brief = replace(settings.products["daily-brief"], items=3, prompt="Brief.", max_tokens_per_day=1)
    watch = replace(settings.products["revolution-watch"], items=3, prompt="Watch.")
    s = replace(settings, products={"daily-brief": brief, "revolution-watch": watch}, webhook_sink=None,
                reconcile=replace(settings.reconcile, concurrency=1))
    store = Store(engine, "test-scheduler")
    for day in (DAY, DAY + dt.timedelta(days=1)):
        for p in s.products.values():
            store.schedule(p, day)
    for _ in range(4):
        tick(s, engine, sim)
    by_product: dict[str, list[str]] = {}
    for r in job_rows(engine):
        by_product.setdefault(r["product"], []).append(r["state"])
    assert by_product["daily-brief"].count(State.CREATE_ELIGIBLE.value) == 1
    assert by_product["revolution-watch"] == [State.SAVED_NOT_PUBLIC.value] * 2
    code, line = queries.collect(engine, s).check()
    assert code == Severity.CRITICAL and "product daily-brief max_tokens_per_day 1" in line


def test_spend_is_counted_by_payment_time_with_prices_and_the_flex_saving(
        settings: Settings, engine: sa.Engine, sim: Simulator) -> None:
    s = flex(settings, minutes=1440)
    s = replace(s, pricing=replace(s.pricing, models={"gpt-5-mini": _price()}))
    days = [DAY - dt.timedelta(days=n) for n in range(30, 34)]  # a backfill of old dates, paid today
    backfill(s, engine, *days)
    for _ in range(5):
        tick(s, engine, sim)
    paid = queries.collect(engine, s).paid
    assert paid is not None
    today = paid.window("today")
    tokens = sum(r["total_tokens"] for r in job_rows(engine))
    assert today.total.creates == 4 and today.total.tokens == tokens > 0
    assert today.by_tier["flex"].tokens == tokens and today.by_product["daily-brief"].creates == 4
    assert today.total.cost is not None and today.total.flex_saving is not None
    assert today.total.flex_saving == pytest.approx(today.total.cost)  # flex at half price saves as much
    doc = queries.collect(engine, s).to_dict()
    assert doc["paid"]["windows"]["30d"]["tokens"] == tokens and doc["paid"]["currency"] == "USD"
    from iipub.observe import metrics

    text = metrics.render(queries.collect(engine, s), s.products).decode()
    assert f'iipub_paid_tokens{{window="today"}} {float(tokens)}' in text
    assert 'iipub_paid_tokens_by_tier{tier="flex",window="7d"}' in text
    assert 'iipub_flex_saving{currency="USD",window="30d"}' in text


def _price() -> Any:
    from iipub.settings.config import ModelPrice

    return ModelPrice(input_per_million=1.0, output_per_million=4.0)


# -- an unreachable provider ----------------------------------------------------------------------


def test_ticks_that_cannot_connect_report_refusals_and_check_warns_after_n(
        cli_env: dict[str, str], engine: sa.Engine, sim: Simulator, tmp_path: Path) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: every connection is refused
    env = {**sim_env(cli_env, sim, tmp_path, CEILING.replace("max_tokens_per_day = 100", "")
                     + "[status]\nunreachable_after_ticks = 2\n[monitoring]\nheartbeat_after_seconds = 0\n",
                     auto_schedule=False),
           "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1"}
    s = load_settings(env)
    Store(engine, "test-scheduler").schedule(s.products["daily-brief"], DAY)
    summaries = []
    for _ in range(2):
        clock.advance_clock(engine, 120)  # past the refused create's backoff
        result = run_cli("reconcile", env=env)
        assert result.returncode == 0, result.stderr
        summaries.append(json.loads(result.stdout))
    for summary in summaries:
        assert summary["refused"] == 1 and summary["creates"] == 0 and summary["provider_unreachable"] is True
    check = run_cli("status", "--check", env=env)
    assert check.returncode == 1 and "provider unreachable: the last 2 reconcile runs" in check.stdout
    assert job_rows(engine)[0]["generation_attempts"] == 0  # nothing was charged


@pytest.mark.parametrize(("args", "code", "needle"), [
    (("--tokens", "0", "--reason", "x"), 2, "--tokens must be a positive number"),
    (("--tokens", "10", "--reason", "x", "--product", "nope"), 2, "unknown product 'nope'"),
    (("--tokens", "10", "--reason", "x", "--until", "tomorrow"), 2, "YYYY-MM-DDTHH:MM"),
    (("--tokens", "10", "--reason", "x", "--until", "2001-01-01T00:00Z"), 3, "already past"),
    (("--tokens", "10", "--reason", "  "), 2, "--reason must say why"),
])
def test_a_bad_override_is_one_error_line_and_nothing_is_written(
        cli_env: dict[str, str], engine: sa.Engine, sim: Simulator, tmp_path: Path, args: tuple[str, ...],
        code: int, needle: str) -> None:
    env = sim_env(cli_env, sim, tmp_path, CEILING, auto_schedule=False)
    result = run_cli("budget", "override", *args, env=env)
    assert result.returncode != 0
    one_line_error(result, code, needle)
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(tables.spend_overrides)).scalar_one() == 0
    assert gate_events(engine, "budget_override") == []


BOTH_CEILINGS = CEILING + """max_tokens_per_day = 1000000
[[products]]
name = "revolution-watch"
prompt = "Watch."
items = 3
opens_at = "00:00"
"""


def _overrides(engine: sa.Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(tables.spend_overrides)).mappings()]


def test_an_override_raises_the_ceiling_that_holds_the_creates_or_refuses_naming_it(
        cli_env: dict[str, str], engine: sa.Engine, sim: Simulator, tmp_path: Path) -> None:
    """daily-brief has a ceiling of its own (1,000,000) under the global one (100), which is reached
    after the first create; revolution-watch has none: the global ceiling holds both."""
    env = sim_env(cli_env, sim, tmp_path, BOTH_CEILINGS, auto_schedule=False)
    s = load_settings(env)
    Store(engine, "test").schedule(s.products["daily-brief"], DAY)
    tick(s, engine, sim)  # one create, counted at its estimate: the global ceiling is reached
    counted = queries.collect(engine, s).paid
    assert counted is not None and [c.scope for c in counted.ceilings if c.reached] == ["*"]
    # A product without a ceiling of its own: refused, naming the global ceiling that holds it.
    result = run_cli("budget", "override", "--tokens", "500", "--product", "revolution-watch", "--reason", "x",
                     env=env)
    one_line_error(result, 3, "product revolution-watch has no max_tokens_per_day of its own: its creates are held "
                              "by [budgets] max_tokens_per_day 100")
    # A product whose own ceiling is not what holds it: refused, naming the one that does.
    result = run_cli("budget", "override", "--tokens", "500", "--product", "daily-brief", "--reason", "x", env=env)
    one_line_error(result, 3, "daily-brief's creates are held by [budgets] max_tokens_per_day 100")
    assert _overrides(engine) == [] and gate_events(engine, "budget_override") == []
    # The global override releases them: written, journaled, and the ceiling is no longer reached.
    result = run_cli("budget", "override", "--tokens", "10000000", "--reason", "backfill approved", env=env)
    assert result.returncode == 0, result.stderr
    (row,) = _overrides(engine)
    assert (row["scope"], row["extra_tokens"]) == ("*", 10_000_000)
    counted = queries.collect(engine, s).paid
    assert counted is not None and not any(c.reached for c in counted.ceilings)


def test_an_override_of_a_ceiling_that_is_not_configured_is_refused(
        cli_env: dict[str, str], engine: sa.Engine, sim: Simulator, tmp_path: Path) -> None:
    env = sim_env(cli_env, sim, tmp_path, CEILING.replace("max_tokens_per_day = 100\n", ""), auto_schedule=False)
    result = run_cli("budget", "override", "--tokens", "500", "--reason", "x", env=env)
    one_line_error(result, 3, "the global ceiling ([budgets] max_tokens_per_day) is not configured; nothing to raise")
    result = run_cli("budget", "override", "--tokens", "500", "--product", "daily-brief", "--reason", "x", env=env)
    one_line_error(result, 3, "no global ceiling is configured: nothing holds its creates")
    assert _overrides(engine) == [] and gate_events(engine, "budget_override") == []
