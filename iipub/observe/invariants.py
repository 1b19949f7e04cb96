"""The promises iipub keeps, checked after the fact against any iipub database.

`check(engine, ...)` only reads (the jobs, the journal, editions, outbox, deliveries, and
optionally the simulator's request counts, the static site and a webhook receiver's log)
and returns a list of `Violation`s; an empty list means every invariant held. It is what
the chaos runner (`bench/chaos/chaos.py`) asserts at the end of a run, and what `iipub check`
prints. Each `kind` below names one invariant:

Journal
  journal_versions       versions in `job_events` strictly increase per job
  journal_chain          each event starts where the previous one ended; the first is the slot's
                         creation (-> NO_JOB); the last ends in the job's current state
  journal_edge           every journaled move is an edge of the state table; operator-only edges
                         carry an `operator_*` reason
  journal_orphan         an event of a job that does not exist
  attempts_mismatch      jobs.generation_attempts == dispatches - refunded (create_refused)
  budget_exceeded        paid creates charged to a slot > budgets.max_generation_attempts

Paid creates (needs the simulator's stats)
  unjournaled_create     the provider received more creates for a job (or for one of its
                         attempts) than the journal dispatched and did not refund
  create_missing         the journal says a create was accepted or refused-and-charged but the
                         provider never saw it (fewer creates than dispatches - refunds - the
                         dispatches that ended ambiguous / rejected / crashed)
  create_unknown_job     the provider received a create naming no job of this database
  sdk_retry              the provider saw a request with x-stainless-retry-count > 0
  create_after_ambiguous a `dispatch` after an ambiguous create outcome without an operator
                         release in between (journal; no simulator needed)
  unreleased_exit        a job left QUARANTINED without an operator action

Custody of provider output
  expiry_unjournaled     a move into PROVIDER_EXPIRED_OR_MISSING (or out of it) does not name the
                         lost response id
  response_abandoned     a new paid create while the previous accepted response was neither taken
                         into custody nor journaled as lost
  deleted_without_custody a remote response was deleted (simulator) or a job reached DELETED
                         without the output in custody and without an operator kill
  delete_without_owner   a DELETE iipub recorded sending (`provider_deletes`) of a response no job
                         held in custody or killed, and no operator discarded as an orphan

Publication
  not_published          a published job lacks an edition or an outbox event for a saved language
  edition_orphan         an edition whose job is missing, of another slot, or never saved
  published_twice        more than one save or publication journaled for one job (one more per paid
                         correction, `correct --regenerate`)
  outbox_unpublished     a published job's outbox event has no published_at
  outbox_orphan          an outbox row whose edition is missing, or an edition with != 1 event
  undelivered_sink       a published event lacks a delivered record for a configured sink
  sink_parked            a delivery is parked for an operator
  static_missing         the static sink's files for a delivered event are missing or differ
  webhook_not_received   a delivered webhook event never reached the receiver (when given)
  parked_without_reason  QUARANTINED without quarantine_reason, VALIDATION_FAILED_RETAINED without
                         its reasons or payload, MANUALLY_SUSPENDED without the state to resume
  killed_but_published   a killed job has editions

Spend ledger (`check_ledger`, `iipub check --ledger`)
  behind_ledger          the ledger charged paid creates for a slot that this database does not know
                         of and has not quarantined, or records custody, a save or a publication a
                         job still waiting for output does not know of (a restored backup)
  ledger_unreadable      ledger lines that could not be parsed (a torn line; the next ones count)
  ledger_missing         the ledger file is missing or unreadable although the database recorded a
                         paid create
  ledger_lost            the ledger is missing, replaced, truncated or behind what the database
                         remembers of it (`ledger_book`): creates are held until acknowledged

Language tracks
  journal_* / not_published / published_twice / deleted_without_custody, per track: its journal
                         is a chain of track edges fenced by its version; a PUBLISHED slot has every
                         track published; a saved track has exactly one edition of its language; a
                         slot is deleted only with every track's part in custody

Liveness
  stranded               a job neither published nor killed nor parked, `stranded_after_seconds` past
                         its slot's opening (database clock; `jobs.is_stranded`, as `status` reports)
With `settled=True` (after a convergence phase, nothing running):
  unsettled              a job neither DELETED (published or killed) nor parked, nor a NO_JOB slot
                         whose window has not opened
  outbox_pending         an outbox event not yet published
  stale_lease            a job or outbox lease held past its expiry
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from iipub.core.errors import SchemaNotReady
from iipub.core.timefmt import naive_utc
from iipub.edition.compose import artifact_from_json
from iipub.model import states
from iipub.model.jobs import STRANDED_AFTER_SECONDS, is_stranded
from iipub.model.states import (
    ADOPTION_REASONS,
    AMBIGUOUS_CREATE,
    REFUND_REASONS,
    EditionStatus,
    EventType,
    Reason,
    State,
    is_operator_reason,
)
from iipub.money.spend import SlotSpend, slot_of
from iipub.settings.config import Settings
from iipub.store import clock, installation, invariant_queries
from iipub.store.handles import Engine

# A dispatch that ended in one of AMBIGUOUS_CREATE may or may not have reached the provider;
# these certainly created nothing, but the journal cannot tell from the outcome alone.
UNCOUNTED_CREATE = AMBIGUOUS_CREATE | {Reason.CREATE_REJECTED}
# Entries that take output into custody, save editions, publish them.
CUSTODY = frozenset({Reason.RETRIEVED, Reason.OPERATOR_HARVEST, Reason.OPERATOR_IMPORT_PAYLOAD,
                     Reason.OPERATOR_ADOPT_ORPHAN})
ADOPTED = frozenset({Reason.ACCEPTED, Reason.OPERATOR_LINK, Reason.RESTORED_ADOPTED, Reason.AUTO_LINKED,
                     Reason.OPERATOR_ADOPT_ORPHAN, Reason.OPERATOR_ADOPT})
# Adoptions that add the paid creates a restored journal no longer shows (detail `attempts_added`).
ADDS_ATTEMPTS = frozenset({Reason.RESTORED_ADOPTED, Reason.RESTORED_PUBLISHED, Reason.OPERATOR_ADOPT_ORPHAN})


@dataclass(frozen=True)
class Violation:
    kind: str
    job_id: str | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.kind} {self.job_id or '-'}: {self.detail}"


@dataclass
class _Ev:
    id: int
    job_id: str
    from_state: str | None
    to_state: str
    version: int
    reason: str
    detail: dict[str, Any]
    at: dt.datetime


class _Found:
    def __init__(self) -> None:
        self.items: list[Violation] = []

    def add(self, kind: str, job_id: str | None, detail: str) -> None:
        self.items.append(Violation(kind, job_id, detail[:500]))


def check(
    engine: Engine,
    *,
    settings: Settings | None = None,
    sim_stats: Mapping[str, Any] | None = None,
    static_root: Path | None = None,
    sinks: Sequence[str] | None = None,
    webhook_keys: Collection[str] | None = None,
    settled: bool = False,
    stranded_after_seconds: float = STRANDED_AFTER_SECONDS,
    ledger: Mapping[str, SlotSpend] | None = None,
) -> list[Violation]:
    """Every invariant violation found, journal order within a job. Reads only.

    `settings` supplies the generation budget, the configured sinks and the static root
    (each can also be passed on its own); `sim_stats` is the simulator's `/_sim/stats`
    document; `webhook_keys` the Idempotency-Keys a webhook receiver saw; `settled` adds the
    end-of-run checks (nothing left to do, no lease held). With the spend ledger's slots
    (`ledger`), creates and custody a restored database forgot are explained by the ledger."""
    if settings is not None:
        if static_root is None and settings.static_sink is not None:
            static_root = Path(settings.static_sink.root)
        if sinks is None:
            sinks = settings.sink_names()
    found = _Found()
    with engine.connect() as conn:
        now = naive_utc(clock.read_now(conn))
        jobs = invariant_queries.jobs(conn)
        events: dict[str, list[_Ev]] = defaultdict(list)
        track_events: dict[tuple[str, str], list[_Ev]] = defaultdict(list)
        for r in invariant_queries.journal(conn):
            ev = _Ev(r.id, r.job_id, r.from_state, r.to_state, r.version, r.reason, _detail(r.detail), naive_utc(r.at))
            (events[r.job_id] if r.lang is None else track_events[(r.job_id, r.lang)]).append(ev)
        track_rows = invariant_queries.tracks(conn)
        editions = invariant_queries.editions(conn)
        outbox = invariant_queries.outbox(conn)
        deliveries = invariant_queries.deliveries(conn)
        deletes = installation.deletes(conn)
        fates = invariant_queries.orphan_fates(conn)
        try:
            ours: str | None = installation.read(conn)
        except SchemaNotReady:
            ours = None
    for job_id in sorted(set(events) - set(jobs)):
        found.add("journal_orphan", job_id, f"{len(events[job_id])} events of a job that does not exist")
    max_gen = settings.budgets.max_generation_attempts if settings is not None else None
    # Slots waiting only on parked language tracks (the others saved): parked, for an operator.
    by_job: dict[str, list[str]] = defaultdict(list)
    for (jid, _lang), t in track_rows.items():
        by_job[jid].append(t["state"])
    waiting = {jid for jid, ss in by_job.items()
               if any(s in states.TRACK_PARKED for s in ss) and all(s in states.TRACK_PARKED | states.TRACK_SAVED
                                                                    for s in ss)}
    for job_id, job in sorted(jobs.items(), key=lambda kv: (kv[1]["product"], kv[1]["edition_date"], kv[0])):
        evs = events.get(job_id, [])
        _journal(found, job, evs, max_gen)
        _custody(found, job, evs)
        _liveness(found, job, evs, now, stranded_after_seconds, settled,
                  parked_track=job_id in waiting and job["state"] in states.TRACKS_RUN_IN)
    _tracks(found, jobs, track_rows, track_events, editions)
    _publication(found, jobs, events, editions, outbox, deliveries, list(sinks or _sink_names(deliveries)),
                 static_root, webhook_keys, now, settled, track_events)
    _deletes(found, jobs, deletes, fates, events)
    if sim_stats is not None:
        _creates(found, jobs, events, _own(sim_stats, ours), ledger or {})
    return found.items


def _deletes(found: _Found, jobs: Mapping[str, Mapping[str, Any]], deletes: Sequence[Mapping[str, Any]],
             fates: Mapping[str, str | None], events: Mapping[str, Sequence[_Ev]] | None = None) -> None:
    """Every DELETE iipub sent had an owner: a job holding that response with its output in custody
    (or killed), or an orphan an operator discarded. A published slot generated again to correct
    its editions (`correct --regenerate`) held the response it replaced in custody: its journal
    names it."""
    holders: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for job in jobs.values():
        if job["response_id"]:
            holders[str(job["response_id"])].append(job)
    for jid, evs in (events or {}).items():
        for e in evs:
            replaced = e.detail.get("replaced_response_id") if e.reason == Reason.OPERATOR_CORRECT_REGENERATE \
                else None
            if replaced and jid in jobs:
                holders[str(replaced)].append({**jobs[jid], "has_payload": True})
    for d in deletes:
        rid, basis = str(d["response_id"]), d["basis"]
        held = holders.get(rid, [])
        if basis == "custody" and any(j["has_payload"] for j in held):
            continue
        if basis == "kill" and any(j["kill_requested"] for j in held):
            continue
        if basis == "discard" and fates.get(rid) == "discarded":
            continue
        found.add("delete_without_owner", d["job_id"], f"DELETE of response {rid} ({basis}) by {d['worker']} at "
                                                       f"{d['at']}: no job holds it in custody or killed, and no "
                                                       "operator discarded it")


def _own(stats: Mapping[str, Any], ours: str | None) -> Mapping[str, Any]:
    """The simulator's create counts without another installation's: a project shared with
    another iipub shows its creates too (their metadata names that installation)."""
    if ours is None:
        return stats
    metas = [m for m in stats.get("create_metadata") or [] if isinstance(m, Mapping)]
    theirs = Counter(str(m.get("iipub_job_id")) for m in metas if m.get("iipub_installation") not in (None, ours))
    if not theirs:
        return stats
    by_job = {str(k): int(v) - theirs.get(str(k), 0) for k, v in (stats.get("creates_by_job") or {}).items()}
    return {**stats, "creates_by_job": {k: v for k, v in by_job.items() if v > 0},
            "create_metadata": [m for m in metas if m.get("iipub_installation") in (None, ours)]}


# -- the journal -------------------------------------------------------------------------------


def _journal(found: _Found, job: Mapping[str, Any], evs: Sequence[_Ev], max_gen: int | None) -> None:
    jid = job["id"]
    if not evs:
        found.add("journal_chain", jid, "job has no journal at all")
        return
    if evs[0].from_state is not None or evs[0].to_state != State.NO_JOB.value:
        found.add("journal_chain", jid,
                  f"first event {evs[0].from_state} -> {evs[0].to_state}, not the slot's creation")
    _chained(found, jid, evs, "", "job")
    for ev in evs[1:]:
        if ev.from_state is None:
            continue
        edge = states.edge(ev.from_state, ev.to_state) if _is_state(ev.from_state) and _is_state(ev.to_state) else None
        if ev.reason in states.EDITION_ACTIONS and ev.from_state == ev.to_state:
            continue  # a withdrawal or correction of its editions: journaled on the slot, which stays put
        if edge is None:
            found.add("journal_edge", jid, f"event {ev.id}: {ev.from_state} -> {ev.to_state} is not in the state table")
        elif edge.operator and not is_operator_reason(ev.reason):
            found.add("journal_edge", jid, f"event {ev.id}: operator-only {ev.from_state} -> {ev.to_state} "
                                           f"taken with reason {ev.reason!r}")
        if ev.from_state == State.QUARANTINED.value and ev.to_state != State.QUARANTINED.value \
                and not is_operator_reason(ev.reason) and ev.reason not in ADOPTION_REASONS:
            found.add("unreleased_exit", jid, f"event {ev.id} left QUARANTINED with reason {ev.reason!r}")
    last = evs[-1]
    if last.to_state != job["state"]:
        found.add("journal_chain", jid, f"journal ends in {last.to_state} but the job is {job['state']}")
    if last.version > job["version"]:
        found.add("journal_versions", jid, f"journal version {last.version} > job version {job['version']}")
    charged = sum(e.reason == Reason.DISPATCH for e in evs) - sum(e.reason in REFUND_REASONS for e in evs)
    # After a restore the journal is as old as the backup; the spend ledger's adoption names the
    # paid creates it no longer shows.
    charged += sum(int(e.detail.get("attempts_added") or 0) for e in evs if e.reason in ADDS_ATTEMPTS)
    # `iipub adopt` charges the creates a legacy system paid for (none of them went through iipub).
    charged += sum(int(e.detail.get("attempts") or 0) for e in evs if e.reason == Reason.OPERATOR_ADOPT)
    charged += sum(int(e.detail.get("charged_from_ledger") or 0) for e in evs
                   if e.reason == Reason.OPERATOR_RELEASE_VERIFIED_LOST)
    if charged != job["generation_attempts"]:
        found.add("attempts_mismatch", jid, f"generation_attempts={job['generation_attempts']} but the journal "
                                            f"charged {charged} (dispatches minus refunds)")
    if max_gen is not None and charged > max_gen:
        found.add("budget_exceeded", jid, f"{charged} paid creates charged, budget {max_gen}")
    # No new paid create after an ambiguous outcome until an operator took the job out.
    ambiguous: str | None = None
    for ev in evs:
        if ev.to_state == State.QUARANTINED.value and ev.reason in AMBIGUOUS_CREATE:
            ambiguous = ev.reason
        elif ev.from_state == State.QUARANTINED.value and (is_operator_reason(ev.reason)
                                                            or ev.reason == Reason.AUTO_LINKED):
            ambiguous = None  # an operator's release, or proof of which response the create made
        elif ev.reason == Reason.DISPATCH and ambiguous is not None:
            found.add("create_after_ambiguous", jid, f"event {ev.id}: dispatch after {ambiguous} without an "
                                                     "operator release")


# -- custody of provider output -------------------------------------------------------------------


def _custody(found: _Found, job: Mapping[str, Any], evs: Sequence[_Ev]) -> None:
    jid = job["id"]
    current: str | None = None  # the accepted response we owe custody or a journaled loss
    in_custody = False
    killed = False
    published_live = False  # closed on the live site's proof after a restore (`restored_published`)
    for ev in evs:
        d = ev.detail
        published_live = published_live or ev.reason == Reason.RESTORED_PUBLISHED
        if ev.reason == Reason.DISPATCH and current is not None and not in_custody:
            found.add("response_abandoned", jid, f"event {ev.id}: new paid create while response {current} was "
                                                 "neither retrieved nor journaled as lost")
        if ev.reason == Reason.DISPATCH:
            current, in_custody = None, False
        if ev.reason in ADOPTED and d.get("response_id"):
            current, in_custody = str(d["response_id"]), False
        if ev.reason in CUSTODY:
            in_custody = True
        if ev.to_state == State.PROVIDER_EXPIRED_OR_MISSING.value:
            lost = d.get("response_id")
            if not lost:
                found.add("expiry_unjournaled", jid, f"event {ev.id} -> PROVIDER_EXPIRED_OR_MISSING does not "
                                                     "name the lost response")
            elif current is not None and lost != current:
                found.add("expiry_unjournaled", jid, f"event {ev.id} journals {lost} as lost, but the accepted "
                                                     f"response was {current}")
            current = None
        if ev.from_state == State.PROVIDER_EXPIRED_OR_MISSING.value and ev.to_state != ev.from_state \
                and not d.get("lost_response_id") and not is_operator_reason(ev.reason):
            found.add("expiry_unjournaled", jid, f"event {ev.id} leaves PROVIDER_EXPIRED_OR_MISSING without "
                                                 "the lost response id")
        if ev.reason in (Reason.OPERATOR_RELEASE_VERIFIED_LOST, Reason.OPERATOR_KILL):
            current = None  # an operator decided what happens to it
            killed = killed or ev.reason == Reason.OPERATOR_KILL
    if job["state"] == State.DELETED.value and not (killed or job["kill_requested"] or published_live) \
            and not job["has_payload"]:
        found.add("deleted_without_custody", jid, "DELETED without the output in custody and without a kill")


# -- liveness -----------------------------------------------------------------------------------------


def _liveness(found: _Found, job: Mapping[str, Any], evs: Sequence[_Ev], now: dt.datetime, after: float,
              settled: bool, parked_track: bool = False) -> None:
    jid = job["id"]
    state = State(job["state"])
    not_open = state == State.NO_JOB and naive_utc(job["opens_at"]) > now
    # The same definition `iipub status` uses: measured from the slot's opening.
    age = is_stranded(state, bool(job["kill_requested"]), job["opens_at"], job["created_at"], now, after)
    if age is not None and not parked_track:
        found.add("stranded", jid, f"{state} ({job['product']} {job['edition_date']}), unpublished {age:.0f} s "
                                   f"after its slot opened > {after:.0f} s")
    if state not in states.SETTLED and not not_open and settled and not parked_track:
        found.add("unsettled", jid, f"{state} ({job['product']} {job['edition_date']}) after convergence; "
                                    f"last error: {(job['last_error'] or '-')[:200]}")
    if state == State.QUARANTINED and not job["quarantine_reason"]:
        found.add("parked_without_reason", jid, "QUARANTINED without a quarantine_reason")
    if state == State.VALIDATION_FAILED_RETAINED:
        failed = [e for e in evs if e.reason == Reason.VALIDATION_FAILED]
        if not job["has_payload"]:
            found.add("parked_without_reason", jid, "VALIDATION_FAILED_RETAINED but the payload is gone")
        if not job["last_error"] or not (failed and failed[-1].detail.get("reasons")):
            found.add("parked_without_reason", jid, "VALIDATION_FAILED_RETAINED without its validation reasons")
    if state == State.MANUALLY_SUSPENDED and not job["suspended_from"]:
        found.add("parked_without_reason", jid, "MANUALLY_SUSPENDED without the state to resume to")
    if settled and job["lease_owner"] and job["lease_expiry"] is not None and naive_utc(job["lease_expiry"]) < now:
        found.add("stale_lease", jid, f"lease of {job['lease_owner']} expired at {job['lease_expiry']} "
                                      f"and is still held ({state})")


# -- publication ------------------------------------------------------------------------------------------


def _publication(
    found: _Found, jobs: Mapping[str, Mapping[str, Any]], events: Mapping[str, Sequence[_Ev]],
    editions: Sequence[Mapping[str, Any]], outbox: Sequence[Mapping[str, Any]],
    deliveries: Sequence[Mapping[str, Any]], sinks: Sequence[str], static_root: Path | None,
    webhook_keys: Collection[str] | None, now: dt.datetime, settled: bool,
    track_events: Mapping[tuple[str, str], Sequence[_Ev]] | None = None,
) -> None:
    ed_by_job: dict[str, dict[str, Mapping[str, Any]]] = defaultdict(dict)
    ed_by_id = {e["id"]: e for e in editions}
    for e in editions:
        job = jobs.get(e["job_id"])
        saved = any(ev.reason == Reason.SAVED for ev in itertools.chain(
            events.get(e["job_id"], ()), (track_events or {}).get((e["job_id"], e["lang"]), ())))
        if job is None or (job["product"], job["edition_date"]) != (e["product"], e["edition_date"]) or not saved:
            found.add("edition_orphan", e["job_id"], f"edition {e['product']} {e['edition_date']} {e['lang']} "
                                                     "has no saved job of that slot")
        ed_by_job[e["job_id"]][e["lang"]] = e
    ob_by_edition: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for o in outbox:
        if o["edition_id"] not in ed_by_id:
            found.add("outbox_orphan", o["job_id"], f"outbox event {o['event_id']} has no edition")
        ob_by_edition[o["edition_id"]].append(o)
        if settled and o["published_at"] is None:
            found.add("outbox_pending", o["job_id"], f"outbox event {o['event_id']} unpublished after convergence")
        if settled and o["lease_owner"] and o["lease_expiry"] is not None and naive_utc(o["lease_expiry"]) < now:
            found.add("stale_lease", o["job_id"], f"outbox event {o['event_id']} leased by {o['lease_owner']} "
                                                  "past its expiry")
    for e in editions:
        # One publication each; corrections and withdrawals add their own events (`edition_changes`).
        n = sum(o.get("event_type", EventType.PUBLISHED) == EventType.PUBLISHED for o in ob_by_edition.get(e["id"], ()))
        if n != 1:
            found.add("outbox_orphan", e["job_id"], f"edition {e['lang']} has {n} publication events, not 1")
    by_event: dict[str, dict[str, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    known_events = {o["event_id"] for o in outbox}
    for d in deliveries:
        by_event[d["event_id"]][d["sink"]].append(d)
        if d["event_id"] not in known_events:
            found.add("outbox_orphan", None, f"delivery record for unknown event {d['event_id']} ({d['sink']})")
        if d["parked_at"] is not None:
            found.add("sink_parked", None, f"event {d['event_id']} parked at sink {d['sink']}: {d['last_error']}")

    for jid, job in jobs.items():
        evs = events.get(jid, ())
        saves = [e for e in evs if e.reason == Reason.SAVED]
        pubs = [e for e in evs if e.reason == Reason.ALL_EVENTS_DELIVERED]
        killed = bool(job["kill_requested"]) or any(e.reason == Reason.OPERATOR_KILL for e in evs)
        # A paid correction (`correct --regenerate`) saves and publishes the slot once more.
        allowed = 1 + sum(e.reason == Reason.OPERATOR_CORRECT_REGENERATE for e in evs)
        if len(saves) > allowed or len(pubs) > allowed:
            found.add("published_twice", jid, f"{len(saves)} saves and {len(pubs)} publications journaled")
        if killed and ed_by_job.get(jid):
            found.add("killed_but_published", jid, f"killed, yet editions {sorted(ed_by_job[jid])} exist")
        state = State(job["state"])
        closed_on_site = any(e.reason == Reason.RESTORED_PUBLISHED for e in evs)  # its pages are live already
        if state in states.DONE and not killed and not pubs and not closed_on_site:
            found.add("not_published", jid, f"{state} without a journaled publication")
        if not pubs:
            continue
        langs = saves[-1].detail.get("editions") if saves else None
        if not isinstance(langs, list) or not langs:
            found.add("not_published", jid, "published, but the save does not list its editions")
            continue
        for lang in langs:
            ed = ed_by_job.get(jid, {}).get(lang)
            if ed is None:
                found.add("not_published", jid, f"published without its {lang} edition")
                continue
            for o in ob_by_edition.get(ed["id"], ()):
                if o["published_at"] is None:
                    found.add("outbox_unpublished", jid, f"{lang} event {o['event_id']} not published, job is {state}")
        for lang in sorted(set(ed_by_job.get(jid, {})) - set(langs)):
            found.add("edition_orphan", jid, f"edition {lang} not listed by the job's save")

    for o in outbox:
        if o["published_at"] is None or o.get("superseded_by"):
            continue  # a superseded event was replaced by a later revision before every sink had it
        ed = ed_by_id.get(o["edition_id"])
        got = by_event.get(o["event_id"], {})
        for sink in sinks:
            rows = got.get(sink, [])
            if len(rows) > 1:
                found.add("undelivered_sink", o["job_id"], f"event {o['event_id']} has {len(rows)} {sink} records")
            if not any(r["delivered_at"] is not None for r in rows):
                found.add("undelivered_sink", o["job_id"], f"published event {o['event_id']} never delivered to "
                                                           f"{sink}")
        if ed is not None and static_root is not None and "static" in sinks:
            problem = _static_problem(static_root, ed)
            if problem:
                found.add("static_missing", o["job_id"], problem)
        if webhook_keys is not None and any(r["delivered_at"] for r in got.get("webhook", [])) \
                and o["event_id"] not in webhook_keys:
            found.add("webhook_not_received", o["job_id"], f"event {o['event_id']} marked delivered to the "
                                                           "webhook, never received")


def _tracks(found: _Found, jobs: Mapping[str, Mapping[str, Any]], tracks: Mapping[tuple[str, str], Mapping[str, Any]],
            events: Mapping[tuple[str, str], Sequence[_Ev]], editions: Sequence[Mapping[str, Any]]) -> None:
    """Language tracks: each track's journal is a chain of track edges its version fences; a
    PUBLISHED slot has every track published; a saved track has its one edition; a remote delete
    of a slot (not killed) had every track's part in custody."""
    langs_by_job: dict[str, dict[str, Mapping[str, Any]]] = defaultdict(dict)
    for (jid, lang), track in tracks.items():
        langs_by_job[jid][lang] = track
    eds = Counter((e["job_id"], e["lang"]) for e in editions)
    for (jid, lang), evs in sorted(events.items()):
        if (jid, lang) not in tracks:
            found.add("journal_orphan", jid, f"{len(evs)} events of a {lang} track that does not exist")
    for (jid, lang), track in sorted(tracks.items()):
        where = f"{lang} track"
        evs = events.get((jid, lang), ())
        if jid not in jobs:
            found.add("journal_orphan", jid, f"{where} of a job that does not exist")
            continue
        _track_journal(found, jid, where, track, evs)
        state = State(track["state"])
        if state in states.TRACK_SAVED and eds[(jid, lang)] != 1:
            found.add("not_published", jid, f"{where} is {state} with {eds[(jid, lang)]} editions, not 1")
        saves = sum(e.reason == Reason.SAVED for e in evs)
        pubs = sum(e.reason == Reason.ALL_EVENTS_DELIVERED for e in evs)
        # Its edition's correction by a paid generation is saved (`correction_saved`) and published once more.
        if saves > 1 or pubs > 1 + sum(e.reason == Reason.CORRECTION_SAVED for e in evs):
            found.add("published_twice", jid, f"{where}: {saves} saves and {pubs} publications journaled")
    for jid, langs in langs_by_job.items():
        job = jobs.get(jid)
        if job is None:
            continue
        if job["state"] in states.DONE and not job["kill_requested"]:
            behind = sorted(lang for lang, t in langs.items() if t["state"] != State.PUBLISHED.value)
            if behind:
                found.add("not_published", jid, f"{job['state']} while the {', '.join(behind)} track is not published")
            lost = sorted(lang for lang, t in langs.items() if not t["has_payload"])
            if job["state"] == State.DELETED.value and lost:
                found.add("deleted_without_custody", jid, f"DELETED without the {', '.join(lost)} track's part")


