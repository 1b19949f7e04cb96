"""Real accounts, over real HTTP against `iipub simulator` answering as OpenAI does: the
placeholder key, holds that fit the cause (no access to a model, a request too large for the
tokens-per-minute limit, a refused parameter), the account-wide breaker kept for the key, the
country and the account, and retry hints. Assertions are on the creates the simulator received,
the hold rows and `status --check`."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from iipub.provider.openai.simulator import Simulator
from iipub.provider.openai.simulator.faults import FaultRule
from tests.support.cli import run_cli
from tests.support.rows import job_events, job_rows
from tests.support.settings import MIDNIGHT_PRODUCT_TOML, sim_env

# No relay runs here: their heartbeat is not what these checks are about.
QUIET = "[monitoring]\nheartbeat_after_seconds = 0\n"


@pytest.fixture
def env(cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine) -> dict[str, str]:
    return sim_env(cli_env, sim, tmp_path, MIDNIGHT_PRODUCT_TOML + QUIET)


def test_the_placeholder_key_holds_creates_and_status_warns(env: dict[str, str], tmp_path: Path,
                                                           sim: Simulator) -> None:
    """`iipub init` writes OPENAI_API_KEY=sk-CHANGE-ME: nothing is sent with it, and status says
    why (a WARNING naming OPENAI_API_KEY), until the key is set."""
    placeholder = {**env, "OPENAI_API_KEY": "sk-CHANGE-ME"}
    for _ in range(2):
        ran = run_cli("reconcile", env=placeholder, cwd=tmp_path)
        assert ran.returncode == 0, ran.stderr
    assert sim.stats()["requests"]["create"] == 0
    assert "OPENAI_API_KEY is the placeholder sk-CHANGE-ME" in ran.stderr
    check = run_cli("status", "--check", env=placeholder, cwd=tmp_path)
    assert check.returncode == 1, check.stdout
    assert check.stdout.startswith("IIPUB WARNING - OPENAI_API_KEY is the placeholder sk-CHANGE-ME that `iipub init` "
                                   "writes: creates are held until it is set to the project's key")
    assert json.loads(run_cli("status", "--json", env=placeholder, cwd=tmp_path).stdout)["api_key_placeholder"]
    # the real key: the create goes out, and the warning is gone
    run_cli("reconcile", env=env, cwd=tmp_path, check=True)
    assert sim.stats()["creates_total"] == 1
    assert "placeholder" not in run_cli("status", "--check", env=env, cwd=tmp_path).stdout


def test_a_content_filter_stop_is_named_with_its_remedy(env: dict[str, str], tmp_path: Path, sim: Simulator,
                                                        engine: sa.Engine) -> None:
    """An `incomplete` response whose reason is content_filter parks `content_filtered` (not
    `not_json`), its output kept; `quarantine show` and `status` name the cause and the remedy,
    and nothing is paid again."""
    sim.add_faults([FaultRule("create", "content_filter", times=1)])
    for _ in range(4):
        run_cli("reconcile", env=env, cwd=tmp_path, check=True)
        sim.advance(5)
    (job,) = job_rows(engine)
    assert (job["state"], job["quarantine_reason"], job["output_end"]) == ("QUARANTINED", "content_filtered",
                                                                           "content_filter")
    assert job["payload"] is not None
    shown = run_cli("quarantine", "show", job["id"], env=env, cwd=tmp_path, check=True).stdout
    assert "content filter stopped the response" in shown and "change 'daily-brief''s prompt" in shown
    assert f"iipub quarantine release {job['id']} --verified-lost" in shown
    check = run_cli("status", "--check", env=env, cwd=tmp_path)
    assert check.returncode == 1
    assert "1 response stopped by the provider's content filter (oldest daily-brief" in check.stdout
    assert "change the product's prompt, then `iipub quarantine release" in check.stdout
    run_cli("reconcile", env=env, cwd=tmp_path, check=True)
    assert sim.stats()["creates_total"] == 1


def _legacy_response(sim: Simulator, key: str) -> str:
    """A response a legacy system created with its own key (in its own project)."""
    with httpx.Client(base_url=sim.url, headers={"Authorization": f"Bearer {key}"}, timeout=10) as client:
        answer = client.post("/responses", json={"model": "gpt-5-mini", "input": "legacy", "background": True,
                                                 "store": True})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["id"])


def test_a_taken_over_response_is_never_declared_lost_on_a_404_and_its_scope_is_recorded(
        env: dict[str, str], tmp_path: Path, sim: Simulator, engine: sa.Engine) -> None:
    """`iipub adopt` of two legacy responses: one created in the legacy system's own project
    (invisible to iipub's key: every read is 404), one in iipub's. The first parks
    `scope_unknown` with the facts after the loss confirmation, nothing paid again; the second
    records iipub's scope at its first successful read."""
    sim.backend.key_projects["sk-legacy"] = "proj_legacy"
    elsewhere, here = _legacy_response(sim, "sk-legacy"), _legacy_response(sim, "sk-test")
    day = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)
    handover_file = tmp_path / "legacy.csv"
    handover_file.write_text(f"product,edition_date,response_id,attempts\ndaily-brief,{day},{elsewhere},1\n"
                             f"daily-brief,{day - dt.timedelta(days=1)},{here},1\n")
    run_cli("adopt", str(handover_file), "--reason", "cutover", env=env, cwd=tmp_path, check=True)
    for _ in range(5):
        run_cli("reconcile", env=env, cwd=tmp_path, check=True)
        sim.advance(5)
    rows = {r["response_id"]: r for r in job_rows(engine)}
    lost_looking = rows[elsewhere]
    assert (lost_looking["state"], lost_looking["quarantine_reason"]) == ("QUARANTINED", "scope_unknown")
    assert lost_looking["create_scope"] is None and lost_looking["generation_attempts"] == 1
    trail = [e["reason"] for e in job_events(engine, lost_looking["id"])]
    assert "loss_suspected" in trail and "loss_confirmed" not in trail
    shown = run_cli("quarantine", "show", lost_looking["id"], env=env, cwd=tmp_path, check=True).stdout
    assert f"response {elsewhere} answers 404 under org=- project=- key=" in shown
    assert "where it was created is not known" in shown
    readable = rows[here]
    assert readable["create_scope"] is not None and readable["create_scope"].startswith("org=- project=- key=")
    # Nothing was paid for either adopted slot (today's own slot is created as usual).
    creates = sim.stats()["creates_by_job"]
    assert creates.get(lost_looking["id"], 0) == creates.get(readable["id"], 0) == 0
