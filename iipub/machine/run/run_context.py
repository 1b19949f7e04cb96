"""One run that moves leased jobs, a sweep or one webhook delivery, as its steps and threads see
it: the pieces it was built with, each with one job. `for_sweep` builds the whole set;
`for_delivery` builds only what a delivery uses: no create pieces (`creates.Creates`) and no
write batches, so a delivery cannot create whatever state its job reaches."""

from __future__ import annotations

import random

from iipub.machine.run import creates as creates_mod
from iipub.machine.run import shared_cool_down
from iipub.machine.run.counters import Counters, SweepReport
from iipub.machine.run.creates import Creates
from iipub.machine.run.deadline import Deadline
from iipub.machine.run.ledger_records import ChainRecords
from iipub.machine.run.ledger_view import SpendLedgerView
from iipub.machine.run.poll_cadence import PollCadence
from iipub.machine.run.shared_cool_down import SharedCoolDown
from iipub.machine.run.write_batch import WriteBatches
from iipub.provider.interface import Provider
from iipub.settings.config import Settings
from iipub.store import installation
from iipub.store.job_store import Store


class RunContext:
    """What every run that moves jobs shares: the deadline, the reads' cool-down, the counters,
    the spend ledger's view and chain records, the poll cadence."""

    def __init__(self, settings: Settings, store: Store, provider: Provider, rng: random.Random, *,
                 deadline: Deadline, counters: Counters, reads: SharedCoolDown, ledger: SpendLedgerView,
                 polls: PollCadence) -> None:
        self.settings = settings
        self.store = store
        self.provider = provider
        self.rng = rng
        self.shadow = settings.reconcile.shadow
        # The scope every call of this run is made under (the provider's: see `provider.interface`).
        self.scope = provider.scope
        self.deadline = deadline
        self.counters = counters
        self.reads = reads
        self.ledger = ledger
        self.chain = ChainRecords(ledger, store.worker)
        self.polls = polls
        self._installation: str | None = None

    @property
    def installation(self) -> str:
        """This database's installation id (read once per run, at the first create or unknown response)."""
        if self._installation is None:
            self._installation = installation.read(self.store.engine)
        return self._installation


class SweepContext(RunContext):
    """A sweep's run: everything above, the create pieces and the write batches of its chunks."""

    def __init__(self, settings: Settings, store: Store, provider: Provider, rng: random.Random, *,
                 deadline: Deadline, counters: Counters, reads: SharedCoolDown, ledger: SpendLedgerView,
                 polls: PollCadence, creates: Creates, batches: WriteBatches) -> None:
        super().__init__(settings, store, provider, rng, deadline=deadline, counters=counters, reads=reads,
                         ledger=ledger, polls=polls)
        self.creates = creates
        self.batches = batches


def for_sweep(settings: Settings, store: Store, provider: Provider, deadline: float,
              rng: random.Random) -> SweepContext:
    """A sweep's context: its deadline at `deadline` (`time.monotonic()`), the gate and both
    cool-downs as the other processes left them."""
    ends, counters, reads, ledger, polls = _shared_pieces(settings, store, deadline)
    creates = creates_mod.start(settings, store, ends, counters, ledger)
    return SweepContext(settings, store, provider, rng, deadline=ends, counters=counters, reads=reads,
                        ledger=ledger, polls=polls, creates=creates, batches=WriteBatches(store, counters))


def for_delivery(settings: Settings, store: Store, provider: Provider, deadline: float,
                 rng: random.Random) -> RunContext:
    """A webhook delivery's context: it reads and stores a finished response as a sweep would,
    and never creates (a create needs its full timeout, more than a request's budget; the job
    waits for a sweep)."""
    ends, counters, reads, ledger, polls = _shared_pieces(settings, store, deadline)
    return RunContext(settings, store, provider, rng, deadline=ends, counters=counters, reads=reads,
                      ledger=ledger, polls=polls)


def _shared_pieces(settings: Settings, store: Store, deadline: float) -> tuple[
        Deadline, Counters, SharedCoolDown, SpendLedgerView, PollCadence]:
    """The pieces every run has: its deadline, counters, the reads' cool-down as the other
    processes left it, the spend ledger's view and the poll cadence."""
    return (Deadline(deadline), Counters(SweepReport(worker=store.worker, shadow=settings.reconcile.shadow)),
            shared_cool_down.of_reads(store), SpendLedgerView(settings, store.engine),
            PollCadence(settings, store.engine))
