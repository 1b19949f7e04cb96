"""iipub on a 3-node MariaDB Galera cluster under node faults (opt-in, minutes long).

    IIPUB_TEST_GALERA=1 .venv/bin/python -m pytest -q -n 0 tests/cluster/test_galera.py

Runs bench/cluster/galera.py's campaign (a reconcile and a relay per node, the chaos campaign's
faults, one node SIGKILLed and restarted, one SIGSTOPped past the lease and resumed) on
nodes it starts itself on loopback ports 33061-33063 (gcomm 45671-45673), as root (the
servers run as the `mysql` user for rsync SST). Not part of the default CI run.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.suite import bench_module

ROOT = Path(__file__).resolve().parents[2]


def _opted_in() -> bool:
    """IIPUB_TEST_GALERA=1 in the environment pytest was started with. tests/conftest.py
    removes every IIPUB_ variable from os.environ before this module is collected, so the
    process's initial environment (/proc/self/environ, which that removal leaves alone) is
    read as well."""
    if os.environ.get("IIPUB_TEST_GALERA") == "1":
        return True
    try:
        initial = Path("/proc/self/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"IIPUB_TEST_GALERA=1" in initial


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not _opted_in(), reason="set IIPUB_TEST_GALERA=1 to run"),
    pytest.mark.skipif(not Path("/usr/lib/galera/libgalera_smm.so").exists(), reason="galera-4 is not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the nodes are started as root and run as the mysql user"),
]


def import_galera() -> Any:
    """bench/cluster/galera.py."""
    return bench_module("galera")


def database_on_every_node(cluster: Any, name: str) -> list[Any]:
    """A new database on the cluster, and an engine on it for each node (once it replicated)."""
    import sqlalchemy as sa

    from iipub.store import db

    admin = sa.create_engine(cluster.nodes[0].url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    admin.dispose()
    cluster.wait_synced(60)
    return [db.make_engine(n.url(name)) for n in cluster.nodes]


def migrate_at_once(engines: list[Any]) -> tuple[list[Any], list[BaseException]]:
    """`migrate.migrate` on every engine at the same moment (one thread each): what each applied,
    and what each raised."""
    import threading

    from iipub.store import migrate

    results: list[Any] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(engines))

    def go(e: Any) -> None:
        barrier.wait()
        try:
            results.append(migrate.migrate(e))
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return results, errors


def test_short_campaign_on_three_nodes_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    galera = import_galera()
    report = tmp_path / "report.json"
    cluster_dir = Path("/tmp") / f"iipub-galera-test-{os.getpid()}"
    try:
        rc = galera.main(["campaign", "--nodes", "3", "--slots", "60", "--seconds", "75", "--seed", "5",
                          "--node-kills", "1", "--node-pauses", "1", "--cluster-dir", str(cluster_dir),
                          "--report", str(report)])
    finally:
        shutil.rmtree(cluster_dir, ignore_errors=True)
    doc = json.loads(report.read_text())
    assert rc == 0, doc.get("violations_by_kind") or doc.get("error")
    figures = doc["figures"]
    assert figures["duplicate_paid_creates_outside_quarantine"] == 0
    assert figures["duplicate_publications"] == 0
    assert figures["lost_outputs"] == 0
    assert figures["stranded_jobs"] == 0
    assert figures["iipub_check_rc"] == 0
    assert {e["event"] for e in doc["node_events"]} >= {"node_sigkill", "node_restart", "node_sigstop", "node_sigcont"}


def test_two_migrations_on_two_nodes_apply_each_migration_once(tmp_path: Path) -> None:
    """GET_LOCK would let both run (it is not replicated); the lock row is certified."""

    import sqlalchemy as sa

    from iipub.store import migrate, tables

    galera = import_galera()
    cluster_dir = Path("/tmp") / f"iipub-galera-mig-{os.getpid()}"
    try:
        with galera.running_cluster(2, cluster_dir, sql_port=33071, gcomm_port=45771, ist_port=45781,
                                    sst_port=45791) as cluster:
            engines = database_on_every_node(cluster, "iipub_mig")
            results, errors = migrate_at_once(engines)
            assert errors == []
            applied = sorted(m.version for r in results for m in r)
            assert applied == [m.version for m in migrate.available("mysql")]
            cluster.wait_synced(60)
            for e in engines:  # every node agrees: each migration recorded once, the lock released
                with e.connect() as conn:
                    versions = sorted(conn.execute(sa.select(tables.schema_migrations.c.version)).scalars())
                assert versions == applied
                e.dispose()
    finally:
        shutil.rmtree(cluster_dir, ignore_errors=True)


def test_0009_on_two_nodes_converts_every_state_once_and_finishes(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Migration 0009 run on both nodes at once over a database holding a job in every state
    (tests/integration/store/test_tracks_migration.py's): every slot past the fork gets its tracks
    once, and the upgraded cluster finishes every slot with no create paid twice."""

    import sqlalchemy as sa

    from iipub.machine import sweep
    from iipub.publish import relay
    from iipub.store import tables
    from tests.integration.store import test_tracks_migration as tm
    from tests.support.simulator import simulator

    galera = import_galera()
    cluster_dir = Path("/tmp") / f"iipub-galera-tracks-{os.getpid()}"
    try:
        with galera.running_cluster(2, cluster_dir, sql_port=33081, gcomm_port=45871, ist_port=45881,
                                    sst_port=45891) as cluster, \
                simulator() as sim:
            engines = database_on_every_node(cluster, "iipub_tracks")
            tm._at_0008(engines[0], monkeypatch)
            s = tm.settings_for(cluster.nodes[0].url("iipub_tracks"), sim, tmp_path)
            ids = tm._populate(engines[0], s, sim)
            paid_before = dict(sim.stats()["creates_by_job"])
            cluster.wait_synced(60)
            _, errors = migrate_at_once(engines)
            assert errors == []
            cluster.wait_synced(60)
            with engines[1].connect() as conn:
                rows = conn.execute(sa.select(tables.tracks.c.job_id, tables.tracks.c.lang)).all()
            assert len(rows) == len(set(rows)) == 2 * len(tm.EXPECTED_TRACKS)
            assert {job_id for job_id, _ in rows} == {ids[state] for state in tm.EXPECTED_TRACKS}
            for _ in range(6):
                sweep.run(s, engines[0])
                relay.run(s, engines[0])
                sim.advance(5)
            stats = sim.stats()
            for state, job_id in ids.items():
                new = stats["creates_by_job"].get(job_id, 0) - paid_before.get(job_id, 0)
                assert new == (0 if state in tm.PAID else 1), state
            for e in engines:
                e.dispose()
    finally:
        shutil.rmtree(cluster_dir, ignore_errors=True)
