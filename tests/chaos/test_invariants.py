"""The invariant checker (`iipub.observe.invariants`) on real runs: silent on a correct history, and
loud for each kind of damage. Each test first drives real slots through the pipeline
(reconcile + relay + cleanup against the simulator over HTTP), then damages one thing and
asserts the checker names it, so none of these checks can pass vacuously."""

from __future__ import annotations

import copy
import datetime as dt
import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.machine import sweep
from iipub.model.states import SETTLED, State
from iipub.money import gate
from iipub.observe import invariants
from iipub.provider.openai.simulator import Simulator
from iipub.publish import relay
from iipub.settings.config import Settings, WebhookSinkSettings
from iipub.store import clock, db, migrate, tables
from iipub.store.job_store import Store
from tests.support.cli import CliResult, error_messages, run_cli
from tests.support.databases import Snapshot, fresh_database, restore_rows, snapshot_rows
from tests.support.loopback import receiver
from tests.support.settings import make_settings
from tests.support.simulator import simulator
from tests.support.suite import fast_first

DAY = dt.date(2026, 11, 28)
PRODUCT = "daily-brief"
PARKED = {s.value for s in SETTLED}
# `cfg` (conftest): one product, its slots the tests' own.
pytestmark = [pytest.mark.no_auto_schedule, pytest.mark.usefixtures("webhook_sink_secret")]


def states(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(tables.jobs.c.state).order_by(tables.jobs.c.edition_date)).scalars())


def job_ids(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(tables.jobs.c.id).order_by(tables.jobs.c.edition_date)).scalars())


def run_to_end(s: Settings, engine: sa.Engine, sim: Simulator, days: int = 2) -> None:
    store = Store(engine, "test")
    for i in range(days):
        store.schedule(s.products[PRODUCT], DAY - dt.timedelta(days=i))
    for _ in range(12):
        sweep.run(s, engine)
        relay.run(s, engine)
        sim.advance(5)
        if set(states(engine)) <= PARKED:
            return
        # An unknown create outcome (or a refused key) holds the other creates until the create
        # breaker's probe is due: let that time pass.
        with engine.connect() as conn:
            g, now = gate.read(conn), clock.read_now(conn)
        if g.is_open and g.probe_after is not None and g.probe_after > now:
            clock.advance_clock(engine, (g.probe_after - now).total_seconds() + 1)
    raise AssertionError(f"did not settle: {states(engine)}")


def kinds(found: list[invariants.Violation]) -> set[str]:
    return {v.kind for v in found}


def execute(engine: sa.Engine, stmt: Any) -> None:
    with engine.begin() as conn:
        conn.execute(stmt)


# -- a correct history is silent ------------------------------------------------------------------


def test_a_clean_run_holds_every_invariant(cfg: Settings, engine: sa.Engine, sim: Simulator) -> None:
    run_to_end(cfg, engine, sim)
    assert states(engine) == ["DELETED", "DELETED"]
    assert invariants.check(engine, settings=cfg, sim_stats=sim.stats(), settled=True) == []


# The billed unknown outcome in the fast loop; the unbilled and parked ones with the slow tests.
@pytest.mark.parametrize("fault", fast_first(["drop_after_accept", "server_error", "unauthorized", "malformed_output"]))
def test_parked_jobs_and_unknown_create_outcomes_are_not_violations(
    cfg: Settings, engine: sa.Engine, sim: Simulator, fault: str
) -> None:
    # drop_after_accept created (and billed) the response, server_error and unauthorized did not:
    # the journal cannot tell, so either count is explained.
    first = DAY
    Store(engine, "test").schedule(cfg.products[PRODUCT], first)
    (job_id,) = job_ids(engine)
    sim.add_faults([{"op": "create", "fault": fault, "job_id": job_id}])
    run_to_end(cfg, engine, sim, days=2)
    assert states(engine)[1] in ("QUARANTINED", "VALIDATION_FAILED_RETAINED")
    assert invariants.check(engine, settings=cfg, sim_stats=sim.stats(), settled=True) == []


