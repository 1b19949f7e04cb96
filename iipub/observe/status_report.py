"""What `iipub status` reports: job counts, the SLIs of the seed computed from the journal,
outbox health, quarantine, provider spend, and the Nagios-style check.

The report as a value, the arithmetic over the rows it is made of, and the check policy; no
I/O, and no import of a module that does any (pyproject's `status-value` contract): the parts
other modules collect arrive as their pure values (`heartbeat_values`, `cutover_values`,
`model.deliveries`, `money.payment_values`). `queries.collect` reads the rows (by the database
clock); the CLI formats.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from iipub.core.severity import Severity
from iipub.core.timefmt import duration, iso_z, iso_z_or_none, seconds_between
from iipub.core.wording import clip_words, plural, printable
from iipub.model.deliveries import WebhookSummary
from iipub.model.holds import ModelHold, ProductHold
from iipub.model.jobs import is_stranded, late_seconds
from iipub.model.states import CUSTODY_PENDING, DWELL_LOST, Reason, State
from iipub.model.track_views import Figures as TrackFigures
from iipub.model.track_views import parked_reason
from iipub.money import breaker
from iipub.money import budgets as money
from iipub.money.breaker import GateState
from iipub.money.payment_values import SpendReport
from iipub.observe import error_budget
from iipub.observe.cutover_values import Cutover
from iipub.observe.heartbeat_values import HeartbeatSummary
from iipub.settings.config import Settings, StatusSettings

PROBLEM_WIDTH = 300  # one problem's text in the check line, at most


# -- value types ----------------------------------------------------------------------


@dataclass(frozen=True)
class Sli:
    """One latency SLI: the sampled durations and how many fall within the SLO.

    `durations` holds finished intervals plus intervals still running that are already
    past the SLO (a breach whatever happens next; `open` counts them). `failed` counts
    intervals that ended without the good outcome: breaches without a duration."""

    name: str
    slo_seconds: float
    target: float
    durations: tuple[float, ...] = ()
    open: int = 0
    failed: int = 0

    @property
    def count(self) -> int:
        return len(self.durations) + self.failed

    @property
    def within(self) -> int:
        return sum(1 for d in self.durations if d < self.slo_seconds)

    @property
    def share(self) -> float | None:
        return self.within / self.count if self.count else None

    @property
    def breached(self) -> bool:
        share = self.share
        return share is not None and share < self.target

    def percentile(self, p: float) -> float | None:
        """Nearest-rank percentile of the durations (None without samples)."""
        if not self.durations:
            return None
        ordered = sorted(self.durations)
        rank = max(1, math.ceil(p / 100 * len(ordered)))
        return ordered[rank - 1]

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "open": self.open,
            "failed": self.failed,
            "p50_seconds": _round(self.percentile(50)),
            "p99_seconds": _round(self.percentile(99)),
            "max_seconds": _round(max(self.durations) if self.durations else None),
            "slo_seconds": self.slo_seconds,
            "target": self.target,
            "within_slo": None if self.share is None else round(self.share, 4),
            "breached": self.breached,
        }


@dataclass(frozen=True)
class JobRef:
    """A job an operator may have to look at."""

    id: str
    product: str
    edition_date: dt.date
    state: str
    age_seconds: float
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "product": self.product, "edition_date": self.edition_date.isoformat(),
            "state": self.state, "age_seconds": _round(self.age_seconds), "reason": self.reason,
        }


@dataclass(frozen=True)
class Queue:
    """The operator's queue for one reason: quarantined jobs or parked language tracks."""

    kind: str  # "quarantine" | "parked"
    reason: str
    count: int
    oldest_seconds: float
    critical_after_seconds: float
    overdue: int  # waiting longer than critical_after_seconds
    oldest: str  # the oldest one, for a person (job id prefix, language)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason, "count": self.count,
                "oldest_seconds": _round(self.oldest_seconds), "critical_after_seconds": self.critical_after_seconds,
                "overdue": self.overdue, "oldest": self.oldest}


