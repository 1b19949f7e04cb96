"""What only a create uses: the shared create gate, the creates' cool-down, admission control,
the first-create rule, the probe waiters and the ledger's create lines. Only the sweep builds
one (`run_context.for_sweep`); a webhook delivery's context has none, so nothing on its path can
send a create."""

from __future__ import annotations

from dataclasses import dataclass

from iipub.machine.run import shared_cool_down
from iipub.machine.run.admission import Admission
from iipub.machine.run.counters import Counters
from iipub.machine.run.deadline import Deadline
from iipub.machine.run.first_creates import FirstCreates
from iipub.machine.run.ledger_records import CreateRecords
from iipub.machine.run.ledger_view import SpendLedgerView
from iipub.machine.run.probes import ProbeWaiters
from iipub.machine.run.shared_cool_down import SharedCoolDown
from iipub.money.gate import CreateGate
from iipub.settings.config import Settings
from iipub.store.job_store import Store


@dataclass(frozen=True)
class Creates:
    gate: CreateGate  # pause, daily spend ceilings, breaker, shared cool-down, global rate
    blocked: bool  # paused, or the breaker open and no probe due: creates are not even leased this run
    cool_down: SharedCoolDown
    admission: Admission
    first: FirstCreates
    probes: ProbeWaiters
    records: CreateRecords


def start(settings: Settings, store: Store, deadline: Deadline, counters: Counters,
          ledger_view: SpendLedgerView) -> Creates:
    """The run's create pieces, from the gate row as it is now."""
    create_gate = CreateGate(store.engine, store.worker, settings.provider, settings.reconcile.lease_seconds,
                             settings.budgets, settings.products)
    g, now = create_gate.state()
    return Creates(
        gate=create_gate,
        blocked=g.paused or (g.is_open and g.probe_after is not None and g.probe_after > now),
        # Another process's create was rate-limited: this one's creates wait too.
        cool_down=shared_cool_down.of_creates(create_gate, g, now, deadline),
        admission=Admission(store, settings.reconcile.max_in_flight, counters),
        first=FirstCreates(),
        probes=ProbeWaiters(create_gate, deadline, settings.provider),
        records=CreateRecords(ledger_view, store),
    )
