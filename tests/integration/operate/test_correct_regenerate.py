"""`iipub correct --regenerate --pay-again` on a real database, the HTTP simulator, the real static
sink's files, a webhook receiver on loopback and the spend ledger (PRODUCT.md section 26): the
paid way to correct a published edition ends with one more paid create, the edition's next
revision everywhere (database, site, CMS, ledger), and nothing paid twice when the create's
outcome is unknown."""

from __future__ import annotations

import hashlib
import json
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.machine import sweep
from iipub.provider.openai.simulator import Simulator
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import clock, tables
from tests.integration.operate.test_correcting import (
    cli,
    counts,
    editions,
    ledger_lines,
    page,
    published,
    received,
    rows,
    saved,
    series,
    tree,
)
from tests.support.cli import child_iipub, one_line_error
from tests.support.databases import restore_rows, snapshot_rows
from tests.support.loopback import Receiver, wait_for
from tests.support.settings import cms_env, with_cms

pytestmark = pytest.mark.no_auto_schedule
NOTE = "Figures checked again."


@pytest.fixture
def s(cfg: Settings, hook: Receiver, webhook_sink_secret: str) -> Settings:
    return with_cms(cfg, hook.url)


@pytest.fixture
def env(cli_env: dict[str, str], sim: Simulator, tmp_path: Path, hook: Receiver) -> dict[str, str]:
    return cms_env(cli_env, sim, tmp_path, hook.url)


def job_row(engine: sa.Engine) -> dict[str, Any]:
    [row] = rows(engine, tables.jobs)
    return row


def done(s: Settings, engine: sa.Engine, sim: Simulator) -> str:
    """Published and cleaned up: the slot's provider response is deleted (DELETED)."""
    job_id = published(s, engine, sim)
    sweep.run(s, engine)
    assert job_row(engine)["state"] == "DELETED"
    return job_id


def run_until_corrected(s: Settings, engine: sa.Engine, sim: Simulator, lang: str, revision: int) -> None:
    for _ in range(8):
        sweep.run(s, engine)
        sim.advance(5)
        relay.run(s, engine)
        if editions(engine)[lang]["revision"] == revision and job_row(engine)["state"] == "DELETED":
            return
    raise AssertionError(f"not corrected: {job_row(engine)['state']}, {editions(engine)[lang]['revision']}")


def regenerate(env: dict[str, str], tmp_path: Path, job_id: str, *more: str) -> Any:
    return cli(env, tmp_path, "correct", job_id, "--regenerate", "--pay-again", "--reason", "a wrong figure",
               "--by", "editor", "--public-note", NOTE, *more)


