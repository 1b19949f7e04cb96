"""One sweep's shared state: the deadline, the provider's cool-down, local admission control,
the shared create gate and the spend ledger as the sweep's threads see them, and the report.
`reconcile` drives the steps; this module only holds what they share."""

from __future__ import annotations

import contextlib
import dataclasses
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import structlog

from iipub.core.errors import Contention, DatabaseUnavailable
from iipub.model.jobs import Job
from iipub.model.states import Reason, State
from iipub.money import budgets, gate, ledger, ledger_book, payments
from iipub.money.gate import CreateGate
from iipub.provider.interface import Provider
from iipub.provider.outcomes import Accepted, Ambiguous, CreateOutcome, Refused, Rejected, scope_of
from iipub.settings.config import ReconcileSettings, Settings
from iipub.store import clock, installation
from iipub.store.deliveries import Deliveries
from iipub.store.job_store import PlannedWrite, Store

log = structlog.get_logger("iipub.reconcile")

# Set by SIGTERM (cron's `timeout`): stop taking work, finish what is in hand, release leases.
STOP = threading.Event()

# States whose next step calls the provider: not stepped while that kind of call cools down.
PROVIDER_BOUND = frozenset({State.CREATE_ELIGIBLE, State.ACCEPTED, State.QUEUED, State.IN_PROGRESS,
                            State.COMPLETED_NOT_RETRIEVED, State.CLEANUP_PENDING})


@dataclass
class TickReport:
    worker: str
    leased: int = 0
    taken: int = 0
    contention: int = 0
    lease_lost: int = 0
    errors: int = 0
    creates: int = 0  # creates sent that the provider may have processed (and charged)
    refused: int = 0  # creates provably not processed (429, never connected): not charged
    held_back: int = 0
    held_by_ceiling: int = 0  # creates waiting because a daily spend ceiling is reached
    held_by_product: int = 0  # creates waiting because their product's request was refused for a parameter
    provider_calls: int = 0
    unreachable: int = 0  # provider calls that could not even connect
    transitions: Counter[str] = field(default_factory=Counter)
    tracks_leased: int = 0  # language tracks leased by this tick
    track_transitions: Counter[str] = field(default_factory=Counter)  # by the state a track entered
    stopped_at_deadline: bool = False
    seconds: float = 0.0
    shadow: bool = False  # shadow mode: creates, saves, deletes and cancels were journaled, not done
    paused_everything: bool = False  # `pause --everything`: the tick did nothing

    @property
    def provider_unreachable(self) -> bool:
        """Every provider call of this tick failed to connect (`status --check` counts such ticks)."""
        return self.provider_calls > 0 and self.unreachable == self.provider_calls

    def summary(self) -> dict[str, object]:
        d = dataclasses.asdict(self)
        d["transitions"] = dict(self.transitions)
        d["track_transitions"] = dict(self.track_transitions)
        d["provider_unreachable"] = self.provider_unreachable
        return d