@dataclass(frozen=True)
class Disk:
    """One filesystem holding some of iipub's files, as statvfs saw it."""

    roles: tuple[str, ...]  # ledger, static_root, database, logs, metrics
    path: str  # the (nearest existing) folder measured
    free_bytes: int  # available to an unprivileged writer
    size_bytes: int
    free_inodes: int | None = None  # None: the filesystem does not count them
    inodes: int | None = None
    error: str | None = None  # it could not be measured
    filling_bytes_per_hour: float | None = None  # from the relay's samples over the last day; None: unknown

    def floor_bytes(self, s: StatusSettings) -> float:
        """Free bytes below which the filesystem is CRITICAL."""
        return max(float(s.disk_crit_free_bytes), self.size_bytes * s.disk_crit_free_percent / 100)

    def hours_to_full(self, s: StatusSettings) -> float | None:
        """At the rate it fills, hours until the CRITICAL floor (None: not filling, or unknown)."""
        rate = self.filling_bytes_per_hour
        if rate is None or rate <= 0:
            return None
        return max(0.0, (self.free_bytes - self.floor_bytes(s)) / rate)

    @property
    def free_share(self) -> float:
        share = self.free_bytes / self.size_bytes if self.size_bytes else 1.0
        if self.inodes:
            share = min(share, (self.free_inodes or 0) / self.inodes)
        return share

    def severity(self, s: StatusSettings) -> Severity:
        if self.error is not None:
            return Severity.WARNING
        if self.free_share * 100 < s.disk_crit_free_percent or self.free_bytes < s.disk_crit_free_bytes:
            return Severity.CRITICAL
        hours = self.hours_to_full(s)
        if hours is not None and hours < s.disk_full_crit_hours:
            return Severity.CRITICAL
        if self.free_share * 100 < s.disk_warn_free_percent:
            return Severity.WARNING
        return Severity.WARNING if hours is not None and hours < s.disk_full_warn_hours else Severity.OK

    def describe(self) -> str:
        if self.error is not None:
            return f"disk of {'/'.join(self.roles)} ({self.path}) cannot be measured: {self.error}"
        inodes = (f", {self.free_inodes:,} inodes free" if self.inodes and self.free_inodes is not None
                  and self.free_inodes / self.inodes < self.free_bytes / max(self.size_bytes, 1) else "")
        filling = (f", filling {_size(round(self.filling_bytes_per_hour))}/h"
                   if self.filling_bytes_per_hour is not None and self.filling_bytes_per_hour > 0 else "")
        return (f"disk of {'/'.join(self.roles)} ({self.path}): {_size(self.free_bytes)} free of "
                f"{_size(self.size_bytes)} ({self.free_share:.1%}{inodes}{filling})")

    def to_dict(self) -> dict[str, Any]:
        return {"roles": list(self.roles), "path": self.path, "free_bytes": self.free_bytes,
                "size_bytes": self.size_bytes, "free_inodes": self.free_inodes, "inodes": self.inodes,
                "free_ratio": round(self.free_share, 4), "error": self.error,
                "filling_bytes_per_hour": None if self.filling_bytes_per_hour is None
                else round(self.filling_bytes_per_hour)}


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


@dataclass(frozen=True)
class ClockCheck:
    """The host's clock against the database's: offset = database - host, +- uncertainty."""

    offset_seconds: float
    uncertainty_seconds: float  # half the query's round trip

    def severity(self, s: StatusSettings) -> Severity:
        off = abs(self.offset_seconds) - self.uncertainty_seconds > s.clock_warn_seconds
        return Severity.WARNING if off else Severity.OK

    def to_dict(self) -> dict[str, Any]:
        return {"offset_seconds": round(self.offset_seconds, 3),
                "uncertainty_seconds": round(self.uncertainty_seconds, 3)}


@dataclass(frozen=True)
class Spend:
    product: str
    edition_date: dt.date
    input_tokens: int
    output_tokens: int
    total_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "product": self.product, "edition_date": self.edition_date.isoformat(),
            "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True)
