"""Language tracks (PRODUCT.md section 15): one paid generation per slot, forked after the shared
checks into one track per language that validates, composes, saves and publishes on its own.

Real databases (SQLite and MariaDB; test 17 on a private mariadbd so its lock counters are its
own), the simulator over HTTP, rows and request counts asserted."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.machine import sweep as reconcile
from iipub.observe import invariants
from iipub.operate.executor import Operator
from iipub.provider.openai.simulator import Simulator
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import db, migrate, tables
from iipub.store.job_store import Store
from tests.support.cli import run_cli
from tests.support.databases import private_mariadbd
from tests.support.rows import job_events
from tests.support.settings import MIDNIGHT_PRODUCT_TOML, make_settings, sim_env
from tests.support.simulator import simulator

DAY = dt.date(2026, 11, 20)
PRODUCT = "daily-brief"
WIRES = ("reuters.com", "apnews.com")  # where the simulator's sources link
# `_settings`' product as a config file: a command run with it creates under the ticks' configuration.
CLI_PRODUCT = (MIDNIGHT_PRODUCT_TOML + "allowed_domains = [" + ", ".join(f'"{d}"' for d in WIRES) + "]\n")


def _tracks(engine: sa.Engine, job_id: str | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    t = tables.tracks
    q = sa.select(t) if job_id is None else sa.select(t).where(t.c.job_id == job_id)
    with engine.connect() as conn:
        return {(r["job_id"], r["lang"]): dict(r) for r in conn.execute(q).mappings()}


def _editions(engine: sa.Engine) -> dict[tuple[str, str], dict[str, Any]]:
    e = tables.editions
    with engine.connect() as conn:
        return {(r["job_id"], r["lang"]): dict(r) for r in conn.execute(sa.select(e)).mappings()}


def _jobs(engine: sa.Engine) -> dict[str, dict[str, Any]]:
    with engine.connect() as conn:
        return {r["id"]: dict(r) for r in conn.execute(sa.select(tables.jobs)).mappings()}


def _settings(db_url: str, sim: Simulator, tmp_path: Path, **reconcile_kw: Any) -> Settings:
    """One product open since midnight; ticks make no slots of their own (the test's are the only ones)."""
    s = make_settings(db_url, sim.url, tmp_path / "public",
                      reconcile={"catch_up_days": 0, "auto_schedule": False, **reconcile_kw})
    p = replace(s.products[PRODUCT], items=3, prompt="Write the brief.", opens_at=dt.time(0, 0), allowed_domains=WIRES)
    return replace(s, products={PRODUCT: p}, webhook_sink=None)


def _run(s: Settings, engine: sa.Engine, sim: Simulator, rounds: int = 4) -> None:
    """Reconcile and relay rounds, the simulator's responses finishing in between."""
    for _ in range(rounds):
        reconcile.run(s, engine)
        relay.run(s, engine)
        sim.advance(5)


# -- test 17: both tracks of many slots at once, no lock waited for ---------------------------------------


@pytest.fixture(scope="module")
def private_mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A mariadbd of this test's own, so the server's lock counters count this test's statements only."""
    with private_mariadbd(tmp_path_factory.mktemp("mariadbd")) as url:
        yield url


def _lock_counters(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SHOW GLOBAL STATUS LIKE 'Innodb_row_lock%'")).all()
    return {str(name): int(value) for name, value in rows}


@pytest.mark.mysql
@pytest.mark.slow
def test_17_dual_language_fork_without_lock_contention(private_mariadb: str, tmp_path: Path) -> None:
    slots = 32
    engine = db.make_engine(private_mariadb, pool_size=24)
    migrate.migrate(engine)
    with simulator() as sim:
        s = _settings(private_mariadb, sim, tmp_path, concurrency=8, batch_size=100)
        store = Store(engine, "test")
        for i in range(slots):
            store.schedule(s.products[PRODUCT], DAY - dt.timedelta(days=i))
        for _ in range(3):  # every slot's one create
            reconcile.run(s, engine)
            if sim.stats()["creates_total"] == slots:
                break
        sim.advance(5)
        time.sleep(0.6)  # every response finished (the simulator's real-time lifecycle)
        before = _lock_counters(engine)
        report = reconcile.run(s, engine)  # custody, the fork, both tracks of every slot, the slots following
        after = _lock_counters(engine)
        waits = after["Innodb_row_lock_waits"] - before["Innodb_row_lock_waits"]
        waited_ms = after["Innodb_row_lock_time"] - before["Innodb_row_lock_time"]
        print(f"test_17: {slots} slots, {report.tracks_leased} tracks in {report.seconds} s: "
              f"{waits} row lock waits, {waited_ms} ms waited")
        jobs = _jobs(engine)
        assert {j["state"] for j in jobs.values()} == {"SAVED_NOT_PUBLIC"}
        assert report.tracks_leased == 2 * slots and report.track_transitions == {"SAVED_NOT_PUBLIC": 2 * slots}
        assert waits == 0 and waited_ms == 0 and after["Innodb_row_lock_current_waits"] == 0
        assert report.contention == 0 and report.lease_lost == 0 and report.errors == 0
        # The tracks of one slot ran in different threads of the pool, at the same time.
        apart = overlapped = 0
        for job_id in jobs:
            saved = {lang: next(e for e in job_events(engine, job_id, lang) if e["reason"] == "saved")
                     for lang in ("en", "es")}
            threads = {lang: json.loads(e["detail"])["thread"] for lang, e in saved.items()}
            apart += threads["en"] != threads["es"]
            forked = {lang: job_events(engine, job_id, lang)[0]["at"] for lang in ("en", "es")}
            overlapped += max(forked.values()) <= min(e["at"] for e in saved.values())
        print(f"test_17: tracks of one slot in different threads: {apart}/{slots}, overlapping: {overlapped}/{slots}")
        assert apart >= slots // 2 and overlapped >= slots // 2
        _run(s, engine, sim, rounds=2)
        stats = sim.stats()
        assert stats["creates_total"] == slots and set(stats["creates_by_job"].values()) == {1}
        assert {t["state"] for t in _tracks(engine).values()} == {"PUBLISHED"}
        assert len(_editions(engine)) == 2 * slots
        assert {j["state"] for j in _jobs(engine).values()} <= {"PUBLISHED", "CLEANUP_PENDING", "DELETED"}
        assert invariants.check(engine, settings=s, sim_stats=stats) == []
    engine.dispose()


# -- test 45: each edition carries its own language's fields -------------------------------------------------


def test_45_each_language_edition_carries_its_own_fields(engine: sa.Engine, db_url: str, tmp_path: Path) -> None:
    with simulator() as sim:
        s = _settings(db_url, sim, tmp_path)
        Store(engine, "test").schedule(s.products[PRODUCT], DAY)
        _run(s, engine, sim)
        (job,) = _jobs(engine).values()
        assert job["state"] in ("PUBLISHED", "CLEANUP_PENDING", "DELETED")
        payload = json.loads(job["payload"])
        tracks, editions = _tracks(engine, job["id"]), _editions(engine)
        docs = {lang: json.loads(editions[(job["id"], lang)]["content"]) for lang in ("en", "es")}
        for lang, doc in docs.items():
            track = tracks[(job["id"], lang)]
            assert list(json.loads(track["payload"])) == [lang]  # a track keeps its own language's part only
            assert doc["lang"] == lang and doc["title"] == payload[lang]["title"]
            assert doc["summary"] == payload[lang]["summary"]
            assert [i["headline"] for i in doc["items"]] == [i["headline"] for i in payload[lang]["items"]]
            assert track["composed_sha256"] == editions[(job["id"], lang)]["sha256"]
        en, es = docs["en"], docs["es"]
        assert en["title"] != es["title"] and en["summary"] != es["summary"]
        assert not {i["headline"] for i in en["items"]} & {i["headline"] for i in es["items"]}
        assert sim.stats()["creates_total"] == 1


# -- one language fails: the other publishes; remedies for that language only ------------------------------


def _spanish_parked(engine: sa.Engine, db_url: str, sim: Simulator, tmp_path: Path) -> tuple[Settings, str]:
    """A slot whose Spanish part links outside allowed_domains: English published, Spanish parked."""
    s = _settings(db_url, sim, tmp_path)
    Store(engine, "test").schedule(s.products[PRODUCT], DAY)
    _run(s, engine, sim)
    (job,) = _jobs(engine).values()
    tracks = _tracks(engine, job["id"])
    assert tracks[(job["id"], "en")]["state"] == "PUBLISHED"
    es = tracks[(job["id"], "es")]
    assert es["state"] == "VALIDATION_FAILED_RETAINED" and ": es.items[0].sources[0]:" in es["last_error"]
    assert es["payload"] and list(json.loads(es["payload"])) == ["es"]  # its part kept
    assert job["state"] == "READY_TO_COMPOSE" and sorted(lang for _, lang in _editions(engine)) == ["en"]
    assert sim.stats()["creates_total"] == 1
    reasons = [e["reason"] for e in job_events(engine, job["id"], "es")]
    assert reasons == ["forked", "validation_failed"]
    # A slot waiting on a parked track is not looked at again: no write per tick.
    versions = (job["version"], es["version"])
    reconcile.run(s, engine)
    assert (_jobs(engine)[job["id"]]["version"], _tracks(engine, job["id"])[(job["id"], "es")]["version"]) == versions
    return s, job["id"]


def test_a_spanish_only_failure_publishes_english_and_revalidate_lang_es_publishes_spanish_for_free(
        engine: sa.Engine, db_url: str, cli_env: dict[str, str], tmp_path: Path) -> None:
    with simulator(corrupt_lang="es", corrupt_domain="www.efe.com") as sim:
        s, job_id = _spanish_parked(engine, db_url, sim, tmp_path)
        english = _editions(engine)[(job_id, "en")]
        fixed = replace(s, products={PRODUCT: replace(s.products[PRODUCT], allowed_domains=(*WIRES, "efe.com"))})
        env = sim_env(cli_env, sim, tmp_path)
        result = run_cli("revalidate", job_id[:8], "--lang", "es", "--reason", "efe.com allowed", "--by", "alice",
                         env=env)
        assert result.returncode == 0, result.stderr
        assert "es track: VALIDATION_FAILED_RETAINED -> RETRIEVED_NOT_VALIDATED" in result.stdout
        es = _tracks(engine, job_id)[(job_id, "es")]
        assert es["state"] == "RETRIEVED_NOT_VALIDATED"
        _run(fixed, engine, sim)
        job = _jobs(engine)[job_id]
        assert job["state"] in ("PUBLISHED", "CLEANUP_PENDING", "DELETED")
        assert {t["state"] for t in _tracks(engine, job_id).values()} == {"PUBLISHED"}
        assert _editions(engine)[(job_id, "en")] == english  # untouched
        assert sim.stats()["creates_total"] == 1  # no second create
        reasons = [e["reason"] for e in job_events(engine, job_id, "es")]
        assert reasons == ["forked", "validation_failed", "operator_revalidate", "validated", "composed", "saved",
                           "all_events_delivered"]
        assert invariants.check(engine, settings=fixed, sim_stats=sim.stats()) == []


def test_regenerate_names_only_the_unpublished_language_and_never_replaces_english(
        engine: sa.Engine, db_url: str, cli_env: dict[str, str], tmp_path: Path) -> None:
    with simulator(corrupt_lang="es") as sim:  # hosts that are never public: only a new generation helps
        s, job_id = _spanish_parked(engine, db_url, sim, tmp_path)
        english = _editions(engine)[(job_id, "en")]
        en_track = _tracks(engine, job_id)[(job_id, "en")]
        # Revalidating cannot help here: the part fails again, for free.
        with Operator(s, engine) as op:
            op.revalidate(job_id, "try again", "alice", lang="es")
        _run(s, engine, sim, rounds=1)
        assert _tracks(engine, job_id)[(job_id, "es")]["state"] == "VALIDATION_FAILED_RETAINED"
        assert sim.stats()["creates_total"] == 1
        env = sim_env(cli_env, sim, tmp_path, CLI_PRODUCT)  # the configuration the ticks run under
        result = run_cli("regenerate", job_id, "--reason", "Spanish links were bogus", "--by", "alice", env=env)
        assert result.returncode == 0, result.stderr
        assert "new paid generation for: es; kept: en" in result.stdout
        regenerated = [e for e in job_events(engine, job_id) if e["reason"] == "operator_regenerate"]
        assert json.loads(regenerated[-1]["detail"])["languages"] == ["es"]
        sim.backend.corrupt_lang = None  # the next generation is sound
        _run(s, engine, sim)
        job = _jobs(engine)[job_id]
        assert job["state"] in ("PUBLISHED", "CLEANUP_PENDING", "DELETED") and job["generation_attempts"] == 2
        assert sim.stats()["creates_total"] == 2
        tracks = _tracks(engine, job_id)
        assert tracks[(job_id, "en")] == en_track  # the published English track was never touched
        assert tracks[(job_id, "es")]["state"] == "PUBLISHED"
        assert tracks[(job_id, "es")]["source_sha256"] == job["payload_sha256"]  # from the new generation
        assert _editions(engine)[(job_id, "en")] == english
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(tables.outbox)).scalar_one() == 2
        assert invariants.check(engine, settings=s, sim_stats=sim.stats()) == []


def test_kill_is_refused_once_a_language_is_saved_and_kills_unpublished_tracks_before(
        engine: sa.Engine, db_url: str, tmp_path: Path) -> None:
    with simulator(corrupt_lang="es") as sim:
        s, job_id = _spanish_parked(engine, db_url, sim, tmp_path)
        with Operator(s, engine) as op, pytest.raises(Exception, match="en edition is already saved"):
            op.kill(job_id, "stop it", "alice")
        assert _jobs(engine)[job_id]["state"] == "READY_TO_COMPOSE"


def test_every_language_failing_parks_the_slot_and_kill_ends_its_tracks(
        engine: sa.Engine, db_url: str, tmp_path: Path) -> None:
    with simulator() as sim:
        s = _settings(db_url, sim, tmp_path)
        Store(engine, "test").schedule(s.products[PRODUCT], DAY)
        (job,) = _jobs(engine).values()
        sim.add_faults([{"op": "create", "fault": "hallucinated_urls", "job_id": job["id"]}])
        _run(s, engine, sim, rounds=2)
        job = _jobs(engine)[job["id"]]
        assert job["state"] == "VALIDATION_FAILED_RETAINED" and "en.items[0]" in job["last_error"]
        assert {t["state"] for t in _tracks(engine, job["id"]).values()} == {"VALIDATION_FAILED_RETAINED"}
        with Operator(s, engine) as op:
            op.kill(job["id"], "bad links in every language", "alice")
        tracks = _tracks(engine, job["id"])
        assert {t["state"] for t in tracks.values()} == {"DELETED"}
        assert all(t["payload"] for t in tracks.values())
        _run(s, engine, sim, rounds=1)
        assert _jobs(engine)[job["id"]]["state"] == "DELETED" and not _editions(engine)
        assert [e["reason"] for e in job_events(engine, job["id"], "es")][-1] == "operator_kill"
        assert invariants.check(engine, settings=s, sim_stats=sim.stats()) == []


def test_revalidate_lang_of_a_slot_parked_with_all_its_tracks_runs_that_language_to_publication(
        engine: sa.Engine, db_url: str, cli_env: dict[str, str], tmp_path: Path) -> None:
    with simulator() as sim:
        strict = _settings(db_url, sim, tmp_path)
        nowhere = replace(strict.products[PRODUCT], allowed_domains=("example.org",))
        strict = replace(strict, products={PRODUCT: nowhere})
        Store(engine, "test").schedule(strict.products[PRODUCT], DAY)
        _run(strict, engine, sim, rounds=2)
        (job,) = _jobs(engine).values()
        assert job["state"] == "VALIDATION_FAILED_RETAINED"  # every language failed: the slot parks with them
        assert {t["state"] for t in _tracks(engine, job["id"]).values()} == {"VALIDATION_FAILED_RETAINED"}
        fixed = _settings(db_url, sim, tmp_path)
        env = sim_env(cli_env, sim, tmp_path)
        # Suspended, the slot lets no track move: refused, nothing written.
        with Operator(fixed, engine) as op:
            op.suspend(job["id"], "hold", "alice")
        before = (_jobs(engine), _tracks(engine))
        refused = run_cli("revalidate", job["id"], "--lang", "en", "--reason", "fixed", env=env)
        assert refused.returncode != 0 and "resume it first" in refused.stderr
        assert (_jobs(engine), _tracks(engine)) == before
        with Operator(fixed, engine) as op:
            op.resume(job["id"], "alice", "go on")
        with Operator(fixed, engine) as op:  # the deployed config (the CLI's would be another product's)
            op.revalidate(job["id"][:8], "wires allowed", "alice", lang="en")
        row = _jobs(engine)[job["id"]]
        assert (row["state"], row["quarantine_reason"]) == ("READY_TO_COMPOSE", None)
        assert _tracks(engine, job["id"])[(job["id"], "en")]["state"] == "RETRIEVED_NOT_VALIDATED"
        _run(fixed, engine, sim)
        tracks = _tracks(engine, job["id"])
        assert tracks[(job["id"], "en")]["state"] == "PUBLISHED" and (job["id"], "en") in _editions(engine)
        assert tracks[(job["id"], "es")]["state"] == "VALIDATION_FAILED_RETAINED"
        assert _jobs(engine)[job["id"]]["state"] == "READY_TO_COMPOSE"  # waits on Spanish, parked with a remedy
        shown = json.loads(run_cli("quarantine", "show", job["id"], "--json", env=env, check=True).stdout)
        assert shown["remedies"][0]["command"] == f"iipub revalidate {job['id']} --lang es --reason …"
        assert not any(r["command"].startswith("iipub kill") for r in shown["remedies"])  # English is saved
        with Operator(fixed, engine) as op:
            op.revalidate(job["id"], "wires allowed", "alice", lang="es")
        _run(fixed, engine, sim)
        assert _jobs(engine)[job["id"]]["state"] in ("PUBLISHED", "CLEANUP_PENDING", "DELETED")
        assert sim.stats()["creates_total"] == 1
        assert invariants.check(engine, settings=fixed, sim_stats=sim.stats()) == []


def test_a_slot_or_track_with_no_path_forward_is_never_ok_in_status_check(
        engine: sa.Engine, db_url: str, tmp_path: Path) -> None:
    from iipub.model.states import Reason, State
    from iipub.model.track_views import Hop
    from iipub.observe import queries
    from iipub.store import track_store as tracks

    with simulator() as sim:
        s = _settings(db_url, sim, tmp_path)
        nowhere = replace(s.products[PRODUCT], allowed_domains=("example.org",))
        strict = replace(s, products={PRODUCT: nowhere})
        Store(engine, "test").schedule(strict.products[PRODUCT], DAY)
        _run(strict, engine, sim, rounds=2)
        (job,) = _jobs(engine).values()
        assert job["state"] == "VALIDATION_FAILED_RETAINED"
        # The Spanish track is sent back to validation under its parked slot (what `revalidate --lang`
        # did before it reopened the slot): nothing would ever run it.
        ts = tracks.TrackStore(Store(engine, "operator:test"))
        with engine.connect() as conn:
            es = next(t for t in tracks.of_job(conn, job["id"]) if t.lang == "es")
        ts.advance(es, [Hop(State.RETRIEVED_NOT_VALIDATED, Reason.OPERATOR_REVALIDATE, {"by": "t", "why": "t"})],
                   operator=True)
        report = queries.collect(engine, strict)
        assert report.tracks is not None
        assert [(t.lang, t.state) for t in report.tracks.immovable] == [("es", "RETRIEVED_NOT_VALIDATED")]
        code, line = report.check()
        assert code >= 1 and "1 track with no path forward" in line and "its slot is VALIDATION_FAILED_RETAINED" in line
        # Revalidating through the command reopens the slot: the track has a path again.
        with Operator(s, engine) as op:
            op.revalidate(job["id"], "wires allowed", "alice", lang="en")
        assert _jobs(engine)[job["id"]]["state"] == "READY_TO_COMPOSE"
        report = queries.collect(engine, s)
        assert report.tracks is not None and report.tracks.immovable == ()
        # A track that ended without its slot being killed holds the slot for ever: named too.
        with engine.connect() as conn:
            en = next(t for t in tracks.of_job(conn, job["id"]) if t.lang == "en")
        ts.advance(en, [Hop(State.DELETED, Reason.OPERATOR_KILL, {"by": "t", "why": "t"})], operator=True)
        report = queries.collect(engine, s)
        assert [(j.id, j.state) for j in report.immovable] == [(job["id"], "READY_TO_COMPOSE")]
        code, line = report.check()
        assert code >= 1 and "1 edition with no path forward" in line and "its en track ended" in line
        from iipub.observe import metrics

        assert b"iipub_immovable 1.0" in metrics.render(report)
        assert sim.stats()["creates_total"] == 1
