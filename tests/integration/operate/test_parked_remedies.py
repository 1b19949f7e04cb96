"""Every remedy iipub prints works from the state it is printed for (the property of PRODUCT.md's
remedies, over reasons × printed commands): for each park reason, with the output the machine
leaves it with (none, a response at the provider, the output in custody), each command `quarantine
show` lists and each command the job's last error names is run as printed; it exits 0 and has
its effect (a paid remedy pays once and publishes, a free one publishes without paying, `kill`
ends the job unpublished), or it is not printed. A paid remedy the budget no longer allows is said
to be blocked (`not_now`), not printed as a command."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.machine import decisions, sweep
from iipub.model.jobs import Job
from iipub.model.states import Reason
from iipub.provider.openai.adapter import OpenAIAdapter
from iipub.provider.openai.simulator import Simulator
from iipub.provider.outcomes import Observed
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.settings.loading import load_settings
from iipub.store import clock, db, tables
from iipub.store.job_store import Store
from tests.support.cli import run_cli
from tests.support.rows import job_events, job_rows
from tests.support.settings import MIDNIGHT_PRODUCT_TOML, sim_env
from tests.support.simulator import simulator

DONE = ("PUBLISHED", "CLEANUP_PENDING", "DELETED")
MAX_ATTEMPTS = 3
NONE, RESPONSE, CUSTODY = "none", "response", "custody"
R = Reason
# The outputs the machine parks each reason with (PRODUCT.md's states; `product_removed` needs the
# product gone from the configuration and has its own tests).
PARKED: list[tuple[str, str]] = [
    (R.CREATE_OUTCOME_UNKNOWN, NONE), (R.CRASHED_DURING_CREATE, NONE), (R.CREATE_REJECTED, NONE),
    (R.GENERATION_BUDGET_EXHAUSTED, NONE), (R.GENERATION_BUDGET_EXHAUSTED, RESPONSE),
    (R.POLL_BUDGET_EXHAUSTED, RESPONSE), (R.POLL_BUDGET_EXHAUSTED, CUSTODY),
    (R.CONFIG_DRIFT, RESPONSE), (R.CONFIG_DRIFT, CUSTODY), (R.EDITION_CONFLICT, CUSTODY),
    (R.PROVIDER_REFUSED, RESPONSE), (R.PROVIDER_REFUSED, CUSTODY), (R.OUTPUT_CAP_REACHED, CUSTODY),
    (R.STEP_FAILING, NONE), (R.STEP_FAILING, RESPONSE), (R.STEP_FAILING, CUSTODY),
    (R.RESTORED_BEHIND_LEDGER, NONE), (R.OPERATOR_CANCELLED, RESPONSE), (R.PAYMENT_REFUSED, NONE),
    ("VALIDATION_FAILED_RETAINED", CUSTODY),
]
# The spent budget each reason is parked with, where it is part of the reason.
SPENT: dict[str, int] = {R.GENERATION_BUDGET_EXHAUSTED: MAX_ATTEMPTS}
COMMAND = re.compile(r"`(iipub [^`]+)`")


class Installation:
    """One configuration on the simulator, the ticks of cron, and the slots the test plants."""

    def __init__(self, cli_env: dict[str, str], sim: Simulator, tmp_path: Path) -> None:
        budgets = f"[budgets]\nmax_generation_attempts = {MAX_ATTEMPTS}\n"
        self.env = sim_env(cli_env, sim, tmp_path, MIDNIGHT_PRODUCT_TOML + budgets, auto_schedule=False)
        self.settings: Settings = load_settings(self.env)
        self.engine = db.make_engine(self.settings.database_url)
        self.sim = sim
        self.tmp = tmp_path
        run_cli("db", "migrate", env=self.env, check=True)
        self.next_day = dt.date(2026, 11, 1)

    def close(self) -> None:
        self.engine.dispose()

    def row(self, job_id: str) -> dict[str, Any]:
        return next(r for r in job_rows(self.engine) if r["id"] == job_id)

    def tick(self, n: int = 1) -> None:
        for _ in range(n):
            sweep.run(self.settings, self.engine)
            relay.run(self.settings, self.engine)
            self.sim.advance(120)
            clock.advance_clock(self.engine, 61)

    def accepted_slot(self) -> tuple[str, str]:
        """A new slot created at the provider (one paid create): its job id and response id."""
        day, self.next_day = self.next_day, self.next_day + dt.timedelta(days=1)
        Store(self.engine, "test").schedule(self.settings.products["daily-brief"], day)
        (job,) = [r for r in job_rows(self.engine) if r["edition_date"] == day]
        sweep.run(self.settings, self.engine)
        row = self.row(job["id"])
        assert row["response_id"] and row["generation_attempts"] == 1, row
        return str(job["id"]), str(row["response_id"])

    def finished(self, response_id: str) -> Observed:
        self.sim.advance(600)
        with OpenAIAdapter(self.settings.provider, "sk-test") as provider:
            found = provider.retrieve(response_id)
        assert isinstance(found, Observed) and found.output_text, found
        return found

    def park(self, reason: str, output: str) -> dict[str, Any]:
        """A slot parked as the machine parks it for `reason` with `output`."""
        job_id, rid = self.accepted_slot()
        observed = self.finished(rid)
        values: dict[str, Any] = {"lease_owner": None, "lease_expiry": None, "retry_count": 0,
                                  "generation_attempts": SPENT.get(reason, 1), "response_id": None,
                                  "payload": None, "payload_sha256": None, "output_end": None}
        if output in (RESPONSE, CUSTODY):
            values["response_id"] = rid
        if output == CUSTODY:
            text = observed.output_text or ""
            values.update(payload=text, payload_sha256=hashlib.sha256(text.encode()).hexdigest())
            if reason == R.OUTPUT_CAP_REACHED:
                values["output_end"] = decisions.OUTPUT_CAP
            if reason == R.PROVIDER_REFUSED:
                values["output_end"] = decisions.REFUSAL
        if reason == "VALIDATION_FAILED_RETAINED":
            values.update(state="VALIDATION_FAILED_RETAINED", quarantine_reason=None,
                          last_error="validation failed: items: 2 < 3")
        else:
            values.update(state="QUARANTINED", quarantine_reason=reason, last_error=f"parked: {reason}")
        j = tables.jobs.c
        with self.engine.begin() as conn:
            conn.execute(tables.jobs.update().where(j.id == job_id).values(version=j.version + 1, **values))
        if reason in (R.OUTPUT_CAP_REACHED, R.PROVIDER_REFUSED) and output == CUSTODY:
            # the machine's own last error, with the remedy it names
            row = self.row(job_id)
            found = decisions.before_validation(Job.from_row(row), self.settings.products["daily-brief"])
            assert found is not None
            with self.engine.begin() as conn:
                conn.execute(tables.jobs.update().where(j.id == job_id).values(
                    last_error=found.changes["last_error"]))
        (self.tmp / f"{job_id}.txt").write_text(observed.output_text or "", encoding="utf-8")
        return self.row(job_id) | {"made_response_id": rid}

    def remedies(self, job_id: str) -> tuple[list[str], list[str]]:
        """What `quarantine show` prints (commands, and what it says is blocked now) and the
        commands the job's last error names."""
        shown = json.loads(run_cli("quarantine", "show", job_id, "--json", env=self.env, check=True).stdout)
        listed = [r["command"] for r in shown["remedies"] or []]
        named = COMMAND.findall(shown.get("last_error") or "")
        return listed + [c for c in named if c not in listed], list(shown.get("not_now") or [])

    def typed(self, command: str, parked: dict[str, Any]) -> list[str]:
        """A printed command as an operator types it: placeholders filled in."""
        words = command.split()
        assert words[0] == "iipub", command
        out: list[str] = []
        for w in words[1:]:
            if w == "…":
                out.append("day two: as printed")
            elif w == "FILE":
                out.append(str(self.tmp / f"{parked['id']}.txt"))
            elif w == "RESP_ID":
                out.append(parked["made_response_id"])
            elif w in ("L", "LANG"):
                out.append("en")
            else:
                out.append(w)
        return out


