"""How often this run polls a job's response: the configured interval; relaxed while verified
webhooks carry completions (in-flight jobs are then polled only as a safety net); slower for a
response that runs at flex (never faster than the above)."""

from __future__ import annotations

import dataclasses
import threading

from iipub.model.jobs import Job
from iipub.money import budgets, payments
from iipub.settings.config import ReconcileSettings, Settings
from iipub.store.deliveries import Deliveries
from iipub.store.handles import Engine


class PollCadence:
    def __init__(self, settings: Settings, engine: Engine) -> None:
        self._engine = engine
        self.webhooks_healthy = (settings.webhooks.enabled
                                 and Deliveries(engine).health(settings.webhooks.healthy_for_seconds).healthy)
        self.default = (dataclasses.replace(settings.reconcile,
                                            poll_interval_seconds=settings.webhooks.poll_interval_seconds)
                        if self.webhooks_healthy else settings.reconcile)
        self.flex = dataclasses.replace(self.default, poll_interval_seconds=max(
            self.default.poll_interval_seconds, settings.reconcile.flex_poll_interval_seconds))
        self._flex_jobs: set[str] | None = None  # jobs whose response runs at flex, read at the first poll
        self._lock = threading.Lock()

    def for_tier(self, tier: str | None) -> ReconcileSettings:
        return self.flex if tier == budgets.FLEX else self.default

    def of(self, job: Job) -> ReconcileSettings:
        """The poll cadence of `job`'s response: the flex one while it runs at flex."""
        with self._lock:
            if self._flex_jobs is None:
                self._flex_jobs = payments.flex_jobs(self._engine)
            flex = job.id in self._flex_jobs
        return self.flex if flex else self.default

    def runs_at(self, job_id: str, tier: str | None) -> None:
        """A create of `job_id` was accepted at `tier` in this run."""
        with self._lock:
            if self._flex_jobs is not None:
                (self._flex_jobs.add if tier == budgets.FLEX else self._flex_jobs.discard)(job_id)
