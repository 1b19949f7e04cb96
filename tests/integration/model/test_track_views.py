"""Language tracks as operators see them (`jobs list`, `jobs show`, `status`, `status --check`,
Prometheus): real rows in the real `tracks`, `jobs`, `editions` and `job_events` tables (SQLite
or MariaDB), read through the command line in process and `status_queries.collect`."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from iipub.core.severity import Severity
from iipub.machine import sweep
from iipub.model.states import State
from iipub.observe import metrics, queries
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import clock, tables
from iipub.store.job_store import Store
from tests.support.cli import run_cli
from tests.support.rows import record_heartbeats
from tests.support.settings import make_settings, sim_env
from tests.support.simulator import simulator

SHA_EN, SHA_ES, COMPOSED_EN = "a" * 64, "b" * 64, "c" * 64
TRACK_KEYS = {"lang", "state", "version", "lease_owner", "lease_expiry", "next_attempt_at", "retry_count",
              "payload_sha256", "source_sha256", "composed_sha256", "quarantine_reason", "last_error",
              "suspended_from", "created_at", "updated_at", "state_entered_at"}


def add_track(engine: sa.Engine, job_id: str, lang: str, state: State, *, version: int = 3,
              entered_ago: float = 0.0, **columns: Any) -> str:
    """Insert one track of `job_id` (its product and date) at `state`, entered `entered_ago` s ago."""
    track_id = str(uuid.uuid4())
    with engine.begin() as conn:
        now = clock.read_now(conn)
        job = conn.execute(sa.select(tables.jobs.c.product, tables.jobs.c.edition_date)
                           .where(tables.jobs.c.id == job_id)).one()
        conn.execute(tables.tracks.insert().values(
            id=track_id, job_id=job_id, product=job.product, edition_date=job.edition_date, lang=lang,
            state=state.value, version=version, next_attempt_at=now, retry_count=0, payload=f'{{"{lang}": {{}}}}',
            created_at=now, updated_at=now, state_entered_at=now - dt.timedelta(seconds=entered_ago),
            **columns))
    return track_id


def set_job(engine: sa.Engine, job_id: str, state: State, **columns: Any) -> None:
    with engine.begin() as conn:
        conn.execute(tables.jobs.update().where(tables.jobs.c.id == job_id).values(state=state.value, **columns))


def add_event(engine: sa.Engine, job_id: str, src: State, dst: State, version: int, reason: str,
              lang: str | None) -> None:
    with engine.begin() as conn:
        conn.execute(tables.job_events.insert().values(
            job_id=job_id, from_state=src.value, to_state=dst.value, version=version, worker="test",
            reason=reason, detail=None, at=clock.read_now(conn), lang=lang))


def forked_job(settings: Settings, engine: sa.Engine, day: dt.date) -> str:
    """A daily-brief slot past the fork: English published, Spanish parked by its validation."""
    store = Store(engine, "test")
    for product in settings.products.values():  # revolution-watch's slot stays before the fork
        assert store.schedule(product, day)
    (job,) = [j for j in store.list_jobs(day=day) if j.product == "daily-brief"]
    set_job(engine, job.id, State.READY_TO_COMPOSE, payload_sha256="f" * 64)
    add_track(engine, job.id, "en", State.PUBLISHED, version=5, payload_sha256=SHA_EN, source_sha256="f" * 64,
              composed_sha256=COMPOSED_EN)
    add_track(engine, job.id, "es", State.VALIDATION_FAILED_RETAINED, version=2, payload_sha256=SHA_ES,
              source_sha256="f" * 64, last_error="es.items[0].url: not a public http(s) URL",
              lease_owner="reconcile:host:1:abcd", lease_expiry=dt.datetime(2030, 1, 1, 12, 0))
    add_event(engine, job.id, State.RETRIEVED_NOT_VALIDATED, State.READY_TO_COMPOSE, 2, "validated", None)
    add_event(engine, job.id, State.RETRIEVED_NOT_VALIDATED, State.READY_TO_COMPOSE, 2, "validated", "en")
    add_event(engine, job.id, State.RETRIEVED_NOT_VALIDATED, State.VALIDATION_FAILED_RETAINED, 2,
              "validation_failed", "es")
    return job.id


def test_jobs_list_sums_up_each_jobs_tracks(settings: Settings, engine: sa.Engine, cli_env: dict[str, str],
                                            tmp_path: Path) -> None:
    day = dt.date(2026, 11, 20)
    job_id = forked_job(settings, engine, day)

    listed = json.loads(run_cli("jobs", "list", "--date", day.isoformat(), "--json", env=cli_env, cwd=tmp_path,
                                check=True).stdout)
    by_product = {j["product"]: j for j in listed}
    forked, unforked = by_product["daily-brief"], by_product["revolution-watch"]
    assert forked["id"] == job_id and unforked["tracks"] == []
    assert [(t["lang"], t["state"], t["version"]) for t in forked["tracks"]] == [
        ("en", "PUBLISHED", 5), ("es", "VALIDATION_FAILED_RETAINED", 2)]
    assert all(set(t) == TRACK_KEYS for t in forked["tracks"])
    assert forked["tracks"][0]["payload_sha256"] == SHA_EN and forked["tracks"][0]["composed_sha256"] == COMPOSED_EN

    text = run_cli("jobs", "list", "--date", day.isoformat(), env=cli_env, cwd=tmp_path, check=True).stdout
    header, *rows = text.splitlines()
    assert header.split()[-1] == "TRACKS"
    (line,) = [r for r in rows if r.startswith(job_id)]
    assert line.endswith("en:PUBLISHED es:VALIDATION_FAILED_RETAINED")
    (other,) = [r for r in rows if not r.startswith(job_id)]
    assert "en:" not in other and other.split()[3] == "NO_JOB"


def test_jobs_show_lists_every_track_and_the_language_of_each_journal_entry(
        settings: Settings, engine: sa.Engine, cli_env: dict[str, str], tmp_path: Path) -> None:
    job_id = forked_job(settings, engine, dt.date(2026, 11, 21))

    shown = json.loads(run_cli("jobs", "show", job_id[:8], "--json", env=cli_env, cwd=tmp_path, check=True).stdout)
    en, es = shown["tracks"]
    assert (en["lang"], en["state"], en["version"], en["lease_owner"]) == ("en", "PUBLISHED", 5, None)
    assert (es["lang"], es["state"], es["version"]) == ("es", "VALIDATION_FAILED_RETAINED", 2)
    assert es["lease_owner"] == "reconcile:host:1:abcd" and es["lease_expiry"] == "2030-01-01T12:00:00.000000Z"
    assert es["payload_sha256"] == SHA_ES and es["composed_sha256"] is None and es["quarantine_reason"] is None
    assert es["last_error"] == "es.items[0].url: not a public http(s) URL"
    assert "payload" not in es and "composed" not in es
    assert [(e["reason"], e["lang"]) for e in shown["events"]] == [
        ("scheduled", None), ("validated", None), ("validated", "en"), ("validation_failed", "es")]

    text = run_cli("jobs", "show", job_id, env=cli_env, cwd=tmp_path, check=True).stdout
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("LANG "))
    assert lines[head].split() == ["LANG", "STATE", "VER", "LEASE", "NEXT", "PAYLOAD", "COMPOSED", "QUARANTINE",
                                   "LAST", "ERROR"]
    en_line, es_line = lines[head + 1], lines[head + 2]
    assert en_line.split()[:3] == ["en", "PUBLISHED", "5"] and SHA_EN[:12] in en_line and SHA_EN[:13] not in en_line
    assert es_line.split()[:4] == ["es", "VALIDATION_FAILED_RETAINED", "2", "reconcile:host:1:abcd"]
    assert "until 2030-01-01T12:00:00Z" in es_line and es_line.endswith("not a public http(s) URL")
    journal = lines[next(i for i, line in enumerate(lines) if line.startswith("AT ")):]
    assert journal[0].split()[:3] == ["AT", "LANG", "VER"]
    assert [row.split()[2] for row in journal[1:]] == ["-", "-", "en", "es"]


def test_a_job_without_tracks_shows_none(settings: Settings, engine: sa.Engine, cli_env: dict[str, str],
                                         tmp_path: Path) -> None:
    store = Store(engine, "test")
    assert store.schedule(settings.products["daily-brief"], dt.date(2026, 11, 22))
    (job,) = store.list_jobs()
    shown = json.loads(run_cli("jobs", "show", job.id, "--json", env=cli_env, cwd=tmp_path, check=True).stdout)
    assert shown["tracks"] == [] and [e["lang"] for e in shown["events"]] == [None]
    text = run_cli("jobs", "show", job.id, env=cli_env, cwd=tmp_path, check=True).stdout
    assert not any(line.startswith("LANG ") for line in text.splitlines())


def test_tracks_of_many_jobs_are_read_in_chunks(settings: Settings, engine: sa.Engine) -> None:
    """More jobs than one IN list holds: every job's tracks, none mixed up."""
    store = Store(engine, "test")
    product = settings.products["daily-brief"]
    first = dt.date(2024, 1, 1)
    days = [first + dt.timedelta(days=i) for i in range(3 * 2 + 1)]
    for day in days:
        store.schedule(product, day)
    jobs = store.list_jobs(limit=len(days))
    with engine.begin() as conn:
        now = clock.read_now(conn)
        conn.execute(tables.tracks.insert(), [
            {"id": str(uuid.uuid4()), "job_id": j.id, "product": j.product, "edition_date": j.edition_date,
             "lang": lang, "state": State.PUBLISHED.value, "version": 4, "next_attempt_at": now, "retry_count": 0,
             "created_at": now, "updated_at": now, "state_entered_at": now}
            for j in jobs for lang in ("en", "es")])
    found = store.tracks_of([j.id for j in jobs] + [jobs[0].id], chunk=3)
    assert len(found) == len(jobs)
    assert all([t.lang for t in found[j.id]] == ["en", "es"] and {t.job_id for t in found[j.id]} == {j.id}
               and {t.edition_date for t in found[j.id]} == {j.edition_date} for j in jobs)


