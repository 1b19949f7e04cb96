"""How the suite itself is arranged: parametrized families whose first case runs in the fast
loop, and bench/ modules imported as the benchmarks run."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest


def bench_module(name: str) -> Any:
    """bench/<concept>/NAME.py, imported as the benchmarks run (bench/ and its concept folders,
    bench/support among them, are not packages: on sys.path just for the import)."""
    bench = Path(__file__).resolve().parents[2] / "bench"
    folders = [str(bench), *(str(d) for d in sorted(bench.iterdir()) if d.is_dir() and any(d.glob("*.py")))]
    sys.path[:0] = folders
    try:
        return importlib.import_module(name)
    finally:
        for folder in folders:
            sys.path.remove(folder)


def fast_first(values: Sequence[Any], fast: int = 1) -> list[Any]:
    """A family of parametrized cases: the first `fast` run in the fast loop (`-m "not slow"`),
    the others with the slow tests (CI runs them all)."""
    return [*values[:fast], *(pytest.param(v, marks=pytest.mark.slow) for v in values[fast:])]