def test_expiry_and_recreate_is_explained_by_the_journal(cfg: Settings, engine: sa.Engine, sim: Simulator) -> None:
    sim.backend.zdr = True  # a zero-data-retention project: gone ~10 minutes after it finished
    Store(engine, "test").schedule(cfg.products[PRODUCT], DAY)
    sweep.run(cfg, engine)
    sim.advance(5 + 700)  # finished, then gone before anyone fetched it
    run_to_end(cfg, engine, sim, days=1)
    stats = sim.stats()
    assert stats["creates_total"] == 2
    assert invariants.check(engine, settings=cfg, sim_stats=stats, settled=True) == []
    # The loss must name the response that was lost.
    execute(engine, tables.job_events.update()
        .where(tables.job_events.c.to_state == State.PROVIDER_EXPIRED_OR_MISSING.value)
            .values(detail=None))
    assert "expiry_unjournaled" in kinds(invariants.check(engine, settings=cfg, sim_stats=stats))


# -- each kind of damage is named ------------------------------------------------------------------------

Tamper = Callable[[sa.Engine, Settings, dict[str, Any]], dict[str, Any] | None]


def _last_event_id(engine: sa.Engine, job_id: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.max(tables.job_events.c.id))
                                .where(tables.job_events.c.job_id == job_id)).scalar_one())


def _versions(engine: sa.Engine, s: Settings, stats: dict[str, Any]) -> None:
    jid = job_ids(engine)[0]
    execute(engine, tables.job_events.update().where(tables.job_events.c.id == _last_event_id(engine, jid))
            .values(version=1))


def _state(engine: sa.Engine, s: Settings, stats: dict[str, Any]) -> None:
    execute(engine, tables.jobs.update().where(tables.jobs.c.id == job_ids(engine)[0]).values(state="IN_PROGRESS"))


def _edge(engine: sa.Engine, s: Settings, stats: dict[str, Any]) -> None:
    jid = job_ids(engine)[0]
    with engine.begin() as conn:
        version = conn.execute(sa.select(tables.jobs.c.version).where(tables.jobs.c.id == jid)).scalar_one() + 1
        conn.execute(tables.jobs.update().where(tables.jobs.c.id == jid).values(version=version))
        conn.execute(tables.job_events.insert().values(job_id=jid, from_state="DELETED", to_state="DELETED",
                                                   version=version, worker="x", reason="bogus",
                                                   at=dt.datetime(2026, 11, 29)))


def _attempts(engine: sa.Engine, s: Settings, stats: dict[str, Any]) -> None:
    execute(engine, tables.jobs.update().where(tables.jobs.c.id == job_ids(engine)[0]).values(generation_attempts=2))


def _extra_create(engine: sa.Engine, s: Settings, stats: dict[str, Any]) -> dict[str, Any]:
    jid = job_ids(engine)[0]
    return {**stats, "creates_by_job": {**stats["creates_by_job"], jid: stats["creates_by_job"][jid] + 1}}


def _same_attempt_twice(engine: sa.Engine, s: Settings, stats: dict[str, Any]) -> dict[str, Any]:
    # The per-job total still matches, but one attempt reached the provider twice (an SDK retry).
    jid = job_ids(engine)[0]
    meta = [m for m in stats["create_metadata"] if m["iipub_job_id"] == jid]
    return {**stats, "create_metadata": stats["create_metadata"] + meta,
            "creates_by_job": {**stats["creates_by_job"], jid: 2}}


def _missing_create(engine: sa.Engine, s: Settings, stats: dict[str, Any]) -> dict[str, Any]:
    return {**stats, "creates_by_job": {**stats["creates_by_job"], job_ids(engine)[0]: 0}}


def _unknown_job(engine: sa.Engine, s: Settings, stats: dict[str, Any]) -> dict[str, Any]:
    return {**stats, "creates_by_job": {**stats["creates_by_job"], "no-such-job": 1}}


def _sdk_retry(engine: sa.Engine, s: Settings, stats: dict[str, Any]) -> dict[str, Any]:
    return {**stats, "max_retry_count_seen": 1}


def _deleted_unknown(engine: sa.Engine, s: Settings, stats: dict[str, Any]) -> dict[str, Any]:
    return {**stats, "deleted_ids": [*stats["deleted_ids"], "resp_nobody_held_this"]}


def _edition_gone(engine: sa.Engine, s: Settings, stats: dict[str, Any]) -> None:
    execute(engine, tables.editions.delete().where(tables.editions.c.job_id == job_ids(engine)[0],
                                               tables.editions.c.lang == "es"))


def _unpublished(engine: sa.Engine, s: Settings, stats: dict[str, Any]) -> None:
    execute(engine, tables.outbox.update().where(tables.outbox.c.job_id == job_ids(engine)[0])
            .values(published_at=None))


