"""`iipub init --root DIR`: a host's folders and files laid out under DIR once; a second run finds
them there and writes nothing (exit 73)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.cli import one_line_error, run_cli


def test_a_host_is_laid_out_once(cli_env: dict[str, str], tmp_path: Path) -> None:
    root = tmp_path / "host"
    run_cli("init", "--root", str(root), "--user", "root", "--iipub", sys.executable, env=cli_env, check=True)
    laid = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert laid and any(p.endswith(".toml") for p in laid)
    before = {p: (root / p).read_bytes() for p in laid}
    one_line_error(run_cli("init", "--root", str(root), "--user", "root", "--iipub", sys.executable, env=cli_env),
                   73, "init writes nothing")
    assert {p: (root / p).read_bytes() for p in laid} == before


def test_an_unknown_user_is_refused_before_anything_is_written(cli_env: dict[str, str], tmp_path: Path) -> None:
    root = tmp_path / "host"
    one_line_error(run_cli("init", "--root", str(root), "--user", "no-such-user-here", env=cli_env), 78,
                   "no user 'no-such-user-here'")
    assert not root.exists() or not any(root.rglob("*"))
