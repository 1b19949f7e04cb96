"""Day two's messages: what a command says when cron's environment is not there names the
variable to fix and never advises what would make a stray, empty SQLite database; an unknown
MariaDB database names the statement that creates it; a connection error says where it tried to
connect; an unknown `--product` is a usage error (exit 2) wherever one is taken."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.support.cli import one_line_error, run_cli
from tests.support.databases import MYSQL_URL


def test_a_missing_env_file_is_named_by_the_variable_or_option_that_names_it(cli_env: dict[str, str],
                                                                           tmp_path: Path) -> None:
    gone = tmp_path / "etc" / "iipub.env"
    by_env = run_cli("jobs", "list", env={**cli_env, "IIPUB_ENV_FILE": str(gone)}, cwd=tmp_path)
    one_line_error(by_env, 78, f"IIPUB_ENV_FILE names {gone}, which does not exist")
    by_option = run_cli("--env-file", str(gone), "jobs", "list", env=cli_env, cwd=tmp_path)
    one_line_error(by_option, 78, f"--env-file names {gone}")
    for done in (by_env, by_option):
        assert "db migrate" not in done.stderr
    assert list(tmp_path.glob("*.sqlite3")) == []


def test_a_missing_default_database_does_not_advise_making_one(tmp_path: Path) -> None:
    from tests.support.cli import clean_env

    env = clean_env()  # no IIPUB_DATABASE_URL, no IIPUB_ENV_FILE: the built-in default in this folder
    done = run_cli("jobs", "list", env=env, cwd=tmp_path)
    one_line_error(done, 69, "no database at")
    message = json.loads(done.stderr.strip().splitlines()[-1])["message"]
    assert "IIPUB_DATABASE_URL" in message and "IIPUB_ENV_FILE" in message
    assert "run `iipub db migrate` to create it" not in message
    assert list(tmp_path.glob("*.sqlite3")) == []  # nothing made


@pytest.mark.parametrize("url", ["mysql+pymysql://root@127.0.0.1:9/none", "mariadb://root@127.0.0.1:9/none"])
def test_a_connection_error_names_host_and_port(cli_env: dict[str, str], tmp_path: Path, url: str) -> None:
    for args in (("jobs", "list"), ("db", "migrate")):
        one_line_error(run_cli(*args, env={**cli_env, "IIPUB_DATABASE_URL": url}, cwd=tmp_path), 69,
                       "database unreachable at 127.0.0.1:9: ")


@pytest.mark.skipif(not MYSQL_URL, reason="an unknown database is a MariaDB/MySQL server's answer")
def test_an_unknown_database_names_the_statement_that_creates_it(cli_env: dict[str, str], tmp_path: Path) -> None:
    url = sa.engine.make_url(MYSQL_URL).set(database="iipub_day_two_missing").render_as_string(hide_password=False)
    server = sa.engine.make_url(url)
    for args in (("jobs", "list"), ("db", "migrate"), ("status",)):
        done = run_cli(*args, env={**cli_env, "IIPUB_DATABASE_URL": url}, cwd=tmp_path)
        one_line_error(done, 69, "database 'iipub_day_two_missing' does not exist on "
                                 f"{server.host}:{server.port or 3306}")
        assert "CREATE DATABASE `iipub_day_two_missing` CHARACTER SET utf8mb4" in done.stderr
        assert "unreachable" not in done.stderr
