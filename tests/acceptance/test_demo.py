"""`iipub demo` on a fresh directory with no configuration at all: it publishes both products
in both languages, cleans up, leaves nothing running, and is idempotent when re-run."""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.support.cli import clean_env, run_cli, run_iipub

PRODUCTS = ("daily-brief", "revolution-watch")
LANGS = ("en", "es")


def processes_in(directory: Path) -> list[int]:
    """Pids whose working directory is `directory` (a child left behind by the demo)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if Path(os.readlink(entry / "cwd")) == directory:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def read_db(directory: Path) -> tuple[Sequence[sa.Row[Any]], int, int]:
    engine = sa.create_engine(f"sqlite:///{directory / 'iipub-demo' / 'iipub.sqlite3'}")
    try:
        with engine.connect() as conn:
            jobs = conn.execute(sa.text(
                "SELECT product, edition_date, state, generation_attempts FROM jobs ORDER BY product")).all()
            editions = conn.execute(sa.text("SELECT COUNT(*) FROM editions")).scalar_one()
            events = conn.execute(sa.text("SELECT COUNT(*) FROM job_events")).scalar_one()
    finally:
        engine.dispose()
    return jobs, editions, events


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/cwd").exists(), reason="needs /proc to look for leftover processes")
def test_demo_runs_the_whole_pipeline_and_leaves_nothing_running(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = run_iipub("demo", env=clean_env(), cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert time.monotonic() - started < 60
    assert "Traceback" not in proc.stderr

    jobs, editions, events = read_db(tmp_path)
    assert [j.product for j in jobs] == list(PRODUCTS)
    assert {j.state for j in jobs} == {"DELETED"}
    assert all(j.generation_attempts == 1 for j in jobs)
    assert editions == len(PRODUCTS) * len(LANGS)
    site = tmp_path / "iipub-demo" / "public"
    for j in jobs:
        for lang in LANGS:
            page = site / j.product / str(j.edition_date) / f"{lang}.html"
            assert page.is_file() and b"<html" in page.read_bytes()[:500].lower(), page
            assert (site / j.product / lang / "index.html").is_file()
            assert f"{j.product}/{j.edition_date}/{lang}.html" in proc.stdout
    assert str(site) in proc.stdout

    # The in-process simulator is gone: its port refuses, and no process remains in the dir.
    match = re.search(r"^simulator\s+http://127\.0\.0\.1:(\d+)", proc.stdout, re.MULTILINE)
    assert match, proc.stdout
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", int(match.group(1))), 2):
        pass
    assert processes_in(tmp_path) == []

    # Again in the same directory (in process this time: the process was checked above): nothing
    # new is paid for or journaled, the editions are reported.
    again = run_cli("demo", env=clean_env(), cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already present" in again.stdout and "nothing to do" in again.stdout
    jobs2, editions2, events2 = read_db(tmp_path)
    assert (jobs2, editions2, events2) == (jobs, editions, events)
    assert all(f"{p}" in again.stdout for p in PRODUCTS) and again.stdout.count("DELETED") == 2
