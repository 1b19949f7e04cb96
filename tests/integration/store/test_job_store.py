"""The fenced write path against a real database (SQLite, or MariaDB with IIPUB_TEST_MYSQL_URL)."""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from freezegun import freeze_time
from sqlalchemy import event

from iipub.core.errors import DatabaseUnavailable, IllegalTransition, LeaseLost, UnknownId
from iipub.model.states import Reason, State
from iipub.provider.factory import settings_from_dict
from iipub.store import clock, db, mysql_driver, tables
from iipub.store.job_store import Store
from tests.support.databases import private_mariadbd

DAY = dt.date(2026, 11, 29)
PRODUCT = settings_from_dict({}).products["daily-brief"]


def _rows(engine: sa.Engine, table: sa.Table) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(table)).mappings()]


def _scheduled(engine: sa.Engine, worker: str = "w1", lease: float = 60) -> tuple[Store, str]:
    store = Store(engine, worker, lease)
    assert store.schedule(PRODUCT, DAY)
    return store, _rows(engine, tables.jobs)[0]["id"]


def test_01_schedule_creates_uuid_job_in_no_job(engine: sa.Engine) -> None:
    store, job_id = _scheduled(engine)
    job = store.get(job_id)
    assert job.state == State.NO_JOB and job.version == 1 and len(job.id) == 36
    assert [e.to_state for e in store.events(job_id)] == ["NO_JOB"]


