"""Several hosts on one database (docs/scale-out.md), modelled as two installation folders with
their own configuration and spend ledger: the second host joins on purpose (`config accept
--join`), each host's ledger is known to the database as its own (one `ledger_book` row each, each
paid create tagged with the ledger its intent went to), so neither holds the other's creates, no
acknowledgement moves a hold to the other, and an acknowledgement counts only its own ledger's
creates. Adding and removing `[ledger] mirror_path` holds nothing."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from iipub.provider.openai.simulator import Simulator
from iipub.settings.loading import load_settings
from iipub.store import tables
from iipub.store.job_store import Store
from tests.support.cli import one_line_error, run_cli
from tests.support.rows import job_rows

CONFIG = ("[reconcile]\npoll_interval_seconds = 0\nlease_seconds = 10\ntick_seconds = 20\nauto_schedule = false\n"
          "catch_up_days = 0\n"
          "[provider]\ntimeout_seconds = 2\nconnect_timeout_seconds = 1\nloss_confirm_seconds = 0\n"
          '[ledger]\npath = "state/spend-ledger.jsonl"\n{mirror}'
          '[[products]]\nname = "daily-brief"\nprompt = "Write the brief."\nopens_at = "00:00"\nitems = 3\n')
DONE = ("PUBLISHED", "CLEANUP_PENDING", "DELETED")
DAY = dt.date(2026, 11, 20)


class Host:
    def __init__(self, folder: Path, cli_env: dict[str, str], sim: Simulator, mirror: str = "") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.config = folder / "iipub.toml"
        self.write_config(mirror)
        self.env = {**cli_env, "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": sim.url,
                    "IIPUB_CONFIG": str(self.config)}
        self.sim = sim

    def write_config(self, mirror: str = "") -> None:
        self.config.write_text(CONFIG.format(mirror=f'mirror_path = "{mirror}"\n' if mirror else ""), encoding="utf-8")

    @property
    def ledger(self) -> Path:
        return self.folder / "state" / "spend-ledger.jsonl"

    def lines(self, path: Path | None = None) -> list[dict[str, object]]:
        return [json.loads(line) for line in (path or self.ledger).read_text().splitlines()]

    def schedule(self, engine: sa.Engine, day: dt.date) -> None:
        Store(engine, "test").schedule(load_settings(self.env).products["daily-brief"], day)

    def tick(self, n: int = 4) -> None:
        for _ in range(n):
            run_cli("reconcile", env=self.env, check=True)
            run_cli("relay", env=self.env, check=True)
            self.sim.advance(5)

    def check(self) -> str:
        return run_cli("status", "--check", env=self.env).stdout


def _states(engine: sa.Engine) -> dict[str, str]:
    return {str(r["edition_date"])[:10]: r["state"] for r in job_rows(engine)}


def _books(engine: sa.Engine) -> list[dict[str, object]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(tables.ledger_book)).mappings()]


def _spend_ledgers(engine: sa.Engine) -> dict[str, str | None]:
    s = tables.spend.c
    with engine.connect() as conn:
        return {str(r[0])[:10]: r[1] for r in conn.execute(sa.select(s.edition_date, s.ledger_id))}


@pytest.mark.slow
def test_two_hosts_each_with_its_own_ledger_pay_once_and_hold_nothing_of_each_other(
        cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine) -> None:
    a, b = Host(tmp_path / "host-a", cli_env, sim), Host(tmp_path / "host-b", cli_env, sim)
    a.schedule(engine, DAY)
    a.tick()
    assert _states(engine)[DAY.isoformat()] in DONE

    # the second host joins on purpose; before that its writes are refused
    one_line_error(run_cli("reconcile", env=b.env), 78, "config accept --join")
    run_cli("config", "accept", "--join", "--reason", "host b joins", "--by", "ops", env=b.env, check=True)
    days = [DAY + dt.timedelta(days=i) for i in range(1, 5)]
    for i, day in enumerate(days):  # the hosts take turns, as two crontabs would
        (a if i % 2 else b).schedule(engine, day)
        for host in (b, a) if i % 2 == 0 else (a, b):
            host.tick(2)
        for host in (a, b):
            assert "spend ledger" not in host.check(), host.check()
    states = _states(engine)
    assert all(states[d.isoformat()] in DONE for d in [DAY, *days]), states
    assert sim.stats()["creates_total"] == 5  # one per slot, none held, none paid twice

    books = _books(engine)
    assert len(books) == 2 and {Path(str(r["path"])) for r in books} == {a.ledger.resolve(), b.ledger.resolve()}
    ids = {Path(str(r["path"])): str(r["ledger_id"]) for r in books}
    tagged = _spend_ledgers(engine)
    for host in (a, b):
        mine = ids[host.ledger.resolve()]
        assert [line["ledger_id"] for line in host.lines() if line["t"] == "open"] == [mine]  # never re-opened
        intents = sorted(str(line["slot"])[-10:] for line in host.lines() if line["t"] == "intent")
        assert intents == sorted(d for d, lid in tagged.items() if lid == mine) and intents

    # host b's ledger lost: only b holds its creates, and acknowledging it names b's creates only
    b.ledger.unlink()
    assert "spend ledger missing" in b.check() and "spend ledger" not in a.check()
    b_creates = sum(1 for lid in tagged.values() if lid == ids[b.ledger.resolve()])
    done = run_cli("ledger", "acknowledge", "--accept", "missing", "--reason", "disk replaced", env=b.env, check=True)
    assert f"may pay for up to {b_creates} of them again" in done.stdout, done.stdout
    for host in (a, b):
        assert "spend ledger" not in host.check()
    nxt = days[-1] + dt.timedelta(days=1)
    a.schedule(engine, nxt)
    b.tick(2)
    a.tick(2)
    assert _states(engine)[nxt.isoformat()] in DONE and sim.stats()["creates_total"] == 6
    shown = json.loads(run_cli("ledger", "show", "--json", env=a.env, check=True).stdout)
    assert shown["problem"] is None and len(shown["ledgers"]) == 2
    assert sum(1 for book in shown["ledgers"] if book["this_one"]) == 1

    # host b taken out: its configuration is refused again, host a goes on
    run_cli("config", "accept", "--leave", "--reason", "host b retired", env=b.env, check=True)
    one_line_error(run_cli("reconcile", env=b.env), 78, "another configuration")
    a.tick(1)


@pytest.mark.slow
def test_a_ledger_from_before_hosts_were_known_is_claimed_by_its_host(
        cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine) -> None:
    a = Host(tmp_path / "host-a", cli_env, sim)
    a.schedule(engine, DAY)
    a.tick()
    with engine.begin() as conn:  # the row as migration 0016 finds it: `this`, no host, spend untagged
        conn.execute(tables.ledger_book.update().values(name="this", host=None))
        conn.execute(tables.spend.update().values(ledger_id=None))
    assert "spend ledger" not in a.check()
    nxt = DAY + dt.timedelta(days=1)
    a.schedule(engine, nxt)
    a.tick()
    (book,) = _books(engine)
    assert book["name"] == "this" and book["host"] and _states(engine)[nxt.isoformat()] in DONE
    assert len([line for line in a.lines() if line["t"] == "open"]) == 1
    assert "spend ledger" not in a.check()


@pytest.mark.slow
def test_adding_and_removing_a_mirror_holds_nothing(cli_env: dict[str, str], sim: Simulator, tmp_path: Path,
                                                    engine: sa.Engine) -> None:
    a = Host(tmp_path / "host-a", cli_env, sim)
    a.schedule(engine, DAY)
    a.tick()
    mirror = tmp_path / "other-disk" / "spend-ledger.jsonl"
    a.write_config(str(mirror))  # the runbook's step: add the line, nothing else
    assert "spend ledger" not in a.check()
    days = [DAY + dt.timedelta(days=1), DAY + dt.timedelta(days=2)]
    a.schedule(engine, days[0])
    a.tick()
    assert _states(engine)[days[0].isoformat()] in DONE and sim.stats()["creates_total"] == 2
    assert mirror.read_bytes() == a.ledger.read_bytes()  # started as a whole copy, then every line in both
    assert "spend ledger" not in a.check()
    a.write_config()  # and removed again
    a.schedule(engine, days[1])
    a.tick()
    assert _states(engine)[days[1].isoformat()] in DONE and sim.stats()["creates_total"] == 3
    assert "spend ledger" not in a.check()
