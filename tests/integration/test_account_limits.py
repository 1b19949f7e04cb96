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

from iipub.core.timefmt import naive_utc
from iipub.provider.openai.simulator import Simulator
from iipub.provider.openai.simulator.faults import FaultRule
from iipub.store import clock, tables
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


def _products(*rows: tuple[str, str, str]) -> str:
    """[[products]] opening at midnight: (name, model, more TOML lines)."""
    return "".join(f'[[products]]\nname = "{name}"\nprompt = "Write it."\nmodel = "{model}"\nopens_at = "00:00"\n'
                   f"items = 3\n{more}" for name, model, more in rows)


def _creates_of(sim: Simulator, model: str) -> int:
    """Create requests the simulator received for `model`, refused or not."""
    return sum(1 for p in sim.stats()["create_params"] if str(p["model"]).lower() == model.lower())


def _gate(engine: sa.Engine) -> sa.RowMapping:
    with engine.connect() as conn:
        return conn.execute(sa.select(tables.create_gate)).mappings().one()


def _rows(engine: sa.Engine, table: sa.Table) -> list[sa.RowMapping]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(table)).mappings())


def _ticks(env: dict[str, str], tmp_path: Path, sim: Simulator, engine: sa.Engine, n: int = 3) -> None:
    for _ in range(n):
        run_cli("reconcile", env=env, cwd=tmp_path, check=True)
        sim.advance(5)
        clock.advance_clock(engine, 90)  # past the held slots' recheck: each is looked at again