def _undelivered(engine: sa.Engine, s: Settings, stats: dict[str, Any]) -> None:
    with engine.begin() as conn:
        event_id = conn.execute(sa.select(tables.outbox.c.event_id).limit(1)).scalar_one()
        conn.execute(tables.outbox_deliveries.delete().where(tables.outbox_deliveries.c.event_id == event_id))


def _file_gone(engine: sa.Engine, s: Settings, stats: dict[str, Any]) -> None:
    assert s.static_sink is not None
    next(Path(s.static_sink.root).rglob("20*/en.json")).unlink()


def _file_changed(engine: sa.Engine, s: Settings, stats: dict[str, Any]) -> None:
    assert s.static_sink is not None
    path = next(Path(s.static_sink.root).rglob("20*/es.json"))
    doc = json.loads(path.read_bytes())
    doc["title"] = doc.get("title", "") + " (edited by hand)"
    path.write_text(json.dumps(doc), encoding="utf-8")


def _stale_lease(engine: sa.Engine, s: Settings, stats: dict[str, Any]) -> None:
    execute(engine, tables.jobs.update().where(tables.jobs.c.id == job_ids(engine)[0])
            .values(lease_owner="reconcile:dead", lease_expiry=dt.datetime(2000, 1, 1)))


def _stranded(engine: sa.Engine, s: Settings, stats: dict[str, Any]) -> None:
    jid = job_ids(engine)[0]
    with engine.begin() as conn:  # a job back in flight, unpublished (journal included), then 3 h pass
        version = conn.execute(sa.select(tables.jobs.c.version).where(tables.jobs.c.id == jid)).scalar_one() + 1
        conn.execute(tables.jobs.update().where(tables.jobs.c.id == jid).values(state="IN_PROGRESS", version=version))
        conn.execute(tables.job_events.insert().values(job_id=jid, from_state="DELETED", to_state="IN_PROGRESS",
                                                   version=version, worker="x", reason="bogus",
                                                   at=dt.datetime(2026, 11, 29)))
    clock.advance_clock(engine, 3 * 3600)


def _killed(engine: sa.Engine, s: Settings, stats: dict[str, Any]) -> None:
    execute(engine, tables.jobs.update().where(tables.jobs.c.id == job_ids(engine)[0]).values(kill_requested=True))


def _orphans(engine: sa.Engine, s: Settings, stats: dict[str, Any]) -> None:
    with engine.begin() as conn:
        conn.execute(tables.editions.insert().values(job_id="nobody", product=PRODUCT, edition_date=DAY,
                                                 lang="fr", title="x", content="{}", sha256="0" * 64,
                                                 created_at=dt.datetime(2026, 11, 29)))
        conn.execute(tables.job_events.insert().values(job_id="nobody", from_state=None, to_state="NO_JOB", version=1,
                                                   worker="x", reason="scheduled", at=dt.datetime(2026, 11, 29)))


DAMAGE: list[tuple[str, Tamper, set[str]]] = [
    ("journal_versions", _versions, {"journal_versions"}),
    ("journal_chain", _state, {"journal_chain", "unsettled"}),
    ("journal_edge", _edge, {"journal_edge"}),
    ("attempts_mismatch", _attempts, {"attempts_mismatch"}),
    ("unjournaled_create", _extra_create, {"unjournaled_create"}),
    ("same_attempt_twice", _same_attempt_twice, {"unjournaled_create"}),
    ("create_missing", _missing_create, {"create_missing"}),
    ("create_unknown_job", _unknown_job, {"create_unknown_job"}),
    ("sdk_retry", _sdk_retry, {"sdk_retry"}),
    ("deleted_without_custody", _deleted_unknown, {"deleted_without_custody"}),
    ("not_published", _edition_gone, {"not_published", "outbox_orphan"}),
    ("outbox_unpublished", _unpublished, {"outbox_unpublished", "outbox_pending"}),
    ("undelivered_sink", _undelivered, {"undelivered_sink"}),
    ("static_file_gone", _file_gone, {"static_missing"}),
    ("static_file_changed", _file_changed, {"static_missing"}),
    ("stale_lease", _stale_lease, {"stale_lease"}),
    ("stranded", _stranded, {"stranded", "unsettled", "journal_edge"}),
    ("killed_but_published", _killed, {"killed_but_published"}),
    ("orphans", _orphans, {"edition_orphan", "journal_orphan"}),
]


@dataclass
class SettledRun:
    rows: Snapshot
    sim_stats: dict[str, Any]
    static_root: Path