# -- status, --check and Prometheus --------------------------------------------------------------


def slot(settings: Settings, engine: sa.Engine, product: str, day: dt.date, state: State, opened_ago: float,
         **columns: Any) -> str:
    """A slot of `product` on `day` in `state`, its window opened `opened_ago` seconds ago."""
    store = Store(engine, "test")
    assert store.schedule(settings.products[product], day)
    (job,) = [j for j in store.list_jobs(day=day) if j.product == product]
    with engine.connect() as conn:
        opened = clock.read_now(conn) - dt.timedelta(seconds=opened_ago)
    set_job(engine, job.id, state, opens_at=opened, created_at=opened, **columns)
    return job.id


def tracks_world(settings: Settings, engine: sa.Engine) -> dict[str, str]:
    """Four slots past the fork:
    parked_new   daily-brief, opened 10 min ago: en PUBLISHED, es VALIDATION_FAILED_RETAINED
    stuck        revolution-watch, opened 3 h ago: en READY_TO_COMPOSE (stranded, its step failing), es PUBLISHED
    suspended    daily-brief, opened 3 h ago, the job MANUALLY_SUSPENDED: es COMPOSED_NOT_SAVED (frozen)
    parked_old   daily-brief, opened 3 h ago: en PUBLISHED, es QUARANTINED config_drift for 3 h"""
    d = dt.date(2026, 11, 10)
    ids = {
        "parked_new": slot(settings, engine, "daily-brief", d, State.READY_TO_COMPOSE, 600),
        "stuck": slot(settings, engine, "revolution-watch", d, State.READY_TO_COMPOSE, 3 * 3600),
        "suspended": slot(settings, engine, "daily-brief", d + dt.timedelta(days=1), State.MANUALLY_SUSPENDED,
                          3 * 3600, suspended_from="READY_TO_COMPOSE"),
        "parked_old": slot(settings, engine, "daily-brief", d + dt.timedelta(days=2), State.READY_TO_COMPOSE,
                           3 * 3600),
    }
    add_track(engine, ids["parked_new"], "en", State.PUBLISHED)
    add_track(engine, ids["parked_new"], "es", State.VALIDATION_FAILED_RETAINED, entered_ago=300,
              last_error="es.title: empty")
    add_track(engine, ids["stuck"], "en", State.READY_TO_COMPOSE, entered_ago=3 * 3600,
              last_error="step_failed: OSError: disk full")
    add_track(engine, ids["stuck"], "es", State.PUBLISHED)
    add_track(engine, ids["suspended"], "en", State.PUBLISHED)
    add_track(engine, ids["suspended"], "es", State.COMPOSED_NOT_SAVED, entered_ago=3 * 3600)
    add_track(engine, ids["parked_old"], "en", State.PUBLISHED)
    add_track(engine, ids["parked_old"], "es", State.QUARANTINED, entered_ago=3 * 3600 - 60,
              quarantine_reason="config_drift")
    return ids


