"""Bad input at the command line, as an operator or cron gives it: `iipub` in process
(`iipub.cli.main` with its own environment, working directory, stdout and stderr). Every case
must end in one clear JSON error line on stderr with a non-zero exit code (no traceback),
and leave every stored row exactly as it was.

Covered elsewhere and not repeated here: a bad `schedule --date`, an unknown `jobs show` id,
`schedule --product nope`, `jobs list --state BOGUS` (tests/acceptance/test_cli_basics.py);
`jobs list` against an unreachable database or a missing schema, a config file that is not
TOML (same file); `status` against an unreachable database (test_status_cli.py);
`quarantine release` usage errors and unknown id, reversed / future / invalid backfill ranges,
an unknown backfill product, a missing OPENAI_API_KEY for reconcile / cancel / release --link
(test_operator_cli.py); every config validation rule (tests/unit/settings/test_config.py).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from iipub.provider.openai.simulator import Simulator
from iipub.settings.config import Settings
from iipub.store import tables
from iipub.store.job_store import Store
from tests.support.cli import one_line_error, run_cli
from tests.support.databases import MYSQL_URL
from tests.support.rows import UNKNOWN_ID as UNKNOWN
from tests.support.rows import stored, utc_today

ONE_PRODUCT = '[[products]]\nname = "daily-brief"\nprompt = "Write the brief."\nitems = 3\nopens_at = "00:00"\n'


def slots(engine: sa.Engine, settings: Settings, *days: dt.date) -> list[str]:
    store = Store(engine, "test-scheduler")
    for day in days:
        store.schedule(settings.products["daily-brief"], day)
    return [j.id for j in store.list_jobs()]


# -- bad arguments ----------------------------------------------------------------------------------


def test_unknown_ids_and_bad_arguments_are_one_line_and_change_nothing(
    engine: sa.Engine, settings: Settings, cli_env: dict[str, str], tmp_path: Path
) -> None:
    (job_id,) = slots(engine, settings, utc_today() - dt.timedelta(days=2))
    before = stored(engine)
    yesterday = (utc_today() - dt.timedelta(days=1)).isoformat()
    cases: list[tuple[tuple[str, ...], int, str]] = [
        (("jobs", "show", "zzzz"), 4, "no job with id 'zzzz'"),
        (("jobs", "show", job_id[:3]), 4, f"job id prefix {job_id[:3]!r} is too short: give at least 4 characters"),
        (("jobs", "show", job_id + "0"), 4, "no job with id"),
        (("suspend", UNKNOWN, "--reason", "incident"), 4, f"no job with id '{UNKNOWN}'"),
        (("resume", UNKNOWN), 4, "no job with id"),
        (("kill", UNKNOWN, "--reason", "typo"), 4, "no job with id"),
        (("quarantine", "release", UNKNOWN, "--resume-polling", "--reason", "r"), 4, "no job with id"),
        (("quarantine", "release", job_id, "--verified-lost", "--reason", "r"), 3, "not QUARANTINED"),
        (("suspend", job_id, "--reason", "r", "--by", " "), 2, "--by must name who is acting"),
        (("backfill", "--product", "daily-brief", "--from", "20260101", "--to", yesterday), 2,
         "'20260101' is not a date in YYYY-MM-DD form"),
        (("backfill", "--product", "daily-brief", "--from", "2026-11-31", "--to", yesterday), 2, "is not a date"),
        (("backfill", "--product", "daily-brief", "--from", "1999-01-01", "--to", yesterday), 2,
         "--from 1999-01-01 is more than 366 days in the past"),  # each slot would be paid for
        (("backfill", "--product", "daily-brief", "--from", (utc_today() - dt.timedelta(days=366)).isoformat(),
          "--to", utc_today().isoformat()), 2, "backfill at most 366 days per run"),
        (("backfill", "--product", "Daily-Brief", "--from", yesterday, "--to", yesterday), 2, "unknown product"),
        (("schedule", "--product", ""), 2, "unknown product ''"),  # not "every product"
    ]
    for args, code, needle in cases:
        one_line_error(run_cli(*args, env=cli_env, cwd=tmp_path), code, needle)
    assert stored(engine) == before


def test_bad_dates_on_every_command_are_one_line(engine: sa.Engine, cli_env: dict[str, str], tmp_path: Path) -> None:
    for args in (("schedule", "--date", "2026-1-1"), ("jobs", "list", "--date", "2026-13-01")):
        one_line_error(run_cli(*args, env=cli_env, cwd=tmp_path), 2, "is not a date in YYYY-MM-DD form")


# -- bad configuration ----------------------------------------------------------------------------------

BAD_CONFIGS: list[tuple[str, bytes | None, str]] = [
    ("unknown_language", b'[[products]]\nname = "daily-brief"\nprompt = "p"\nlanguages = ["en", "klingon"]\n',
     "unknown language code(s) klingon"),
    ("not_utf8", b"[budgets]\nmax_generation_attempts = 3\n# \xff\xfe\n", "is not valid TOML"),
    ("truncated", b'[[products]]\nname = "daily-brief"\nprompt = "Write the', "is not valid TOML"),
    ("no_products", b"products = []\n", "[[products]] must be a non-empty array"),
    ("zero_items", b'[[products]]\nname = "daily-brief"\nprompt = "p"\nitems = 0\n',
     "items: input should be greater than"),
    ("is_a_directory", None, "cannot read config file"),
]


@pytest.mark.parametrize(("name", "text", "needle"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config_stops_every_command_before_any_write(
    engine: sa.Engine, settings: Settings, sim: Simulator, cli_env: dict[str, str], tmp_path: Path,
    name: str, text: bytes | None, needle: str,
) -> None:
    slots(engine, settings, utc_today() - dt.timedelta(days=1))
    cfg = tmp_path / "iipub.toml"
    if text is None:
        cfg.mkdir()
    else:
        cfg.write_bytes(text)
    env = {**cli_env, "IIPUB_CONFIG": str(cfg), "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": sim.url}
    before = stored(engine)
    for args in (("reconcile",), ("relay",), ("schedule",), ("quarantine", "list")):
        one_line_error(run_cli(*args, env=env, cwd=tmp_path), 78, needle)
    assert stored(engine) == before
    assert sum(sim.stats()["requests"].values()) == 0


# -- the database ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_unreachable_or_wrong_database_is_one_line(cli_env: dict[str, str], tmp_path: Path) -> None:
    env = {**cli_env, "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    urls = [
        ("mysql+pymysql://root@127.0.0.1:9/none", 69, "database unreachable"),
        ("mysql://root@127.0.0.1:9/none", 69, "database unreachable"),  # PyMySQL, not MySQLdb
        ("mariadb://root@127.0.0.1:9/none", 69, "database unreachable"),
        ("mysql+mysqldb://root@127.0.0.1:9/none", 69, "database unreachable"),
        # a URL iipub cannot use is a configuration error, like any other setting
        ("not a url", 78, "not a database URL"),
        ("postgresql://u@127.0.0.1/db", 78, "unsupported database 'postgresql'"),
        ("postgres://u:s3cret@127.0.0.1/db", 78, "unsupported database 'postgres'"),
        ("mysql+mysqlconnector://u@127.0.0.1/db", 78, "unsupported database driver 'mysql+mysqlconnector'"),
        ("mysql+pymysql://u:s3cret@127.0.0.1:abc/db", 78, "not a database URL"),  # a port that is not a number
        ("mysql+pymysql://u:s3cret@[::1/db", 78, "not a database URL"),
        ("mysql+pymysql://u:s3cret@127.0.0.1:9/db?unknown_arg=1", 78, "option(s) unknown_arg"),
        ("mysql+pymysql://u:s3cret@127.0.0.1:9/db?read_timeout=abc", 78, "option value the MySQL driver cannot use"),
        ("sqlite://relative.sqlite3", 78, "three slashes"),
        # a missing SQLite file is not created (only `iipub db migrate` makes one)
        (f"sqlite:///{tmp_path / 'no' / 'such' / 'dir' / 'x.sqlite3'}", 69, "no database at"),
        (f"sqlite:///{tmp_path / 'empty.sqlite3'}", 69, "iipub db migrate"),
    ]
    for url, code, needle in urls:
        for args in (("reconcile",), ("relay",), ("schedule",), ("quarantine", "list"),
                     ("backfill", "--product", "daily-brief", "--from", "2026-01-01", "--to", "2026-01-02")):
            result = run_cli(*args, env={**env, "IIPUB_DATABASE_URL": url}, cwd=tmp_path)
            one_line_error(result, code, needle)
            assert "s3cret" not in result.stderr
    assert not (tmp_path / "empty.sqlite3").exists() and not (tmp_path / "no").exists()


@pytest.mark.mysql
def test_wrong_database_password_is_one_line_and_not_echoed(cli_env: dict[str, str], tmp_path: Path) -> None:
    url = sa.engine.make_url(MYSQL_URL).set(password="Wr0ng-pa55word").render_as_string(hide_password=False)
    for args in (("relay",), ("jobs", "list")):
        proc = run_cli(*args, env={**cli_env, "IIPUB_DATABASE_URL": url}, cwd=tmp_path)
        one_line_error(proc, 69, "Access denied")
        assert "Wr0ng-pa55word" not in proc.stderr + proc.stdout


# -- secrets that cannot be used ------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["sk-test\n", "sk-test ", " ", "sk-tëst"], ids=["newline", "space", "blank",
                                                                              "non_ascii"])
def test_api_key_that_cannot_be_sent_is_a_config_error(
    engine: sa.Engine, settings: Settings, sim: Simulator, cli_env: dict[str, str], tmp_path: Path, key: str
) -> None:
    slots(engine, settings, utc_today() - dt.timedelta(days=1))
    cfg = tmp_path / "iipub.toml"
    cfg.write_text(ONE_PRODUCT, encoding="utf-8")
    env = {**cli_env, "IIPUB_CONFIG": str(cfg), "OPENAI_API_KEY": key, "OPENAI_BASE_URL": sim.url}
    proc = run_cli("reconcile", env=env, cwd=tmp_path)
    with engine.connect() as conn:
        quarantined = conn.execute(sa.select(sa.func.count()).where(tables.jobs.c.state == "QUARANTINED")).scalar_one()
    assert sum(sim.stats()["requests"].values()) == 0
    assert quarantined == 0
    one_line_error(proc, 78, "OPENAI_API_KEY")


def test_malformed_webhook_secret_is_a_config_error(engine: sa.Engine, cli_env: dict[str, str],
                                                    tmp_path: Path) -> None:
    cfg = tmp_path / "iipub.toml"
    cfg.write_text('[sinks.webhook]\nurl = "http://127.0.0.1:9/hooks"\n', encoding="utf-8")
    env = {**cli_env, "IIPUB_CONFIG": str(cfg), "IIPUB_WEBHOOK_SECRET": "whsec_!!!not-base64"}
    one_line_error(run_cli("relay", env=env, cwd=tmp_path), 78, "IIPUB_WEBHOOK_SECRET")


def test_missing_webhook_secret_is_a_config_error(engine: sa.Engine, cli_env: dict[str, str], tmp_path: Path) -> None:
    cfg = tmp_path / "iipub.toml"
    cfg.write_text('[sinks.webhook]\nurl = "http://127.0.0.1:9/hooks"\n', encoding="utf-8")
    one_line_error(run_cli("relay", env={**cli_env, "IIPUB_CONFIG": str(cfg)}, cwd=tmp_path), 78,
                   "IIPUB_WEBHOOK_SECRET is not set")


def test_library_errors_are_logged_as_json_lines(tmp_path: Path) -> None:
    code = (
        "import logging\n"
        "from iipub.core import logs\n"
        "logs.configure('info')\n"
        "try:\n"
        "    raise ConnectionError('Lost connection to MySQL server during query')\n"
        "except ConnectionError:\n"
        "    logging.getLogger('sqlalchemy.pool.impl.QueuePool').error('Exception during reset or similar',"
        " exc_info=True)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines and all(ln.startswith("{") and json.loads(ln) for ln in lines), proc.stderr


def test_an_ambiguous_id_prefix_says_so_and_a_unique_one_finds_its_job(
    engine: sa.Engine, settings: Settings, cli_env: dict[str, str], tmp_path: Path
) -> None:
    first, second = slots(engine, settings, utc_today() - dt.timedelta(days=2), utc_today() - dt.timedelta(days=3))
    twins = {first: "abcd0000-0000-4000-8000-000000000001", second: "abcd0000-0000-4000-8000-000000000002"}
    with engine.begin() as conn:  # two ids sharing their first 35 characters
        for old, new in twins.items():
            conn.execute(sa.update(tables.jobs).where(tables.jobs.c.id == old).values(id=new))
            conn.execute(sa.update(tables.job_events).where(tables.job_events.c.job_id == old).values(job_id=new))
    before = stored(engine)
    for prefix, args in (("abcd0000", ("jobs", "show", "abcd0000")), ("abcd", ("suspend", "abcd", "--reason", "r")),
                         ("abcd0000-0000-4000-8000-00000000000",
                          ("quarantine", "show", "abcd0000-0000-4000-8000-00000000000"))):
        one_line_error(run_cli(*args, env=cli_env, cwd=tmp_path), 4,
                       f"job id prefix {prefix!r} is ambiguous: it matches 2 jobs (abcd0000-0000-4000-8000-"
                       "000000000001, abcd0000-0000-4000-8000-000000000002)")
    assert stored(engine) == before
    shown = run_cli("jobs", "show", "ABCD0000-0000-4000-8000-000000000002", "--json", env=cli_env, cwd=tmp_path)
    assert shown.returncode == 0 and json.loads(shown.stdout)["id"] == "abcd0000-0000-4000-8000-000000000002"
