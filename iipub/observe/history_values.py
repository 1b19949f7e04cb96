"""What `iipub report` shows, as values: the rows of a range of days (`store.history_rows`) folded
into daily series, one chart each, and the quarantine now by reason and age. Pure: no I/O.

Days are UTC days of the database clock. Each chart keeps its numbers: the page draws them and
prints them in the table under the drawing.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from iipub.core.timefmt import seconds_between
from iipub.model.states import DONE, EDITIONS_SAVED, State
from iipub.observe.status_report import Sli, timed_dwell_samples

# States whose way out is a provider's answer: the journal entry leaving them says what it answered.
PROVIDER_ANSWERED = frozenset({State.CREATE_IN_FLIGHT.value, State.ACCEPTED.value, State.QUEUED.value,
                               State.IN_PROGRESS.value, State.CLEANUP_PENDING.value})
MOST_KINDS = 7  # provider answer kinds drawn one by one; the rest are summed as "other"
AGE_BUCKETS: tuple[tuple[str, float], ...] = (("< 1 h", 3600.0), ("1–4 h", 4 * 3600.0), ("4–24 h", 86400.0),
                                              ("1–7 d", 7 * 86400.0), ("> 7 d", float("inf")))


@dataclass(frozen=True)
class Series:
    name: str
    values: tuple[float | None, ...]  # one per day; None: no sample that day


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    unit: str  # what a value counts: "tokens", "editions", "seconds", "runs", "answers", "jobs"
    kind: str  # "stacked" (bars summed per day) or "lines"
    days: tuple[dt.date, ...]
    series: tuple[Series, ...]
    limits: tuple[tuple[str, float], ...] = ()  # horizontal lines: a ceiling, an SLO
    note: str = ""
    empty_note: str = "nothing in these days"

    @property
    def has_data(self) -> bool:
        """Any bar above zero; any point of a line (a dwell of 0 s is a sample)."""
        if self.kind == "lines":
            return any(v is not None for s in self.series for v in s.values)
        return any(v for s in self.series for v in s.values)

    @property
    def top(self) -> float:
        """The largest value drawn: a day's stack, a line's point, a limit."""
        if self.kind == "stacked":
            peak = max((sum(s.values[i] or 0 for s in self.series) for i in range(len(self.days))), default=0.0)
        else:
            peak = max((v for s in self.series for v in s.values if v is not None), default=0.0)
        return max([peak, *(v for _, v in self.limits)])


@dataclass(frozen=True)
class QuarantineAge:
    reason: str
    count: int
    by_age: tuple[int, ...]  # per AGE_BUCKETS
    oldest_seconds: float


@dataclass(frozen=True)
class History:
    generated_at: dt.datetime
    days: tuple[dt.date, ...]
    charts: tuple[Chart, ...]
    quarantine: tuple[QuarantineAge, ...]

    @property
    def first(self) -> dt.date:
        return self.days[0]

    @property
    def last(self) -> dt.date:
        return self.days[-1]

    @property
    def empty(self) -> bool:
        return not self.quarantine and not any(c.has_data for c in self.charts)


def day_range(today: dt.date, days: int) -> tuple[dt.date, ...]:
    return tuple(today - dt.timedelta(days=n) for n in range(days - 1, -1, -1))


def _index(days: Sequence[dt.date]) -> dict[dt.date, int]:
    return {d: i for i, d in enumerate(days)}


def _stack(days: Sequence[dt.date], counts: Mapping[str, Mapping[dt.date, float]],
           order: Iterable[str] | None = None) -> tuple[Series, ...]:
    names = list(order) if order is not None else sorted(counts)
    return tuple(Series(name, tuple(float(counts.get(name, {}).get(d, 0)) for d in days)) for name in names)


def spend_chart(days: Sequence[dt.date], rows: Iterable[Mapping[str, Any]],
                ceilings: Sequence[tuple[str, int]]) -> Chart:
    """Tokens paid per day by product (reported, else the estimate), against the daily ceilings."""
    by: dict[str, dict[dt.date, float]] = defaultdict(lambda: defaultdict(float))
    estimated: Counter[dt.date] = Counter()
    for r in rows:
        day = r["paid_at"].date()
        by[r["product"]][day] += int(r["tokens"])
        estimated[day] += int(bool(r["estimated"]))
    note = ("Counted by payment time, as the daily ceilings count them: the usage the provider reported, or the "
            "product's estimate while a create's usage is unknown. The lines are the ceilings configured now "
            "(an operator's `iipub budget override` raised a day's ceiling beyond them: `iipub budget show`).")
    if sum(estimated.values()):
        note += f" {sum(estimated.values())} create(s) counted at the estimate."
    return Chart("spend", "Spend per day against the ceilings", "tokens", "stacked", tuple(days),
                 _stack(days, by), tuple((f"ceiling {scope}", float(limit)) for scope, limit in ceilings), note,
                 "no paid create in these days")


def editions_chart(days: Sequence[dt.date], rows: Iterable[Mapping[str, Any]], now: dt.datetime,
                   late_after_seconds: float) -> Chart:
    """Per edition date: editions saved (one per language) and, of the slots, those late: saved
    later than `late_after_seconds` after the slot opened, or not saved that long after."""
    published: Counter[dt.date] = Counter()
    on_time: Counter[dt.date] = Counter()
    late: Counter[dt.date] = Counter()
    for r in rows:
        day, saved = r["edition_date"], r["saved_at"]
        opened = r["opens_at"]
        if saved is not None:
            published[day] += 1
            if seconds_between(saved, opened) > late_after_seconds:
                late[day] += 1
            else:
                on_time[day] += 1
        elif r["state"] not in EDITIONS_SAVED and r["state"] not in DONE and \
                seconds_between(now, opened) > late_after_seconds:
            late[day] += 1
    counts = {"saved on time": on_time, "late": late}
    return Chart("editions", "Editions published and late per day", "editions", "stacked", tuple(days),
                 _stack(days, counts, ("saved on time", "late")), (),
                 (f"By edition date, one per language. Late: saved more than {late_after_seconds / 60:g} minutes "
                  "after the slot opened ([status] late_after_minutes), or not saved yet that long after. "
                  f"{sum(published.values())} edition(s) saved in all."),
                 "no edition dated in these days")


def dwell_chart(days: Sequence[dt.date], journal: Sequence[Mapping[str, Any]], slo_seconds: float) -> Chart:
    """Custody dwell per day (the day custody was taken): its median and 95th percentile."""
    events = [(r["job_id"], r["from_state"], r["to_state"], r["at"], r["detail"]) for r in journal if r["lang"] is None]
    timed, _ = timed_dwell_samples(events)
    by_day: dict[dt.date, list[float]] = defaultdict(list)
    for at, seconds in timed:
        by_day[at.date()].append(seconds)
    p50, p95 = [], []
    for d in days:
        sli = Sli("dwell", slo_seconds, 0.99, tuple(by_day.get(d, ())))
        p50.append(sli.percentile(50))
        p95.append(sli.percentile(95))
    return Chart("dwell", "Dwell before custody, p50 and p95", "seconds", "lines", tuple(days),
                 (Series("p50", tuple(p50)), Series("p95", tuple(p95))), (("SLO", float(slo_seconds)),),
                 ("How long a finished response waited at the provider before iipub stored it, by the day it was "
                  f"stored (nearest-rank percentiles; {sum(len(v) for v in by_day.values())} retrieval(s))."),
                 "no retrieval in these days")


def quarantine_chart(days: Sequence[dt.date], journal: Iterable[Mapping[str, Any]]) -> Chart:
    """Jobs and language tracks that entered QUARANTINED per day, by reason."""
    by: dict[str, Counter[dt.date]] = defaultdict(Counter)
    q = State.QUARANTINED.value
    for r in journal:
        if r["to_state"] == q and r["from_state"] != q:
            by[r["reason"] or "unknown"][r["at"].date()] += 1
    return Chart("quarantines", "Quarantines per day by reason", "jobs", "stacked", tuple(days), _stack(days, by), (),
                 "Jobs (and language tracks) that entered QUARANTINED that day, by the reason they were parked for.",
                 "no quarantine in these days")


def runs_chart(days: Sequence[dt.date], rows: Iterable[Mapping[str, Any]]) -> Chart:
    """Reconcile and relay runs per day: idle (answered by the wake-up check), full, failed, died."""
    counts: dict[str, Counter[dt.date]] = {k: Counter() for k in ("idle", "full", "failed", "unfinished")}
    for r in rows:
        day = r["started_at"].date()
        if r["finished_at"] is None:
            counts["unfinished"][day] += 1
        elif not r["ok"]:
            counts["failed"][day] += 1
        else:
            counts["idle" if r["idle"] else "full"][day] += 1
    return Chart("runs", "Runs per day, idle and full", "runs", "stacked", tuple(days),
                 _stack(days, counts, ("idle", "full", "failed", "unfinished")), (),
                 ("reconcile and relay runs by the day they started: idle (the wake-up check found nothing due), "
                  "full, failed, and not finished (still running, or killed)."),
                 "no run recorded in these days")


def provider_chart(days: Sequence[dt.date], journal: Iterable[Mapping[str, Any]]) -> Chart:
    """What the provider answered, as the journal recorded it: the reason of each entry leaving a
    state only a provider's answer leaves (a create, a poll, a delete), per day."""
    by: dict[str, Counter[dt.date]] = defaultdict(Counter)
    for r in journal:
        if r["lang"] is None and r["from_state"] in PROVIDER_ANSWERED:
            by[r["reason"] or "unknown"][r["at"].date()] += 1
    ranked = sorted(by, key=lambda k: (-sum(by[k].values()), k))
    if len(ranked) > MOST_KINDS:
        other: Counter[dt.date] = Counter()
        for k in ranked[MOST_KINDS - 1:]:
            other.update(by.pop(k))
        ranked = [*ranked[:MOST_KINDS - 1], "other"]
        by["other"] = other
    return Chart("provider", "Provider answers by kind", "answers", "stacked", tuple(days),
                 _stack(days, by, ranked), (),
                 ("Journal entries leaving a create, a poll or a delete, by their reason: the answers that moved a "
                  "job (a poll that changed nothing is not journaled)."),
                 "no provider answer journaled in these days")


def quarantine_now(rows: Iterable[Mapping[str, Any]], now: dt.datetime) -> tuple[QuarantineAge, ...]:
    groups: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        groups[r["quarantine_reason"] or "unknown"].append(max(0.0, seconds_between(now, r["state_entered_at"])))
    out = []
    for reason, ages in sorted(groups.items()):
        buckets = [0] * len(AGE_BUCKETS)
        for age in ages:
            buckets[next(i for i, (_, upto) in enumerate(AGE_BUCKETS) if age < upto)] += 1
        out.append(QuarantineAge(reason, len(ages), tuple(buckets), max(ages)))
    return tuple(out)
