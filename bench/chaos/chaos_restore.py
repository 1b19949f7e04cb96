"""The chaos campaign's restore step (`bench/chaos/chaos.py --restore`): a backup taken while the
workers run (one consistent read of every table), restored once they are stopped, and what
the restore must not have cost, read from outside the database: the public site's bytes and
the spend ledger's order of lines (no paid create for a slot after its publication)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from iipub.store import tables

Backup = dict[str, list[dict[str, Any]]]


def _tables() -> list[sa.Table]:
    return [t for t in tables.metadata.sorted_tables if t is not tables.schema_migrations]


def take_backup(engine: sa.Engine) -> Backup:
    """Every row of every iipub table, read in one transaction (InnoDB's consistent read, as a
    `mysqldump --single-transaction` would see it)."""
    with engine.connect() as conn, conn.begin():
        return {t.name: [dict(r) for r in conn.execute(sa.select(t)).mappings()] for t in _tables()}


def restore(engine: sa.Engine, backup: Backup) -> None:
    """Make the database hold exactly the backup's rows, in one transaction."""
    tables = _tables()
    with engine.begin() as conn:
        for t in reversed(tables):
            conn.execute(t.delete())
        for t in tables:
            rows = backup.get(t.name) or []
            for i in range(0, len(rows), 500):
                conn.execute(t.insert(), rows[i:i + 500])


def pages(root: Path) -> dict[str, str]:
    """sha256 of every file of the public site, by path."""
    if not root.is_dir():
        return {}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def changed_pages(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Edition files published before that were removed or rewritten with other bytes (index,
    month and feed pages legitimately change as later editions arrive)."""
    return sorted(p for p, sha in before.items() if p.endswith(".json") and after.get(p) != sha)


def paid_after_publication(ledger: Path) -> list[str]:
    """Slots the spend ledger shows a paid create for after the slot's editions were published."""
    published: set[str] = set()
    repaid: set[str] = set()
    try:
        lines = ledger.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        try:
            rec = json.loads(line)
            kind, slot = rec["t"], str(rec["slot"])
        except (ValueError, KeyError, TypeError):
            continue
        if kind == "published":
            published.add(slot)
        elif kind == "intent" and slot in published:
            repaid.add(slot)
    return sorted(repaid)