def test_11_scheduling_the_same_slot_twice_concurrently_yields_one_job(engine: sa.Engine) -> None:
    stores = [Store(engine, f"w{i}") for i in range(6)]
    barrier = threading.Barrier(len(stores))
    results: list[bool] = []

    def go(s: Store) -> None:
        barrier.wait()
        results.append(s.schedule(PRODUCT, DAY))

    threads = [threading.Thread(target=go, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 5 + [True]
    assert len(_rows(engine, tables.jobs)) == 1
    assert len(_rows(engine, tables.job_events)) == 1
    assert stores[0].schedule(PRODUCT, DAY) is False


def test_two_connections_race_to_lease_exactly_one_wins(db_url: str, engine: sa.Engine) -> None:
    _, job_id = _scheduled(engine)
    engines = [db.make_engine(db_url) for _ in range(2)]
    try:
        stores = [Store(e, f"racer{i}") for i, e in enumerate(engines)]
        barrier = threading.Barrier(2)
        won: dict[str, object] = {}

        def go(s: Store) -> None:
            barrier.wait()
            won[s.worker] = s.acquire_lease(job_id, 1)

        threads = [threading.Thread(target=go, args=(s,)) for s in stores]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [w for w, j in won.items() if j is not None]
        assert len(winners) == 1
        row = _rows(engine, tables.jobs)[0]
        assert row["lease_owner"] == winners[0] and row["version"] == 2
    finally:
        for e in engines:
            e.dispose()


def test_12_stale_version_write_is_rejected_and_changes_nothing(engine: sa.Engine) -> None:
    store, job_id = _scheduled(engine)
    job = store.acquire_lease(job_id, 1)
    assert job is not None
    moved = store.transition(job, State.CREATE_ELIGIBLE, reason=Reason.WINDOW_OPEN)
    before_rows, before_events = _rows(engine, tables.jobs), _rows(engine, tables.job_events)
    with pytest.raises(LeaseLost):
        store.transition(job, State.CREATE_ELIGIBLE, reason=Reason.WINDOW_OPEN)  # job.version is stale
    assert _rows(engine, tables.jobs) == before_rows
    assert _rows(engine, tables.job_events) == before_events
    assert moved.version == before_rows[0]["version"] == 3


def test_failure_after_update_before_commit_leaves_nothing(engine: sa.Engine) -> None:
    store, job_id = _scheduled(engine)
    job = store.acquire_lease(job_id, 1)
    assert job is not None
    before_rows, before_events = _rows(engine, tables.jobs), _rows(engine, tables.job_events)

    def boom(conn: sa.Connection) -> None:
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        store.transition(job, State.CREATE_ELIGIBLE, reason=Reason.WINDOW_OPEN, extra=boom)
    assert _rows(engine, tables.jobs) == before_rows
    assert _rows(engine, tables.job_events) == before_events


def test_illegal_edge_raises_before_any_sql(engine: sa.Engine) -> None:
    store, job_id = _scheduled(engine)
    job = store.acquire_lease(job_id, 1)
    assert job is not None
    statements: list[str] = []

    def count(*args: object) -> None:
        statements.append(str(args[2]))

    event.listen(engine, "before_cursor_execute", count)
    try:
        with pytest.raises(IllegalTransition, match="not an allowed transition"):
            store.transition(job, State.PUBLISHED, reason=Reason.ALL_EVENTS_DELIVERED)  # NO_JOB -> PUBLISHED
        with pytest.raises(IllegalTransition, match="not an allowed transition"):
            # an operator-only edge, taken by a worker
            store.transition(job, State.MANUALLY_SUSPENDED, reason=Reason.WINDOW_OPEN)
        with pytest.raises(IllegalTransition, match="cannot be written by the machine"):
            # ... and an operator's reason written by a worker
            store.transition(job, State.MANUALLY_SUSPENDED, reason=Reason.OPERATOR_SUSPEND)
        with pytest.raises(IllegalTransition, match="not an allowed transition"):
            # ... or with an operator's flag but no operator edge from NO_JOB to PUBLISHED
            store.transition(job, State.PUBLISHED, reason=Reason.OPERATOR_KILL, operator=True)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert statements == []


def test_15_lease_expiry_follows_database_time(engine: sa.Engine) -> None:
    a, job_id = _scheduled(engine, "A", lease=60)
    b = Store(engine, "B", 60)
    job_a = a.acquire_lease(job_id, 1)
    assert job_a is not None
    # 14: a live lease is never taken, whatever version B saw.
    assert b.acquire_lease(job_id, job_a.version) is None
    clock.advance_clock(engine, 30)
    assert b.acquire_lease(job_id, job_a.version) is None
    clock.advance_clock(engine, 31)
    job_b = b.acquire_lease(job_id, job_a.version)
    assert job_b is not None and job_b.lease_owner == "B"
    # A wakes up after its lease expired: its write is fenced out.
    with pytest.raises(LeaseLost):
        a.transition(job_a, State.CREATE_ELIGIBLE, reason=Reason.WINDOW_OPEN)
    b.transition(job_b, State.CREATE_ELIGIBLE, reason=Reason.WINDOW_OPEN)
    events = a.events(job_id)
    assert [(e.to_state, e.worker) for e in events] == [("NO_JOB", "A"), ("CREATE_ELIGIBLE", "B")]


@pytest.mark.host_clock
@pytest.mark.parametrize("skew", [dt.timedelta(hours=-5), dt.timedelta(hours=7)])
def test_48_host_clock_skew_changes_no_lease_decision(engine: sa.Engine, skew: dt.timedelta) -> None:
    a, job_id = _scheduled(engine, "A")
    b = Store(engine, "B")
    with freeze_time(dt.datetime.now(dt.UTC) + skew):
        job = a.acquire_lease(job_id, 1)
        assert job is not None
        assert b.acquire_lease(job_id, job.version) is None
        with engine.connect() as conn:
            db_now = clock.read_now(conn)
    assert abs((db_now - dt.datetime.now(dt.UTC).replace(tzinfo=None)).total_seconds()) < 60


def test_version_increases_on_every_write_and_journal_follows(engine: sa.Engine) -> None:
    store, job_id = _scheduled(engine)
    job = store.acquire_lease(job_id, 1)
    assert job is not None
    job = store.transition(job, State.CREATE_ELIGIBLE, reason=Reason.WINDOW_OPEN, keep_lease=True)
    job = store.transition(job, State.CREATE_IN_FLIGHT, reason=Reason.DISPATCH,
                           changes={"generation_attempts": 1}, keep_lease=True)
    row = _rows(engine, tables.jobs)[0]
    assert row["version"] == job.version == 4
    assert row["lease_owner"] == store.worker and row["generation_attempts"] == 1
    versions = [e.version for e in store.events(job_id)]
    assert versions == sorted(versions) and versions[-1] == 4


def test_release_gives_the_lease_back(engine: sa.Engine) -> None:
    store, job_id = _scheduled(engine)
    job = store.acquire_lease(job_id, 1)
    assert job is not None and store.release(job)
    assert _rows(engine, tables.jobs)[0]["lease_owner"] is None
    assert Store(engine, "other").acquire_lease(job_id, job.version + 1) is not None


def test_suspended_job_is_never_leased_by_a_worker(engine: sa.Engine) -> None:
    store, job_id = _scheduled(engine)
    op = Store(engine, "operator:alice")
    job = op.acquire_lease(job_id, 1, operator=True)
    assert job is not None
    job = op.transition(job, State.MANUALLY_SUSPENDED, reason=Reason.OPERATOR_SUSPEND, operator=True,
                        changes={"suspended_from": "NO_JOB"})
    clock.advance_clock(engine, 3600 * 24)
    assert store.due_candidates(10) == []
    assert store.acquire_lease(job_id, job.version) is None


@pytest.mark.mysql
def test_mysql_rowcount_counts_matched_rows(engine: sa.Engine) -> None:
    """The fence relies on rowcount == matched rows (CLIENT_FOUND_ROWS), even when an
    UPDATE changes nothing."""
    _store, job_id = _scheduled(engine)
    with engine.begin() as conn:
        res = conn.execute(tables.jobs.update().where(tables.jobs.c.id == job_id).values(product=PRODUCT.name))
        assert res.rowcount == 1
        res = conn.execute(tables.jobs.update().where(tables.jobs.c.id == "nope").values(product="x"))
        assert res.rowcount == 0


@pytest.mark.mysql
def test_mysql_session_is_read_committed(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        level = conn.exec_driver_sql("SELECT @@tx_isolation").scalar()
    assert level == "READ-COMMITTED"


def test_claim_leases_each_free_job_of_a_chunk_on_its_own_fence(engine: sa.Engine) -> None:
    store = Store(engine, "w1")
    days = [DAY - dt.timedelta(days=i) for i in range(4)]
    for day in days:
        assert store.schedule(PRODUCT, day)
    ids = {r["edition_date"]: r["id"] for r in _rows(engine, tables.jobs)}
    fresh, stale, held, suspended = (ids[d] for d in days)
    assert Store(engine, "other").acquire_lease(held, 1) is not None  # someone else holds it
    op = Store(engine, "operator:alice")
    job = op.acquire_lease(suspended, 1, operator=True)
    assert job is not None
    op.transition(job, State.MANUALLY_SUSPENDED, reason=Reason.OPERATOR_SUSPEND, operator=True,
                  changes={"suspended_from": "NO_JOB"})
    clock.advance_clock(engine, 1)  # the other lease is still live (60 s)

    got = store.claim([(suspended, 3), (held, 1), (stale, 0), (fresh, 1)])

    assert [j.id for j in got] == [fresh]  # only the job nobody wrote to since version 1
    by_id = {r["id"]: r for r in _rows(engine, tables.jobs)}
    assert by_id[fresh]["lease_owner"] == "w1" and by_id[fresh]["version"] == 2 and got[0].version == 2
    assert by_id[stale]["lease_owner"] is None and by_id[stale]["version"] == 1
    assert by_id[held]["lease_owner"] == "other" and by_id[held]["version"] == 2
    assert by_id[suspended]["state"] == "MANUALLY_SUSPENDED" and by_id[suspended]["lease_owner"] is None
    assert store.claim([]) == []
    # Version 1 of `stale` was current all along: claimed on its right version, it is leased.
    assert [j.id for j in store.claim([(stale, 1)])] == [stale]


def _connection_id(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT CONNECTION_ID()")).scalar_one())


@contextmanager
def _pool_with_a_killed_connection(db_url: str, admin: sa.Engine) -> Iterator[tuple[sa.Engine, int]]:
    """A one-connection pool whose pooled connection the server has just killed."""
    worker = db.make_engine(db_url, pool_size=1)
    try:
        dead = _connection_id(worker)
        with admin.connect() as conn:
            conn.execute(sa.text(f"KILL CONNECTION {dead}"))
        yield worker, dead
    finally:
        worker.dispose()


@pytest.mark.mysql
def test_a_pooled_connection_killed_while_idle_is_pinged_and_replaced(
    db_url: str, engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _pool_with_a_killed_connection(db_url, engine) as (worker, dead):
        # The pool's idle threshold decides whether a checkout pings: set, not waited out.
        monkeypatch.setattr(db, "IDLE_PING_SECONDS", 0.0)  # the pooled connection counts as idle
        assert Store(worker, "w1").schedule(PRODUCT, DAY)  # no error: the ping found it dead first
        assert _connection_id(worker) != dead
        assert len(_rows(engine, tables.jobs)) == 1


@pytest.mark.mysql
def test_a_connection_killed_between_busy_uses_fails_one_call_cleanly_then_heals(
    db_url: str, engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _pool_with_a_killed_connection(db_url, engine) as (worker, _dead):
        # The pool's idle threshold decides whether a checkout pings: set, not waited out.
        monkeypatch.setattr(db, "IDLE_PING_SECONDS", 3600.0)  # handed back just now: not pinged
        store = Store(worker, "w1")
        with pytest.raises(DatabaseUnavailable):
            store.schedule(PRODUCT, DAY)
        assert _rows(engine, tables.jobs) == []  # nothing half-written
        assert store.schedule(PRODUCT, DAY)  # the pool dropped the dead connection
        assert len(_rows(engine, tables.jobs)) == 1


@pytest.mark.parametrize(("reason", "operator", "needle"), [
    ("window_opened", False, "not a declared journal reason"),
    (Reason.OPERATOR_SUSPEND, False, "cannot be written by the machine"),
    (Reason.WINDOW_OPEN, True, "cannot be written by an operator command"),
])
def test_transition_refuses_an_undeclared_or_mismatched_reason(
    engine: sa.Engine, reason: str, operator: bool, needle: str
) -> None:
    store, job_id = _scheduled(engine)
    job = store.acquire_lease(job_id, 1)
    assert job is not None
    before_rows, before_events = _rows(engine, tables.jobs), _rows(engine, tables.job_events)
    to = State.MANUALLY_SUSPENDED if reason == Reason.OPERATOR_SUSPEND else State.CREATE_ELIGIBLE
    with pytest.raises(IllegalTransition, match=needle):
        store.transition(job, to, reason=reason, operator=operator)  # type: ignore[arg-type]
    assert _rows(engine, tables.jobs) == before_rows
    assert _rows(engine, tables.job_events) == before_events


def _accepted(store: Store, n: int) -> list[Any]:
    jobs = []
    for i in range(n):
        store.schedule(PRODUCT, DAY - dt.timedelta(days=i + 1))
    for row in _rows(store.engine, tables.jobs):
        j = store.get(row["id"])
        j = store.transition(j, State.CREATE_ELIGIBLE, reason=Reason.WINDOW_OPEN, changes={"config_fingerprint": "f"})
        j = store.transition(j, State.CREATE_IN_FLIGHT, reason=Reason.DISPATCH, changes={"generation_attempts": 1},
                             detail={"attempt": 1})
        j = store.transition(j, State.ACCEPTED, reason=Reason.ACCEPTED, changes={"response_id": f"resp_{i}"})
        jobs.append(j)
    return jobs


def test_a_batch_of_transitions_commits_once_and_drops_only_the_job_that_lost_its_fence(engine: sa.Engine) -> None:
    store = Store(engine, "w1", 60)
    a, b, c = _accepted(store, 3)
    Store(engine, "other", 60).transition(b, State.QUEUED, reason=Reason.POLL, detail={"status": "queued"})
    commits: list[int] = []
    event.listen(engine, "commit", lambda conn: commits.append(1))
    writes = [store.plan(j, State.IN_PROGRESS, reason=Reason.POLL, changes={"poll_count": 1},
                         detail={"status": "in_progress"}, delay=30) for j in (a, b, c)]
    results = store.transition_many(writes)
    assert [r is not None for r in results] == [True, False, True]
    assert len(commits) == 1
    rows = {r["id"]: r for r in _rows(engine, tables.jobs)}
    assert rows[a.id]["state"] == rows[c.id]["state"] == State.IN_PROGRESS.value
    assert rows[a.id]["version"] == a.version + 1 and rows[a.id]["poll_count"] == 1
    assert rows[b.id]["state"] == State.QUEUED.value and rows[b.id]["poll_count"] == 0  # the other writer's
    polls = [e for e in _rows(engine, tables.job_events) if e["reason"] == "poll"]
    assert sorted((e["job_id"], e["worker"]) for e in polls) == sorted(
        [(a.id, "w1"), (c.id, "w1"), (b.id, "other")])
    with pytest.raises(IllegalTransition):
        store.plan(a, State.NO_JOB, reason=Reason.POLL)


def test_release_if_held_is_one_update_guarded_by_the_lease_owner(engine: sa.Engine) -> None:
    """The machine gives a lease back with one statement on the whole id, whatever version it
    wrote last; the row count says whether it held the lease. No read, no prefix lookup."""
    store, job_id = _scheduled(engine)
    other = Store(engine, "w2")
    leased = store.acquire_lease(job_id, store.get(job_id).version)
    assert leased is not None and leased.lease_owner == "w1"
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", seen)
    try:
        assert other.release_if_held(job_id) is False  # w2 holds nothing: nothing changes
        assert store.get(job_id).version == leased.version and store.get(job_id).lease_owner == "w1"
        statements.clear()
        assert store.release_if_held(job_id) is True
        writes = [s for s in statements if s.lstrip().upper().startswith(("UPDATE", "SELECT"))]
        assert len(writes) == 1 and writes[0].lstrip().upper().startswith("UPDATE")
        assert "LIKE" not in writes[0].upper()
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    after = store.get(job_id)
    assert after.lease_owner is None and after.lease_expiry is None and after.version == leased.version + 1
    assert store.release_if_held(job_id) is False  # already given back


def test_the_machine_finds_jobs_by_whole_id_only_and_operators_by_prefix(engine: sa.Engine) -> None:
    store, job_id = _scheduled(engine)
    with pytest.raises(UnknownId):
        store.get(job_id[:8])
    assert store.lookup(job_id[:8]).id == job_id
    assert store.get(job_id).id == job_id


def test_mysql_connections_share_one_default_tls_context_built_only_for_a_server_with_tls(
        engine: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """PyMySQL's default ("preferred") TLS context is built once per process, not per connection
    (it reads the CA bundle each time), and only when the server offers TLS; the connections
    still work, each on its own socket."""
    if db.dialect_family(engine) != "mysql":
        pytest.skip("PyMySQL only")
    import ssl

    built: list[object] = []
    real = ssl.create_default_context

    def counted(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        built.append(args)
        return real(*args, **kwargs)

    # Counted, not changed: how many TLS contexts the driver builds is the subject.
    monkeypatch.setattr(ssl, "create_default_context", counted)
    with engine.connect() as conn:
        offers_tls = conn.execute(sa.text("SELECT @@have_ssl")).scalar_one() == "YES"
    conns = [engine.connect() for _ in range(3)]
    try:
        assert [c.execute(sa.text("SELECT 1")).scalar_one() for c in conns] == [1, 1, 1]
        raw: list[Any] = [c.connection.dbapi_connection for c in conns]
        assert len({id(r) for r in raw}) == 3
        assert len(built) == (1 if offers_tls else 0)
        # Asked for, every connection's context is the one context.
        contexts = {id(r.ctx._build() if isinstance(r.ctx, mysql_driver._OnFirstUse) else r.ctx) for r in raw}
        assert len(contexts) == 1 and len(built) == 1
    finally:
        for c in conns:
            c.close()


@pytest.mark.mysql
@pytest.mark.slow
def test_a_server_that_offers_tls_is_spoken_to_over_tls_with_one_context(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PyMySQL's preferred mode against a server that offers TLS (as MariaDB 11.4 does by
    default): every connection is encrypted, and the one context is built at the first handshake."""
    import ssl

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem")],
                   check=True, capture_output=True, timeout=60)
    built: list[object] = []
    real = ssl.create_default_context

    def counted(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        built.append(args)
        return real(*args, **kwargs)

    with private_mariadbd(tmp_path, f"--ssl-cert={tmp_path / 'cert.pem'}", f"--ssl-key={tmp_path / 'key.pem'}") as url:
        engine = db.make_engine(url)
        monkeypatch.setattr(ssl, "create_default_context", counted)  # counted, not changed
        try:
            conns = [engine.connect() for _ in range(3)]
            ciphers = [c.execute(sa.text("SHOW SESSION STATUS LIKE 'Ssl_cipher'")).one()[1] for c in conns]
            for c in conns:
                c.close()
        finally:
            engine.dispose()
    assert all(ciphers) and len(ciphers) == 3, ciphers
    assert len(built) <= 1  # none if an earlier connection of this process already built it


def test_a_job_read_as_a_tuple_is_the_job_read_as_a_mapping(engine: sa.Engine) -> None:
    """The claim builds its jobs from tuples (`Job.from_columns`): the same values, types and
    equality as `Job.from_row`; a column the job does not know is left out, a missing one is an error."""
    from iipub.model.jobs import Job

    _, job_id = _scheduled(engine)
    with engine.connect() as conn:
        result = conn.execute(sa.select(tables.jobs).where(tables.jobs.c.id == job_id))
        keys, row = list(result.keys()), result.one()
        mapping = conn.execute(sa.select(tables.jobs).where(tables.jobs.c.id == job_id)).mappings().one()
    fast, slow = Job.from_columns(keys, row), Job.from_row(mapping)
    assert fast == slow and fast.state is State.NO_JOB and fast.is_backfill is False and fast.kill_requested is False
    assert vars(fast) == vars(slow)
    assert Job.from_columns([*keys, "column_of_a_later_migration"], [*row, 1]) == slow
    with pytest.raises(TypeError):
        Job.from_columns(keys[1:], row[1:])  # no id


def test_a_job_parked_anew_or_holding_a_new_response_is_due_for_the_custody_watch(engine: sa.Engine) -> None:
    """A custody watch time left from an earlier parking (read rarely: its response was gone) does
    not carry over to the job's next parking: the fenced writer clears it, so the new response is
    read at the watch's next pass."""
    store, job_id = _scheduled(engine)
    job = store.acquire_lease(job_id, 1)
    assert job is not None
    job = store.transition(job, State.CREATE_ELIGIBLE, reason=Reason.WINDOW_OPEN, keep_lease=True)
    job = store.transition(job, State.CREATE_IN_FLIGHT, reason=Reason.DISPATCH, changes={"generation_attempts": 1},
                           keep_lease=True)
    job = store.transition(job, State.ACCEPTED, reason=Reason.ACCEPTED, changes={"response_id": "resp_2"},
                           keep_lease=True)
    with engine.begin() as conn:  # left by the first response's parking, ten watch periods away
        conn.execute(tables.jobs.update().values(custody_watch_at=dt.datetime(2099, 1, 1)))
    job = store.get(job_id)
    assert job.custody_watch_at is not None
    kept = store.transition(job, State.IN_PROGRESS, reason=Reason.POLL, keep_lease=True)
    assert kept.custody_watch_at is not None and _rows(engine, tables.jobs)[0]["custody_watch_at"] is not None
    parked = store.transition(kept, State.QUARANTINED, reason=Reason.POLL_BUDGET_EXHAUSTED,
                              changes={"quarantine_reason": "poll_budget_exhausted"})
    assert parked.custody_watch_at is None and _rows(engine, tables.jobs)[0]["custody_watch_at"] is None
    assert [j.id for j in store.custody_watch_due(10)] == [job_id]
