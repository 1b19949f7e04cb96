"""`iipub jobs import-payload`: output an operator recovered from the provider's dashboard, taken
into custody through the fenced path, then validated and published by the next ticks like any
other output. Jobs reach their state by real ticks against the simulator over HTTP; the command
runs in process through `iipub.cli.main`; assertions read the database, and `iipub check`'s
invariants must hold at the end."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from iipub.machine import decisions, steps, sweep
from iipub.model.jobs import Job
from iipub.model.states import Reason, State
from iipub.observe import invariants
from iipub.provider.openai.simulator import Simulator
from iipub.provider.outcomes import Observed, Stage
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import clock
from iipub.store.job_store import Store
from tests.support.cli import one_line_error, run_cli
from tests.support.rows import job_events, job_rows, stored
from tests.support.settings import sim_env
from tests.support.simulator import MINUTE
from tests.support.suite import fast_first

PRODUCT = "daily-brief"
PRODUCT_TOML = (
    '[[products]]\nname = "daily-brief"\nlanguages = ["en", "es"]\nopens_at = "00:00"\n'
    'prompt = "Write the brief."\nitems = 3\nmax_output_bytes = 20000\n'
)
pytestmark = [pytest.mark.simulator(**MINUTE), pytest.mark.no_auto_schedule]


@pytest.fixture
def cfg(settings: Settings) -> Settings:
    """The product of PRODUCT_TOML, in process (the command line reads the same from its file)."""
    p = replace(settings.products[PRODUCT], items=3, prompt="Write the brief.", opens_at=dt.time(0, 0),
                max_output_bytes=20000)
    return replace(settings, products={PRODUCT: p}, webhook_sink=None,
                   provider=replace(settings.provider, timeout_seconds=10),
                   reconcile=replace(settings.reconcile, lease_seconds=30))


@pytest.fixture
def env(cli_env: dict[str, str], sim: Simulator, tmp_path: Path) -> dict[str, str]:
    return sim_env(cli_env, sim, tmp_path, PRODUCT_TOML)


DAY = dt.date(2026, 11, 28)


# -- helpers ------------------------------------------------------------------------------------


def the_job(engine: sa.Engine) -> dict[str, Any]:
    (row,) = job_rows(engine)
    return row


def last_event(engine: sa.Engine, job_id: str) -> dict[str, Any]:
    e = job_events(engine, job_id)[-1]
    return {**e, "detail": json.loads(e["detail"]) if e["detail"] else {}}


def dashboard(sim: Simulator, response_id: str) -> dict[str, Any]:
    """The response as the provider's dashboard (or a GET) shows it."""
    r = httpx.get(f"{sim.url}/responses/{response_id}", headers={"Authorization": "Bearer sk-test"}, timeout=5)
    r.raise_for_status()
    doc: dict[str, Any] = r.json()
    return doc


def output_text(doc: dict[str, Any]) -> str:
    return "".join(c["text"] for item in doc["output"] if item["type"] == "message"
                   for c in item["content"] if c["type"] == "output_text")


def responses_of(sim: Simulator, job_id: str) -> list[str]:
    return [r.id for r in sim.backend._responses.values() if r.job_id == job_id]


def create_unknown(cfg: Settings, engine: sa.Engine, sim: Simulator) -> str:
    """A job quarantined create_outcome_unknown: the provider accepted (and billed) the create,
    the answer was lost."""
    Store(engine, "test").schedule(cfg.products[PRODUCT], DAY)
    sim.add_faults([{"op": "create", "fault": "drop_after_accept"}])
    sweep.run(cfg, engine)
    row = the_job(engine)
    assert (row["state"], row["quarantine_reason"]) == (State.QUARANTINED, "create_outcome_unknown")
    return str(row["id"])


def stopped_in(cfg: Settings, engine: sa.Engine, sim: Simulator, where: State) -> tuple[str, dict[str, Any]]:
    """A job left in `where` (its worker stopped there) whose finished response the provider has
    since forgotten; returns the job id and the response as it was seen before it expired."""

    sim.backend.zdr = True  # a zero-data-retention project: forgotten ~10 minutes after it finished

    def stop(tick: Any, job: Job) -> None:
        tick.store.release(job)

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the worker died at custody")

    with pytest.MonkeyPatch.context() as mp:
        if where == State.COMPLETED_NOT_RETRIEVED:  # a poll takes custody in the same step
            mp.setattr(decisions, "on_output", crash)  # a worker dying mid-step: injected where it dies
        else:
            mp.setitem(steps.STEPS, where, stop)
        Store(engine, "test").schedule(cfg.products[PRODUCT], DAY)
        sweep.run(cfg, engine)
        job_id = str(the_job(engine)["id"])
        sim.advance(120)
        (rid,) = responses_of(sim, job_id)
        seen = dashboard(sim, rid)
        assert seen["status"] == "completed"
        if where == State.PROVIDER_EXPIRED_OR_MISSING:
            sim.advance(700)  # gone before anyone fetched it
        for _ in range(6):
            if the_job(engine)["state"] == where:
                break
            sweep.run(cfg, engine)
        assert the_job(engine)["state"] == where
    sim.advance(700)  # and now the provider has forgotten it in any case
    return job_id, seen