def _chained(found: _Found, jid: str, evs: Sequence[_Ev], prefix: str, what: str) -> None:
    """Versions strictly increase, and each event starts where the previous one ended."""
    for prev, ev in itertools.pairwise(evs):
        if ev.version <= prev.version:
            found.add("journal_versions", jid, f"{prefix}event {ev.id} has version {ev.version} after {prev.version}")
        if ev.from_state != prev.to_state:
            found.add("journal_chain", jid, f"{prefix}event {ev.id} starts in {ev.from_state} but the {what} was in "
                                            f"{prev.to_state}")


def _track_journal(found: _Found, jid: str, where: str, track: Mapping[str, Any], evs: Sequence[_Ev]) -> None:
    if not evs:
        found.add("journal_chain", jid, f"{where} has no journal at all")
        return
    if evs[0].from_state is not None:
        found.add("journal_chain", jid, f"{where}: first event starts in {evs[0].from_state}, not at its fork")
    _chained(found, jid, evs, f"{where}: ", "track")
    for ev in evs[1:]:
        if not (_is_state(str(ev.from_state)) and _is_state(ev.to_state)
                and states.track_allowed(str(ev.from_state), ev.to_state, operator=is_operator_reason(ev.reason))):
            found.add("journal_edge", jid, f"{where}: event {ev.id}: {ev.from_state} -> {ev.to_state} "
                                           f"({ev.reason}) is not a track edge")
    if evs[-1].to_state != track["state"]:
        found.add("journal_chain", jid, f"{where}: journal ends in {evs[-1].to_state} but the track is "
                                        f"{track['state']}")
    if evs[-1].version > track["version"]:
        found.add("journal_versions", jid, f"{where}: journal version {evs[-1].version} > track version "
                                           f"{track['version']}")