@pytest.fixture
def installation(cli_env: dict[str, str], sim: Simulator, tmp_path: Path) -> Any:
    inst = Installation(cli_env, sim, tmp_path)
    yield inst
    inst.close()


def _creates(sim: Simulator) -> int:
    return int(sim.stats()["creates_total"])


@pytest.mark.parametrize(("reason", "output"), PARKED, ids=[f"{r}-{o}" for r, o in PARKED])
@pytest.mark.slow
def test_every_printed_remedy_works_from_its_park(installation: Installation, reason: str, output: str) -> None:
    inst = installation
    probe = inst.park(reason, output)
    templates = [c.replace(probe["id"], "<JOB>") for c in inst.remedies(probe["id"])[0]]
    assert any(t.startswith("iipub kill") for t in templates), templates
    for i, template in enumerate(templates):
        parked = probe if i == 0 else inst.park(reason, output)
        assert template in [c.replace(parked["id"], "<JOB>") for c in inst.remedies(parked["id"])[0]]
        printed = template.replace("<JOB>", parked["id"])
        args = inst.typed(printed, parked)
        creates = _creates(inst.sim)
        done = run_cli(*args, env=inst.env)
        assert done.returncode == 0, (reason, output, printed, done.stdout, done.stderr)
        inst.tick(6)
        row = inst.row(parked["id"])
        events = [e["reason"] for e in job_events(inst.engine, parked["id"])]
        if args[0] == "kill":
            assert row["kill_requested"] and row["state"] in ("CLEANUP_PENDING", "DELETED"), row
            assert "published" not in events
            continue
        pays = args[0] == "regenerate" or "--verified-lost" in args
        assert row["state"] in DONE, (reason, output, printed, row["state"], row["last_error"])
        assert _creates(inst.sim) - creates == (1 if pays else 0), (reason, output, printed)
        assert row["generation_attempts"] == parked["generation_attempts"] + (1 if pays else 0)