def publish(cfg: Settings, engine: sa.Engine, sim: Simulator) -> None:
    for _ in range(4):
        sweep.run(cfg, engine)
        relay.run(cfg, engine)
        if the_job(engine)["state"] == State.DELETED:
            return
    raise AssertionError(f"not published: {the_job(engine)['state']}")


def write(tmp_path: Path, name: str, data: bytes | str) -> Path:
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


# -- the happy paths ------------------------------------------------------------------------------


@pytest.mark.parametrize("form", fast_first(["response", "output_text", "text"]))
def test_imported_output_of_a_quarantined_job_is_validated_published_and_the_invariants_hold(
    cfg: Settings, engine: sa.Engine, sim: Simulator, env: dict[str, str], tmp_path: Path, form: str
) -> None:
    job_id = create_unknown(cfg, engine, sim)
    sim.advance(120)
    (rid,) = responses_of(sim, job_id)
    doc = dashboard(sim, rid)
    text = output_text(doc)
    content = {"response": json.dumps(doc, indent=2), "output_text": json.dumps({"output_text": text}),
               "text": text}[form]
    path = write(tmp_path, f"recovered-{form}.json", content)

    res = run_cli("jobs", "import-payload", job_id[:8], str(path), "--reason", "copied from the dashboard",
                  "--by", "alice", env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert f"job {job_id}: QUARANTINED -> RETRIEVED_NOT_VALIDATED" in res.stdout
    row = the_job(engine)
    # Stored exactly as a poll's custody stores the same response.
    same = decisions.on_output(Job.from_row(row), Observed(rid, "completed", text, None, stage=Stage.FINISHED))
    assert row["payload"] == text == same.changes["payload"]
    assert row["payload_sha256"] == hashlib.sha256(text.encode()).hexdigest() == same.changes["payload_sha256"]
    assert row["state"] == State.RETRIEVED_NOT_VALIDATED and row["quarantine_reason"] is None
    assert row["lease_owner"] is None
    with engine.connect() as conn:
        assert row["next_attempt_at"] <= clock.read_now(conn)  # due now
    ev = last_event(engine, job_id)
    assert ev["reason"] == Reason.OPERATOR_IMPORT_PAYLOAD and ev["from_state"] == State.QUARANTINED
    d = ev["detail"]
    assert (d["by"], d["why"], d["source"], d["quarantine_reason"]) == (
        "alice", "copied from the dashboard", form, "create_outcome_unknown")
    assert d["sha256_as_received"] == row["payload_sha256"] and d["file_bytes"] == path.stat().st_size
    assert (d.get("file_response_id") == rid) == (form == "response")
    if form == "response":  # the tokens the response cost are counted, once
        assert row["total_tokens"] == doc["usage"]["total_tokens"] > 0

    publish(cfg, engine, sim)
    trail = [e["reason"] for e in job_events(engine, job_id)]
    # The slot's own journal: validated (and forked), then saved once both language tracks were.
    assert trail[trail.index("operator_import_payload"):][:3] == ["operator_import_payload", "validated", "saved"]
    assert sim.stats()["creates_total"] == 1  # nothing paid again
    assert invariants.check(engine, settings=cfg, sim_stats=sim.stats(), settled=True) == []
    check = run_cli("check", "--settled", env=env, cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("where", fast_first([State.PROVIDER_EXPIRED_OR_MISSING, State.COMPLETED_NOT_RETRIEVED]))
def test_output_the_provider_no_longer_has_is_imported_and_published(
    cfg: Settings, engine: sa.Engine, sim: Simulator, env: dict[str, str], tmp_path: Path,
    where: State
) -> None:
    job_id, seen = stopped_in(cfg, engine, sim, where)
    path = write(tmp_path, "recovered.json", json.dumps(seen))
    res = run_cli("jobs", "import-payload", job_id, str(path), "--reason", "recovered", "--by", "bob",
                  env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert f"{where} -> RETRIEVED_NOT_VALIDATED" in res.stdout
    assert the_job(engine)["payload"] == output_text(seen)
    publish(cfg, engine, sim)
    stats = sim.stats()
    assert stats["creates_total"] == 1  # the lost response was not paid for again
    assert invariants.check(engine, settings=cfg, sim_stats=stats, settled=True) == []


# -- refusals: one line, non-zero, nothing written --------------------------------------------------


def refused(engine: sa.Engine, env: dict[str, str], tmp_path: Path, job_id: str, path: Path | str, code: int,
            needle: str) -> None:
    before = stored(engine)
    res = run_cli("jobs", "import-payload", job_id, str(path), "--reason", "recovered", env=env, cwd=tmp_path)
    one_line_error(res, code, needle)
    assert stored(engine) == before


def test_refused_for_an_unknown_job(engine: sa.Engine, env: dict[str, str], tmp_path: Path) -> None:
    path = write(tmp_path, "out.json", '{"output_text": "x"}')
    refused(engine, env, tmp_path, "00000000-0000-0000-0000-000000000000", path, 4, "no job with id")


def test_refused_for_bad_files(cfg: Settings, engine: sa.Engine, sim: Simulator, env: dict[str, str],
                               tmp_path: Path) -> None:
    job_id = create_unknown(cfg, engine, sim)
    sim.advance(120)
    (rid,) = responses_of(sim, job_id)
    doc = dashboard(sim, rid)
    cases: list[tuple[Path | str, int, str]] = [
        (tmp_path / "missing.json", 2, "cannot read"),
        (tmp_path, 2, "cannot read"),
        (write(tmp_path, "latin1.txt", "caf\xe9".encode("latin-1")), 3, "not UTF-8"),
        (write(tmp_path, "empty.txt", "  \n"), 3, "no output text"),
        (write(tmp_path, "big.txt", "x" * 20001), 3, "max_output_bytes (20000)"),
        (write(tmp_path, "huge.txt", b"x" * (4 * 20000 + 1_048_576 + 1)), 3, "larger than"),
        (write(tmp_path, "not-text.json", '{"output_text": 42}'), 3, "not a string"),
        (write(tmp_path, "running.json", json.dumps({**doc, "status": "in_progress"})), 3, "not finished"),
        (write(tmp_path, "other.json", json.dumps({**doc, "metadata": {**doc["metadata"], "iipub_job_id": "other"}})),
         3, "names job other"),
        (write(tmp_path, "no-output.json", json.dumps({**doc, "output": []})), 3, "no output text"),
    ]
    for path, code, needle in cases:
        refused(engine, env, tmp_path, job_id, path, code, needle)


def test_refused_in_a_state_without_the_edge(cfg: Settings, engine: sa.Engine,
                                             env: dict[str, str], tmp_path: Path) -> None:
    Store(engine, "test").schedule(cfg.products[PRODUCT], DAY)
    sweep.run(cfg, engine)
    job = the_job(engine)
    assert job["state"] == State.ACCEPTED
    path = write(tmp_path, "out.txt", '{"en": {}}')
    refused(engine, env, tmp_path, str(job["id"]), path, 3, "import-payload applies only to")
    run_cli("suspend", str(job["id"]), "--reason", "incident", env=env, cwd=tmp_path, check=True)
    refused(engine, env, tmp_path, str(job["id"]), path, 3, "resume it first")


def test_refused_for_a_job_with_a_payload_in_custody(cfg: Settings, engine: sa.Engine, sim: Simulator,
                                                     env: dict[str, str], tmp_path: Path) -> None:
    # Output stored, then the product's config changed under it: QUARANTINED config_drift, payload kept.
    Store(engine, "test").schedule(cfg.products[PRODUCT], DAY)
    sweep.run(cfg, engine)
    sim.advance(120)
    p = cfg.products[PRODUCT]
    sweep.run(replace(cfg, products={PRODUCT: replace(p, prompt="Write it differently.")}), engine)
    job = the_job(engine)
    assert (job["state"], job["quarantine_reason"], bool(job["payload"])) == (State.QUARANTINED, "config_drift", True)
    path = write(tmp_path, "out.json", json.dumps({"output_text": job["payload"]}))
    refused(engine, env, tmp_path, str(job["id"]), path, 3, "already holds a payload in custody")


def test_a_second_import_is_refused(cfg: Settings, engine: sa.Engine, sim: Simulator, env: dict[str, str],
                                    tmp_path: Path) -> None:
    job_id = create_unknown(cfg, engine, sim)
    path = write(tmp_path, "out.txt", '{"en": {"title": "x"}}')
    run_cli("jobs", "import-payload", job_id, str(path), "--reason", "first", env=env, cwd=tmp_path, check=True)
    refused(engine, env, tmp_path, job_id, path, 3, "is RETRIEVED_NOT_VALIDATED")
    # Output that fails validation parks as usual, payload kept: never imported over.
    sweep.run(cfg, engine)
    assert the_job(engine)["state"] == State.VALIDATION_FAILED_RETAINED
    refused(engine, env, tmp_path, job_id, path, 3, "is VALIDATION_FAILED_RETAINED")
