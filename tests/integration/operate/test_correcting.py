"""`iipub withdraw` and `iipub correct` on a real database, the real static sink's files, a real
webhook receiver on loopback and the spend ledger (PRODUCT.md section 26): what the site, the
CMS, the database and the ledger say afterwards, for each way the contract could break."""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.machine import sweep
from iipub.money import authority, paying, restore
from iipub.money.authority import Route
from iipub.provider.openai.simulator import Simulator
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import tables
from iipub.store.job_store import Store
from iipub.store.outbox import Outbox
from tests.support.cli import one_line_error, run_cli
from tests.support.databases import restore_rows, snapshot_rows
from tests.support.loopback import Receiver
from tests.support.settings import cms_env, ledger_file_of, with_cms

DAY = dt.date(2026, 11, 28)
NOTE = "Withdrawn at a source's request <script>alert(1)</script> & \"more\""
pytestmark = pytest.mark.no_auto_schedule


@pytest.fixture
def s(cfg: Settings, hook: Receiver, webhook_sink_secret: str) -> Settings:
    return with_cms(cfg, hook.url)


@pytest.fixture
def env(cli_env: dict[str, str], sim: Simulator, tmp_path: Path, hook: Receiver) -> dict[str, str]:
    return cms_env(cli_env, sim, tmp_path, hook.url)


def saved(s: Settings, engine: sa.Engine, sim: Simulator) -> str:
    Store(engine, "test").schedule(s.products["daily-brief"], DAY)
    for _ in range(6):
        sweep.run(s, engine)
        sim.advance(5)
        with engine.connect() as conn:
            rows = conn.execute(sa.select(tables.jobs.c.id, tables.jobs.c.state)).all()
        if {r.state for r in rows} == {"SAVED_NOT_PUBLIC"}:
            return str(rows[0].id)
    raise AssertionError("the job did not reach SAVED_NOT_PUBLIC")


def published(s: Settings, engine: sa.Engine, sim: Simulator) -> str:
    job_id = saved(s, engine, sim)
    report = relay.run(s, engine)
    assert report.published == 2 and report.jobs_published == 1
    return job_id


def cli(env: dict[str, str], tmp_path: Path, *args: str) -> Any:
    return run_cli(*args, env=env, cwd=tmp_path)


def page(tmp_path: Path, lang: str, suffix: str = "html") -> str:
    return (tmp_path / "public" / "daily-brief" / DAY.isoformat() / f"{lang}.{suffix}").read_text()


def series(tmp_path: Path, lang: str, name: str) -> str:
    return (tmp_path / "public" / "daily-brief" / lang / name).read_text()


def rows(engine: sa.Engine, table: sa.Table) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(table).order_by(*table.primary_key.columns)).mappings()]


def editions(engine: sa.Engine) -> dict[str, dict[str, Any]]:
    return {r["lang"]: r for r in rows(engine, tables.editions)}


def counts(engine: sa.Engine) -> dict[str, int]:
    return {t.name: len(rows(engine, t)) for t in (tables.outbox, tables.edition_changes, tables.job_events,
                                                  tables.editions)}


def received(hook: Receiver) -> list[dict[str, Any]]:
    with hook.lock:
        return [json.loads(r["body"]) for r in hook.requests]


def consumer_state(events: Iterable[dict[str, Any]], keys: Iterable[str]) -> dict[str, tuple[int, str, str]]:
    """What a consumer following README's rules holds per language: deduplicate on the key, apply
    an event only if its revision is newer than the one held. (revision, type, sha256)."""
    seen: set[str] = set()
    held: dict[str, tuple[int, str, str]] = {}
    for key, ev in zip(keys, events, strict=True):
        if key in seen:
            continue
        seen.add(key)
        revision = ev.get("revision", 1)
        if ev["lang"] not in held or revision > held[ev["lang"]][0]:
            held[ev["lang"]] = (revision, ev.get("type", "edition.published"), ev["sha256"])
    return held