@pytest.mark.slow
def test_a_paid_regeneration_corrects_a_live_edition_with_one_more_create(
        s: Settings, engine: sa.Engine, sim: Simulator, hook: Receiver, env: dict[str, str], tmp_path: Path) -> None:
    job_id = done(s, engine, sim)
    original = editions(engine)
    creates = sim.stats()["creates_total"]
    backup = snapshot_rows(engine)

    res = regenerate(env, tmp_path, job_id, "--lang", "en")
    assert res.returncode == 0, res.stderr
    assert "paid generation will replace revision 1" in res.stdout
    assert job_row(engine)["state"] == "CREATE_ELIGIBLE"
    assert editions(engine)["en"]["revision"] == 1  # nothing changes until the new output is saved
    shown = json.loads(cli(env, tmp_path, "jobs", "show", job_id, "--json").stdout)
    assert shown["correction_in_progress"] == {"languages": ["en"], "by": "editor", "why": "a wrong figure",
                                               "public_note": NOTE}
    [entry] = [e for e in shown["events"] if e["reason"] == "operator_correct_regenerate"]
    assert entry["detail"]["pay_again"]["why"] == "a wrong figure" and entry["detail"]["by"] == "editor"
    status = json.loads(cli(env, tmp_path, "status", "--json").stdout)
    assert status["editions"]["correcting"] == 1

    run_until_corrected(s, engine, sim, "en", 2)
    assert sim.stats()["creates_total"] == creates + 1  # exactly one more paid create
    job = job_row(engine)
    assert job["generation_attempts"] == 2
    now = editions(engine)
    assert (now["en"]["status"], now["en"]["revision"]) == ("corrected", 2)
    assert now["es"] == original["es"]  # --lang: the other language is untouched
    [change] = rows(engine, tables.edition_changes)
    assert (change["kind"], change["changed_by"], change["reason"], change["public_note"]) == (
        "corrected", "editor", "a wrong figure", NOTE)
    assert change["superseded_content"] == original["en"]["content"]
    corrected = [e for e in received(hook) if e.get("type") == "edition.corrected"]
    assert len(corrected) == 1
    assert (corrected[0]["revision"], corrected[0]["supersedes"], corrected[0]["sha256"]) == (
        2, original["en"]["sha256"], now["en"]["sha256"])
    html = page(tmp_path, "en")
    assert 'class="notice corrected" data-revision="2"' in html and NOTE in html
    assert hashlib.sha256(page(tmp_path, "en", "json").encode()).hexdigest() == now["en"]["sha256"]
    assert "notice corrected" in series(tmp_path, "en", "feed.atom")
    assert [ln["revision"] for ln in ledger_lines(tmp_path) if ln.get("t") == "revised"] == [2]
    shown = json.loads(cli(env, tmp_path, "jobs", "show", job_id, "--json").stdout)
    assert shown["correction_in_progress"] is None
    checked = cli(env, tmp_path, "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr

    # A restore from before the correction does not bring revision 1 back.
    site = tree(tmp_path / "public")
    restore_rows(engine, backup)
    for _ in range(2):
        relay.run(s, engine)
        sweep.run(s, engine)
    assert tree(tmp_path / "public") == site
    assert sim.stats()["creates_total"] == creates + 1


def test_a_paid_regeneration_corrects_a_withdrawn_edition_which_stays_withdrawn_until_then(
        s: Settings, engine: sa.Engine, sim: Simulator, hook: Receiver, env: dict[str, str], tmp_path: Path) -> None:
    job_id = done(s, engine, sim)
    assert cli(env, tmp_path, "withdraw", job_id, "--lang", "es", "--reason", "legal").returncode == 0
    relay.run(s, engine)
    assert json.loads(page(tmp_path, "es", "json"))["withdrawn"] is True
    creates = sim.stats()["creates_total"]

    res = regenerate(env, tmp_path, job_id, "--lang", "es")
    assert res.returncode == 0, res.stderr
    sweep.run(s, engine)  # the create is sent; its output is not in yet
    relay.run(s, engine)
    assert editions(engine)["es"]["status"] == "withdrawn"
    assert json.loads(page(tmp_path, "es", "json"))["withdrawn"] is True

    run_until_corrected(s, engine, sim, "es", 3)
    assert sim.stats()["creates_total"] == creates + 1
    assert (editions(engine)["es"]["status"], editions(engine)["en"]["revision"]) == ("corrected", 1)
    assert hashlib.sha256(page(tmp_path, "es", "json").encode()).hexdigest() == editions(engine)["es"]["sha256"]
    assert 'class="notice corrected" data-revision="3"' in page(tmp_path, "es")
    assert [e["type"] for e in received(hook) if e["lang"] == "es"][-1] == "edition.corrected"


def test_bad_input_is_one_line_and_changes_nothing(
        s: Settings, engine: sa.Engine, sim: Simulator, env: dict[str, str], tmp_path: Path) -> None:
    job_id = saved(s, engine, sim)  # saved, not public yet
    creates = sim.stats()["creates_total"]
    snapshot = counts(engine), job_row(engine)["version"]
    one_line_error(regenerate(env, tmp_path, "00000000-0000"), 4, "no job")
    one_line_error(regenerate(env, tmp_path, job_id, "--lang", "fr"), 2, "no language 'fr'")
    one_line_error(regenerate(env, tmp_path, job_id), 3, "not public yet")
    one_line_error(cli(env, tmp_path, "correct", job_id, "--regenerate", "--reason", "r"), 2, "--pay-again")
    one_line_error(cli(env, tmp_path, "correct", job_id, "--regenerate", "--pay-again", "--from-file",
                       str(tmp_path / "x.json"), "--reason", "r"), 2, "not both")
    one_line_error(cli(env, tmp_path, "correct", job_id, "--reason", "r"), 2, "--from-file")
    relay.run(s, engine)
    sweep.run(s, engine)
    assert job_row(engine)["state"] == "DELETED"
    snapshot = counts(engine), job_row(engine)["version"]
    one_line_error(cli(env, tmp_path, "correct", job_id, "--regenerate", "--reason", "r"), 2, "--pay-again")
    assert (counts(engine), job_row(engine)["version"]) == snapshot
    assert regenerate(env, tmp_path, job_id).returncode == 0
    snapshot = counts(engine), job_row(engine)["version"]
    one_line_error(regenerate(env, tmp_path, job_id), 3, "under way")  # one correction at a time
    # Nor a withdrawal or a correction by hand meanwhile: they say what is under way, in one line.
    one_line_error(cli(env, tmp_path, "withdraw", job_id, "--reason", "r"), 3, "paid correction of its en, es")
    (tmp_path / "fixed.json").write_text("{}")
    one_line_error(cli(env, tmp_path, "correct", job_id, "--from-file", str(tmp_path / "fixed.json"),
                       "--reason", "r"), 3, "then `iipub correct` works again")
    assert (counts(engine), job_row(engine)["version"]) == snapshot
    assert sim.stats()["creates_total"] == creates


@pytest.mark.slow
def test_a_create_lost_on_its_way_is_parked_never_paid_twice(
        s: Settings, engine: sa.Engine, sim: Simulator, env: dict[str, str], tmp_path: Path) -> None:
    s = replace(s, provider=replace(s.provider, breaker_cooldown_seconds=0.5))  # the breaker's probe comes soon
    job_id = done(s, engine, sim)
    original = editions(engine)
    site = tree(tmp_path / "public")
    creates = sim.stats()["creates_total"]
    sim.add_faults([{"op": "create", "fault": "drop_after_accept"}])
    assert regenerate(env, tmp_path, job_id).returncode == 0
    for _ in range(3):
        sweep.run(s, engine)
        sim.advance(5)
        relay.run(s, engine)
    job = job_row(engine)
    assert (job["state"], job["quarantine_reason"]) == ("QUARANTINED", "create_outcome_unknown")
    assert sim.stats()["creates_total"] == creates + 1  # accepted once, never sent again
    assert editions(engine) == original and tree(tmp_path / "public") == site

    # What `quarantine show` prints works: the paid release names --pay-again, and no kill is offered
    # for a slot whose editions are live.
    shown = json.loads(cli(env, tmp_path, "quarantine", "show", job_id, "--json").stdout)
    commands = [r["command"] for r in shown["remedies"]]
    assert f"iipub quarantine release {job_id} --verified-lost --pay-again --reason …" in commands, commands
    assert not [c for c in commands if c.startswith("iipub kill")], commands
    # The operator, having checked the provider, releases it: still the correction, paid on purpose.
    one_line_error(cli(env, tmp_path, "quarantine", "release", job_id, "--verified-lost", "--reason", "checked"),
                   3, "--pay-again")
    res = cli(env, tmp_path, "quarantine", "release", job_id, "--verified-lost", "--pay-again", "--reason", "checked")
    assert res.returncode == 0, res.stderr
    time.sleep(0.6)  # the breaker the unknown outcome opened lets its probe through
    run_until_corrected(s, engine, sim, "en", 2)
    assert sim.stats()["creates_total"] == creates + 2
    assert editions(engine)["en"]["status"] == "corrected" and editions(engine)["es"]["status"] == "corrected"
    assert [c["changed_by"] for c in rows(engine, tables.edition_changes)] == ["editor", "editor"]


@pytest.mark.slow
def test_a_run_killed_while_the_corrections_create_is_on_its_way_never_pays_twice_and_the_correction_goes_on(
        s: Settings, engine: sa.Engine, sim: Simulator, env: dict[str, str], tmp_path: Path) -> None:
    """`iipub reconcile` SIGKILLed while the correction's paid create hangs: its outcome is unknown,
    so once the dead run's lease expires the slot parks `crashed_during_create`, the correction still
    under way and the live edition untouched, and no later run sends it again. Released as lost
    (paid again, on purpose), the correction completes as the next revision."""
    s = replace(s, provider=replace(s.provider, breaker_cooldown_seconds=0.5))
    config = Path(env["IIPUB_CONFIG"])  # the child run makes no slot of its own: this one is the subject
    config.write_text(config.read_text().replace("[reconcile]\n", "[reconcile]\nauto_schedule = false\n", 1))
    job_id = done(s, engine, sim)
    original, site = editions(engine), tree(tmp_path / "public")
    sent = sim.stats()["requests"]["create"]
    assert regenerate(env, tmp_path, job_id, "--lang", "en").returncode == 0
    sim.add_faults([{"op": "create", "fault": "slow", "times": 1}])
    with child_iipub("reconcile", env=env, cwd=tmp_path) as child:
        wait_for(lambda: job_row(engine)["state"] == "CREATE_IN_FLIGHT")
        wait_for(lambda: sim.stats()["requests"]["create"] == sent + 1)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    clock.advance_clock(engine, 120)  # past the dead run's lease
    for _ in range(3):
        sweep.run(s, engine)
        relay.run(s, engine)
    job = job_row(engine)
    assert (job["state"], job["quarantine_reason"]) == ("QUARANTINED", "crashed_during_create")
    assert sim.stats()["requests"]["create"] == sent + 1  # never sent again
    assert editions(engine) == original and tree(tmp_path / "public") == site
    shown = json.loads(cli(env, tmp_path, "jobs", "show", job_id, "--json").stdout)
    assert shown["correction_in_progress"]["languages"] == ["en"]

    res = cli(env, tmp_path, "quarantine", "release", job_id, "--verified-lost", "--pay-again", "--reason", "checked")
    assert res.returncode == 0, res.stderr
    time.sleep(0.6)  # a breaker the unknown outcome opened lets its probe through
    run_until_corrected(s, engine, sim, "en", 2)
    assert sim.stats()["requests"]["create"] == sent + 2
    now = editions(engine)
    assert (now["en"]["status"], now["en"]["revision"]) == ("corrected", 2) and now["es"] == original["es"]
    assert [c["kind"] for c in rows(engine, tables.edition_changes)] == ["corrected"]