def test_status_counts_tracks_and_reports_parked_and_stranded_ones(settings: Settings, engine: sa.Engine) -> None:
    ids = tracks_world(settings, engine)
    report = queries.collect(engine, settings)
    t = report.tracks
    assert t is not None
    assert t.counts == {
        "daily-brief": {"en": {"PUBLISHED": 3},
                        "es": {"VALIDATION_FAILED_RETAINED": 1, "COMPOSED_NOT_SAVED": 1, "QUARANTINED": 1}},
        "revolution-watch": {"en": {"READY_TO_COMPOSE": 1}, "es": {"PUBLISHED": 1}},
    }
    assert t.total == 8 and t.by_lang["es"] == {"COMPOSED_NOT_SAVED": 1, "PUBLISHED": 1, "QUARANTINED": 1,
                                                  "VALIDATION_FAILED_RETAINED": 1}
    # parked: the older first, each with why; the frozen track of the suspended job is not reported
    assert [(p.job_id, p.lang, p.state, p.reason) for p in t.parked] == [
        (ids["parked_old"], "es", "QUARANTINED", "config_drift"),
        (ids["parked_new"], "es", "VALIDATION_FAILED_RETAINED", "es.title: empty")]
    assert 3 * 3600 - 70 < t.parked[0].age_seconds < 3 * 3600 and 290 < t.parked[1].age_seconds < 400
    assert [(x.job_id, x.lang, x.state) for x in t.stranded] == [(ids["stuck"], "en", "READY_TO_COMPOSE")]
    assert t.stranded[0].age_seconds > 3 * 3600 - 10
    # jobs: the slot waiting on a parked track is not stranded; the one with a stranded track is
    assert [j.id for j in report.stranded] == [ids["stuck"]]

    problems = {text.split(" (")[0]: sev for sev, text in report.problems()}
    assert problems["1 track stranded > 2h00m"] == Severity.CRITICAL
    assert problems["2 parked tracks"] == Severity.WARNING
    assert problems["1 track whose step is failing"] == Severity.WARNING
    lines = [text for _, text in report.problems()]
    assert (f"1 track stranded > 2h00m (oldest revolution-watch 2026-11-10 en in READY_TO_COMPOSE for 3h00m, job "
            f"{ids['stuck'][:8]})") in lines
    assert any(line.startswith("2 parked tracks (config_drift 1, validation_failed_retained 1; oldest daily-brief "
                               "2026-11-12 es in QUARANTINED for ") and line.endswith(
                                   f": config_drift, job {ids['parked_old'][:8]})") for line in lines), lines

    doc = json.loads(json.dumps(report.to_dict()))
    assert doc["tracks"]["by_product"]["revolution-watch"] == {"en": {"READY_TO_COMPOSE": 1}, "es": {"PUBLISHED": 1}}
    assert doc["tracks"]["parked"]["count"] == 2 and doc["tracks"]["parked"]["by_reason"] == {
        "config_drift": 1, "validation_failed_retained": 1}
    assert doc["tracks"]["stranded"]["oldest"]["job_id"] == ids["stuck"]
    assert doc["tracks"]["stranded"]["by_lang"] == {"en": 1}
    assert doc["tracks"]["duplicate_publications_by_lang"] == {}
    assert [(f["job_id"], f["lang"], f["reason"]) for f in doc["tracks"]["failing_steps"]] == [
        (ids["stuck"], "en", "step_failed: OSError: disk full")]
    assert ("1 track whose step is failing (e.g. revolution-watch 2026-11-10 en in READY_TO_COMPOSE: step_failed: "
            "OSError: disk full)") in lines
    assert "tracks_parked=2;0" in report.perfdata() and "tracks_stranded=1;;0" in report.perfdata()


