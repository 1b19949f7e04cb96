"""The database clock: every time iipub writes comes from it, and the drills move it forward
without sleeping (a lease expires, a backoff passes)."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from iipub.core.timefmt import naive_utc
from iipub.store import clock


@pytest.mark.host_clock
def test_the_clock_is_read_naive_utc_and_close_to_the_hosts(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        now = clock.read_now(conn)
    assert now.tzinfo is None
    assert abs((now - dt.datetime.now(dt.UTC).replace(tzinfo=None)).total_seconds()) < 120


def test_advancing_the_clock_moves_every_reading_forward(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        before = clock.read_now(conn)
    clock.advance_clock(engine, 3600)
    with engine.connect() as conn:
        after = clock.read_now(conn)
        in_sql = conn.execute(sa.select(clock.now(engine, 60))).scalar_one()
    assert 3600 <= (after - before).total_seconds() < 3700
    assert 3600 + 60 <= (naive_utc(in_sql) - before).total_seconds() < 3760