@pytest.fixture(scope="module")
def settled_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SettledRun]:
    """One real run to the end, as `run_to_end` drives it (reconcile + relay + cleanup against
    the simulator over HTTP, on a database of the selected backend), kept as its rows, its
    static site and the simulator's stats. Each damage test damages its own copy of it."""
    base = tmp_path_factory.mktemp("settled-run")
    with fresh_database(base) as url, simulator() as sim:
        settings = make_settings(url, sim.url, base / "public", reconcile={"auto_schedule": False})
        p = replace(settings.products[PRODUCT], items=3, prompt="Write the brief.", opens_at=dt.time(0, 0))
        s = replace(settings, products={PRODUCT: p})
        engine = db.make_engine(url)
        try:
            migrate.migrate(engine)
            run_to_end(s, engine, sim)
            assert states(engine) == ["DELETED", "DELETED"]
            yield SettledRun(snapshot_rows(engine), sim.stats(), base / "public")
        finally:
            engine.dispose()


@pytest.mark.parametrize(("name", "tamper", "expected"), DAMAGE, ids=[d[0] for d in DAMAGE])
def test_damage_is_named(cfg: Settings, engine: sa.Engine, settled_run: SettledRun, name: str, tamper: Tamper,
                         expected: set[str]) -> None:
    restore_rows(engine, settled_run.rows)
    assert states(engine) == ["DELETED", "DELETED"]
    assert cfg.static_sink is not None
    shutil.copytree(settled_run.static_root, cfg.static_sink.root, dirs_exist_ok=True)
    stats = copy.deepcopy(settled_run.sim_stats)
    assert invariants.check(engine, settings=cfg, sim_stats=stats, settled=True) == []
    stats = tamper(engine, cfg, stats) or stats
    found = invariants.check(engine, settings=cfg, sim_stats=stats, settled=True)
    assert expected <= kinds(found), found
    assert all(v.detail for v in found)


def test_settled_only_checks_wait_for_settled(cfg: Settings, engine: sa.Engine, sim: Simulator) -> None:
    Store(engine, "test").schedule(cfg.products[PRODUCT], DAY)
    sweep.run(cfg, engine)  # one tick: accepted, nothing published yet
    assert states(engine) == ["ACCEPTED"]
    assert invariants.check(engine, settings=cfg, sim_stats=sim.stats()) == []
    assert kinds(invariants.check(engine, settings=cfg, sim_stats=sim.stats(), settled=True)) == {"unsettled"}


def test_webhook_deliveries_are_compared_with_what_the_receiver_saw(
    cfg: Settings, engine: sa.Engine, sim: Simulator
) -> None:
    with receiver() as hook:
        s = replace(cfg, webhook_sink=WebhookSinkSettings(url=hook.url, timeout_seconds=2))
        run_to_end(s, engine, sim)
        keys = set(hook.keys())
    assert len(keys) == 4
    assert invariants.check(engine, settings=s, webhook_keys=keys, settled=True) == []
    found = invariants.check(engine, settings=s, webhook_keys=set(sorted(keys)[1:]), settled=True)
    assert kinds(found) == {"webhook_not_received"} and len(found) == 1


# -- journals no real run produces -------------------------------------------------------------------------


def _fake_job(engine: sa.Engine, moves: list[tuple[str, str, dict[str, Any]]], **cols: Any) -> str:
    """A job row and its journal written directly: (to_state, reason, detail) per move."""
    jid = "fake-" + "0" * 31
    with engine.connect() as conn:
        at = clock.read_now(conn).replace(tzinfo=None, microsecond=0)
    with engine.begin() as conn:
        conn.execute(tables.jobs.insert().values(
            id=jid, product=PRODUCT, edition_date=DAY - dt.timedelta(days=30), state=moves[-1][0],
            version=len(moves), priority=10, is_backfill=False, opens_at=at, next_attempt_at=at,
            generation_attempts=cols.pop("generation_attempts", 0), poll_count=0, retry_count=0, input_tokens=0,
            output_tokens=0, total_tokens=0, kill_requested=False, created_at=at, updated_at=at,
            state_entered_at=at, **cols))
        prev = None
        for i, (to, reason, detail) in enumerate(moves, start=1):
            conn.execute(tables.job_events.insert().values(job_id=jid, from_state=prev, to_state=to, version=i,
                                                       worker="x", reason=reason, detail=json.dumps(detail), at=at))
            prev = to
    return jid