def test_a_parked_track_alone_is_a_warning(settings: Settings, engine: sa.Engine, cli_env: dict[str, str],
                                          tmp_path: Path) -> None:
    """The English edition is out, the Spanish one waits for an operator: WARNING, not stranded."""
    record_heartbeats(engine)  # as the cron commands would have
    with engine.connect() as conn:
        yesterday = clock.read_now(conn).date() - dt.timedelta(days=1)  # no day of the window without its slot
    job_id = slot(settings, engine, "daily-brief", yesterday, State.READY_TO_COMPOSE, 600)
    add_track(engine, job_id, "en", State.PUBLISHED)
    add_track(engine, job_id, "es", State.VALIDATION_FAILED_RETAINED, last_error="es.items[1].url: not public")
    result = run_cli("status", "--check", env=cli_env, cwd=tmp_path)
    assert result.returncode == Severity.WARNING, result.stdout
    assert result.stdout.startswith("IIPUB WARNING - 1 parked track (validation_failed_retained 1; oldest "
                                    f"daily-brief {yesterday} es in VALIDATION_FAILED_RETAINED for ")
    assert "stranded" not in result.stdout.split(" | ")[0]

    human = run_cli("status", env=cli_env, cwd=tmp_path, check=True).stdout.splitlines()
    at = human.index("TRACKS")
    assert human[at + 1].split() == ["STATE", "daily-brief/en", "daily-brief/es", "TOTAL"]
    assert human[at + 2].split() == ["VALIDATION_FAILED_RETAINED", "0", "1", "1"]
    assert human[at + 3].split() == ["PUBLISHED", "1", "0", "1"]
    assert human[at + 4].split() == ["TOTAL", "1", "1", "2"]
    assert any(line.split()[:3] == ["tracks", "parked", "1"] for line in human)
    assert any(line.strip().startswith("parked") and f"{job_id} es" in line and "not public" in line
               for line in human)