@pytest.mark.slow
def test_no_access_to_a_model_holds_its_products_once_and_nothing_else(cli_env: dict[str, str], sim: Simulator,
                                                                       tmp_path: Path, engine: sa.Engine) -> None:
    """A project without access to gpt-4.1 (403 model_not_found): one refused create for the
    model, both of its products held, the gpt-5-mini product created as usual, the breaker
    closed; status names the model, the project and the remedy. Once the models endpoint answers
    for it (free), the hold lifts by itself and the held slots are created."""
    sim.backend.no_access_models = frozenset({"gpt-4.1"})
    config = _products(("brief", "gpt-5-mini", ""), ("watch", "gpt-4.1", ""), ("digest", "GPT-4.1", "")) + QUIET
    env = {**sim_env(cli_env, sim, tmp_path, config), "OPENAI_PROJECT_ID": "proj_news"}
    _ticks(env, tmp_path, sim, engine)
    assert _creates_of(sim, "gpt-4.1") == 1  # once, for two products and every run since
    assert _creates_of(sim, "gpt-5-mini") == 1 and sim.stats()["creates_total"] == 1
    (held,) = _rows(engine, tables.model_holds)
    assert (held["model"], held["cause"]) == ("gpt-4.1", "no_access") and "proj_news" in held["scope"]
    assert _gate(engine)["breaker"] == "closed" and _gate(engine)["cooldown_until"] is None
    jobs = {r["product"]: r for r in job_rows(engine)}
    assert jobs["watch"]["state"] == jobs["digest"]["state"] == "CREATE_ELIGIBLE"
    assert jobs["watch"]["generation_attempts"] + jobs["digest"]["generation_attempts"] == 0  # refunded
    check = run_cli("status", "--check", env=env, cwd=tmp_path)
    assert check.returncode == 2
    assert ("creates of gpt-4.1 (watch, digest) held: project proj_news has no access to model gpt-4.1" in check.stdout
            or "creates of gpt-4.1 (digest, watch) held: project proj_news has no access to model gpt-4.1"
            in check.stdout), check.stdout
    assert "allow the model in the project's limits" in check.stdout and "create breaker" not in check.stdout
    doc = json.loads(run_cli("status", "--json", env=env, cwd=tmp_path).stdout)
    assert doc["model_holds"][0]["model"] == "gpt-4.1" and sorted(doc["model_holds"][0]["products"]) == [
        "digest", "watch"]
    # Access granted: within the recheck the models endpoint answers (free), the hold lifts.
    sim.backend.no_access_models = frozenset()
    clock.advance_clock(engine, 900)
    _ticks(env, tmp_path, sim, engine, n=2)
    assert _rows(engine, tables.model_holds) == []
    assert _creates_of(sim, "gpt-4.1") == 3 and sim.stats()["creates_total"] == 3
    assert sim.stats()["requests"]["model"] >= 1
    lifted = [e for e in _rows(engine, tables.gate_events) if e["kind"] == "model_hold_lifted"]
    assert len(lifted) == 1 and "models endpoint answers for" in lifted[0]["detail"]
    # Every paid create is explained by the journal (the refunded one included).
    checked = run_cli("check", "--simulator", sim.url, env=env, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout


def test_a_model_that_does_not_exist_is_held_once(cli_env: dict[str, str], sim: Simulator, tmp_path: Path,
                                                  engine: sa.Engine) -> None:
    sim.backend.unknown_models = frozenset({"gpt-9"})
    config = _products(("brief", "gpt-5-mini", ""), ("gone", "gpt-9", ""), ("gone-too", "gpt-9", "")) + QUIET
    env = sim_env(cli_env, sim, tmp_path, config)
    _ticks(env, tmp_path, sim, engine)
    assert _creates_of(sim, "gpt-9") == 1 and _creates_of(sim, "gpt-5-mini") == 1
    (held,) = _rows(engine, tables.model_holds)
    assert held["cause"] == "unknown"
    check = run_cli("status", "--check", env=env, cwd=tmp_path)
    assert check.returncode == 2 and "model gpt-9 does not exist for the key's project" in check.stdout
    assert "correct the products' model" in check.stdout
    assert not [r for r in job_rows(engine) if r["state"] == "QUARANTINED"]  # not one slot after another


def test_a_request_too_large_holds_its_product_until_its_request_changes(cli_env: dict[str, str], sim: Simulator,
                                                                         tmp_path: Path, engine: sa.Engine) -> None:
    """429 "Request too large" (type tokens): one refused create, that product held with its cap
    and the API's limit named, no cool-down for the others; a lower max_output_tokens lifts it."""
    sim.backend.tokens_per_minute = 30_000
    # 37,600: daily-brief's default cap (two languages, 14 items), over a 30,000 tokens-per-minute limit
    config = _products(("brief", "gpt-5-mini", "max_output_tokens = 37600\n"), ("watch", "gpt-5-mini", ""))
    env = sim_env(cli_env, sim, tmp_path, config + QUIET)
    _ticks(env, tmp_path, sim, engine)
    made = sim.stats()["creates_by_job"]
    jobs = {r["product"]: r for r in job_rows(engine)}
    assert made.get(jobs["watch"]["id"]) == 1 and jobs["watch"]["state"] != "CREATE_ELIGIBLE"
    too_large = [p for p in sim.stats()["create_params"] if p["max_output_tokens"] == 37_600]
    assert len(too_large) == 1  # sent once, never again unchanged
    (held,) = _rows(engine, tables.product_holds)
    assert (held["product"], held["cause"], held["cap_tokens"], held["limit_tokens"]) == ("brief", "too_large",
                                                                                          37_600, 30_000)
    assert held["requested_tokens"] > 30_000
    assert _gate(engine)["breaker"] == "closed" and _gate(engine)["cooldown_until"] is None
    check = run_cli("status", "--check", env=env, cwd=tmp_path)
    assert check.returncode == 2
    assert ("creates of brief held: a create (max_output_tokens 37,600) is larger than the organization's "
            "tokens-per-minute limit (the API's limit 30,000, requested ") in check.stdout
    assert "lower the product's max_output_tokens, ask for fewer items or languages, or move to a higher rate tier" \
        in check.stdout
    # The fix: a lower cap. The hold lifts at the next create, which goes out.
    path = Path(env["IIPUB_CONFIG"])
    path.write_text(path.read_text().replace("max_output_tokens = 37600", "max_output_tokens = 20000"))
    _ticks(env, tmp_path, sim, engine, n=2)
    assert _rows(engine, tables.product_holds) == []
    assert [p["max_output_tokens"] for p in sim.stats()["create_params"]].count(20_000) == 1
    brief = {r["product"]: r for r in job_rows(engine)}["brief"]
    assert brief["state"] != "CREATE_ELIGIBLE" and brief["generation_attempts"] == 1
    checked = run_cli("check", "--simulator", sim.url, env=env, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout


@pytest.mark.parametrize(("fault", "status"), [("unauthorized", 401), ("unsupported_country", 403)])
def test_a_refused_key_or_country_still_opens_the_account_wide_breaker(env: dict[str, str], tmp_path: Path,
                                                                       sim: Simulator, engine: sa.Engine,
                                                                       fault: str, status: int) -> None:
    sim.add_faults([FaultRule("create", fault, times=1)])
    run_cli("reconcile", env=env, cwd=tmp_path, check=True)
    gate = _gate(engine)
    assert (gate["breaker"], gate["breaker_reason"]) == ("open", "provider_auth")
    assert f"HTTP {status}" in gate["breaker_detail"]
    assert _rows(engine, tables.model_holds) == [] and _rows(engine, tables.product_holds) == []


def test_a_requests_429_waits_for_the_requests_reset_not_the_tokens_one(env: dict[str, str], tmp_path: Path,
                                                                        sim: Simulator, engine: sa.Engine) -> None:
    """x-ratelimit-reset-requests: 1s, x-ratelimit-reset-tokens: 6m0s on a requests 429: creates
    wait about a second, not six minutes."""
    sim.add_faults([FaultRule("create", "rate_limit_requests", times=1)])
    run_cli("reconcile", env=env, cwd=tmp_path, check=True)
    gate = _gate(engine)
    with engine.connect() as conn:
        now = clock.read_now(conn)
    assert gate["cooldown_until"] is not None
    assert 0 < (naive_utc(gate["cooldown_until"]) - now).total_seconds() <= 2.0
    (job,) = job_rows(engine)
    assert job["state"] == "CREATE_ELIGIBLE" and job["generation_attempts"] == 0