def _static_problem(root: Path, ed: Mapping[str, Any]) -> str | None:
    base = Path(root) / ed["product"] / str(ed["edition_date"])
    for suffix in ("json", "html"):
        if not (base / f"{ed['lang']}.{suffix}").is_file():
            return f"missing {base / (ed['lang'] + '.' + suffix)}"
    if ed.get("status") == EditionStatus.WITHDRAWN:
        try:
            doc = json.loads((base / f"{ed['lang']}.json").read_bytes())
        except (OSError, ValueError) as exc:
            return f"unreadable {base / (ed['lang'] + '.json')}: {exc}"
        if isinstance(doc, dict) and doc.get("withdrawn") is True and doc.get("sha256") == ed["sha256"]:
            return None  # withdrawn on the site (or, below, not yet: its withdrawal is on its way)
    try:
        art = artifact_from_json((base / f"{ed['lang']}.json").read_bytes())
    except (OSError, ValueError) as exc:
        return f"unreadable {base / (ed['lang'] + '.json')}: {exc}"
    if art.sha256 != ed["sha256"]:
        return f"{base / (ed['lang'] + '.json')} has sha256 {art.sha256}, the edition {ed['sha256']}"
    lang_dir = Path(root) / ed["product"] / ed["lang"]
    for name in ("index.html", "feed.atom"):
        if not (lang_dir / name).is_file():
            return f"missing {lang_dir / name}"
    return None