def ledger_lines(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ledger_file_of(tmp_path).read_text().splitlines() if line.strip()]


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_withdrawing_one_language_of_two_takes_only_it_off_the_site_and_tells_the_cms(
        s: Settings, engine: sa.Engine, sim: Simulator, hook: Receiver, env: dict[str, str], tmp_path: Path) -> None:
    job_id = published(s, engine, sim)
    live = editions(engine)
    es_item = json.loads(live["es"]["content"])["items"][0]["headline"]
    before = cli(env, tmp_path, "status", "--check").returncode

    res = cli(env, tmp_path, "withdraw", job_id[:8], "--lang", "es", "--reason", "legal request #12 (internal)",
              "--public-note", NOTE, "--by", "ana")
    assert res.returncode == 0, res.stderr
    assert "es withdrawn (revision 2" in res.stdout
    after = editions(engine)
    assert (after["es"]["status"], after["es"]["revision"]) == ("withdrawn", 2)
    assert (after["en"]["status"], after["en"]["revision"]) == ("live", 1)
    assert after["es"]["content"] == live["es"]["content"]  # the evidence is kept
    [change] = rows(engine, tables.edition_changes)
    assert (change["lang"], change["kind"], change["revision"], change["changed_by"]) == ("es", "withdrawn", 2, "ana")
    assert change["superseded_sha256"] == live["es"]["sha256"] and change["superseded_content"] == live["es"]["content"]
    journal = [e for e in rows(engine, tables.job_events) if e["reason"] == "operator_withdraw"]
    assert len(journal) == 1 and journal[0]["from_state"] == journal[0]["to_state"] == "PUBLISHED"
    assert json.loads(journal[0]["detail"])["why"] == "legal request #12 (internal)"

    report = relay.run(s, engine)
    assert report.published == 1
    notice = page(tmp_path, "es")
    assert 'class="notice withdrawn"' in notice and es_item not in notice
    assert html.escape(NOTE) in notice and "<script>" not in notice
    assert "legal request" not in notice  # the reason stays internal
    tombstone = json.loads(page(tmp_path, "es", "json"))
    assert tombstone["withdrawn"] is True and tombstone["revision"] == 2 and tombstone["sha256"] == live["es"]["sha256"]
    assert DAY.isoformat() not in series(tmp_path, "es", "index.html")
    assert DAY.isoformat() not in series(tmp_path, "es", "feed.atom")
    assert DAY.isoformat() not in series(tmp_path, "es", f"{DAY:%Y-%m}.html")
    # The other language stays, and no longer links to the withdrawn one.
    assert hashlib.sha256(page(tmp_path, "en", "json").encode()).hexdigest() == live["en"]["sha256"]
    assert DAY.isoformat() in series(tmp_path, "en", "index.html")
    assert 'hreflang="es"' not in page(tmp_path, "en")
    # The CMS heard it: type, revision, the sha256 taken back, a time-ordered id as the key.
    events = received(hook)
    withdrawn = [e for e in events if e.get("type") == "edition.withdrawn"]
    assert len(withdrawn) == 1 and withdrawn[0]["lang"] == "es" and withdrawn[0]["revision"] == 2
    assert withdrawn[0]["sha256"] == live["es"]["sha256"] and withdrawn[0]["public_note"] == NOTE
    assert "artifact" not in withdrawn[0]
    keys = [r["headers"]["idempotency-key"] for r in hook.requests]
    # The first two (one per language) may arrive in either order: the relay delivers concurrently.
    assert keys[-1] == withdrawn[0]["event_id"] and keys[-1][14] == "7" and max(keys) == keys[-1]
    assert hook.verified() == len(hook.requests)
    assert [line["revision"] for line in ledger_lines(tmp_path) if line["t"] == "revised"] == [2]
    # Deliberate: never an alert; `jobs show` and `status` say so.
    assert cli(env, tmp_path, "status", "--check").returncode == before
    shown = json.loads(cli(env, tmp_path, "jobs", "show", job_id, "--json").stdout)
    assert shown["editions_changed"] == {"es": {"status": "withdrawn", "revision": 2}}
    assert shown["edition_changes"][0]["public_note"] == NOTE
    assert json.loads(cli(env, tmp_path, "status", "--json").stdout)["editions"] == {"withdrawn": 1, "corrected": 0,
                                                                              "correcting": 0}
    text = cli(env, tmp_path, "jobs", "show", job_id).stdout
    assert "WITHDRAWN" in text and "legal request #12" in text and live["es"]["sha256"][:12] in text
    assert "withdrawn editions" in cli(env, tmp_path, "status").stdout

    # What a restored slot is adopted from: the ledger's published editions, which the live site
    # still proves, the withdrawn language by its withdrawal's record.
    book = restore.ledger_of(s, engine)
    assert book is not None
    spend = book.read()[0][f"daily-brief/{DAY.isoformat()}"]
    assert spend.revisions["es"][:2] == (2, "withdrawn")
    assert restore.published_live(s, spend) == spend.published_editions
    assert set(spend.published_editions) == {"en", "es"}
    checked = cli(env, tmp_path, "check")  # the invariants hold with a withdrawal in them
    assert checked.returncode == 0, checked.stdout + checked.stderr

    # Twice: a no-op that says so.
    snapshot = counts(engine)
    again = cli(env, tmp_path, "withdraw", job_id, "--lang", "es", "--reason", "again")
    assert again.returncode == 0 and "already withdrawn" in again.stdout
    assert counts(engine) == snapshot
    # No relay, tick or republish brings it back.
    relay.run(s, engine)
    sweep.run(s, engine)
    assert cli(env, tmp_path, "republish", job_id, "--reason", "try").returncode == 0
    relay.run(s, engine)
    assert json.loads(page(tmp_path, "es", "json"))["withdrawn"] is True


