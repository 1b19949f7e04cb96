"""Files replaced whole, so readers see the old bytes or the new ones, never a mix: the static
site's pages and state, and the Prometheus textfile."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["fsync_dir", "replace_atomically"]


def replace_atomically(path: Path, data: bytes, *, tmp_dir: Path | None = None) -> None:
    """Write `data` to a hidden temporary file (`.<name>.<random>.tmp`, in `tmp_dir` or beside
    `path`; same filesystem), fsync it, make it world-readable, rename it over `path`. The
    directory is not fsynced here: callers do it once for all they wrote (`fsync_dir`)."""
    fd, tmp = tempfile.mkstemp(dir=tmp_dir or path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a web server or a collector runs as another user
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def fsync_dir(path: Path) -> None:
    """Make the renames in directory `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
