"""The migration lock is a row (replicated and certified by Galera), not GET_LOCK."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from iipub.core.errors import MigrationError
from iipub.store import clock, migrate, tables

pytestmark = pytest.mark.mysql


def _lock_row(engine: sa.Engine, holder: str, seconds: float) -> None:
    t = tables.schema_migrations
    with engine.begin() as conn:
        conn.execute(t.insert().values(version="!lock", name=holder, checksum="lock",
                                       applied_at=clock.now(conn, seconds, drill_offset=False)))


def test_a_live_lock_makes_migrate_wait_then_give_up(engine: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    _lock_row(engine, "other-host:1:abcd", 600)
    monkeypatch.setattr(migrate, "LOCK_WAIT_SECONDS", 1.0)  # the three minutes a migrator waits, made one second
    with pytest.raises(MigrationError, match=r"holds the migration lock.*other-host:1:abcd"):
        migrate.migrate(engine)


def test_an_expired_lock_is_taken_over_and_released(engine: sa.Engine) -> None:
    _lock_row(engine, "crashed-host:1:abcd", -5)
    assert migrate.migrate(engine) == []
    with engine.connect() as conn:
        left = conn.execute(sa.select(sa.func.count()).select_from(tables.schema_migrations)
                            .where(tables.schema_migrations.c.version == "!lock")).scalar_one()
    assert left == 0
    assert all(s.applied_at and s.checksum_ok for s in migrate.status(engine))