# -- paid creates against the provider's own count ----------------------------------------------------------


def _creates(found: _Found, jobs: Mapping[str, Mapping[str, Any]], events: Mapping[str, Sequence[_Ev]],
             stats: Mapping[str, Any], ledger: Mapping[str, SlotSpend]) -> None:
    by_job = Counter({str(k): int(v) for k, v in (stats.get("creates_by_job") or {}).items()})
    by_attempt: dict[str, Counter[str]] = defaultdict(Counter)
    for meta in stats.get("create_metadata") or []:
        if isinstance(meta, Mapping) and meta.get("iipub_job_id"):
            by_attempt[str(meta["iipub_job_id"])][str(meta.get("iipub_attempt"))] += 1
    if int(stats.get("max_retry_count_seen") or 0) > 0:
        found.add("sdk_retry", None, f"the provider saw x-stainless-retry-count={stats['max_retry_count_seen']}")
    in_ledger = {j for s in ledger.values() for j in s.job_ids}  # rows a restore took away
    for jid in sorted(set(by_job) - set(jobs) - in_ledger):
        found.add("create_unknown_job", jid, f"{by_job[jid]} creates name a job this database does not have")
    for jid in jobs:
        evs = events.get(jid, ())
        allowed: Counter[str] = Counter()
        uncounted = 0
        for i, ev in enumerate(evs):
            if ev.reason == Reason.DISPATCH:
                allowed[str(ev.detail.get("attempt"))] += 1
                nxt = evs[i + 1] if i + 1 < len(evs) else None
                if nxt is None or (nxt.to_state == State.QUARANTINED.value and nxt.reason in UNCOUNTED_CREATE):
                    uncounted += 1  # still in flight, or the outcome is unknown / nothing was created
            elif ev.reason in REFUND_REASONS:
                allowed[str(ev.detail.get("refunded_attempt"))] -= 1
            elif ev.reason in (Reason.RESTORED_ADOPTED, Reason.OPERATOR_ADOPT_ORPHAN) and int(
                    ev.detail.get("attempts_added") or 0) > 0:
                allowed[str(ev.detail.get("attempt"))] += 1
        spend = ledger.get(slot_of(jobs[jid]["product"], jobs[jid]["edition_date"].isoformat()))
        if spend is not None:  # what a restore made the journal forget, the ledger still knows
            for attempt, n in spend.intents.items():
                if n > allowed[attempt] and attempt in spend.uncertain:
                    uncounted += n - allowed[attempt]  # ambiguous, rejected or cut short: maybe never sent
                allowed[attempt] = max(allowed[attempt], n)
        charged = sum(allowed.values())
        seen = by_job.get(jid, 0)
        if seen > charged:
            found.add("unjournaled_create", jid, f"the provider received {seen} creates; the journal charged "
                                                 f"{charged} (dispatches minus refunds)")
        elif seen < charged - uncounted:
            found.add("create_missing", jid, f"the provider received {seen} creates; the journal charged {charged}, "
                                             f"of which {uncounted} may legitimately never have arrived")
        for attempt, n in sorted(by_attempt.get(jid, Counter()).items()):
            if n > allowed.get(attempt, 0):
                found.add("unjournaled_create", jid, f"attempt {attempt} created {n} times at the provider, "
                                                     f"journaled {allowed.get(attempt, 0)}")
    custody = _custody_ids(events)
    custody.update({rid: "ledger" for s in ledger.values() for rid in (*s.custody_ids, *s.killed_ids)})
    for rid in stats.get("deleted_ids") or []:
        owner = custody.get(str(rid))
        if owner is None:
            found.add("deleted_without_custody", None, f"response {rid} was deleted at the provider but no job "
                                                       "held its output or had been killed")


