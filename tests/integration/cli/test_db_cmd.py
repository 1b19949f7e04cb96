"""`iipub db migrate|status`: every migration applied once (a second run applies nothing), the
installation id given once and shown, the status listed as text and JSON; a SQLite file that does
not exist is reported, not created."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.support.cli import one_line_error, run_cli
from tests.support.databases import MYSQL_URL


def test_migrate_applies_each_migration_once_and_status_lists_them(cli_env: dict[str, str]) -> None:
    first = run_cli("db", "migrate", env=cli_env, check=True).stdout.splitlines()
    assert first[0] == "applied 0000_schema_migrations" and first[-1].startswith("installation inst_")
    again = run_cli("db", "migrate", env=cli_env, check=True).stdout.splitlines()
    assert again == ["schema up to date; nothing to apply", first[-1]]  # the same installation id
    doc = json.loads(run_cli("db", "status", "--json", env=cli_env, check=True).stdout)
    assert len(doc) == len(first) - 1 and all(m["applied_at"] and m["checksum_ok"] for m in doc)
    text = run_cli("db", "status", env=cli_env, check=True).stdout.splitlines()
    assert text[0] == first[-1] and text[1].split() == ["VERSION", "NAME", "STATUS", "APPLIED_AT", "NOTE"]
    assert all(" applied " in line for line in text[2:])


@pytest.mark.skipif(bool(MYSQL_URL), reason="a server database always exists; the missing file is SQLite's case")
def test_status_of_a_missing_sqlite_file_is_reported_not_created(cli_env: dict[str, str]) -> None:
    path = Path(sa.engine.make_url(cli_env["IIPUB_DATABASE_URL"]).database or "")
    one_line_error(run_cli("db", "status", env=cli_env), 69, "no database at")
    assert not path.exists()