def test_a_withdrawal_while_the_cms_still_refuses_the_first_delivery_ends_withdrawn_there(
        s: Settings, engine: sa.Engine, sim: Simulator, hook: Receiver, env: dict[str, str], tmp_path: Path) -> None:
    job_id = saved(s, engine, sim)
    hook.mode = "503"
    relay.run(s, engine)  # the site has both languages; the CMS answered 503 (retry in 120 s)
    assert (tmp_path / "public" / "daily-brief" / DAY.isoformat() / "en.html").is_file()
    first = received(hook)
    assert {e["type"] for e in first} == {"edition.published"}

    res = cli(env, tmp_path, "withdraw", job_id, "--reason", "wrong figures", "--public-note", "Withdrawn.")
    assert res.returncode == 0, res.stderr
    superseded = [r for r in rows(engine, tables.outbox) if r["superseded_by"]]
    assert len(superseded) == 2 and all(r["published_at"] is not None for r in superseded)

    hook.mode = "ok"
    relay.run(s, engine)
    events = received(hook)
    keys = [r["headers"]["idempotency-key"] for r in hook.requests]
    # The first events are never sent again after the withdrawal: the consumer ends withdrawn.
    assert [e["type"] for e in events[len(first):]] == ["edition.withdrawn"] * 2
    assert {lang: state[1] for lang, state in consumer_state(events, keys).items()} == {
        "en": "edition.withdrawn", "es": "edition.withdrawn"}
    assert all(json.loads(page(tmp_path, lang, "json"))["withdrawn"] for lang in ("en", "es"))
    with engine.connect() as conn:  # every event of the job is settled: the slot is published, withdrawn
        assert conn.execute(sa.select(tables.jobs.c.state)).scalar_one() == "PUBLISHED"


