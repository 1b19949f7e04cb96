"""The layer contract (pyproject's `[tool.importlinter]`) is executable and is the table of
docs/architecture.md: a planted back-import breaks it, and every module it names sits in the
documentation's row of its layer."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
# The contract's layers, top first, and the row of docs/architecture.md each belongs to.
DOC_ROWS = ["command line", "command line", "drivers", "drivers", "edges (I/O)", "decisions (pure)",
            "values and rules (pure)"]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _layers() -> list[list[str]]:
    (layers,) = [c["layers"] for c in CONTRACT["contracts"] if c["type"] == "layers"]
    return [[m.strip() for m in re.split(r"[:|]", layer)] for layer in layers]


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--config", str(tree / "pyproject.toml"), "--no-cache"],
                          cwd=tree, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not LINT_IMPORTS.exists():
        pytest.skip("lint-imports is not installed beside this interpreter")
    tree = tmp_path_factory.mktemp("layers")
    shutil.copytree(ROOT / "iipub", tree / "iipub", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def test_the_contract_holds_on_the_tree(tree_copy: Path) -> None:
    out = _lint(tree_copy)
    assert out.returncode == 0, out.stdout[-2000:]
    assert "0 broken" in out.stdout


@pytest.mark.parametrize(("module", "planted"), [
    ("handlers.py", "from . import store  # planted\n"),      # a decision reaching up into an edge
    ("states.py", "import sqlalchemy  # planted\n"),         # a pure value reaching the database
    ("status.py", "from . import tables  # planted\n"),       # the status report reading rows itself
])
def test_a_planted_back_import_breaks_the_contract(tree_copy: Path, module: str, planted: str) -> None:
    target = tree_copy / "iipub" / module
    original = target.read_text()
    target.write_text(original.replace("from __future__ import annotations\n",
                                       "from __future__ import annotations\n" + planted, 1))
    try:
        out = _lint(tree_copy)
    finally:
        target.write_text(original)
    assert out.returncode != 0
    assert "BROKEN" in out.stdout and f"iipub.{module[:-3]}" in out.stdout


def test_every_module_of_the_contract_is_in_its_layer_row_of_the_architecture_table() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    rows = {m.group(1).strip(): m.group(2) for m in re.finditer(r"^\| ([^|`]+) \| (.+?) \|", doc, re.MULTILINE)}
    layers = _layers()
    assert len(layers) == len(DOC_ROWS)
    missing = [(m, row) for layer, row in zip(layers, DOC_ROWS, strict=True) for m in layer
               if not re.search(rf"`{re.escape(m)}[`/ ]", rows[row])]
    assert missing == []


def test_the_contract_names_every_module_of_the_package() -> None:
    named = {m for layer in _layers() for m in layer}
    on_disk = {p.stem if p.is_file() else p.name for p in (ROOT / "iipub").iterdir()
               if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}
    assert named == on_disk