class Status:
    generated_at: dt.datetime
    settings: StatusSettings
    counts: Mapping[str, Mapping[str, int]]  # product -> state -> jobs
    dispatch: Sli
    dwell: Sli
    overdue_polls: Sli
    duplicate_publications: int
    stranded: tuple[JobRef, ...]  # oldest first
    quarantined: tuple[JobRef, ...]  # oldest first
    expired_now: int
    expired_in_window: int
    outbox_unpublished: int
    outbox_lag_seconds: float
    outbox_problems: tuple[Mapping[str, Any], ...]  # from outbox.parked_or_failing
    spend: tuple[Spend, ...]
    late: tuple[JobRef, ...] = ()  # editions unpublished past late_after_minutes, oldest first
    gate: GateState | None = None
    unexpected_statuses: int = 0  # reads of a status iipub does not know, in the window
    failing_steps: tuple[JobRef, ...] = ()  # jobs whose last step failed with an unexpected error
    webhooks: WebhookSummary | None = None
    heartbeats: HeartbeatSummary | None = None  # the last reconcile and relay runs
    extra_problems: tuple[tuple[Severity, str], ...] = ()  # found by the command itself (e.g. an unwritable file)
    installation_id: str | None = None  # this database's (`iipub.store.installation`)
    read_cooldown_until: dt.datetime | None = None  # provider reads wait until then (a 429 on a read)
    cutover: Cutover | None = None  # missing days, shadow decisions, the immediate abort
    paid: SpendReport | None = None  # spend by payment time, the daily ceilings and their overrides
    ledger_problem: str | None = None  # the spend ledger is missing or unreadable although creates were paid
    tracks: TrackFigures | None = None  # the language tracks: counts, parked and stranded ones
    product_holds: tuple[ProductHold, ...] = ()  # products whose creates wait: a refused parameter, too large
    # Models whose creates wait (no access, no such model), each with the products on it.
    model_holds: tuple[tuple[ModelHold, tuple[str, ...]], ...] = ()
    project: str | None = None  # the project named in the settings (OPENAI_PROJECT_ID), for the hold's line
    # Jobs in flight created under another scope (organization, project, key) than reads use now,
    # with one such scope and the current one (`Provider.scope`, opaque).
    other_scope_jobs: int = 0
    other_scope: str | None = None
    current_scope: str | None = None
    # Slots with no path forward: nothing due, leased, final or parked with a remedy moves them
    # (a forked slot held by a track that ended without the slot being killed).
    immovable: tuple[JobRef, ...] = ()
    # Parked for an operator other than in quarantine (a validation failure, a suspension), oldest
    # first: the edition cannot move until someone acts (`quarantine show` lists the remedies).
    parked: tuple[JobRef, ...] = ()
    budgets: tuple[error_budget.Budget, ...] = ()  # each SLO's error budget and burn rates
    disks: tuple[Disk, ...] = ()  # the filesystems of the ledger, the site, the database, the logs
    clock_check: ClockCheck | None = None  # the host clock against the database's
    placeholder_key: str | None = None  # OPENAI_API_KEY is the placeholder `iipub init` writes: why creates wait
    # Editions an operator took back (`iipub withdraw`) or corrected (`iipub correct`): shown, never
    # an alert (each was a deliberate, journaled act).
    editions_withdrawn: int = 0
    editions_corrected: int = 0
    editions_correcting: int = 0  # slots whose paid `correct --regenerate` is not saved yet

    # -- derived figures ---------------------------------------------------------------

    @property
    def jobs_total(self) -> int:
        return sum(sum(by_state.values()) for by_state in self.counts.values())

    @property
    def by_state(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for by_state in self.counts.values():
            total.update(by_state)
        return {s.value: total[s.value] for s in State if total[s.value]}

    @property
    def slis(self) -> tuple[Sli, ...]:
        return (self.dispatch, self.dwell, self.overdue_polls)

    @property
    def outbox_parked(self) -> int:
        return sum(1 for p in self.outbox_problems if p.get("kind") == "parked")

    @property
    def outbox_failing(self) -> int:
        return sum(1 for p in self.outbox_problems if p.get("kind") == "failing")

    def queues(self) -> list[Queue]:
        """Queue depth and age by reason, quarantined jobs then parked tracks, each against the
        `[status]` limit past which it is CRITICAL."""
        s = self.settings
        out: list[Queue] = []
        groups: dict[tuple[str, str], list[tuple[float, str]]] = {}
        for q in self.quarantined:
            groups.setdefault(("quarantine", q.reason or "unknown"), []).append((q.age_seconds, q.id[:8]))
        for t in self.tracks.parked if self.tracks is not None else ():
            groups.setdefault(("parked", parked_reason(t)), []).append((t.age_seconds, f"{t.job_id[:8]} {t.lang}"))
        for (kind, reason), items in sorted(groups.items()):
            limit = s.critical_after(reason, track=kind == "parked")
            age, who = max(items)
            out.append(Queue(kind, reason, len(items), age, limit, sum(1 for a, _ in items if a > limit), who))
        return out

    def _host_problems(self) -> list[tuple[Severity, str]]:
        """Disk headroom before a write fails; the host clock against the database's."""
        s = self.settings
        found: list[tuple[Severity, str]] = []
        for d in self.disks:
            severity = d.severity(s)
            if severity == Severity.OK:
                continue
            hours = d.hours_to_full(s)
            if d.error is not None:
                found.append((severity, d.describe()))
            elif hours is not None and hours < s.disk_full_warn_hours and (
                    d.free_bytes >= s.disk_crit_free_bytes and d.free_share * 100 >= s.disk_warn_free_percent):
                found.append((severity, f"{d.describe()}: full in {duration(hours * 3600)} at this rate"))
            else:
                limit = s.disk_crit_free_percent if severity == Severity.CRITICAL else s.disk_warn_free_percent
                found.append((severity, f"{d.describe()} < {limit:g}%"))
        c = self.clock_check
        if c is not None and c.severity(s) != Severity.OK:
            found.append((Severity.WARNING,
                          (f"host clock {abs(c.offset_seconds):.1f}s "
                           f"{'behind' if c.offset_seconds > 0 else 'ahead of'} the database's "
                           f"(> {s.clock_warn_seconds:g}s; check NTP: timedatectl, chronyc tracking)")))
        return found

    def freeze(self) -> list[str]:
        """The SLOs whose error budget is spent: while any is, changes are frozen."""
        return error_budget.freeze_reasons(self.budgets)

    def _budget_problems(self) -> list[tuple[Severity, str]]:
        """Multiwindow burn-rate alerts (fast: CRITICAL, slow: WARNING) and the change freeze."""
        found: list[tuple[Severity, str]] = []
        for b in self.budgets:
            if b.fast_burn:
                # A low-traffic SLO (a few editions a day) burns 100x on one late sample: it pages
                # only once enough bad samples prove a pattern (the workbook's low-traffic advice).
                severe = b.bad_within("1h") >= self.settings.burn_page_min_bad_events
                found.append((Severity.CRITICAL if severe else Severity.WARNING,
                              (f"{b.name} error budget burning fast: {b.rate('1h'):.1f}x over 1h and "
                               f"{b.rate('5m'):.1f}x over 5m (> {error_budget.FAST[2]:g}x)")))
            elif b.slow_burn:
                found.append((Severity.WARNING, (f"{b.name} error budget burning: {b.rate('6h'):.1f}x over 6h and "
                                                 f"{b.rate('30m'):.1f}x over 30m (> {error_budget.SLOW[2]:g}x)")))
        return found

    def freeze_note(self) -> str | None:
        """The change freeze, said on the check line. Not a severity of its own: with a few
        editions a day one late one spends a month's budget, and a WARNING held for a month
        would teach operators to ignore the check."""
        frozen = self.freeze()
        if not frozen:
            return None
        return (f"change freeze on: error budget spent for {', '.join(frozen)} over "
                f"{self.settings.error_budget_days:g}d (configuration changes are flagged in the journal until "
                "it recovers)")

    def _escalation_problems(self) -> list[tuple[Severity, str]]:
        """A quarantine or a parked track nobody released within its reason's limit: CRITICAL."""
        found = []
        for q in self.queues():
            if q.overdue:
                noun = "quarantined job" if q.kind == "quarantine" else "parked track"
                found.append((Severity.CRITICAL, (f"{plural(q.overdue, noun)} {q.reason} unreleased > "
                                                  f"{duration(q.critical_after_seconds)} (oldest {q.oldest} for "
                                                  f"{duration(q.oldest_seconds)})")))
        return found

    @property
    def quarantine_reasons(self) -> dict[str, int]:
        return dict(sorted(Counter(q.reason or "unknown" for q in self.quarantined).items()))

    # -- the check -----------------------------------------------------------------------

    def problems(self) -> list[tuple[Severity, str]]:
        """(severity, text) for everything that is not OK, most severe first."""
        s = self.settings
        found: list[tuple[Severity, str]] = []
        if self.stranded:
            o = self.stranded[0]
            found.append((Severity.CRITICAL, (f"{len(self.stranded)} stranded > {duration(s.stranded_after_seconds)} "
                                              f"(oldest {o.product} {o.edition_date} in {o.state} for "
                                              f"{duration(o.age_seconds)}, job {o.id[:8]})")))
        found.extend(self._escalation_problems())
        found.extend(self._budget_problems())
        found.extend(self._host_problems())
        found.extend(self._track_problems())
        if self.immovable:
            o = self.immovable[0]
            found.append((Severity.WARNING,
                          (f"{plural(len(self.immovable), 'edition')} with no path forward (e.g. "
                           f"{o.product} {o.edition_date} in {o.state}: {o.reason}; see `iipub quarantine "
                           f"show {o.id}`)")))
        if self.late:
            o = self.late[0]
            severe = o.age_seconds > s.stranded_after_seconds
            limit = s.stranded_after_seconds if severe else s.late_after_minutes * 60
            found.append((Severity.CRITICAL if severe else Severity.WARNING,
                          (f"{plural(len(self.late), 'edition')} late > {duration(s.late_after_minutes * 60)} (oldest "
                           f"{o.product} {o.edition_date} in {o.state}, {duration(o.age_seconds)} since its window "
                           f"opened > {duration(limit)})")))
        if self.ledger_problem:
            found.append((Severity.CRITICAL, self.ledger_problem))
        found.extend(self._gate_problems())
        if self.placeholder_key:
            found.append((Severity.WARNING, self.placeholder_key))
        found.extend((Severity.CRITICAL, h.describe() + f": {clip_words(h.message or '', 120)}")
                     for h in self.product_holds)
        found.extend((Severity.CRITICAL, h.describe(products, self.project) + f": {clip_words(h.message or '', 160)}")
                     for h, products in self.model_holds)
        if self.other_scope_jobs:
            found.append((Severity.CRITICAL,
                          (f"{plural(self.other_scope_jobs, 'job')} in flight created under "
                           f"{self.other_scope}, reads now under {self.current_scope}: their responses "
                           f"cannot be read there (a 404 is not taken as a loss); restore that scope's "
                           f"credentials (runbook: \"Rotating a key\")")))
        if self.cutover is not None:
            found.extend(self.cutover.problems())
        found.extend(self._ceiling_problems())
        if self.heartbeats is not None:
            found.extend(self.heartbeats.problems())
        if self.failing_steps:
            o = self.failing_steps[0]
            found.append((Severity.WARNING,
                          (f"{plural(len(self.failing_steps), 'job')} whose step is failing (e.g. "
                           f"{o.product} {o.edition_date} in {o.state}: {clip_words(o.reason or '', 120)})")))
        if self.unexpected_statuses:
            found.append((Severity.WARNING,
                          (f"{plural(self.unexpected_statuses, 'read')} of a provider status iipub does "
                           f"not know in {s.window_hours:g}h")))
        if self.duplicate_publications:
            found.append((Severity.CRITICAL, plural(self.duplicate_publications, "duplicate publication")))
        lag = self.outbox_lag_seconds
        if lag > s.outbox_lag_crit_seconds:
            found.append((Severity.CRITICAL, f"outbox lag {lag:.0f}s > {s.outbox_lag_crit_seconds:.0f}s"))
        elif lag > s.outbox_lag_warn_seconds:
            found.append((Severity.WARNING, f"outbox lag {lag:.0f}s > {s.outbox_lag_warn_seconds:.0f}s"))
        if self.quarantined:
            found.append((Severity.WARNING,
                          f"{len(self.quarantined)} quarantined ({', '.join(self.quarantine_reasons)})"))
        filtered = [q for q in self.quarantined if q.reason == Reason.CONTENT_FILTERED.value]
        if filtered:
            o = filtered[0]
            found.append((Severity.WARNING,
                          (f"{plural(len(filtered), 'response')} stopped by the provider's content filter (oldest "
                           f"{o.product} {o.edition_date}, job {o.id[:8]}): change the product's prompt, then "
                           f"`iipub quarantine release {o.id[:8]} --verified-lost` (see `iipub quarantine show`)")))
        if self.parked:
            o = self.parked[0]
            kinds = ", ".join(f"{state} {n}" for state, n in sorted(Counter(j.state for j in self.parked).items()))
            found.append((Severity.WARNING,
                          (f"{plural(len(self.parked), 'job')} parked for an operator ({kinds}; oldest "
                           f"{o.product} {o.edition_date} for {duration(o.age_seconds)}: see `iipub "
                           f"quarantine show {o.id}`)")))
        if self.expired_now or self.expired_in_window:
            found.append((Severity.WARNING, (f"provider expired/missing: {self.expired_now} now, "
                                             f"{self.expired_in_window} in {s.window_hours:g}h")))
        if self.outbox_parked:
            found.append((Severity.WARNING,
                          plural(self.outbox_parked, "parked sink delivery", "parked sink deliveries")))
        if self.webhooks is not None:
            found.extend((Severity.WARNING, text) for text in self.webhooks.problems())
        if self.outbox_failing:
            found.append((Severity.WARNING, f"{plural(self.outbox_failing, 'outbox event')} failing"))
        found.extend((Severity.WARNING, (f"SLO breach: {sli.name} {sli.within}/{sli.count} within "
                                         f"{sli.slo_seconds:g}s (target {sli.target:.0%})"))
                     for sli in self.slis if sli.breached)
        found.extend(self.extra_problems)
        # Operator and provider text (a pause reason, a breaker's detail, a run's error) is in
        # these: one line each, no control character, no `|` (it starts the perfdata).
        return sorted(((sev, printable(text, PROBLEM_WIDTH).replace("|", "/")) for sev, text in found),
                      key=lambda p: -p[0])

    def _track_problems(self) -> list[tuple[Severity, str]]:
        """Stranded tracks are CRITICAL like stranded jobs; a parked track is a WARNING like a
        parked job (its language waits for an operator; the other languages go on)."""
        t, s = self.tracks, self.settings
        if t is None:
            return []
        found: list[tuple[Severity, str]] = []
        if t.stranded:
            o = t.stranded[0]
            found.append((Severity.CRITICAL, (f"{plural(len(t.stranded), 'track')} stranded > "
                                              f"{duration(s.stranded_after_seconds)} (oldest {o.describe()} for "
                                              f"{duration(o.age_seconds)}, job {o.job_id[:8]})")))
        if t.failing_steps:
            o = t.failing_steps[0]
            found.append((Severity.WARNING, (f"{plural(len(t.failing_steps), 'track')} whose step is failing (e.g. "
                                             f"{o.describe()}: {clip_words(o.reason or '', 120)})")))
        if t.immovable:
            o = t.immovable[0]
            found.append((Severity.WARNING,
                          (f"{plural(len(t.immovable), 'track')} with no path forward (e.g. "
                           f"{o.describe()}, {o.reason}; job {o.job_id[:8]}: see `iipub quarantine show "
                           f"{o.job_id}`)")))
        if t.parked:
            o = t.parked[0]
            reasons = ", ".join(f"{reason} {n}" for reason, n in t.parked_by_reason().items())
            why = f": {clip_words(o.reason, 80)}" if o.reason else ""
            found.append((Severity.WARNING,
                          (f"{plural(len(t.parked), 'parked track')} ({reasons}; oldest {o.describe()} "
                           f"for {duration(o.age_seconds)}{why}, job {o.job_id[:8]})")))
        return found

    def _gate_problems(self) -> list[tuple[Severity, str]]:
        g, s = self.gate, self.settings
        if g is None:
            return []
        found: list[tuple[Severity, str]] = []
        if g.paused and not g.paused_everything:  # everything paused: see `cutover`
            found.append((Severity.WARNING,
                          (f"creates paused by {g.paused_by} since "
                           f"{iso_z(g.paused_at, 'seconds') if g.paused_at else '?'}: {g.paused_reason}")))
        if g.is_open:
            open_for = seconds_between(self.generated_at, g.opened_at) if g.opened_at else 0.0
            since = iso_z(g.opened_at, "seconds") if g.opened_at else "?"  # stable between two reports
            severe = g.breaker_reason in breaker.CRITICAL_REASONS or open_for > s.breaker_crit_after_seconds
            next_probe = iso_z(g.probe_after, "seconds") if g.probe_after else "now"
            found.append((Severity.CRITICAL if severe else Severity.WARNING,
                          (f"create breaker open ({g.breaker_reason}) since {since}, {g.open_count} "
                           f"opening(s); next probe {next_probe}: {clip_words(g.breaker_detail or '', 120)}")))
        return found

    def _ceiling_problems(self) -> list[tuple[Severity, str]]:
        if self.paid is None:
            return []
        return [(Severity.CRITICAL,
                 (f"spend ceiling reached: {c.describe()}; new creates wait (custody, validation and "
                  f"publication go on; raise it with `iipub budget override`)"))
                for c in self.paid.ceilings if c.reached]

    def check(self) -> tuple[Severity, str]:
        """(exit code, one Nagios-style line): 0 OK, 1 WARNING, 2 CRITICAL."""
        found = self.problems()
        code = found[0][0] if found else Severity.OK
        if found:
            summary = "; ".join(text for _, text in found)
        else:
            summary = (f"{plural(self.jobs_total, 'job')}, {len(self.quarantined)} quarantined, "
                       f"outbox lag {self.outbox_lag_seconds:.0f}s")
        note = self.freeze_note()
        if note is not None:
            summary = f"{summary}; {note}"
        return code, f"IIPUB {code.name} - {summary} | {self.perfdata()}"

    def perfdata(self) -> str:
        s = self.settings
        parts = [
            f"jobs={self.jobs_total}",
            f"quarantined={len(self.quarantined)};0",
            f"queue_overdue={sum(q.overdue for q in self.queues())};;0",  # ages: --json, Prometheus
            f"stranded={len(self.stranded)};;0",
            f"provider_expired={self.expired_now};0",
            f"outbox_lag={self.outbox_lag_seconds:.0f}s;{s.outbox_lag_warn_seconds:g};{s.outbox_lag_crit_seconds:g}",
            f"outbox_unpublished={self.outbox_unpublished}",
            f"outbox_parked={self.outbox_parked};0",
            f"duplicates={self.duplicate_publications};;0",
            f"late={len(self.late)};0",
            f"tracks_parked={len(self.tracks.parked) if self.tracks else 0};0",
            f"tracks_stranded={len(self.tracks.stranded) if self.tracks else 0};;0",
            # Nagios ranges: "0" alerts above 0, so a 0/1 flag warns as soon as it is 1.
            f"breaker_open={int(bool(self.gate and self.gate.is_open))};0",
            f"paused={int(bool(self.gate and self.gate.paused))};0",
        ]
        if self.paid is not None:
            parts.append(f"tokens_today={self.paid.window('today').total.tokens}")
            parts.extend(f"ceiling_{'global' if c.scope == money.GLOBAL else c.scope}={c.spent};;{c.allowed}"
                         for c in self.paid.ceilings)
        parts.extend(f"budget_left_{b.name}={b.left * 100:.1f}%;0:;0:" for b in self.budgets)
        parts.append(f"change_freeze={int(bool(self.freeze()))};0")
        parts.extend(f"disk_free_{'_'.join(d.roles)}={d.free_share * 100:.0f}%;{s.disk_warn_free_percent:g}:;"
                     f"{s.disk_crit_free_percent:g}:" for d in self.disks if d.error is None)
        if self.clock_check is not None:
            # whole seconds: two reports a moment apart print the same line (the JSON has milliseconds)
            parts.append(f"clock_offset={round(self.clock_check.offset_seconds)}s;"
                         f"{-s.clock_warn_seconds:g}:{s.clock_warn_seconds:g}")
        for key, sli in (("dispatch", self.dispatch), ("dwell", self.dwell), ("overdue_poll", self.overdue_polls)):
            p99 = sli.percentile(99)
            if p99 is not None:
                parts.append(f"{key}_p99={p99:.3f}s;{sli.slo_seconds:g}")
        return " ".join(parts)

    # -- the JSON document ---------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The `iipub status --json` document (keys documented in the CLI help)."""
        code, line = self.check()
        oldest_q = self.quarantined[0].to_dict() if self.quarantined else None
        return {
            "generated_at": iso_z(self.generated_at),
            "installation_id": self.installation_id,
            "api_key_placeholder": self.placeholder_key is not None,
            "other_scope": {"jobs": self.other_scope_jobs, "created_under": self.other_scope,
                            "reads_under": self.current_scope},
            "product_holds": [{"product": h.product, "cause": h.cause, "param": h.param, "code": h.code,
                               "message": h.message, "max_output_tokens": h.cap, "limit": h.limit,
                               "requested": h.requested, "job_id": h.job_id, "held_at": iso_z(h.held_at)}
                              for h in self.product_holds],
            "model_holds": [{"model": h.model, "cause": h.cause, "products": list(products), "message": h.message,
                             "job_id": h.job_id, "held_at": iso_z(h.held_at), "checked_at": iso_z(h.checked_at)}
                            for h, products in self.model_holds],
            "read_cooldown": {"until": iso_z_or_none(self.read_cooldown_until),
                              "cap_seconds": breaker.READ_COOLDOWN_CAP_SECONDS},
            "window_hours": self.settings.window_hours,
            "jobs": {
                "total": self.jobs_total,
                "by_state": self.by_state,
                "by_product": {p: dict(sorted(c.items())) for p, c in sorted(self.counts.items())},
            },
            "slis": {
                "time_to_dispatch": self.dispatch.to_dict(),
                "unretrieved_dwell": self.dwell.to_dict(),
                "overdue_polls": self.overdue_polls.to_dict(),
            },
            "duplicate_publications": self.duplicate_publications,
            "editions": {"withdrawn": self.editions_withdrawn, "corrected": self.editions_corrected,
                         "correcting": self.editions_correcting},
            "tracks": (self.tracks or TrackFigures(counts={})).to_dict(),
            "immovable": [j.to_dict() for j in self.immovable],
            "parked": [j.to_dict() for j in self.parked],
            "stranded": {
                "count": len(self.stranded),
                "after_seconds": self.settings.stranded_after_seconds,
                "oldest": self.stranded[0].to_dict() if self.stranded else None,
                "jobs": [j.to_dict() for j in self.stranded],
            },
            "outbox": {
                "unpublished": self.outbox_unpublished,
                "lag_seconds": _round(self.outbox_lag_seconds),
                "lag_warn_seconds": self.settings.outbox_lag_warn_seconds,
                "lag_crit_seconds": self.settings.outbox_lag_crit_seconds,
                "parked": self.outbox_parked,
                "failing": self.outbox_failing,
                "problems": [dict(p) for p in self.outbox_problems],
            },
            "quarantine": {
                "count": len(self.quarantined),
                "by_reason": self.quarantine_reasons,
                "oldest": oldest_q,
                "jobs": [j.to_dict() for j in self.quarantined],
            },
            "queues": [q.to_dict() for q in self.queues()],
            "error_budgets": {b.name: b.to_dict() for b in self.budgets},
            "change_freeze": {"on": bool(self.freeze()), "slos": self.freeze()},
            "disks": [d.to_dict() for d in self.disks],
            "clock": self.clock_check.to_dict() if self.clock_check is not None else None,
            "provider_expired": {"current": self.expired_now, "in_window": self.expired_in_window},
            "late": {
                "count": len(self.late),
                "after_minutes": self.settings.late_after_minutes,
                "oldest": self.late[0].to_dict() if self.late else None,
                "jobs": [j.to_dict() for j in self.late],
            },
            "create_gate": _gate_dict(self.gate),
            "cutover": self.cutover.to_dict() if self.cutover is not None else None,
            "webhooks": self.webhooks.to_dict() if self.webhooks is not None else None,
            "heartbeats": self.heartbeats.to_dict() if self.heartbeats is not None else None,
            "unexpected_statuses": self.unexpected_statuses,
            "failing_steps": [j.to_dict() for j in self.failing_steps],
            "paid": self.paid.to_dict() if self.paid is not None else None,
            "spend": {
                "counted_by": "edition date",
                "days": self.settings.spend_days,
                "rows": [r.to_dict() for r in self.spend],
                "total": {
                    "input_tokens": sum(r.input_tokens for r in self.spend),
                    "output_tokens": sum(r.output_tokens for r in self.spend),
                    "total_tokens": sum(r.total_tokens for r in self.spend),
                },
            },
            "check": {
                "code": code,
                "status": code.name,
                "line": line,
                "problems": [{"severity": sev.name, "text": text} for sev, text in self.problems()],
            },
        }


def _gate_dict(g: GateState | None) -> dict[str, Any] | None:
    if g is None:
        return None
    return {
        "breaker": g.breaker, "reason": g.breaker_reason, "detail": g.breaker_detail,
        "opened_at": iso_z_or_none(g.opened_at), "openings": g.open_count, "probe_after": iso_z_or_none(g.probe_after),
        "last_accepted_create_at": iso_z_or_none(g.last_ok_at), "cooldown_until": iso_z_or_none(g.cooldown_until),
        "paused": g.paused, "paused_by": g.paused_by, "paused_reason": g.paused_reason,
        "paused_at": iso_z_or_none(g.paused_at), "paused_everything": g.paused_everything,
    }


# -- arithmetic on what the queries read ------------------------------------------------


def stale_after(settings: Settings) -> float:
    """How long a run may go unfinished before it counts as dead: longer than any tick with its
    leases, and never shorter than the heartbeat limit."""
    longest = max(settings.reconcile.tick_seconds + settings.reconcile.lease_seconds,
                  settings.relay.tick_seconds + settings.relay.lease_seconds)
    return max(settings.monitoring.heartbeat_after_seconds, longest + 60.0)


def dwell_samples(events: Iterable[Sequence[Any]]) -> tuple[list[float], int]:
    """The custody dwell of each retrieval and how many dwells lost the output (see
    `timed_dwell_samples`)."""
    timed, lost = timed_dwell_samples(events)
    return [d for _, d in timed], len(lost)


def timed_dwell_samples(events: Iterable[Sequence[Any]]) -> tuple[list[tuple[dt.datetime, float]], list[dt.datetime]]:
    """The custody dwell of each retrieval, from events `(job_id, from_state, to_state, at[,
    detail])` in journal order per job.

    A retrieval whose detail has the provider's `provider_created_at` and `provider_completed_at`,
    of a job whose create was accepted in the window, is measured from the provider's completion
    mapped onto the database clock through that acceptance: (retrieved - accepted) - (completed -
    created). The time a finished response waited unseen counts, and the two clocks are never
    compared (the mapping errs early by at most the create's round trip). Otherwise it runs from
    the job's entry into COMPLETED_NOT_RETRIEVED. Unclosed dwells are left to the caller.
    Returns (retrieved at, dwell) per retrieval and the times of the dwells that lost the output."""
    cnr, cif = State.COMPLETED_NOT_RETRIEVED.value, State.CREATE_IN_FLIGHT.value
    rnv = State.RETRIEVED_NOT_VALIDATED.value
    durations: list[tuple[dt.datetime, float]] = []
    failed: list[dt.datetime] = []
    entered: dict[str, dt.datetime] = {}
    accepted: dict[str, dt.datetime] = {}
    for event in events:
        job_id, src, dst, at = event[:4]
        if src == cif and dst in CUSTODY_PENDING:
            accepted[job_id] = at
        if dst == cnr and src != cnr:
            entered[job_id] = at
        elif src == cnr and dst != cnr and job_id in entered | accepted:
            start = entered.pop(job_id, None)
            if dst == rnv:
                provider_run = _provider_run_seconds(event[4] if len(event) > 4 else None)
                if provider_run is not None and job_id in accepted:
                    durations.append((at, max(0.0, seconds_between(at, accepted[job_id]) - provider_run)))
                elif start is not None:
                    durations.append((at, max(0.0, seconds_between(at, start))))
            elif dst in DWELL_LOST and start is not None:
                failed.append(at)
    return durations, failed


def _provider_run_seconds(detail: str | None) -> float | None:
    """completed_at - created_at of a retrieval's journal detail (the provider's clock)."""
    if not detail:
        return None
    try:
        doc = json.loads(detail)
        run = float(doc["provider_completed_at"]) - float(doc["provider_created_at"])
    except (ValueError, KeyError, TypeError):
        return None
    return run if run >= 0 else None


def poll_lateness(at: dt.datetime, detail: str | None) -> float | None:
    """Seconds between a poll's due time (from its journal detail) and when it ran."""
    if not detail:
        return None
    try:
        due = json.loads(detail).get("due_at")
        if not due:
            return None
        due_at = dt.datetime.fromisoformat(str(due)).replace(tzinfo=None)
    except (ValueError, AttributeError):
        return None
    return max(0.0, seconds_between(at, due_at))


def stranded_jobs(live: Iterable[Mapping[str, Any]], now: dt.datetime, after_seconds: float) -> tuple[JobRef, ...]:
    """Unpublished jobs nobody is asked to act on, `after_seconds` past their slot's opening
    (`jobs.is_stranded`, the definition `iipub check` uses too), oldest first."""
    found = []
    for j in live:
        age = is_stranded(j["state"], bool(j["kill_requested"]), j["opens_at"], j["created_at"], now, after_seconds)
        if age is not None:
            found.append(job_ref(j, age))
    return tuple(sorted(found, key=lambda r: -r.age_seconds))


def late_editions(live: Iterable[Mapping[str, Any]], now: dt.datetime, after_seconds: float) -> tuple[JobRef, ...]:
    """Editions unpublished `after_seconds` past their slot's opening, however their job got
    there (parked and looping ones included), oldest first."""
    found = []
    for j in live:
        age = late_seconds(j["state"], bool(j["kill_requested"]), j["opens_at"], j["created_at"], now)
        if age is not None and age > after_seconds:
            found.append(job_ref(j, age))
    return tuple(sorted(found, key=lambda r: -r.age_seconds))


# -- helpers ----------------------------------------------------------------------------------


def job_ref(j: Mapping[str, Any], age: float) -> JobRef:
    return JobRef(j["id"], j["product"], j["edition_date"], j["state"], age, j["quarantine_reason"])


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