def corrected_file(engine: sa.Engine, tmp_path: Path, marker: str) -> Path:
    with engine.connect() as conn:
        doc = json.loads(conn.execute(sa.select(tables.jobs.c.payload)).scalar_one())
    for lang in doc:
        doc[lang]["summary"] = f"{doc[lang]['summary']} {marker} <b>bold</b>"
    path = tmp_path / "corrected.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_correction_after_a_withdrawal_brings_the_edition_back_with_a_notice(
        s: Settings, engine: sa.Engine, sim: Simulator, hook: Receiver, env: dict[str, str], tmp_path: Path) -> None:
    job_id = published(s, engine, sim)
    original = editions(engine)["en"]
    assert cli(env, tmp_path, "withdraw", job_id, "--lang", "en", "--reason", "check").returncode == 0
    relay.run(s, engine)
    assert DAY.isoformat() not in series(tmp_path, "en", "feed.atom")

    path = corrected_file(engine, tmp_path, "CORRECTED-TEXT")
    res = cli(env, tmp_path, "correct", job_id, "--lang", "en", "--from-file", str(path), "--reason", "fixed",
              "--public-note", "Figures <fixed> & checked.")
    assert res.returncode == 0, res.stderr
    now = editions(engine)["en"]
    assert (now["status"], now["revision"]) == ("corrected", 3) and "CORRECTED-TEXT" in now["content"]
    assert editions(engine)["es"]["revision"] == 1  # --lang: the other language is untouched
    changes = rows(engine, tables.edition_changes)
    assert [c["kind"] for c in changes] == ["withdrawn", "corrected"]
    assert changes[1]["superseded_content"] == original["content"]  # both versions kept

    relay.run(s, engine)
    html = page(tmp_path, "en")
    assert 'class="notice corrected" data-revision="3"' in html and "Figures &lt;fixed&gt; &amp; checked." in html
    assert "CORRECTED-TEXT &lt;b&gt;bold&lt;/b&gt;" in html
    assert hashlib.sha256(page(tmp_path, "en", "json").encode()).hexdigest() == now["sha256"]
    assert DAY.isoformat() in series(tmp_path, "en", "index.html")
    feed = series(tmp_path, "en", "feed.atom")
    assert "CORRECTED-TEXT" in feed and "notice corrected" in feed
    checked = cli(env, tmp_path, "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    [corrected] = [e for e in received(hook) if e.get("type") == "edition.corrected"]
    assert (corrected["revision"], corrected["supersedes"], corrected["sha256"]) == (
        3, original["sha256"], now["sha256"])
    assert corrected["artifact"]["summary"].endswith("CORRECTED-TEXT <b>bold</b>")

    # The same correction again changes nothing; a file that fails validation is refused.
    snapshot = counts(engine)
    same = cli(env, tmp_path, "correct", job_id, "--lang", "en", "--from-file", str(path), "--reason", "again")
    assert same.returncode == 0 and "nothing to do" in same.stdout and counts(engine) == snapshot
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"en": {"title": "x"}}))
    one_line_error(cli(env, tmp_path, "correct", job_id, "--lang", "en", "--from-file", str(bad), "--reason", "r"),
                   3, "fails validation")
    # A response object (as the provider's dashboard gives it) that names another job is refused,
    # as `jobs import-payload` refuses it.
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"id": "resp_other", "object": "response", "status": "completed",
                                 "metadata": {"iipub_job_id": "00000000-0000-4000-8000-000000000000"},
                                 "output": [{"type": "message", "role": "assistant", "content": [
                                     {"type": "output_text", "text": path.read_text(), "annotations": []}]}]}))
    one_line_error(cli(env, tmp_path, "correct", job_id, "--lang", "en", "--from-file", str(other), "--reason", "r"),
                   3, "names job 00000000-0000-4000-8000-000000000000, not job")
    assert counts(engine) == snapshot


