"""Random operator command sequences (PRODUCT.md section 20), property style: release, suspend,
resume, kill, revalidate, regenerate, override and pause, run through the CLI in process and
interleaved with ticks, relays and provider outcomes (responses finishing, 404s, bad output in
one language or all). After every step:

- a command that exited 0 had the effect it printed (read back from the rows), and one that
  refused wrote nothing and said why in one line;
- every job is progressing (a state the sweep or the relay works on, with a path forward),
  final, or parked with a remedy; no track or slot is left with no path forward;
- at the end, `iipub check`'s invariants hold.

Real SQLite or MariaDB (a fresh database per example), the simulator over HTTP."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iipub.machine import sweep
from iipub.model import states
from iipub.model.jobs import Job
from iipub.model.states import State
from iipub.observe import invariants, queries
from iipub.operate import parked
from iipub.provider.factory import load_settings
from iipub.provider.openai.simulator import Simulator
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import clock, db, tables
from tests.support.cli import run_cli
from tests.support.databases import fresh_database
from tests.support.rows import stored
from tests.support.settings import sim_env
from tests.support.simulator import MINUTE

pytestmark = [pytest.mark.slow, pytest.mark.simulator(**MINUTE)]

CONFIG = """
[budgets]
max_generation_attempts = 3
max_poll_attempts = 2
max_tokens_per_day = 45000
[[products]]
name = "daily-brief"
prompt = "Write the brief."
items = 3
opens_at = "00:00"
allowed_domains = ["reuters.com", "apnews.com"]
"""

OPERATOR_STEPS = ("release_lost", "release_polling", "suspend", "resume", "kill", "revalidate", "revalidate_es",
                  "regenerate", "override", "pause", "unpause")
# Weighted by repetition: the machine moves more often than operators act.
MACHINE_STEPS = ("tick", "tick", "tick", "relay", "finish_tick", "finish_tick", "finish", "wait", "stall", "gone",
                 "bad_es", "bad_all", "good")
_examples = itertools.count()


class World:
    """One example: a fresh database, the CLI's environment and the settings it loads."""

    def __init__(self, env: dict[str, str], sim: Simulator) -> None:
        self.env, self.sim = env, sim
        self.settings: Settings = load_settings(env)
        run_cli("db", "migrate", env=env, check=True)
        self.engine = db.make_engine(env["IIPUB_DATABASE_URL"])
        with self.engine.connect() as conn:
            today = clock.read_now(conn).date()
        run_cli("schedule", "--date", today.isoformat(), env=env, check=True)
        (self.job_id,) = [r["id"] for r in self.rows(tables.jobs)]

    def rows(self, table: sa.Table) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(sa.select(table)).mappings()]

    def job(self) -> dict[str, Any]:
        (row,) = self.rows(tables.jobs)
        return row

    def tracks(self) -> dict[str, dict[str, Any]]:
        return {t["lang"]: t for t in self.rows(tables.tracks)}

    def everything(self) -> dict[str, Any]:
        found = stored(self.engine)
        found["tracks"] = self.tracks()
        found["overrides"] = len(self.rows(tables.spend_overrides))
        found["gate"] = self.rows(tables.create_gate)
        return found

    # -- the machine's side ---------------------------------------------------------------------

    def machine(self, step: str) -> None:
        if step == "tick":
            sweep.run(self.settings, self.engine)
        elif step == "finish_tick":
            self.machine("finish")
            self.machine("tick")
        elif step == "stall":  # ticks while the response runs: the poll budget runs out
            for _ in range(3):
                self.machine("wait")
                self.machine("tick")
        elif step == "relay":
            relay.run(self.settings, self.engine)
        elif step == "finish":  # responses finish (and the provider's retention may pass)
            self.sim.advance(120)
            clock.advance_clock(self.engine, 61)
        elif step == "wait":
            clock.advance_clock(self.engine, 61)
        elif step == "gone":
            self.sim.add_faults([{"op": "retrieve", "fault": "not_found", "times": 3}])
        elif step == "bad_es":
            self.sim.backend.corrupt_lang = "es"
        elif step == "bad_all":
            self.sim.add_faults([{"op": "create", "fault": "hallucinated_urls", "times": 1}])
        else:
            self.sim.backend.corrupt_lang = None
            self.sim.clear_faults()

    # -- the operator's side --------------------------------------------------------------------

    def operator(self, step: str) -> None:
        jid = self.job_id
        args = {
            "release_lost": ("quarantine", "release", jid, "--verified-lost", "--reason", "r"),
            "release_polling": ("quarantine", "release", jid[:8], "--resume-polling", "--reason", "r"),
            "suspend": ("suspend", jid, "--reason", "incident"),
            "resume": ("resume", jid),
            "kill": ("kill", jid, "--reason", "give up"),
            "revalidate": ("revalidate", jid, "--reason", "r"),
            "revalidate_es": ("revalidate", jid, "--lang", "es", "--reason", "r"),
            "regenerate": ("regenerate", jid, "--reason", "r"),
            "override": ("budget", "override", "--tokens", "20000", "--reason", "r"),
            "pause": ("pause", "--reason", "incident"),
            "unpause": ("unpause",),
        }[step]
        before = self.everything()
        result = run_cli(*args, env=self.env)
        after = self.everything()
        if result.returncode != 0:
            lines = [line for line in result.stderr.splitlines() if line.strip()]
            assert len(lines) == 1 and "Traceback" not in result.stderr, (step, result.stderr)
            assert after == before, f"{step} refused ({lines[0]}) but wrote"
            return
        self.effect(step, before, after)

    def effect(self, step: str, before: dict[str, Any], after: dict[str, Any]) -> None:
        """The effect a command that exited 0 printed, read back from the rows."""
        was, now = before["jobs"][self.job_id], after["jobs"][self.job_id]
        expected = {"release_lost": State.CREATE_ELIGIBLE, "release_polling": State.ACCEPTED,
                    "suspend": State.MANUALLY_SUSPENDED, "kill": State.CLEANUP_PENDING,
                    "regenerate": State.CREATE_ELIGIBLE}
        if step in expected:
            assert now["state"] == expected[step], (step, was["state"], now["state"])
        if step == "suspend":
            assert now["suspended_from"] == was["state"]
        elif step == "resume":
            assert was["state"] == State.MANUALLY_SUSPENDED and now["state"] == was["suspended_from"]
        elif step == "kill":
            assert now["kill_requested"]
        elif step in ("revalidate", "revalidate_es"):
            moved = [lang for lang, t in after["tracks"].items()
                     if t["state"] == State.RETRIEVED_NOT_VALIDATED and before["tracks"][lang]["state"] in
                     states.TRACK_PARKED]
            if now["state"] == State.RETRIEVED_NOT_VALIDATED and was["state"] != now["state"]:
                pass  # the slot's own kept payload, validated again by the next tick
            else:  # a language's track, under a slot that runs its tracks
                assert moved and (step == "revalidate" or moved == ["es"]), (step, moved)
                assert now["state"] in states.TRACKS_RUN_IN, now["state"]
        elif step == "override":
            assert after["overrides"] == before["overrides"] + 1
        elif step in ("pause", "unpause"):
            assert bool(after["gate"][0]["paused"]) == (step == "pause")

    # -- the property ---------------------------------------------------------------------------

    def check_every_job_has_a_way_on(self) -> None:
        b = self.settings.budgets
        for job in self.rows(tables.jobs):
            state = State(job["state"])
            if state in states.ACTIVE or state == State.SAVED_NOT_PUBLIC or state in states.TERMINAL:
                continue
            found = parked.of(Job.from_row(job), b.max_generation_attempts, 60)
            assert found is not None and found.remedies, (state, job["quarantine_reason"])
        report = queries.collect(self.engine, self.settings)
        assert report.immovable == (), report.immovable
        assert report.tracks is None or report.tracks.immovable == (), report.tracks.immovable


@settings(max_examples=15, deadline=None, database=None,  # no example database written into the tree
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(first=st.sampled_from(["good", "bad_es", "bad_all"]), then=st.sampled_from(["tick", "stall", "finish_tick"]),
       steps=st.lists(st.sampled_from(OPERATOR_STEPS + MACHINE_STEPS), min_size=6, max_size=20))
def test_random_operator_sequences_keep_every_job_moving_and_every_command_honest(
        first: str, then: str, steps: list[str], cli_env: dict[str, str], sim: Simulator,
        tmp_path: Path) -> None:
    where = tmp_path / f"example-{next(_examples)}"
    where.mkdir()
    sim.backend.corrupt_lang = None
    sim.clear_faults()
    with fresh_database(where) as url:
        env = sim_env({**cli_env, "IIPUB_DATABASE_URL": url}, sim, where, CONFIG)
        world = World(env, sim)
        try:
            for step in [first, "tick", then, *steps, "good", "tick", "relay", "tick"]:
                if step in OPERATOR_STEPS:
                    world.operator(step)
                else:
                    world.machine(step)
                world.check_every_job_has_a_way_on()
            found = invariants.check(world.engine, settings=world.settings)
            assert found == [], [str(v) for v in found]
        finally:
            world.engine.dispose()
