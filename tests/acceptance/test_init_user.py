"""`iipub init --user` on a host whose paths hold spaces: every generated file runs iipub as that
user (logrotate's `su`, systemd's `User=`/`Group=`, the crontab's `crontab -u`), every path is
quoted where it is used, logrotate and systemd accept the files (`logrotate -d`, `systemd-analyze
verify`; skipped only where the tool is absent), the crontab's lines run as written, and init
refuses a service user who could not run the `iipub` it writes into the crontab."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import clean_env, one_line_error, run_cli

USER, GROUP = "nobody", "nogroup"


@pytest.fixture
def spaced() -> Iterator[Path]:
    """A folder with a space in its name that every user may search (the service user's way)."""
    base = Path(tempfile.mkdtemp(prefix="iipub day two "))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _stub(path: Path, record: Path) -> Path:
    """An `iipub` that writes its working directory and arguments to `record`."""
    path.parent.mkdir(parents=True)
    path.parent.chmod(0o755)
    path.write_text(f'#!/bin/sh\nprintf "%s\\n" "$PWD" "$@" > "{record}"\n', encoding="utf-8")
    path.chmod(0o755)
    return path


def _init(spaced: Path, *extra: str) -> tuple[Path, Path, Path]:
    root = spaced / "root dir"
    record = spaced / "ran.txt"
    program = _stub(spaced / "bin dir" / "iipub", record)
    done = run_cli("init", "--root", str(root), "--iipub", str(program), "--user", USER, *extra, env=clean_env())
    assert done.returncode == 0, done.stderr
    return root, program, record


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("id") is None, reason="--user gives files away: root only")
def test_init_user_is_honoured_in_every_file_and_spaced_paths_are_quoted(spaced: Path) -> None:
    root, program, record = _init(spaced)
    texts = {p.name: p.read_text() for p in root.rglob("*") if p.is_file() and not p.name.endswith(".md")}
    assert f"su {USER} {GROUP}" in texts["iipub"]
    for name, text in texts.items():
        assert "su iipub iipub" not in text and "User=iipub" not in text and "crontab -u iipub" not in text, name
        if name.endswith(".service"):
            assert f"User={USER}\nGroup={GROUP}\n" in text, name
    assert f"crontab -u {USER} " in texts["crontab"]
    assert (root / "srv" / "iipub" / "env").stat().st_uid == int(subprocess.check_output(["id", "-u", USER]))

    # the crontab's reconcile line runs as written (sh, as cron runs it), spaces and all
    line = next(x for x in texts["crontab"].splitlines() if x.startswith("* * * * *") and " reconcile " in x)
    command = line.split(" ", 5)[5]
    subprocess.run(["/bin/sh", "-c", command], env={"IIPUB": str(program), "PATH": "/usr/bin:/bin"}, check=True)
    assert record.read_text().splitlines() == [str(root / "srv" / "iipub"), "reconcile"]
    assert (root / "var" / "log" / "iipub" / "reconcile.log").exists()


@pytest.mark.skipif(shutil.which("logrotate") is None, reason="logrotate is not installed")
@pytest.mark.skipif(os.geteuid() != 0, reason="logrotate's su needs root")
def test_logrotate_accepts_the_generated_file(spaced: Path) -> None:
    root, _, _ = _init(spaced)
    logs = root / "var" / "log" / "iipub"
    (logs / "reconcile.log").write_text("{}\n")
    conf = root / "etc" / "logrotate.d" / "iipub"
    done = subprocess.run(["logrotate", "-d", "-s", str(spaced / "logrotate.state"), str(conf)],
                          capture_output=True, text=True, timeout=60)
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "error" not in out.lower(), out
    assert f"considering log {logs / 'reconcile.log'}" in out, out
    assert f"switching euid from 0 to {int(subprocess.check_output(['id', '-u', USER]))}" in out, out


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.skipif(os.geteuid() != 0, reason="--user gives files away: root only")
def test_systemd_analyze_verifies_the_generated_units(spaced: Path) -> None:
    root, _, _ = _init(spaced)
    units = sorted(str(p) for p in (root / "etc" / "systemd" / "system").glob("iipub-*"))
    assert len(units) == 10
    done = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True, text=True, timeout=120)
    problems = [line for line in (done.stdout + done.stderr).splitlines()
                if "Special user nobody configured" not in line]  # the stand-in user, not a fault
    assert done.returncode == 0 and problems == [], done.stdout + done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="--user gives files away: root only")
def test_init_refuses_a_service_user_who_cannot_run_the_iipub_it_writes(spaced: Path) -> None:
    private = spaced / "private"
    program = _stub(private / "bin" / "iipub", spaced / "ran.txt")
    private.chmod(0o700)
    assert not stat.S_IMODE(private.stat().st_mode) & 0o001
    root = spaced / "root dir"
    done = run_cli("init", "--root", str(root), "--iipub", str(program), "--user", USER, env=clean_env())
    one_line_error(done, 78, f"{private} is not searchable by that user")
    assert not root.exists()  # nothing written
    # an interpreter it cannot run is found too
    script = spaced / "bin dir" / "iipub"
    _stub(script, spaced / "ran.txt")
    hidden = Path(tempfile.mkdtemp(prefix="iipub-interpreter-"))  # mode 0700: root's alone
    try:
        shell = hidden / "sh"
        shutil.copy("/bin/sh", shell)
        script.write_text(f"#!{shell}\necho hi\n")
        one_line_error(run_cli("init", "--root", str(root), "--iipub", str(script), "--user", USER,
                               env=clean_env()), 78, f"{hidden} is not searchable by that user")
    finally:
        shutil.rmtree(hidden, ignore_errors=True)
    assert not root.exists()