class Tick:
    """State shared by the threads of one sweep."""

    def __init__(self, settings: Settings, store: Store, provider: Provider, deadline: float,
                 rng: random.Random) -> None:
        self.settings = settings
        self.store = store
        self.provider = provider
        # The scope every call of this run is made under (the key's fingerprint, never the key).
        self.provider_scope = scope_of(settings.provider.organization, settings.provider.project, settings.api_key)
        self._proven: set[str] = set()  # request fingerprints accepted in this run (`first_create`)
        self._request_locks: dict[str, threading.Lock] = {}
        self.deadline = deadline
        self.started = time.monotonic()
        self.rng = rng
        self.shadow = settings.reconcile.shadow
        self.report = TickReport(worker=store.worker, shadow=self.shadow)
        self._lock = threading.Lock()
        self._creates_cool_until = 0.0  # time.monotonic(): creates wait (429 on a create, shared gate)
        self._reads_cool_until = 0.0  # polls, custody, cleanup wait (429 on a read; at most 60 s)
        self._admitting = 0  # creates admitted by this tick whose CREATE_IN_FLIGHT is not committed yet
        self.gate = CreateGate(store.engine, store.worker, settings.provider, settings.reconcile.lease_seconds,
                               settings.budgets, settings.products)
        self.probe_waiters: set[str] = set()  # held while another worker's probe create is out
        self._batches: dict[str, WriteBatch] = {}
        self._ledger: ledger.SpendLedger | bool | None = False  # built at the first use (it reads the id)
        self._view: ledger.LedgerView | None = None
        self._opening = threading.Lock()
        self._noted = (0, 0)  # unreadable and foreign old lines already logged (each once per tick)
        self._installation: str | None = None
        # While verified webhooks carry completions, in-flight jobs are polled only as a safety net.
        self.webhooks_healthy = (settings.webhooks.enabled
                                 and Deliveries(store.engine).health(settings.webhooks.healthy_for_seconds).healthy)
        self.poll_settings = (dataclasses.replace(settings.reconcile,
                                                  poll_interval_seconds=settings.webhooks.poll_interval_seconds)
                              if self.webhooks_healthy else settings.reconcile)
        # Flex responses are slower: polled at their own cadence (never faster than the above).
        self.flex_poll_settings = dataclasses.replace(self.poll_settings, poll_interval_seconds=max(
            self.poll_settings.poll_interval_seconds, settings.reconcile.flex_poll_interval_seconds))
        self._flex_jobs: set[str] | None = None  # jobs whose response runs at flex, read at the first poll
        g, now = self.gate.state()
        # Paused, or the breaker open and no probe due: creates are not even leased this tick.
        self.creates_blocked = g.paused or (g.is_open and g.probe_after is not None and g.probe_after > now)
        self.creates_allowed = True  # False for a webhook delivery (`steps`): it never creates
        if g.cooldown_until is not None and g.cooldown_until > now:
            # Another process's create was rate-limited: this one's creates wait too. Polls and
            # custody go on: a finished response is kept for only about ten minutes.
            self._cool_locally((g.cooldown_until - now).total_seconds(), creates=True)
        with store.engine.connect() as conn:
            reads_until, now = gate.read_cool_down(conn), clock.read_now(conn)
        if reads_until is not None:
            self._cool_locally((reads_until - now).total_seconds(), creates=False)

    @property
    def installation(self) -> str:
        """This database's installation id (read once per tick, at the first create or unknown response)."""
        if self._installation is None:
            self._installation = installation.read(self.store.engine)
        return self._installation

    def batch(self, job_ids: list[str]) -> WriteBatch:
        """A write batch for a claimed chunk (see `WriteBatch`)."""
        batch = WriteBatch(self, job_ids)
        with self._lock:
            self._batches.update(dict.fromkeys(job_ids, batch))
        return batch

    def batch_of(self, job_id: str) -> WriteBatch | None:
        with self._lock:
            return self._batches.get(job_id)

    def past_deadline(self) -> bool:
        return STOP.is_set() or time.monotonic() >= self.deadline

    def too_late_to_create(self, flex: bool) -> bool:
        """Past the last moment a create can start and still be answered and recorded before the
        cron wrapper stops the run (`Settings.create_window`): the create waits for the next run."""
        window = self.settings.create_window(flex)
        return window is not None and time.monotonic() > self.started + window

    def creates_cooling(self) -> bool:
        """A create was rate-limited (here or in another process): no create now."""
        return time.monotonic() < self._creates_cool_until

    def reads_cooling(self) -> bool:
        """A read was rate-limited: no poll, custody read or delete for a while (at most 60 s)."""
        return time.monotonic() < self._reads_cool_until

    def waits_for_provider(self, state: State) -> bool:
        """Whether the sweep should not even lease a job in `state` now: its next step calls the
        provider, and that kind of call cools down. (A leased job's step asks `cooling_for` again
        right before its call: a cool-down may begin while it waits in the queue.)"""
        return state in PROVIDER_BOUND and self.cooling_for(state)

    def cooling_for(self, state: State) -> bool:
        """Whether a job in `state` waits for a cool-down before its provider call (the one rule:
        a create's 429 holds creates, a read's holds every other provider call)."""
        return self.creates_cooling() if state == State.CREATE_ELIGIBLE else self.reads_cooling()

    def cool_down(self, seconds: float, *, creates: bool) -> None:
        """A 429 with a hint. On a create: this tick's creates stop (no stampede) and every other
        process's until the hint has passed; polls and custody go on. On a read: every process's
        reads wait for the hint, capped at 60 s (a finished response is kept for only about ten
        minutes); creates go on."""
        self._cool_locally(seconds, creates=creates)
        try:
            if creates:
                self.gate.share_cool_down(seconds)
            else:
                gate.share_read_cool_down(self.store.engine, seconds, self.store.worker)
        except (Contention, DatabaseUnavailable) as exc:  # the local cool-down still holds
            log.warning("cool_down_not_shared", worker=self.store.worker, error=str(exc))

    def _cool_locally(self, seconds: float, *, creates: bool) -> None:
        with self._lock:
            if creates:
                self._creates_cool_until = max(self._creates_cool_until, self.deadline, time.monotonic() + seconds)
            else:
                wait = min(max(0.0, seconds), gate.READ_COOLDOWN_CAP_SECONDS)
                self._reads_cool_until = max(self._reads_cool_until, time.monotonic() + wait)

    @property
    def spend_ledger(self) -> ledger.SpendLedger | None:
        """The spend ledger as this installation writes and reads it, or None when it is off."""
        if self._ledger is False:
            from iipub.money import restore

            self._ledger = restore.ledger_of(self.settings, self.store.engine)
        assert not isinstance(self._ledger, bool)
        return self._ledger

    def spend(self, slot: str) -> ledger.SlotSpend | None:
        """What this installation's lines of the spend ledger record for `slot`, read afresh (only
        the lines appended since the last read): a job leased before this call is never compared
        with a copy of the ledger older than its row (another worker's refund or create)."""
        book = self.spend_ledger
        if book is None:
            return None
        with self._lock:
            if self._view is None:
                self._view = ledger.LedgerView(book)
            fold = self._view.refresh()
            if fold.bad > self._noted[0]:
                log.warning("ledger_unreadable_lines", path=str(book.path), lines=fold.bad)
            if fold.foreign_legacy > self._noted[1]:
                log.info("ledger_foreign_lines", path=str(book.path), lines=fold.foreign_legacy,
                         why="lines without an installation id whose job and response this database does not "
                             "know: another installation's, not this one's evidence")
            self._noted = (fold.bad, fold.foreign_legacy)
            return fold.slots.get(slot)

    def ledger_knows(self, response_id: str) -> bool:
        """Whether this installation's lines of the spend ledger recorded `response_id` as the
        answer to one of its creates (a restored database may have forgotten the job that made it)."""
        book = self.spend_ledger
        if book is None:
            return False
        try:
            with self._lock:
                if self._view is None:
                    self._view = ledger.LedgerView(book)
                return self._view.knows(response_id)
        except ledger.LedgerError:
            return False

    def ledger_problem(self) -> ledger_book.Problem | None:
        """Right before a create: the spend ledger against what the database remembers of it
        (opened here the first time), read as fresh as `spend`. A problem holds the create."""
        book = self.spend_ledger
        if book is None:
            return None
        def fresh() -> ledger.Fold | None:  # read after the database's position (`ledger_book.problem`)
            with self._lock:
                if self._view is None:
                    self._view = ledger.LedgerView(book)
                return self._view.refresh()

        found = ledger_book.problem(self.store.engine, book, fresh)
        if found is None:
            try:
                with self._opening:  # one `open` line per process, not one per thread
                    ledger_book.ensure_open(self.store.engine, book)
            except ledger.LedgerError as exc:  # the intent line will fail the same way: not sent, refunded
                log.error("ledger_unwritable", worker=self.store.worker, error=str(exc))
        return found

    def record_intent(self, job_id: str, slot: str, attempt: int, fingerprint: str) -> None:
        if self.spend_ledger is None:
            return
        self.spend_ledger.intent(job_id, slot, attempt, fingerprint, self.store.worker)

    def record_outcome(self, job_id: str, slot: str, attempt: int, outcome: CreateOutcome) -> None:
        if self.spend_ledger is None:
            return
        kind = {Accepted: "accepted", Refused: "refused", Ambiguous: "ambiguous", Rejected: "rejected"}[type(outcome)]
        rid = outcome.response_id if isinstance(outcome, Accepted) else None
        try:
            self.spend_ledger.outcome(job_id, slot, attempt, kind, rid)
        except ledger.LedgerError as exc:  # the intent is on disk: a restore still cannot pay twice
            log.error("ledger_unwritable", job_id=job_id, worker=self.store.worker, error=str(exc))

    def poll_settings_for(self, tier: str | None) -> ReconcileSettings:
        return self.flex_poll_settings if tier == budgets.FLEX else self.poll_settings

    def polls_of(self, job: Job) -> ReconcileSettings:
        """The poll cadence of `job`'s response: the flex one while it runs at flex."""
        with self._lock:
            if self._flex_jobs is None:
                self._flex_jobs = payments.flex_jobs(self.store.engine)
            flex = job.id in self._flex_jobs
        return self.flex_poll_settings if flex else self.poll_settings

    def runs_at(self, job_id: str, tier: str | None) -> None:
        """A create of `job_id` was accepted at `tier` in this tick."""
        with self._lock:
            if self._flex_jobs is not None:
                (self._flex_jobs.add if tier == budgets.FLEX else self._flex_jobs.discard)(job_id)

    def called(self, outcome: object) -> None:
        """One provider call and its outcome (an unreachable provider is counted per call)."""
        with self._lock:
            self.report.provider_calls += 1
            self.report.unreachable += int(bool(getattr(outcome, "unreachable", False)))

    @contextlib.contextmanager
    def first_create(self, request: str) -> Iterator[None]:
        """Around a create of `request` (a product's request fingerprint, `holds`): one at a time
        in this process until one of them was accepted (`proven`), then no wait at all."""
        with self._lock:
            lock = None if request in self._proven else self._request_locks.setdefault(request, threading.Lock())
        if lock is None:
            yield
            return
        with lock:
            yield

    def proven(self, request: str) -> None:
        """A create of `request` was accepted: the provider takes its parameters."""
        with self._lock:
            self._proven.add(request)

    def create_refused(self) -> None:
        """A create admitted by `admit_create` was provably refused: it is reported as refused,
        not as a create (its in-flight place is the database's count: it left CREATE_IN_FLIGHT)."""
        with self._lock:
            self.report.creates -= 1
            self.report.refused += 1

    def record_chain(self, job: Job, reason: Reason) -> None:
        """After a committed custody or save, its link of the ledger's chain (best effort: a line
        missing here leaves the ledger behind the database, the safe direction)."""
        if self.spend_ledger is None or reason not in (Reason.RETRIEVED, Reason.SAVED):
            return
        slot = ledger.slot_of(job.product, job.edition_date.isoformat())
        try:
            if reason == Reason.RETRIEVED:
                self.spend_ledger.custody(job.id, slot, job.generation_attempts, job.response_id, job.payload_sha256)
            else:
                self.spend_ledger.saved(job.id, slot, job.generation_attempts, ledger.composed_editions(job.composed))
        except ledger.LedgerError as exc:
            log.error("ledger_unwritable", job_id=job.id, worker=self.store.worker, error=str(exc))

    def wait_for_probe(self, job_id: str) -> None:
        with self._lock:
            self.probe_waiters.add(job_id)

    def wait_for_probe_outcome(self) -> None:
        """Until another worker's (or process's) probe create has an outcome, bounded by one
        create's timeout and the tick's deadline."""
        p = self.settings.provider
        until = min(self.deadline, time.monotonic() + p.connect_timeout_seconds + p.timeout_seconds + 1)
        while time.monotonic() < until and not STOP.is_set():
            g, now = self.gate.state()
            if g.probe_owner is None or g.probe_expiry is None or g.probe_expiry <= now or g.is_open:
                return
            STOP.wait(0.2)

    def take_probe_waiters(self) -> set[str]:
        with self._lock:
            waiting, self.probe_waiters = self.probe_waiters, set()
            return waiting

    def admit_create(self) -> bool:
        """Admission control across processes: the accepted-but-unfinished provider jobs in the
        database (every process's, as `iipub jobs list` counts them) plus this tick's admissions
        not yet committed stay under max_in_flight. Counted under the lock, so this process never
        overshoots; two processes can only race within the milliseconds between a count and the
        other's commit. Every True must be followed by `admitted()`."""
        with self._lock:
            if self.store.count_in_flight() + self._admitting >= self.settings.reconcile.max_in_flight:
                self.report.held_back += 1
                return False
            self._admitting += 1
            self.report.creates += 1
            return True

    def admitted(self) -> None:
        """The admitted create's CREATE_IN_FLIGHT write is committed (or failed): the database
        counts it from now on."""
        with self._lock:
            self._admitting -= 1

    def count(self, attr: str, n: int = 1) -> None:
        with self._lock:
            setattr(self.report, attr, getattr(self.report, attr) + n)

    def counted(self, to: State) -> None:
        with self._lock:
            self.report.transitions[to.value] += 1

    def counted_track(self, to: State) -> None:
        with self._lock:
            self.report.track_transitions[to.value] += 1




