"""Migration 0009 on a database holding jobs in every state (PRODUCT.md section 15, "Existing
rows"): built at 0008 (no tracks, no `job_events.lang`), upgraded by `db migrate`, then finished by
reconcile and relay. Every slot past the fork gets its language tracks from what its row holds;
nothing is lost, paid again or published twice. SQLite, and MariaDB with IIPUB_TEST_MYSQL_URL."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.edition import compose, validate
from iipub.machine import sweep
from iipub.model.jobs import Job, slot_row
from iipub.provider.openai.adapter import OpenAIAdapter
from iipub.provider.openai.simulator import Simulator, content
from iipub.provider.outcomes import Accepted, CreateRequest
from iipub.publish import relay
from iipub.settings.config import Product, Settings
from iipub.store import clock, db, migrate, outbox, tables
from tests.support.settings import make_settings
from tests.support.simulator import simulator

PRODUCT = "daily-brief"
LANGS = ("en", "es")
FIRST = dt.date(2026, 10, 1)
# Every state, and for MANUALLY_SUSPENDED the state it was suspended from.
STATES = ("NO_JOB", "CREATE_ELIGIBLE", "CREATE_IN_FLIGHT", "ACCEPTED", "QUEUED", "IN_PROGRESS",
          "COMPLETED_NOT_RETRIEVED", "RETRIEVED_NOT_VALIDATED", "VALIDATION_FAILED_RETAINED", "READY_TO_COMPOSE",
          "COMPOSED_NOT_SAVED", "SAVED_NOT_PUBLIC", "PUBLISHED", "CLEANUP_PENDING", "DELETED",
          "PROVIDER_EXPIRED_OR_MISSING", "QUARANTINED", "MANUALLY_SUSPENDED")
PAID = frozenset(STATES) - {"NO_JOB", "CREATE_ELIGIBLE"}  # a create is charged already: never again
EXPECTED_TRACKS = {"READY_TO_COMPOSE": "RETRIEVED_NOT_VALIDATED", "COMPOSED_NOT_SAVED": "COMPOSED_NOT_SAVED",
                   "SAVED_NOT_PUBLIC": "SAVED_NOT_PUBLIC", "PUBLISHED": "PUBLISHED", "CLEANUP_PENDING": "PUBLISHED",
                   "DELETED": "PUBLISHED", "MANUALLY_SUSPENDED": "RETRIEVED_NOT_VALIDATED"}


def _at_0008(engine: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    real = migrate.available
    with monkeypatch.context() as m:
        # The database as release 0008 left it: the migrations after it are not shipped yet.
        m.setattr(migrate, "available", lambda family: [x for x in real(family) if x.version <= "0008"])
        migrate.migrate(engine)
    with engine.connect() as conn:
        assert "tracks" not in sa.inspect(conn).get_table_names()


def _row(state: str, day: dt.date, product: Product, now: dt.datetime, **values: Any) -> dict[str, Any]:
    row = slot_row(job_id=str(uuid.uuid4()), product=PRODUCT, day=day, priority=0,
                   opens_at=dt.datetime.combine(day, dt.time(0, 0)), now=now)
    row.update(state=state, version=2, config_fingerprint=product.fingerprint(), **values)
    return row


def _payload(product: Product, day: dt.date, *, bad: bool = False) -> str:
    text = content.generate(product.output_schema(), model=product.model, slot=f"{PRODUCT}/{day}", seed=7,
                            faults=frozenset({"malformed_output"}) if bad else frozenset())
    return text


def _composed(payload: str, product: Product, day: dt.date) -> tuple[str, str, dict[str, compose.Artifact]]:
    result = validate.validate(payload, product)
    assert result.ok and result.edition is not None
    artifacts = compose.compose(result.edition, product, day)
    text = json.dumps({lang: a.document() for lang, a in sorted(artifacts.items())}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False)
    return text, hashlib.sha256(text.encode()).hexdigest(), artifacts


def _populate(engine: sa.Engine, s: Settings, sim: Simulator) -> dict[str, str]:
    """One job per state (as an 0008 database holds them); returns state -> job id."""
    product = s.products[PRODUCT]
    provider = OpenAIAdapter(s.provider, "sk-test")
    ids: dict[str, str] = {}
    try:
        with db.transaction(engine) as conn:
            now = clock.read_now(conn)
            for n, state in enumerate(STATES):
                day = FIRST + dt.timedelta(days=n)
                values: dict[str, Any] = {}
                effective = "READY_TO_COMPOSE" if state == "MANUALLY_SUSPENDED" else state
                if state not in ("NO_JOB", "CREATE_ELIGIBLE"):
                    values["generation_attempts"] = 3 if state == "PROVIDER_EXPIRED_OR_MISSING" else 1
                if state in ("ACCEPTED", "QUEUED", "IN_PROGRESS", "COMPLETED_NOT_RETRIEVED", "CLEANUP_PENDING"):
                    job_id = str(uuid.uuid4())
                    got = provider.create(CreateRequest(job_id=job_id, product=product, edition_date=day, attempt=1,
                                                        fingerprint=product.fingerprint()))
                    assert isinstance(got, Accepted)
                    values.update(id=job_id, response_id=got.response_id)
                if state == "CREATE_IN_FLIGHT":
                    values.update(lease_owner="reconcile:gone", lease_expiry=now - dt.timedelta(minutes=5))
                if state == "QUARANTINED":
                    values.update(quarantine_reason="create_outcome_unknown", last_error="timeout after sending")
                if state == "PROVIDER_EXPIRED_OR_MISSING":
                    values.update(response_id="resp_gone", last_error="404")
                if state == "MANUALLY_SUSPENDED":
                    values["suspended_from"] = "READY_TO_COMPOSE"
                past_fork = effective in EXPECTED_TRACKS or state == "RETRIEVED_NOT_VALIDATED" \
                    or state == "VALIDATION_FAILED_RETAINED"
                if past_fork:
                    payload = _payload(product, day, bad=state == "VALIDATION_FAILED_RETAINED")
                    values.update(payload=payload, payload_sha256=hashlib.sha256(payload.encode()).hexdigest(),
                                  response_id=values.get("response_id") or (None if state == "DELETED"
                                                                            else f"resp_{uuid.uuid4().hex}"))
                artifacts: dict[str, compose.Artifact] = {}
                if effective in ("COMPOSED_NOT_SAVED", "SAVED_NOT_PUBLIC", "PUBLISHED", "CLEANUP_PENDING", "DELETED"):
                    text, sha, artifacts = _composed(values["payload"], product, day)
                    values.update(composed=text, composed_sha256=sha)
                row = _row(state, day, product, now, **values)
                conn.execute(tables.jobs.insert().values(row))
                for version, (frm, to) in enumerate([(None, "NO_JOB"), ("NO_JOB", state)], start=1):
                    conn.execute(tables.job_events.insert().values(
                        job_id=row["id"], from_state=frm, to_state=to, version=version, worker="legacy",
                        reason="scheduled" if frm is None else "window_open", at=now))
                if artifacts and effective != "COMPOSED_NOT_SAVED":
                    outbox.save_editions(conn, Job.from_row(row), artifacts)
                    if effective != "SAVED_NOT_PUBLIC":
                        conn.execute(tables.outbox.update().where(tables.outbox.c.job_id == row["id"])
                                     .values(published_at=now))
                ids[state] = row["id"]
    finally:
        provider.close()
    return ids


def _snapshot(engine: sa.Engine, table: sa.Table, columns: Collection[str] | None = None) -> list[dict[str, Any]]:
    """The table's rows, in the columns the database has now (a later migration may add some), or
    in `columns` only."""
    with engine.connect() as conn:
        present = {c["name"] for c in sa.inspect(conn).get_columns(table.name)}
        cols = [c for c in table.columns if c.name in present and (columns is None or c.name in columns)]
        return [dict(r) for r in conn.execute(sa.select(*cols).order_by(*table.primary_key.columns)).mappings()]


def settings_for(db_url: str, sim: Simulator, tmp_path: Path) -> Settings:
    """One product; ticks make no slots of their own (the test's are the only ones)."""
    s = make_settings(db_url, sim.url, tmp_path / "public", reconcile={"catch_up_days": 0, "auto_schedule": False})
    p = replace(s.products[PRODUCT], items=3, prompt="Write the brief.", opens_at=dt.time(0, 0))
    return replace(s, products={PRODUCT: p}, webhook_sink=None)


@pytest.mark.slow
def test_0009_converts_every_state_and_the_upgraded_database_finishes_without_paying_or_publishing_twice(
        db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = db.make_engine(db_url, pool_size=24)
    _at_0008(engine, monkeypatch)
    with simulator() as sim:
        s = settings_for(db_url, sim, tmp_path)
        ids = _populate(engine, s, sim)
        creates_before = dict(sim.stats()["creates_by_job"])
        jobs_before = {r["id"]: r for r in _snapshot(engine, tables.jobs)}
        editions_before = _snapshot(engine, tables.editions)

        migrate.migrate(engine)  # 0009 and its data step (and the migrations after it)
        migrate.migrate(engine)  # again: nothing twice

        edition_columns = editions_before[0].keys()  # what the editions table had at 0008
        assert _snapshot(engine, tables.editions, edition_columns) == editions_before
        columns = next(iter(jobs_before.values())).keys()  # what the jobs table had at 0008
        assert {r["id"]: r for r in _snapshot(engine, tables.jobs, columns)} == jobs_before  # no slot row rewritten
        with engine.connect() as conn:
            tracks = {(r["job_id"], r["lang"]): dict(r) for r in conn.execute(sa.select(tables.tracks)).mappings()}
        for state, job_id in ids.items():
            got = {lang: t for (jid, lang), t in tracks.items() if jid == job_id}
            if state not in EXPECTED_TRACKS:
                assert not got, state
                continue
            assert sorted(got) == list(LANGS), state
            payload = json.loads(jobs_before[job_id]["payload"])
            for lang, t in got.items():
                assert t["state"] == EXPECTED_TRACKS[state], (state, lang)
                assert json.loads(t["payload"]) == {lang: payload[lang]}  # the part, nothing lost
                assert t["source_sha256"] == jobs_before[job_id]["payload_sha256"]
            if state in ("SAVED_NOT_PUBLIC", "PUBLISHED", "CLEANUP_PENDING", "DELETED"):
                eds = {e["lang"]: e["sha256"] for e in editions_before if e["job_id"] == job_id}
                assert {lang: t["composed_sha256"] for lang, t in got.items()} == eds

        for _ in range(6):
            sweep.run(s, engine)
            relay.run(s, engine)
            sim.advance(5)
        stats = sim.stats()
        after = {r["id"]: r for r in _snapshot(engine, tables.jobs)}
        for state, job_id in ids.items():
            new_creates = stats["creates_by_job"].get(job_id, 0) - creates_before.get(job_id, 0)
            assert new_creates == (0 if state in PAID else 1), state
        done = {"PUBLISHED", "CLEANUP_PENDING", "DELETED"}
        parked = {"QUARANTINED", "VALIDATION_FAILED_RETAINED", "MANUALLY_SUSPENDED"}
        for state, job_id in ids.items():
            assert after[job_id]["state"] in done | parked, (state, after[job_id]["state"])
        for state in ("NO_JOB", "CREATE_ELIGIBLE", "ACCEPTED", "QUEUED", "IN_PROGRESS", "COMPLETED_NOT_RETRIEVED",
                      "RETRIEVED_NOT_VALIDATED", "READY_TO_COMPOSE", "COMPOSED_NOT_SAVED", "SAVED_NOT_PUBLIC",
                      "PUBLISHED", "CLEANUP_PENDING", "DELETED"):
            assert after[ids[state]]["state"] in done, state
        editions = _snapshot(engine, tables.editions, edition_columns)
        assert [e for e in editions if e["id"] in {x["id"] for x in editions_before}] == editions_before
        by_slot: dict[tuple[str, str], int] = {}
        for e in editions:
            by_slot[(e["job_id"], e["lang"])] = by_slot.get((e["job_id"], e["lang"]), 0) + 1
        assert set(by_slot.values()) == {1}
        with engine.connect() as conn:
            events = conn.execute(sa.select(tables.outbox.c.edition_id, sa.func.count())
                                  .group_by(tables.outbox.c.edition_id)).all()
            saves = conn.execute(sa.select(tables.job_events.c.job_id, tables.job_events.c.lang, sa.func.count())
                                 .where(tables.job_events.c.reason == "saved")
                                 .group_by(tables.job_events.c.job_id, tables.job_events.c.lang)).all()
        assert {n for _, n in events} == {1} and len(events) == len(editions)
        assert {n for _, _, n in saves} == {1}  # no slot nor track saved twice
        # The suspended slot's tracks waited; resumed, it publishes too, with no create.
        from iipub.operate.executor import Operator

        with Operator(s, engine) as op:
            op.resume(ids["MANUALLY_SUSPENDED"], "alice", "checked")
        for _ in range(3):
            sweep.run(s, engine)
            relay.run(s, engine)
        final = {r["id"]: r for r in _snapshot(engine, tables.jobs)}
        assert final[ids["MANUALLY_SUSPENDED"]]["state"] in done
        assert sim.stats()["creates_by_job"].get(ids["MANUALLY_SUSPENDED"], 0) == 0
    engine.dispose()