def test_bad_input_is_one_line_and_changes_nothing(
        s: Settings, engine: sa.Engine, sim: Simulator, env: dict[str, str], tmp_path: Path) -> None:
    job_id = saved(s, engine, sim)
    snapshot = counts(engine)
    one_line_error(cli(env, tmp_path, "withdraw", "00000000-0000", "--reason", "r"), 4, "no job")
    one_line_error(cli(env, tmp_path, "withdraw", job_id, "--lang", "fr", "--reason", "r"), 2, "no language 'fr'")
    one_line_error(cli(env, tmp_path, "withdraw", job_id, "--reason", "r"), 3, "not public yet")
    one_line_error(cli(env, tmp_path, "withdraw", job_id, "--reason", " "), 2, "--reason")
    one_line_error(cli(env, tmp_path, "correct", job_id, "--from-file", str(tmp_path / "none.json"), "--reason", "r"),
                   3, "not public yet")
    assert counts(engine) == snapshot


def test_a_restore_from_before_the_withdrawal_does_not_bring_the_edition_back(
        s: Settings, engine: sa.Engine, sim: Simulator, hook: Receiver, env: dict[str, str], tmp_path: Path) -> None:
    job_id = saved(s, engine, sim)
    hook.mode = "503"
    relay.run(s, engine)  # public on the site; the CMS has not taken it yet
    backup = snapshot_rows(engine)
    assert cli(env, tmp_path, "withdraw", job_id, "--lang", "es", "--reason", "legal").returncode == 0
    hook.mode = "ok"
    relay.run(s, engine)
    site = tree(tmp_path / "public")
    restore_rows(engine, backup)  # the database forgets the withdrawal; the ledger and the site do not
    assert editions(engine)["es"]["status"] == "live"
    for _ in range(2):
        relay.run(s, engine)  # the restored first events go out again: stale everywhere
        sweep.run(s, engine)
    assert tree(tmp_path / "public") == site
    events = received(hook)
    keys = [r["headers"]["idempotency-key"] for r in hook.requests]
    assert consumer_state(events, keys)["es"][1] == "edition.withdrawn"
    assert consumer_state(events, keys)["en"][1] == "edition.published"

    # Withdrawing again on the restored database takes a revision past the ledger's.
    res = cli(env, tmp_path, "withdraw", job_id, "--lang", "es", "--reason", "legal, again", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["changed"][0]["revision"] == 3
    relay.run(s, engine)
    assert json.loads(page(tmp_path, "es", "json"))["revision"] == 3


def test_an_edition_whose_events_were_pruned_is_still_public_and_can_be_withdrawn(
        s: Settings, engine: sa.Engine, sim: Simulator, env: dict[str, str], tmp_path: Path) -> None:
    job_id = published(s, engine, sim)
    assert Outbox(engine, "test", 60).prune(-60) == 2  # `relay --prune`: the delivery records go too
    assert rows(engine, tables.outbox) == [] and rows(engine, tables.outbox_deliveries) == []
    res = cli(env, tmp_path, "withdraw", job_id, "--lang", "en", "--reason", "old edition")
    assert res.returncode == 0, res.stderr
    relay.run(s, engine)
    assert json.loads(page(tmp_path, "en", "json"))["withdrawn"] is True


def test_the_payment_authority_sees_a_withdrawn_edition_on_the_live_site(
        s: Settings, engine: sa.Engine, sim: Simulator, env: dict[str, str], tmp_path: Path) -> None:
    empty = snapshot_rows(engine)
    job_id = published(s, engine, sim)
    assert cli(env, tmp_path, "withdraw", job_id, "--reason", "legal").returncode == 0
    relay.run(s, engine)
    restore_rows(engine, empty)  # a backup from before the slot existed: only the site remembers
    store = Store(engine, "test")
    store.schedule(s.products["daily-brief"], DAY)
    job = store.list_jobs(limit=1)[0]
    found = paying.facts(s, engine, job, Route.SWEEP)
    assert found.live == ["en", "es"]  # the withdrawals are what the site serves: nothing is bought again
    assert not authority.may_pay(found, Route.SWEEP).allowed
