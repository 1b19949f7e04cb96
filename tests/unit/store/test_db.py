"""How Galera's errors are classified (docs/scale-out.md, section 5)."""

from __future__ import annotations

import pymysql
import pytest
import sqlalchemy as sa

from iipub.core.errors import Contention
from iipub.store import db


def _err(code: int, text: str) -> sa.exc.OperationalError:
    return sa.exc.OperationalError("COMMIT", {}, pymysql.err.OperationalError(code, text))


def test_a_certification_failure_is_contention() -> None:
    exc = _err(1213, "Deadlock found when trying to get lock; try restarting transaction")
    assert db.is_contention(exc)
    assert not db.is_unreachable(exc)


@pytest.mark.parametrize(("code", "text"), [
    (1047, "WSREP has not yet prepared node for application use"),
    (1180, ("Error while appending streaming replication fragment(provider status: Not connected to Primary "
           "Component)")),
])
def test_a_node_outside_the_primary_component_is_unavailable_not_a_job_fault(code: int, text: str) -> None:
    exc = _err(code, text)
    assert db.is_unreachable(exc)
    assert not db.is_contention(exc)


def _contention(code: int, text: str) -> Contention:
    """What `db.transaction` raises for a driver error it classifies as contention."""
    try:
        raise Contention(f"database contention: {text}") from _err(code, text)
    except Contention as exc:
        return exc


def test_two_nodes_scheduling_the_same_slot_is_already_present_not_a_failure() -> None:
    # One server: 1062 at INSERT. Galera: the loser's COMMIT fails certification with 1213.
    assert db.slot_taken(sa.exc.IntegrityError("INSERT", {}, pymysql.err.IntegrityError(1062, "Duplicate entry")))
    assert db.slot_taken(_contention(1213, "Deadlock found when trying to get lock; try restarting transaction"))
    assert db.slot_taken(_contention(1205, "Lock wait timeout exceeded; try restarting transaction"))
    assert not db.slot_taken(_err(2006, "MySQL server has gone away"))
    assert not db.slot_taken(Contention("no driver error under it"))
