"""The sweep's write batches: the poll decisions of one claimed chunk, written in one transaction
once the chunk's last job is done (`Store.transition_many`): one COMMIT for the chunk instead of
one per job."""

from __future__ import annotations

import threading

import structlog

from iipub.core.errors import Contention, DatabaseUnavailable
from iipub.machine.run.counters import Counters
from iipub.model.jobs import Job
from iipub.store.job_store import PlannedWrite, Store

log = structlog.get_logger("iipub.reconcile")


class WriteBatch:
    """One chunk's deferred writes. Each UPDATE is still fenced on its own; a job whose fence
    failed is dropped, the rest commit. If contention rolls the batch back, each write is tried
    again on its own."""

    def __init__(self, store: Store, counters: Counters, job_ids: list[str]) -> None:
        self._store = store
        self._counters = counters
        self._left = set(job_ids)
        self._writes: list[PlannedWrite] = []
        self._lock = threading.Lock()

    def defer(self, write: PlannedWrite) -> None:
        with self._lock:
            self._writes.append(write)

    def done(self, job_id: str) -> None:
        with self._lock:
            self._left.discard(job_id)
            if self._left or not self._writes:
                return
            writes, self._writes = self._writes, []
        self._flush(writes)

    def _flush(self, writes: list[PlannedWrite]) -> None:
        store = self._store
        try:
            results: list[Job | None] = list(store.transition_many(writes))
        except Contention as exc:
            self._counters.count("contention")
            log.warning("contention", job_ids=[w.job.id for w in writes], worker=store.worker, error=str(exc))
            results = [self._alone(w) for w in writes]
        except DatabaseUnavailable as exc:  # nothing written: the leases expire and the polls repeat
            self._counters.count("errors", len(writes))
            log.error("database_unavailable", job_ids=[w.job.id for w in writes], worker=store.worker,
                      error=str(exc))
            return
        for w, job in zip(writes, results, strict=True):
            if job is None:
                self._counters.count("lease_lost")
                log.warning("lease_lost", job_id=w.job.id, worker=store.worker)
            else:
                self._counters.entered(w.to_state)

    def _alone(self, w: PlannedWrite) -> Job | None:
        try:
            return self._store.transition_many([w])[0]
        except (Contention, DatabaseUnavailable) as exc:
            log.warning("poll_write_lost", job_id=w.job.id, worker=self._store.worker, error=str(exc))
            return None


class WriteBatches:
    """The batch of each job the sweep has claimed in a chunk."""

    def __init__(self, store: Store, counters: Counters) -> None:
        self._store = store
        self._counters = counters
        self._of: dict[str, WriteBatch] = {}
        self._lock = threading.Lock()

    def open(self, job_ids: list[str]) -> WriteBatch:
        """A write batch for a claimed chunk."""
        batch = WriteBatch(self._store, self._counters, job_ids)
        with self._lock:
            self._of.update(dict.fromkeys(job_ids, batch))
        return batch

    def of(self, job_id: str) -> WriteBatch | None:
        with self._lock:
            return self._of.get(job_id)
