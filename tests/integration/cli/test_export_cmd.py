"""`iipub export --in-flight`: the hand-over file `iipub adopt` reads, CSV with its header or JSON
lines, and the count on stderr."""

from __future__ import annotations

import sqlalchemy as sa

from iipub.operate import handover
from tests.support.cli import run_cli


def test_nothing_in_flight_is_a_header_and_a_count(cli_env: dict[str, str], engine: sa.Engine, slot: str) -> None:
    res = run_cli("export", "--in-flight", env=cli_env, check=True)
    assert res.stdout == ",".join(handover.COLUMNS) + "\n"  # a NO_JOB slot is not in flight
    assert "0 in-flight jobs exported" in res.stderr
    assert run_cli("export", "--in-flight", "--format", "json", env=cli_env, check=True).stdout == ""


def test_export_needs_in_flight(cli_env: dict[str, str], engine: sa.Engine) -> None:
    assert run_cli("export", env=cli_env).returncode == 2
