"""The MySQL and SQLite migrations declare the same columns with the same kind of type, and
both agree with the code's table definitions (`iipub.store.db`). Read from the shipped `sql/`."""

from __future__ import annotations

import re

import sqlalchemy as sa

from iipub.store import migrate, tables

_TABLE = re.compile(r"CREATE TABLE IF NOT EXISTS (\w+) \((.*?)\n\)", re.DOTALL)
_COLUMN = re.compile(r"^\s+(\w+)\s+([A-Z]+)(?:\((\d+)(?:,\s*\d+)?\))?(.*)$", re.MULTILINE)
_ALTER = re.compile(r"ALTER TABLE (\w+) (.*?);", re.DOTALL)
_ADDED = re.compile(r"ADD COLUMN (?:IF NOT EXISTS )?(\w+)\s+([A-Z]+)(?:\((\d+)(?:,\s*\d+)?\))?")
_KEYWORDS = {"PRIMARY", "UNIQUE", "KEY", "INDEX", "CONSTRAINT", "FOREIGN", "CHECK"}
# What a declared type is, whichever dialect spells it.
_FAMILY = {
    "CHAR": "text", "VARCHAR": "text", "TEXT": "text", "LONGTEXT": "text", "MEDIUMTEXT": "text",
    "INT": "int", "INTEGER": "int", "BIGINT": "bigint", "SMALLINT": "int", "BOOLEAN": "bool", "TINYINT": "bool",
    "DATETIME": "datetime", "DATE": "date",
}


def _columns(family: str) -> dict[str, dict[str, tuple[str, int | None]]]:
    out: dict[str, dict[str, tuple[str, int | None]]] = {}
    for migration in migrate.available(family):
        for table, body in _TABLE.findall(migration.text):
            cols = out.setdefault(table, {})
            for name, type_name, length, rest in _COLUMN.findall(body):
                if name.upper() in _KEYWORDS:
                    continue
                text_len = int(length) if length and type_name in ("CHAR", "VARCHAR") else None
                kind = _FAMILY[type_name]
                if family == "sqlite" and type_name == "INTEGER" and "PRIMARY KEY" in rest:
                    kind = "rowid"  # SQLite's rowid alias: a 64-bit integer, whatever MySQL calls it
                cols[name] = (kind, text_len)
        for table, body in _ALTER.findall(migration.text):  # columns added by a later migration
            for name, type_name, length in _ADDED.findall(body):
                text_len = int(length) if length and type_name in ("CHAR", "VARCHAR") else None
                out.setdefault(table, {})[name] = (_FAMILY[type_name], text_len)
    return out


def _declared_family(column: sa.Column[object]) -> str:
    t = column.type
    if isinstance(t, sa.types.TypeDecorator):  # iipub.store.db's per-dialect types: their generic side
        t = t.impl_instance
    if isinstance(t, sa.Boolean):
        return "bool"
    if isinstance(t, sa.BigInteger):
        return "bigint"
    if isinstance(t, sa.Integer):
        return "int"
    if isinstance(t, sa.Date) and not isinstance(t, sa.DateTime):
        return "date"
    if isinstance(t, (sa.String, sa.Text)):
        return "text"
    return "datetime"  # the dialect-aware time type of iipub.store.db


def test_both_dialects_declare_the_same_columns_and_type_families() -> None:
    mysql, sqlite = _columns("mysql"), _columns("sqlite")
    assert set(mysql) == set(sqlite)
    for table in mysql:
        assert set(mysql[table]) == set(sqlite[table]), table
        for name, (family, length) in mysql[table].items():
            other_family, other_length = sqlite[table][name]
            same = family == other_family or (other_family == "rowid" and family in ("int", "bigint"))
            assert same, f"{table}.{name}: mysql {family}, sqlite {other_family}"
            assert length == other_length, f"{table}.{name}: mysql length {length}, sqlite {other_length}"


def test_the_migrations_agree_with_the_code_s_table_definitions() -> None:
    mysql = _columns("mysql")
    for table in tables.metadata.sorted_tables:
        assert table.name in mysql, table.name
        for column in table.columns:
            family, length = mysql[table.name][column.name]
            assert family == _declared_family(column), f"{table.name}.{column.name}"
            declared_length = getattr(column.type, "length", None)
            if length is not None:
                assert declared_length == length, f"{table.name}.{column.name}: {declared_length} != {length}"
