"""One payment authority (PRODUCT.md section 19, issue 37): every path that can lead to a paid
create asks one rule, which refuses while evidence says the slot is paid for or its output held.
Each case is driven through the CLI: 0 extra paid creates (the simulator's count), a one-line
refusal naming the evidence, and the remedy it names works."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.provider.openai.simulator import Simulator
from iipub.store import clock, tables
from tests.integration.observe.test_cutover import legacy_create
from tests.support.cli import run_cli
from tests.support.rows import job_events, job_rows, utc_today
from tests.support.settings import MIDNIGHT_PRODUCT_TOML, sim_env
from tests.support.simulator import simulator

OTHER_PRODUCT = MIDNIGHT_PRODUCT_TOML.replace('name = "daily-brief"', 'name = "other-brief"')
DONE = ("PUBLISHED", "CLEANUP_PENDING", "DELETED")


def _env(cli_env: dict[str, str], sim: Simulator, tmp_path: Path, products: str = MIDNIGHT_PRODUCT_TOML,
         reconcile: str = "") -> dict[str, str]:
    """A config of one product opening at midnight, today's slot only (no catch-up days)."""
    env = sim_env(cli_env, sim, tmp_path, products)
    _set_config(env, products, reconcile)
    return env


def _set_config(env: dict[str, str], products: str, reconcile: str = "") -> None:
    """Rewrite the config file `env` names (the deployment changes its configuration)."""
    cfg = Path(env["IIPUB_CONFIG"])
    base = cfg.with_suffix(".base")
    if not base.exists():
        base.write_text(cfg.read_text().split("[[products]]", 1)[0])
    head = base.read_text().split("[reconcile]\n", 1)
    cfg.write_text(head[0] + "[reconcile]\ncatch_up_days = 0\n" + reconcile + head[1] + products)


def _tick(env: dict[str, str], sim: Simulator, n: int = 1) -> None:
    for _ in range(n):
        run_cli("reconcile", env=env, check=True)
        run_cli("relay", env=env, check=True)
        sim.advance(5)


def _one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


def _job(engine: sa.Engine, product: str = "daily-brief") -> dict[str, Any]:
    (row,) = [r for r in job_rows(engine) if r["product"] == product]
    return row


# -- custody: a product_removed job holding its payload (issue item 3) -----------------------------


@pytest.mark.slow
def test_release_verified_lost_of_a_job_holding_its_output_is_refused_in_every_form_and_revalidate_works(
    cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine
) -> None:
    env = _env(cli_env, sim, tmp_path)
    _tick(env, sim)  # created and accepted
    _set_config(env, OTHER_PRODUCT)  # the product is removed while its response runs
    _tick(env, sim, 2)
    job = _job(engine)
    assert (job["state"], job["quarantine_reason"]) == ("QUARANTINED", "product_removed") and job["payload_sha256"]
    created = sim.stats()["creates_total"]
    assert created == 2  # daily-brief's, and other-brief's own slot

    single = run_cli("quarantine", "release", job["id"], "--verified-lost", "--reason", "gone?", "--by", "ops",
                     env=env)
    assert single.returncode == 3 and single.stdout == ""
    line = _one_line(single.stderr)
    assert "its output is in custody" in line and f"iipub revalidate {job['id']}" in line and "--pay-again" in line
    bulk = run_cli("quarantine", "release", "--all", "--quarantine-reason", "product_removed", "--verified-lost",
                   "--reason", "incident", "--by", "ops", env=env)
    assert bulk.returncode == 3 and "refused" in bulk.stdout and "in custody" in bulk.stdout
    _tick(env, sim, 2)
    assert sim.stats()["creates_total"] == created  # nothing paid again
    assert _job(engine)["state"] == "QUARANTINED"

    # The remedy it names: the product back, the kept output validated again, for free.
    _set_config(env, MIDNIGHT_PRODUCT_TOML + OTHER_PRODUCT)
    fixed = run_cli("revalidate", job["id"], "--reason", "product back", "--by", "ops", env=env)
    assert fixed.returncode == 0, fixed.stderr
    _tick(env, sim, 4)
    done = next(r for r in job_rows(engine) if r["id"] == job["id"])
    assert done["state"] in DONE and done["generation_attempts"] == 1
    assert sim.stats()["creates_total"] == created


