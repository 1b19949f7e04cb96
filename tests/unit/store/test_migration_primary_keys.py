"""Every table the MySQL migrations create has a primary key.

Galera replicates row events keyed by the primary key: a table without one is replicated
badly (or refused outright with `wsrep_certify_nonPK` off / `innodb_force_primary_key` on),
and its deletes can hit different rows on different nodes. See docs/scale-out.md.
"""

from __future__ import annotations

import re

from iipub.store import migrate

_CREATE = re.compile(r"^\s*CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?`?(\w+)`?\s*\((.*)\)", re.IGNORECASE | re.DOTALL)


def _tables(family: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for m in migrate.available(family):
        for stmt in m.statements():
            found = _CREATE.match(stmt)
            if found:
                out[found.group(1)] = found.group(2)
    return out


def test_every_mysql_table_has_a_primary_key() -> None:
    tables = _tables("mysql")
    assert len(tables) >= 10, sorted(tables)
    missing = sorted(name for name, body in tables.items() if not re.search(r"PRIMARY\s+KEY", body, re.IGNORECASE))
    assert missing == []


def test_every_mysql_table_is_innodb() -> None:
    # Galera replicates InnoDB only (MyISAM replication is experimental and off by default).
    tables = _tables("mysql")
    stmts = [s for m in migrate.available("mysql") for s in m.statements() if _CREATE.match(s)]
    assert len(stmts) == len(tables)
    assert [s.split("(", 1)[0] for s in stmts if not re.search(r"ENGINE\s*=\s*InnoDB", s, re.IGNORECASE)] == []