OPEN: list[tuple[str, str, dict[str, Any]]] = [("NO_JOB", "scheduled", {}), ("CREATE_ELIGIBLE", "window_open", {})]


def test_a_new_create_after_an_ambiguous_one_needs_an_operator(engine: sa.Engine) -> None:
    _fake_job(engine, [*OPEN, ("CREATE_IN_FLIGHT", "dispatch", {"attempt": 1}),
                       ("QUARANTINED", "create_outcome_unknown", {}),
                       ("CREATE_ELIGIBLE", "auto_retry", {}),
                       ("CREATE_IN_FLIGHT", "dispatch", {"attempt": 2})],
              generation_attempts=2, quarantine_reason=None)
    assert {"create_after_ambiguous", "unreleased_exit", "journal_edge"} <= kinds(invariants.check(engine))


def test_an_operator_release_allows_the_new_create(engine: sa.Engine) -> None:
    _fake_job(engine, [*OPEN, ("CREATE_IN_FLIGHT", "dispatch", {"attempt": 1}),
                       ("QUARANTINED", "create_outcome_unknown", {}),
                       ("CREATE_ELIGIBLE", "operator_release_verified_lost", {"by": "alice"}),
                       ("CREATE_IN_FLIGHT", "dispatch", {"attempt": 2})],
              generation_attempts=2)
    assert invariants.check(engine) == []


def test_an_accepted_response_must_be_kept_or_journaled_lost(engine: sa.Engine) -> None:
    _fake_job(engine, [*OPEN, ("CREATE_IN_FLIGHT", "dispatch", {"attempt": 1}),
                       ("ACCEPTED", "accepted", {"response_id": "resp_a"}),
                       ("QUARANTINED", "poll_budget_exhausted", {"response_id": "resp_a"}),
                       ("CREATE_ELIGIBLE", "operator_resume_polling", {}),  # not a release of the response
                       ("CREATE_IN_FLIGHT", "dispatch", {"attempt": 2})],
              generation_attempts=2)
    assert "response_abandoned" in kinds(invariants.check(engine))


def test_parked_jobs_need_their_reason(engine: sa.Engine) -> None:
    _fake_job(engine, [*OPEN, ("CREATE_IN_FLIGHT", "dispatch", {"attempt": 1}),
                       ("QUARANTINED", "create_outcome_unknown", {})],
              generation_attempts=1, quarantine_reason=None)
    found = invariants.check(engine, settled=True)
    assert kinds(found) == {"parked_without_reason"}


# -- the command ----------------------------------------------------------------------------------------------


def _check_cli(env: dict[str, str], cwd: Path, *args: str) -> CliResult:
    return run_cli("check", *args, env=env, cwd=cwd)


def test_check_command(cfg: Settings, engine: sa.Engine, sim: Simulator, cli_env: dict[str, str],
                       tmp_path: Path) -> None:
    run_to_end(cfg, engine, sim)
    assert cfg.static_sink is not None
    toml = tmp_path / "iipub.toml"
    toml.write_text(f'[[products]]\nname = "{PRODUCT}"\nprompt = "Write the brief."\nitems = 3\nopens_at = "00:00"\n'
                    f'[sinks.static]\nroot = "{cfg.static_sink.root}"\n', encoding="utf-8")
    env = {**cli_env, "IIPUB_CONFIG": str(toml)}
    ok = _check_cli(env, tmp_path, "--simulator", sim.url, "--settled", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == {"ok": True, "counts": {}, "violations": []}
    assert _check_cli(env, tmp_path).stdout.strip() == "all invariants hold"

    next(Path(cfg.static_sink.root).rglob("20*/en.html")).unlink()
    bad = _check_cli(env, tmp_path, "--json")
    assert bad.returncode == 1
    doc = json.loads(bad.stdout)
    assert doc["ok"] is False and doc["counts"] == {"static_missing": 1}
    assert error_messages(bad.stderr) == ["1 invariant violation(s): static_missing=1"]
    human = _check_cli(env, tmp_path)
    assert human.returncode == 1 and human.stdout.splitlines()[0].split() == ["KIND", "JOB", "DETAIL"]

    down = _check_cli(env, tmp_path, "--simulator", "http://127.0.0.1:9")
    assert down.returncode == 1 and "cannot read simulator stats" in down.stderr
    assert "Traceback" not in down.stderr and len(down.stderr.strip().splitlines()) == 1