@pytest.mark.slow
def test_pay_again_buys_once_on_purpose_and_is_journaled(
    cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine
) -> None:
    env = _env(cli_env, sim, tmp_path)
    _tick(env, sim)
    _set_config(env, OTHER_PRODUCT)
    _tick(env, sim, 2)
    job = _job(engine)
    created = sim.stats()["creates_total"]
    _set_config(env, MIDNIGHT_PRODUCT_TOML)
    res = run_cli("quarantine", "release", job["id"], "--verified-lost", "--pay-again", "--reason",
                  "the kept output is for the old product", "--by", "ops", env=env)
    assert res.returncode == 0, res.stderr
    grant = [e for e in job_events(engine, job["id"]) if e["reason"] == "operator_release_verified_lost"][-1]
    assert json.loads(grant["detail"])["pay_again"]["overrides"] == ["custody"]
    _tick(env, sim, 4)
    done = _job(engine)
    assert done["state"] in DONE and done["generation_attempts"] == 2
    assert sim.stats()["creates_total"] == created + 1  # exactly one more, on purpose


# -- configured languages: regenerate for a language no longer configured (issue item 4) -----------


def test_regenerate_for_a_language_no_longer_configured_pays_nothing(
    cli_env: dict[str, str], tmp_path: Path, engine: sa.Engine, db_url: str
) -> None:
    from tests.integration.machine.test_track_steps import CLI_PRODUCT, _spanish_parked, _tracks

    with simulator(corrupt_lang="es") as sim:
        _, job_id = _spanish_parked(engine, db_url, sim, tmp_path)  # English published, Spanish parked
        env = sim_env(cli_env, sim, tmp_path, CLI_PRODUCT + 'languages = ["en"]\n')  # Spanish dropped
        res = run_cli("regenerate", job_id, "--reason", "fix Spanish", "--by", "ops", env=env)
        assert res.returncode == 3 and res.stdout == ""
        line = _one_line(res.stderr)
        assert "every configured language" in line and "(en)" in line and "buy nothing" in line
        assert "--pay-again" not in line  # nothing to buy: not even on purpose
        again = run_cli("regenerate", job_id, "--pay-again", "--reason", "fix Spanish", "--by", "ops", env=env)
        assert again.returncode == 3
        assert sim.stats()["creates_total"] == 1
        # The remedy it names re-checks the parked track for free; the English page stays.
        assert "iipub revalidate" in line and "--lang" in line
        checked = run_cli("revalidate", job_id, "--lang", "es", "--reason", "check", "--by", "ops", env=env)
        assert checked.returncode == 0, checked.stderr
        assert _tracks(engine, job_id)[(job_id, "en")]["state"] == "PUBLISHED"
        assert sim.stats()["creates_total"] == 1


# -- the legacy decisions file: cutover from shadow to normal (issue item 2) ----------------------


def test_cutover_does_not_pay_for_the_legacy_systems_edition_and_adopt_takes_it_over(
    cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine
) -> None:
    day = utc_today()
    decisions = tmp_path / "legacy-decisions.jsonl"
    shadow = f'mode = "shadow"\nlegacy_decisions_file = "{decisions}"\n'
    env = _env(cli_env, sim, tmp_path, reconcile=shadow)
    rid = legacy_create(sim, env, "daily-brief", day)  # the legacy poller pays for today's slot
    decisions.write_text(json.dumps({"product": "daily-brief", "edition_date": day.isoformat(), "action": "create",
                                     "response_id": rid}) + "\n")
    _tick(env, sim, 2)
    assert _job(engine)["state"] == "NO_JOB" and sim.stats()["creates_total"] == 1
    _set_config(env, MIDNIGHT_PRODUCT_TOML, f'legacy_decisions_file = "{decisions}"\n')  # mode = "normal"
    clock.advance_clock(engine, 600)  # past shadow mode's next look at the slot
    _tick(env, sim, 2)
    job = _job(engine)
    assert (job["state"], job["quarantine_reason"]) == ("QUARANTINED", "payment_refused")
    assert "the legacy decisions file says the legacy system did create" in job["last_error"]
    assert "iipub adopt FILE" in job["last_error"]
    assert sim.stats()["creates_total"] == 1  # iipub paid nothing

    # The remedy it names: adopt the legacy system's response; it is published with no create.
    handover = tmp_path / "handover.csv"
    handover.write_text(f"product,edition_date,response_id\ndaily-brief,{day.isoformat()},{rid}\n")
    adopted = run_cli("adopt", str(handover), "--reason", "cutover", "--by", "ops", env=env)
    assert adopted.returncode == 0, adopted.stdout + adopted.stderr
    _tick(env, sim, 4)
    done = _job(engine)
    assert done["state"] in DONE and done["response_id"] == rid
    assert sim.stats()["creates_total"] == 1
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(tables.editions)).scalar_one() == 2


