"""The layer contract (pyproject's `[tool.importlinter]`) is executable and is the layout table of
docs/architecture.md: packages import only the floors below them, no import cycle exists (at
module level or inside a function), the pure modules reach no I/O library, the status report
imports values only, no module of the package imports the tests' in-memory provider, only the
store speaks SQL or names the tables, and a planted violation of each rule breaks the contract."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _floors() -> list[list[str]]:
    (layers,) = [c["layers"] for c in CONTRACT["contracts"] if c["type"] == "layers"]
    return [[m.strip() for m in re.split(r"[:|]", layer)] for layer in layers]


def _layout_rows() -> list[tuple[str, str]]:
    """The rows of the layout table: (package or top-level modules, the modules it lists)."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    table = doc[doc.index("## Layout"):]
    return [(m.group(1).strip(), m.group(2)) for m in re.finditer(r"^\| `([^`|]+)` \| (.+?) \|$", table, re.MULTILINE)]


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--config", str(tree / "pyproject.toml"), "--no-cache"],
                          cwd=tree, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # import-linter is in the test extra: the README's test command runs these tests.
    assert LINT_IMPORTS.exists(), "lint-imports is not installed beside this interpreter: pip install '.[test]'"
    tree = tmp_path_factory.mktemp("layers")
    shutil.copytree(ROOT / "iipub", tree / "iipub", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def test_the_contract_holds_on_the_tree(tree_copy: Path) -> None:
    out = _lint(tree_copy)
    assert out.returncode == 0, out.stdout[-2000:]
    assert "0 broken" in out.stdout


@pytest.mark.parametrize(("module", "planted", "contract"), [
    # a floor reaching up: the database layer importing the sweep
    ("store/db.py", "from iipub.machine import steps  # planted\n", "floors below it"),
    # a pure value reaching the database library
    ("model/states.py", "import sqlalchemy  # planted\n", "pure modules"),
    # a cycle hidden in a function body: config imports fingerprint; fingerprint would import config back
    ("settings/fingerprint.py", "\n\ndef _planted() -> None:\n    from iipub.settings import config  # noqa\n",
     "no import cycle"),
    # a cycle between two packages of one floor's neighbours: money reaching back into machine
    ("money/spend.py", "\n\ndef _planted() -> None:\n    from iipub.machine import decisions  # noqa\n",
     "floors below it"),
    # a production path reaching for the tests' in-memory provider
    ("machine/sweep.py", "\n\ndef _planted() -> None:\n    from iipub.provider import fake  # noqa\n",
     "only the provider factory imports it"),
    # the provider interface reaching an HTTP library
    ("provider/interface.py", "import httpx  # planted\n", "pure modules"),
    # the status report reaching the rows it reports on
    ("observe/status_report.py", "from iipub.store import tables  # planted\n", "the status report"),
    # ... or a value type it shows back in its I/O module
    ("observe/status_report.py", "from iipub.observe.heartbeat import summary  # planted\n", "the status report"),
    # SQL outside the store: a reader reaching the database library, or the table objects
    ("observe/metrics.py", "import sqlalchemy  # planted\n", "only iipub.store speaks SQL"),
    ("publish/relay.py", "from iipub.store import tables  # planted\n", "only iipub.store speaks SQL"),
    # ... even a type named at type-checking time only
    ("money/payments.py", "\n\nif False:\n    from sqlalchemy.engine import Engine  # noqa\n",
     "only iipub.store speaks SQL"),
])
def test_a_planted_violation_breaks_the_contract(tree_copy: Path, module: str, planted: str, contract: str) -> None:
    target = tree_copy / "iipub" / module
    original = target.read_text()
    if planted.startswith("\n"):
        target.write_text(original + planted)
    else:
        target.write_text(original.replace("from __future__ import annotations\n",
                                           "from __future__ import annotations\n" + planted, 1))
    try:
        out = _lint(tree_copy)
    finally:
        target.write_text(original)
    assert out.returncode != 0
    broken = [line for line in out.stdout.splitlines() if " BROKEN" in line]
    assert any(contract in line for line in broken), out.stdout[-2000:]


def test_the_contract_names_every_package_and_top_level_module() -> None:
    named = {m for floor in _floors() for m in floor}
    on_disk = {p.stem if p.is_file() else p.name for p in (ROOT / "iipub").iterdir()
               if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}
    assert named == on_disk


def test_the_layout_table_lists_every_package_in_floor_order_and_every_module_in_its_row() -> None:
    rows = _layout_rows()
    packages = [name for name, _ in rows if "/" not in name and "." not in name]
    floors = [m for floor in _floors() for m in floor if (ROOT / "iipub" / m).is_dir()]
    assert packages == floors  # the table reads top floor first, like the contract
    listed = dict(rows)
    missing = []
    for package in floors:
        for path in sorted((ROOT / "iipub" / package).rglob("*.py")):
            if path.stem == "__init__" and path.parent == ROOT / "iipub" / package:
                continue
            rel = path.relative_to(ROOT / "iipub" / package).with_suffix("").as_posix().replace("/__init__", "/")
            if not re.search(rf"`{re.escape(rel)}`", listed[package]):
                missing.append(f"{package}/{rel}")
    assert missing == []


def test_a_new_top_level_module_must_be_placed() -> None:
    """At most a handful of modules sit beside the packages: the entry points."""
    top = sorted(p.stem for p in (ROOT / "iipub").glob("*.py") if p.stem != "__init__")
    assert top == ["__main__", "entry", "webhook"]


def test_every_command_lives_in_a_module_named_after_it() -> None:
    """`cli/<command>_cmd.py` holds `iipub <command>` (a group with its subcommands); an undo sits
    beside its command. Every command module is a command's."""
    from iipub.cli import COMMANDS

    undo = {"unpause": "pause", "resume": "suspend"}
    assert {name: module for name, (module, _) in COMMANDS.items()
            if module != f"{undo.get(name, name)}_cmd"} == {}
    modules = {p.stem for p in (ROOT / "iipub" / "cli").glob("*_cmd.py")}
    assert modules == {module for module, _ in COMMANDS.values()}


def test_the_tests_mirror_the_code() -> None:
    """Tests of a module sit at `tests/{unit,integration}/<its package path>/test_<module>.py`:
    at least 60 % of the modules have one, and every test folder mirrors a package."""
    from tests.support import mirror

    done, missing = mirror.mirrored()
    assert len(done) / (len(done) + len(missing)) >= 0.6, f"{len(done)} of {len(done) + len(missing)}"
    for level in mirror.LEVELS:
        for folder in (ROOT / "tests" / level).rglob("*"):
            if folder.is_dir() and folder.name != "__pycache__":
                rel = folder.relative_to(ROOT / "tests" / level)
                assert (ROOT / "iipub" / rel / "__init__.py").is_file(), f"tests/{level}/{rel} mirrors no package"
                assert (folder / "__init__.py").is_file(), f"tests/{level}/{rel} has no __init__.py"


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement in `body` and in the blocks nested in it (a class is a statement: the
    expressions around it need not be walked)."""
    for stmt in body:
        yield stmt
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, field, None)
            if isinstance(inner, list):
                yield from _statements(inner)
        for clause in [*getattr(stmt, "handlers", ()), *getattr(stmt, "cases", ())]:
            yield from _statements(clause.body)


def test_every_class_name_is_unique_across_the_package() -> None:
    """A class is known by its name alone in logs, tracebacks and docs: no two share one."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted((ROOT / "iipub").rglob("*.py")):
        for node in _statements(ast.parse(path.read_text()).body):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert {name: at for name, at in where.items() if len(at) > 1} == {}
