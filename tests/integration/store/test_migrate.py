"""Migrations == the code's table definitions, and re-running them is a no-op."""

from __future__ import annotations

import threading

import sqlalchemy as sa

from iipub.store import db, migrate, tables


def _schema(engine: sa.Engine) -> dict[str, dict[str, object]]:
    insp = sa.inspect(engine)
    out: dict[str, dict[str, object]] = {}
    for name in sorted(insp.get_table_names()):
        columns = {c["name"]: bool(c["nullable"]) for c in insp.get_columns(name)}
        pk = tuple(insp.get_pk_constraint(name)["constrained_columns"])
        # SQLAlchemy types an index's column_names as list[str | None] (None for an expression).
        uniques: set[tuple[str | None, ...]] = {tuple(u["column_names"]) for u in insp.get_unique_constraints(name)}
        indexes: set[tuple[str | None, ...]] = set()
        for ix in insp.get_indexes(name):
            cols = tuple(ix["column_names"])
            if ix.get("unique"):
                uniques.add(cols)  # MySQL reports unique keys as unique indexes
            else:
                indexes.add(cols)
        out[name] = {"columns": columns, "pk": pk, "uniques": uniques, "indexes": indexes}
    return out


def _declared() -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for t in tables.metadata.sorted_tables:
        out[t.name] = {
            "columns": {c.name: bool(c.nullable) and not c.primary_key for c in t.columns},
            "pk": tuple(c.name for c in t.primary_key.columns),
            "uniques": {tuple(c.name for c in u.columns) for u in t.constraints if isinstance(u, sa.UniqueConstraint)},
            "indexes": {tuple(c.name for c in ix.columns) for ix in t.indexes},
        }
    return dict(sorted(out.items()))


def test_migrations_match_table_definitions(engine: sa.Engine) -> None:
    assert _schema(engine) == _declared()


def test_rerunning_migrate_is_a_noop(engine: sa.Engine) -> None:
    before = _schema(engine)
    assert migrate.migrate(engine) == []
    assert _schema(engine) == before
    statuses = migrate.status(engine)
    assert statuses and all(s.applied_at and s.checksum_ok for s in statuses)


def test_two_concurrent_migrations_apply_each_once(db_url: str) -> None:
    engines = [db.make_engine(db_url) for _ in range(2)]
    results: list[list[migrate.Migration]] = []
    barrier = threading.Barrier(2)

    def go(e: sa.Engine) -> None:
        barrier.wait()
        results.append(migrate.migrate(e))

    try:
        threads = [threading.Thread(target=go, args=(e,)) for e in engines]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        applied = sorted(m.version for r in results for m in r)
        assert applied == [m.version for m in migrate.available(db.dialect_family(engines[0]))]
        with engines[0].connect() as conn:
            count = sa.select(sa.func.count()).select_from(tables.schema_migrations)
            assert conn.execute(count).scalar() == len(applied)
            assert conn.execute(sa.select(sa.func.count()).select_from(tables.clock)).scalar() == 1
    finally:
        for e in engines:
            e.dispose()