# -- drift between CREATE_ELIGIBLE and the create (issue item 5, seed test 30) ---------------------


def test_a_configuration_changed_before_the_create_is_replanned_and_journaled_not_sent_silently(
    cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine
) -> None:
    env = _env(cli_env, sim, tmp_path)
    run_cli("pause", "--reason", "deploy", "--by", "ops", env=env, check=True)
    _tick(env, sim)  # the window opens: CREATE_ELIGIBLE, its fingerprint recorded; creates held
    job = _job(engine)
    assert job["state"] == "CREATE_ELIGIBLE" and job["config_fingerprint"]
    _set_config(env, MIDNIGHT_PRODUCT_TOML.replace("Write the brief.", "Write a shorter brief."))
    run_cli("unpause", "--reason", "deployed", "--by", "ops", env=env, check=True)
    _tick(env, sim, 4)
    done = _job(engine)
    assert done["state"] in DONE and done["generation_attempts"] == 1 and done["quarantine_reason"] is None
    assert sim.stats()["creates_total"] == 1  # created once, under the deployed configuration
    events = job_events(engine, job["id"])
    (replan,) = [e for e in events if e["reason"] == "config_replanned"]
    detail = json.loads(replan["detail"])
    assert detail["recorded_fingerprint"] == job["config_fingerprint"]
    assert detail["deployed_fingerprint"] == done["config_fingerprint"] != job["config_fingerprint"]
    reasons = [e["reason"] for e in events]
    assert reasons.index("config_replanned") < reasons.index("dispatch")


@pytest.mark.parametrize("when", [dt.date(2026, 1, 1)])
def test_the_legacy_file_only_names_its_own_slots(when: dt.date) -> None:
    from iipub.money import paying

    assert paying._by_slot(['{"product": "p", "edition_date": "2026-01-01", "action": "publish"}', "torn",
                            '{"product": "q"}']) == {f"p/{when.isoformat()}": {"publish"}}


# -- this installation's ledger chain: a restore from before a create whose output was stored -------


@pytest.mark.slow
def test_a_restored_job_whose_ledger_saw_its_output_stored_is_not_paid_again_and_import_payload_works(
    cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine
) -> None:
    from iipub.edition.paths import json_path
    from iipub.provider.factory import load_settings
    from iipub.store.job_store import Store
    from tests.integration.money.test_restore import backup, restore

    env = _env(cli_env, sim, tmp_path, reconcile="auto_schedule = false\n")  # the test's slot is the only one
    Store(engine, "test").schedule(load_settings(env).products["daily-brief"], dt.date(2026, 11, 29))
    dump = backup(engine)
    _tick(env, sim, 4)  # paid, stored, published, its response deleted at the provider
    done = _job(engine)
    assert done["state"] in DONE and sim.stats()["creates_total"] == 1
    kept = tmp_path / "recovered.json"
    kept.write_text(done["payload"])  # the operator's copy of the output (e.g. the dashboard's)
    restore(engine, dump)  # the database goes back to before the create ...
    for lang in ("en", "es"):  # ... and the slot's pages are gone too: nothing live proves it
        (tmp_path / "public" / json_path("daily-brief", "2026-11-29", lang)).unlink()
    _tick(env, sim)
    job = _job(engine)
    assert (job["state"], job["quarantine_reason"]) == ("QUARANTINED", "restored_behind_ledger")
    assert "--verified-lost --pay-again" in job["last_error"]

    refused = run_cli("quarantine", "release", job["id"], "--verified-lost", "--reason", "lost?", "--by", "ops",
                      env=env)
    assert refused.returncode == 3
    line = _one_line(refused.stderr)
    assert "this installation's spend ledger records custody" in line and "iipub jobs import-payload" in line
    _tick(env, sim, 2)
    assert sim.stats()["creates_total"] == 1

    imported = run_cli("jobs", "import-payload", job["id"], str(kept), "--reason", "from the dashboard", "--by",
                       "ops", env=env)
    assert imported.returncode == 0, imported.stderr
    _tick(env, sim, 4)
    assert _job(engine)["state"] in DONE
    assert sim.stats()["creates_total"] == 1  # the remedy paid nothing
