"""Every table has one writer module, under `iipub/store/` (docs/architecture.md, "A concept
across floors"): read from the source, each `insert()`, `update()` or `delete()` of a table object
is attributed to its module, and no table is written by two modules. Two tables are still written
from above while they move under the store: the import contract names the same two modules."""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

from iipub.store import tables

ROOT = Path(__file__).resolve().parents[2]
WRITES = {"insert", "update", "delete"}
# Moving under iipub/store/: the contract's named exceptions (none left), and only these tables.
MOVING: dict[str, set[str]] = {}


def _table_of(node: ast.expr, names: dict[str, str]) -> str | None:
    """The table an expression names: `tables.jobs`, or a name bound to one."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "tables":
        return node.attr if node.attr in tables.metadata.tables else None
    if isinstance(node, ast.Name):
        return names.get(node.id)
    return None


def _bindings(body: list[ast.stmt], names: dict[str, str]) -> dict[str, str]:
    """`t = tables.x` and `a, b = tables.x, tables.y` in `body` (not in nested functions)."""
    found = dict(names)
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node is not stmt:
                continue
            if isinstance(node, ast.ImportFrom) and node.module == "iipub.store.tables":
                found.update({a.asname or a.name: a.name for a in node.names if a.name in tables.metadata.tables})
            if not isinstance(node, ast.Assign):
                continue
            for target in node.targets:
                pairs = (zip(target.elts, node.value.elts, strict=False)
                         if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                         else [(target, node.value)])
                for name, value in pairs:
                    table = _table_of(value, found)
                    if isinstance(name, ast.Name) and table is not None:
                        found[name.id] = table
    return found


def _written(tree: ast.Module) -> set[str]:
    out: set[str] = set()
    module_names = _bindings(tree.body, {})
    scopes: list[tuple[ast.AST, dict[str, str]]] = [(tree, module_names)]
    while scopes:
        scope, names = scopes.pop()
        body = getattr(scope, "body", [])
        local = _bindings(body, names) if scope is not tree else names
        for stmt in body:
            for node in ast.walk(stmt):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    scopes.append((node, local))
                    continue
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in WRITES and not node.args):
                    table = _table_of(node.func.value, local)
                    if table is not None:
                        out.add(table)
    return out


@functools.cache
def _scan() -> dict[str, frozenset[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted((ROOT / "iipub").rglob("*.py")):
        text = path.read_text()
        if not any(f".{verb}(" in text for verb in WRITES):
            continue  # no call the scan could attribute: skip parsing it
        for table in _written(ast.parse(text)):
            found[table].add(path.relative_to(ROOT).as_posix())
    return {table: frozenset(modules) for table, modules in found.items()}


def writers() -> dict[str, set[str]]:
    """Each table's writer modules, read from the source once per test process."""
    return {table: set(modules) for table, modules in _scan().items()}


def test_no_table_has_two_writers() -> None:
    assert {t: sorted(w) for t, w in writers().items() if len(w - MOVING.keys()) > 1} == {}


def test_every_writer_is_under_the_store_but_the_named_exceptions() -> None:
    outside = {(t, w) for t, ws in writers().items() for w in ws if not w.startswith("iipub/store/")}
    assert outside == {(t, w) for w, ts in MOVING.items() for t in ts}


def test_the_scan_sees_the_writers_it_should() -> None:
    """The scan is no vacuous pass: it finds a writer of every table, and the ones the
    architecture names."""
    w = writers()
    assert set(w) == set(tables.metadata.tables)
    assert w["jobs"] == {"iipub/store/job_store.py"}
    assert w["spend"] == {"iipub/store/spend_rows.py"}
    assert w["create_gate"] == {"iipub/store/gate_rows.py"}
    assert w["runs"] == {"iipub/store/run_rows.py"}
    assert w["gate_events"] - MOVING.keys() == {"iipub/store/gate_rows.py"}


def test_the_architecture_names_each_tables_writer() -> None:
    """docs/architecture.md's paragraph of writers names every table beside its writer module."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    start = doc.index("Every table has exactly one writer module")
    paragraph = " ".join(doc[start:doc.index("\n\n", start)].split())
    missing = []
    for table, modules in writers().items():
        for module in modules:
            stem = Path(module).stem
            if f"`{table}`" not in paragraph or f"{stem}`" not in paragraph:
                missing.append(f"{table}: {module}")
    assert missing == []