def test_no_tracks_no_track_section_and_ok(settings: Settings, engine: sa.Engine, cli_env: dict[str, str],
                                          tmp_path: Path) -> None:
    report = queries.collect(engine, settings)
    assert report.tracks is not None and report.tracks.total == 0 and report.check()[0] == Severity.OK
    assert report.to_dict()["tracks"]["total"] == 0
    assert "TRACKS" not in run_cli("status", env=cli_env, cwd=tmp_path, check=True).stdout.splitlines()


def test_prometheus_tracks_by_product_language_and_state(settings: Settings, engine: sa.Engine) -> None:
    tracks_world(settings, engine)
    report = queries.collect(engine, settings)
    text = metrics.render(report, settings.products).decode()
    samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
               for line in text.splitlines() if line and not line.startswith("#")}
    assert samples['iipub_tracks{lang="es",product="daily-brief",state="QUARANTINED"}'] == 1
    assert samples['iipub_tracks{lang="en",product="daily-brief",state="PUBLISHED"}'] == 3
    assert samples['iipub_tracks{lang="en",product="revolution-watch",state="READY_TO_COMPOSE"}'] == 1
    # every configured language of every product has a zero for each state
    assert samples['iipub_tracks{lang="en",product="revolution-watch",state="QUARANTINED"}'] == 0
    assert sum(v for k, v in samples.items() if k.startswith("iipub_tracks{")) == 8
    assert samples['iipub_parked_tracks{lang="es",reason="config_drift"}'] == 1
    assert samples['iipub_parked_tracks{lang="es",reason="validation_failed_retained"}'] == 1
    assert samples['iipub_parked_tracks{lang="en",reason="config_drift"}'] == 0
    assert samples['iipub_stranded_tracks{lang="en"}'] == 1 and samples['iipub_stranded_tracks{lang="es"}'] == 0
    assert samples['iipub_duplicate_publications_by_lang{lang="es"}'] == 0
    assert samples["iipub_oldest_stranded_track_age_seconds"] > 3 * 3600 - 10
    assert samples["iipub_stranded_jobs"] == 1 and samples["iipub_check_status"] == Severity.CRITICAL


def test_duplicate_publications_are_counted_per_language(settings: Settings, engine: sa.Engine) -> None:
    """SLI 4 counts editions: a second Spanish edition of a slot is a Spanish duplicate. The
    unique key forbids it, so the test drops the key first (what a hand-made restore could do)."""
    job_id = slot(settings, engine, "daily-brief", dt.date(2026, 11, 10), State.PUBLISHED, 600)
    with engine.begin() as conn:
        if conn.dialect.name == "sqlite":
            conn.execute(sa.text("ALTER TABLE editions RENAME TO editions_keyed"))
            conn.execute(sa.text("CREATE TABLE editions AS SELECT * FROM editions_keyed WHERE 0"))
            conn.execute(sa.text("DROP TABLE editions_keyed"))
        else:
            conn.execute(sa.text("ALTER TABLE editions DROP INDEX uq_editions_slot_lang"))
        now = clock.read_now(conn)
        conn.execute(tables.editions.insert(), [
            {"id": i, "job_id": job_id, "product": "daily-brief", "edition_date": dt.date(2026, 11, 10), "lang": lang,
             "title": "t", "content": "c", "sha256": "d" * 64, "created_at": now}
            for i, lang in enumerate(("en", "es", "es", "es"), start=1)])
    report = queries.collect(engine, settings)
    assert report.duplicate_publications == 2
    assert report.tracks is not None and report.tracks.duplicates_by_lang == {"es": 2}
    samples = metrics.render(report, settings.products).decode()
    assert 'iipub_duplicate_publications_by_lang{lang="es"} 2.0' in samples
    assert 'iipub_duplicate_publications_by_lang{lang="en"} 0.0' in samples


