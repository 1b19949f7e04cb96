"""How far the tests mirror the code: a module `iipub/<path>/<name>.py` is mirrored when
`tests/unit/<path>/test_<name>.py` or `tests/integration/<path>/test_<name>.py` exists.
`python -m tests.support.mirror` prints the figure and the modules that have no test file yet."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LEVELS = ("unit", "integration")


def modules() -> list[Path]:
    """Every module of the package, as a path below `iipub/` (packages' `__init__` and `__main__` aside)."""
    return sorted(p.relative_to(ROOT / "iipub") for p in (ROOT / "iipub").rglob("*.py")
                  if p.stem not in ("__init__", "__main__"))


def test_files_of(module: Path) -> list[Path]:
    return [f for level in LEVELS
            if (f := ROOT / "tests" / level / module.parent / f"test_{module.stem}.py").is_file()]


def mirrored() -> tuple[list[Path], list[Path]]:
    """(the modules with a test file of their name, those without)."""
    found = modules()
    return [m for m in found if test_files_of(m)], [m for m in found if not test_files_of(m)]


def main() -> None:
    done, missing = mirrored()
    total = len(done) + len(missing)
    print(f"{len(done)} of {total} modules have a test file of their name ({100 * len(done) / total:.1f} %)")
    if "--missing" in sys.argv[1:]:
        for m in missing:
            print(f"  iipub/{m.as_posix()}")


if __name__ == "__main__":
    main()