def test_a_spent_budget_prints_no_paid_remedy_and_says_why(installation: Installation) -> None:
    parked = installation.park(R.GENERATION_BUDGET_EXHAUSTED, NONE)
    commands, blocked = installation.remedies(parked["id"])
    assert not any("--verified-lost" in c or "regenerate" in c for c in commands), commands
    assert any("max_generation_attempts" in b for b in blocked), blocked


def test_a_lost_response_after_regenerating_a_parked_track_is_created_again_not_refused(
        engine: sa.Engine, db_url: str, cli_env: dict[str, str], tmp_path: Path) -> None:
    """`regenerate` declared the parked Spanish part bad: when the new generation's response is
    lost, the recreate the machine owes is not refused for that part (`payment_refused` with
    remedies that exit 3); it pays once more within the budget and Spanish publishes."""
    from tests.integration.machine.test_track_steps import CLI_PRODUCT, _run, _spanish_parked, _tracks

    with simulator(corrupt_lang="es") as sim:
        s, job_id = _spanish_parked(engine, db_url, sim, tmp_path)
        env = sim_env(cli_env, sim, tmp_path, CLI_PRODUCT)
        run_cli("regenerate", job_id, "--reason", "Spanish links were bogus", "--by", "alice", env=env, check=True)
        sweep.run(s, engine)
        row = next(r for r in job_rows(engine) if r["id"] == job_id)
        assert row["response_id"] and sim.stats()["creates_total"] == 2
        sim.backend.corrupt_lang = None
        sim.backend.delete(row["response_id"])  # the new generation's response is gone
        _run(s, engine, sim, rounds=6)
        row = next(r for r in job_rows(engine) if r["id"] == job_id)
        reasons = [e["reason"] for e in job_events(engine, job_id)]
        assert "payment_refused" not in reasons, (row["state"], row["last_error"])
        assert row["state"] in DONE and row["generation_attempts"] == 3, (row["state"], row["last_error"])
        assert sim.stats()["creates_total"] == 3
        assert _tracks(engine, job_id)[(job_id, "es")]["state"] == "PUBLISHED"


def test_the_runbooks_bulk_release_of_cut_outputs_pays_once_each_and_journals_it(installation: Installation) -> None:
    inst = installation
    parked = [inst.park(R.OUTPUT_CAP_REACHED, CUSTODY) for _ in range(2)]
    creates = _creates(inst.sim)
    plain = run_cli("quarantine", "release", "--all", "--quarantine-reason", "output_cap_reached", "--verified-lost",
                    "--reason", "cap raised", env=inst.env)
    assert plain.returncode == 3 and all(inst.row(p["id"])["state"] == "QUARANTINED" for p in parked)
    run_cli("quarantine", "release", "--all", "--quarantine-reason", "output_cap_reached", "--verified-lost",
            "--pay-again", "--reason", "cap raised", env=inst.env, check=True)
    inst.tick(6)
    for p in parked:
        row = inst.row(p["id"])
        assert row["state"] in DONE and row["generation_attempts"] == 2, (row["state"], row["last_error"])
        released = [e for e in job_events(inst.engine, p["id"]) if e["reason"] == "operator_release_verified_lost"]
        assert json.loads(released[-1]["detail"])["pay_again"]["overrides"] == ["custody"]
    assert _creates(inst.sim) - creates == 2