def _custody_ids(events: Mapping[str, Sequence[_Ev]]) -> dict[str, str]:
    """response id -> job, for responses whose output a job took into custody (or whose job an
    operator killed, which allows deleting remote data without custody)."""
    out: dict[str, str] = {}
    for jid, evs in events.items():
        current: str | None = None
        killed = any(e.reason == Reason.OPERATOR_KILL for e in evs)
        for ev in evs:
            if ev.reason in ADOPTED and ev.detail.get("response_id"):
                current = str(ev.detail["response_id"])
                if killed:
                    out[current] = jid
            if ev.reason in CUSTODY and current is not None:
                out[current] = jid
    return out


# -- helpers ----------------------------------------------------------------------------------------------------


def _sink_names(deliveries: Iterable[Mapping[str, Any]]) -> list[str]:
    return sorted({str(d["sink"]) for d in deliveries})


def _detail(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"_unparsed": text[:200]}
    return value if isinstance(value, dict) else {"_value": value}


def _is_state(name: str) -> bool:
    return name in State.__members__


def check_ledger(engine: Engine, spend: Mapping[str, SlotSpend], unreadable: int = 0, *,
                 missing: str | None = None) -> list[Violation]:
    """The database against the spend ledger: every slot the ledger charged must be a job of this
    database that knows of at least as many paid creates, and a job still waiting for output
    must know of the output the ledger recorded (`behind_ledger` otherwise: a restore).
    `missing` says why the ledger could not be read at all (`ledger_missing` once the database
    recorded any create: without it a restore would pay again)."""
    from iipub.money.restore import ahead  # the journal reads of the restore fence

    found = _Found()
    if unreadable:
        found.add("ledger_unreadable", None, f"{unreadable} ledger line(s) could not be read (a torn line is "
                                             "skipped; the lines after it count)")
    rows = {slot_of(r.product, r.edition_date.isoformat()): r for r in invariant_queries.slot_attempts(engine)}
    if missing is not None:
        if invariant_queries.creates_recorded(engine):
            found.add("ledger_missing", None, f"{missing}; this database recorded paid creates, so a restore "
                                              "would pay for them again")
        return found.items
    for slot, s in sorted(spend.items()):
        row = rows.get(slot)
        if s.charged <= 0:
            continue
        if row is None:
            found.add("behind_ledger", None, f"{slot}: the ledger charged {s.charged} paid create(s); the database "
                                             "has no such slot")
        elif row.generation_attempts < s.charged and row.state != State.QUARANTINED.value:
            found.add("behind_ledger", row.id, f"{slot}: the ledger charged {s.charged} paid create(s) (last "
                                               f"response {s.response_id or '-'}); the job knows of "
                                               f"{row.generation_attempts} and is {row.state}")
        elif State(row.state) in states.BEFORE_CUSTODY:
            job_ahead = ahead(engine, _JobRef(row.id), s)
            if job_ahead:
                found.add("behind_ledger", row.id, f"{slot}: the ledger records {', '.join(job_ahead)} the job "
                                                   f"({row.state}) does not know of")
    return found.items


@dataclass(frozen=True)
class _JobRef:
    id: str


def summarize(violations: Iterable[Violation]) -> dict[str, int]:
    """Violations counted by kind."""
    return dict(sorted(Counter(v.kind for v in violations).items()))


def sim_stats_from(url: str, timeout: float = 10.0) -> dict[str, Any]:
    """Fetch `/_sim/stats` from a simulator given its origin or its `/v1` base URL."""
    import httpx

    base = url.rstrip("/")
    base = base.removesuffix("/v1")
    resp = httpx.get(base + "/_sim/stats", timeout=timeout)
    resp.raise_for_status()
    data = resp.json()
    if not isinstance(data, dict):
        raise ValueError("simulator stats are not a JSON object")
    return data