class WriteBatch:
    """The poll decisions of one claimed chunk, written in one transaction once the chunk's last
    job is done (`Store.transition_many`): one COMMIT for the chunk instead of one per job. Each
    UPDATE is still fenced on its own; a job whose fence failed is dropped, the rest commit. If
    contention rolls the batch back, each write is tried again on its own."""

    def __init__(self, tick: Tick, job_ids: list[str]) -> None:
        self.tick = tick
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
        store = self.tick.store
        try:
            results: list[Job | None] = list(store.transition_many(writes))
        except Contention as exc:
            self.tick.count("contention")
            log.warning("contention", job_ids=[w.job.id for w in writes], worker=store.worker, error=str(exc))
            results = [self._alone(w) for w in writes]
        except DatabaseUnavailable as exc:  # nothing written: the leases expire and the polls repeat
            self.tick.count("errors", len(writes))
            log.error("database_unavailable", job_ids=[w.job.id for w in writes], worker=store.worker,
                      error=str(exc))
            return
        for w, job in zip(writes, results, strict=True):
            if job is None:
                self.tick.count("lease_lost")
                log.warning("lease_lost", job_id=w.job.id, worker=store.worker)
            else:
                self.tick.counted(w.to_state)

    def _alone(self, w: PlannedWrite) -> Job | None:
        try:
            return self.tick.store.transition_many([w])[0]
        except (Contention, DatabaseUnavailable) as exc:
            log.warning("poll_write_lost", job_id=w.job.id, worker=self.tick.store.worker, error=str(exc))
            return None
