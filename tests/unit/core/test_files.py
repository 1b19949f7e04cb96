"""Files replaced whole: a reader sees the old bytes or the new ones, the file is world-readable,
and a failed write leaves the old file and no temporary file behind. Real files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from iipub.core.files import fsync_dir, replace_atomically


def test_a_file_is_replaced_whole_and_readable_by_others(tmp_path: Path) -> None:
    target = tmp_path / "index.html"
    target.write_bytes(b"old")
    replace_atomically(target, b"new page")
    fsync_dir(tmp_path)
    assert target.read_bytes() == b"new page"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # a web server runs as another user
    assert [p.name for p in tmp_path.iterdir()] == ["index.html"]  # no temporary file left


def test_the_temporary_file_can_live_in_another_folder_of_the_same_filesystem(tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    staging.mkdir()
    replace_atomically(tmp_path / "metrics.prom", b"x 1\n", tmp_dir=staging)
    assert (tmp_path / "metrics.prom").read_bytes() == b"x 1\n"
    assert list(staging.iterdir()) == []


def test_a_failed_replacement_keeps_the_old_file_and_cleans_up(tmp_path: Path) -> None:
    target = tmp_path / "page.html"
    target.write_bytes(b"old")
    (tmp_path / "dir-in-the-way").mkdir()
    with pytest.raises(IsADirectoryError):
        replace_atomically(tmp_path / "dir-in-the-way", b"new")  # a rename over a folder fails
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir-in-the-way", "page.html"]


def test_fsync_dir_needs_a_folder(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        fsync_dir(tmp_path / "file")
    assert os.path.isdir(tmp_path)