# -- end to end: reconcile and relay with a Spanish-only failure -------------------------------------


def test_a_spanish_only_failure_as_the_operator_sees_it(db_url: str, engine: sa.Engine, cli_env: dict[str, str],
                                                        tmp_path: Path) -> None:
    """The simulator corrupts Spanish only: after reconcile and relay the operator's views show
    English published and Spanish parked, with one paid create, the journal per language, the
    slot not stranded and a WARNING naming the Spanish track."""
    wires = ("reuters.com", "apnews.com")  # where the simulator's sources link
    with simulator(corrupt_lang="es") as sim:
        base = make_settings(db_url, sim.url, tmp_path / "public",
                             reconcile={"catch_up_days": 0, "auto_schedule": False})
        product = replace(base.products["daily-brief"], items=3, opens_at=dt.time(0, 0), allowed_domains=wires)
        s = replace(base, products={"daily-brief": product}, webhook_sink=None)
        store = Store(engine, "test")
        assert store.schedule(product, dt.date(2026, 11, 20))
        for _ in range(5):
            sweep.run(s, engine)
            relay.run(s, engine)
            sim.advance(5)
        assert sim.stats()["creates_total"] == 1
        env = sim_env(cli_env, sim, tmp_path)

    (listed,) = json.loads(run_cli("jobs", "list", "--json", env=env, cwd=tmp_path, check=True).stdout)
    job_id = listed["id"]
    assert [(t["lang"], t["state"]) for t in listed["tracks"]] == [("en", "PUBLISHED"),
                                                                   ("es", "VALIDATION_FAILED_RETAINED")]
    assert listed["state"] not in ("PUBLISHED", "CLEANUP_PENDING", "DELETED")  # the slot waits for Spanish
    text = run_cli("jobs", "list", env=env, cwd=tmp_path, check=True).stdout
    assert text.splitlines()[1].endswith("en:PUBLISHED es:VALIDATION_FAILED_RETAINED")

    shown = json.loads(run_cli("jobs", "show", job_id, "--json", env=env, cwd=tmp_path, check=True).stdout)
    by_lang: dict[str | None, list[dict[str, Any]]] = {}
    for e in shown["events"]:
        by_lang.setdefault(e["lang"], []).append(e)
    assert set(by_lang) == {None, "en", "es"}
    assert [e["reason"] for e in by_lang["es"]][-1] == "validation_failed"
    assert {"validated", "composed", "saved", "all_events_delivered"} <= {e["reason"] for e in by_lang["en"]}
    assert "dispatch" in {e["reason"] for e in by_lang[None]}  # the money stays the slot's
    for track in shown["tracks"]:  # a track's version is its journal's
        assert track["version"] == max(e["version"] for e in by_lang[track["lang"]])
    es = shown["tracks"][1]
    assert es["payload_sha256"] and es["composed_sha256"] is None and es["last_error"]

    report = queries.collect(engine, s)
    assert report.tracks is not None
    assert report.tracks.counts == {"daily-brief": {"en": {"PUBLISHED": 1}, "es": {"VALIDATION_FAILED_RETAINED": 1}}}
    assert [(p.job_id, p.lang) for p in report.tracks.parked] == [(job_id, "es")]
    assert report.tracks.stranded == () and report.stranded == ()
    assert any(sev == Severity.WARNING and text.startswith("1 parked track (validation_failed_retained 1; oldest "
                                                      "daily-brief 2026-11-20 es in VALIDATION_FAILED_RETAINED")
               for sev, text in report.problems())
    samples = metrics.render(report, s.products).decode()
    assert 'iipub_tracks{lang="es",product="daily-brief",state="VALIDATION_FAILED_RETAINED"} 1.0' in samples
    assert 'iipub_tracks{lang="en",product="daily-brief",state="PUBLISHED"} 1.0' in samples
    assert 'iipub_parked_tracks{lang="es",reason="validation_failed_retained"} 1.0' in samples
