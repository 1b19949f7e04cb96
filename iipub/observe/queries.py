"""The SQL that collects what `iipub status` reports (`status.Status`): job counts, the journal
rows behind the SLIs, outbox health, quarantine, spend, the gate, cut-over and heartbeats.

Reads only; the arithmetic and the check live in `status`. Every age is measured against the
database clock (`clock.read_now`), the same clock that stamped the rows.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from iipub.core.errors import IipubError, SchemaNotReady
from iipub.core.timefmt import as_date, naive_utc, seconds_between
from iipub.model import track_views
from iipub.model.jobs import slot_opened
from iipub.model.states import (
    AWAITING_DISPATCH,
    CUSTODY_PENDING,
    PARKED_OUTSIDE_QUARANTINE,
    SHADOW_HELD,
    EditionStatus,
    Reason,
    State,
)
from iipub.model.track_views import Figures as TrackFigures
from iipub.money import gate, holds
from iipub.money.payments import report as paid_report
from iipub.observe import cutover, error_budget, heartbeat
from iipub.observe import status_report as report
from iipub.provider import factory
from iipub.settings.config import PLACEHOLDER_KEY_LINE, Settings, StatusSettings
from iipub.store import clock, db, deliveries, edition_changes, gate_rows, installation, outbox, status_queries
from iipub.store import disk_samples as disk_rows
from iipub.store.handles import Connection, Engine, OperationalError, ProgrammingError


def collect(engine: Engine, settings: Settings) -> report.Status:
    """Read everything `status` reports, in one short read plus the outbox check."""
    s = settings.status
    with engine.connect() as conn:
        now = clock.read_now(conn)
        cutoff = clock.now(conn, -s.window_hours * 3600)
        counts = _counts(conn)
        live = status_queries.live_jobs(conn)
        dispatch = _dispatch(conn, cutoff, now, live, s)
        dwell = _dwell(conn, cutoff, now, live, s)
        overdue = _overdue_polls(conn, cutoff, now, live, s)
        # Per language for the tracks' figures; their sum is the slots' (one key per slot and language).
        duplicates_by_lang = status_queries.duplicate_editions_by_lang(conn)
        duplicates = sum(duplicates_by_lang.values())
        taken_back = edition_changes.status_counts(conn)
        unpublished, oldest = status_queries.unpublished_outbox(conn)
        expired_in_window = status_queries.entered_since(conn, State.PROVIDER_EXPIRED_OR_MISSING, cutoff)
        spend = _spend(conn, now.date() - dt.timedelta(days=max(s.spend_days, 1) - 1))
        gate_state = gate.read(conn)
        read_cooldown = gate_rows.read_cool_down(conn)
        unexpected = status_queries.journaled_since(conn, Reason.PROVIDER_UNEXPECTED_STATUS.value, cutoff)
        try:
            installation_id: str | None = installation.read(conn)
        except SchemaNotReady:
            installation_id = None
        beats = heartbeat.summary(conn, now, after_seconds=settings.heartbeat_limit(),
                                  ping_configured=bool(settings.monitoring.ping_url), window_hours=s.window_hours,
                                  stale_after_seconds=report.stale_after(settings), any_jobs=bool(counts),
                                  unreachable_after=s.unreachable_after_ticks)
        try:
            paid = paid_report(conn, now, settings.pricing, settings.budgets, settings.products)
        except (OperationalError, ProgrammingError) as exc:
            if db.is_missing_table(exc):
                raise SchemaNotReady("the spend table is missing (migration 0008): run `iipub db migrate`") from None
            raise
        cut = cutover.collect(conn, settings, now, gate_state)
        ledger_trouble = _ledger_problem(conn, settings)
        # In shadow mode the legacy system publishes: what shadow mode holds back is not late.
        held = {st.value for st in SHADOW_HELD} if settings.reconcile.shadow else set()
        track_figures = _tracks(conn, now, s.stranded_after_seconds, held, duplicates_by_lang)
        # Holds still in force: a product since removed or reconfigured is lifted at its next create.
        tpm = settings.provider.tokens_per_minute
        product_holds = tuple(h for h in holds.all_holds(conn) if h.product in settings.products
                              and h.request_fingerprint == holds.request_fingerprint(settings.products[h.product], tpm))
        # Model holds in force: a model the products use, held under the scope reads are made in.
        on_model: dict[str, list[str]] = {}
        for p in settings.products.values():
            on_model.setdefault(p.model.lower(), []).append(p.name)
        held_scope = factory.scope(settings)
        model_holds = tuple((h, tuple(on_model[h.model])) for h in holds.all_model_holds(conn)
                            if h.model in on_model and h.scope == held_scope)
        current_scope = factory.scope(settings)
        elsewhere = _waiting_on_scope(conn, live, lambda created_under: factory.reaches(settings, created_under))
        immovable = _immovable_slots(conn, now)
        budgets = error_budgets(conn, now, live, s)
        clock_check = host_clock(conn)
        first_samples = disk_rows.oldest_since(conn, now - dt.timedelta(days=1))
    attention = [j for j in live if j["state"] not in held]
    # A separate connection: on SQLite each one holds the write lock while open.
    problems = outbox.parked_or_failing(engine, settings.relay.alert_after_seconds)
    hooks = deliveries.summary(engine, settings.webhooks, now - dt.timedelta(hours=s.window_hours))
    return report.Status(
        generated_at=now,
        settings=s,
        counts=counts,
        dispatch=dispatch,
        dwell=dwell,
        overdue_polls=overdue,
        duplicate_publications=duplicates,
        editions_withdrawn=taken_back[EditionStatus.WITHDRAWN.value],
        editions_corrected=taken_back[EditionStatus.CORRECTED.value],
        editions_correcting=taken_back[edition_changes.CORRECTING],
        # A slot waiting on a parked track is reported by that track (a WARNING), not stranded.
        stranded=report.stranded_jobs([j for j in attention if j["id"] not in track_figures.parked_job_ids], now,
                                      s.stranded_after_seconds),
        quarantined=tuple(sorted(
            (report.job_ref(j, seconds_between(now, j["state_entered_at"]))
             for j in live if j["state"] == State.QUARANTINED.value),
            key=lambda r: -r.age_seconds,
        )),
        expired_now=sum(1 for j in live if j["state"] == State.PROVIDER_EXPIRED_OR_MISSING.value),
        expired_in_window=expired_in_window,
        outbox_unpublished=int(unpublished),
        outbox_lag_seconds=max(0.0, seconds_between(now, naive_utc(oldest))) if oldest is not None else 0.0,
        outbox_problems=tuple(problems),
        spend=spend,
        late=report.late_editions(attention, now, s.late_after_minutes * 60),
        gate=gate_state,
        unexpected_statuses=unexpected,
        failing_steps=tuple(
            report.JobRef(j["id"], j["product"], j["edition_date"], j["state"], 0.0, j["last_error"])
            for j in live if (j["last_error"] or "").startswith("step_failed:")
        ),
        webhooks=hooks,
        heartbeats=beats,
        installation_id=installation_id,
        read_cooldown_until=read_cooldown,
        cutover=cut,
        paid=paid,
        product_holds=product_holds,
        model_holds=model_holds,
        project=settings.provider.project,
        placeholder_key=PLACEHOLDER_KEY_LINE if settings.api_key_is_placeholder else None,
        other_scope_jobs=len(elsewhere),
        other_scope=elsewhere[0]["create_scope"] if elsewhere else None,
        current_scope=current_scope,
        ledger_problem=ledger_trouble,
        tracks=track_figures,
        immovable=immovable,
        # A slot parked with its tracks is reported by them (parked tracks), not twice.
        parked=tuple(sorted(
            (report.job_ref(j, seconds_between(now, j["state_entered_at"])) for j in live
             if j["state"] in PARKED_OUTSIDE_QUARANTINE
             and j["id"] not in track_figures.parked_job_ids),
            key=lambda r: -r.age_seconds)),
        budgets=budgets,
        disks=with_growth(disks(settings), first_samples, now),
        clock_check=clock_check,
    )


def _immovable_slots(conn: Connection, now: dt.datetime) -> tuple[report.JobRef, ...]:
    """Forked slots whose tracks let them move neither on nor into parking: a track that ended
    (DELETED) while the slot was not killed holds a slot in READY_TO_COMPOSE / COMPOSED_NOT_SAVED
    for ever (`states.track_blocks`)."""
    rows = status_queries.ended_tracks_of_moving_slots(conn)
    seen: dict[str, report.JobRef] = {}
    for r in rows:
        if r["id"] not in seen:
            seen[r["id"]] = report.JobRef(r["id"], r["product"], as_date(r["edition_date"]), r["state"],
                                          seconds_between(now, r["state_entered_at"]),
                                          f"its {r['lang']} track ended (DELETED) but the slot was not killed")
    return tuple(seen.values())


def _tracks(conn: Connection, now: dt.datetime, stranded_after_seconds: float, held: set[str],
            duplicates: Mapping[str, int]) -> TrackFigures:
    """The language tracks' figures: counts grouped in the database, then every track not done
    yet with its job's liveness columns, and the duplicate publications per language."""
    counts = status_queries.track_counts(conn)
    unfinished = status_queries.unfinished_tracks(conn)
    return track_views.figures(counts, unfinished, now, stranded_after_seconds, duplicates, held)


def _ledger_problem(conn: Connection, settings: Settings) -> str | None:
    """The spend ledger missing or unreadable once this database recorded a paid create: a
    restore would then pay for every one of them again."""
    path = settings.ledger_path()
    if path is not None:
        # What the database remembers of its ledger: missing, replaced, truncated or behind
        # stays CRITICAL until `iipub ledger acknowledge` (a new file does not clear it).
        from iipub.money import ledger_book
        from iipub.money.ledger import SpendLedger

        try:
            book = SpendLedger(path, installation.read(conn), None, settings.ledger_mirror_path())
            found = ledger_book.problem(conn, book)
        except IipubError as exc:
            return f"spend ledger {path}: {exc}"
        if found is not None:
            return found.line()
    if path is None or (path.is_file() and os.access(path, os.R_OK)):
        return None
    if not status_queries.any_paid(conn):
        return None
    why = "is unreadable" if path.exists() else "does not exist"
    return f"spend ledger {path} {why} but paid creates are recorded (a restore would pay again)"


def _counts(conn: Connection) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for product, state, n in status_queries.counts_by_state(conn):
        out.setdefault(product, {})[state] = int(n)
    return out


def _waiting_on_scope(conn: Connection, live: Sequence[Mapping[str, Any]],
                      reaches: Callable[[str], bool]) -> list[Mapping[str, Any]]:
    """Jobs in flight created under another scope than reads use now whose last read was a 404
    there (`scope_mismatch`): naming the project explicitly for a key's own project is no alarm."""
    candidates = [j for j in live if j["state"] in CUSTODY_PENDING and j["create_scope"]
                  and not reaches(j["create_scope"])]
    waiting = []
    for j in candidates:  # a rotation with jobs in flight: a handful, each one indexed read
        last = status_queries.last_reason(conn, j["id"])
        if last == Reason.SCOPE_MISMATCH.value:
            waiting.append(j)
    return waiting


def _dispatch(conn: Connection, cutoff: Any, now: dt.datetime, live: Sequence[Mapping[str, Any]],
              s: StatusSettings) -> report.Sli:
    """Slot open -> the job's first CREATE_IN_FLIGHT, for first dispatches in the window.
    Backfills are left out: admission control holds them back by design."""
    rows = status_queries.first_dispatches(conn, cutoff)
    # A min() that predates the window means this was a re-dispatch; only firsts count.
    cut = now - dt.timedelta(hours=s.window_hours)
    durations = [max(0.0, seconds_between(naive_utc(r.first_at), slot_opened(r.opens_at, r.created_at)))
                 for r in rows if naive_utc(r.first_at) >= cut]
    waiting = {
        j["id"]: seconds_between(now, slot_opened(j["opens_at"], j["created_at"]))
        for j in live
        if j["state"] in AWAITING_DISPATCH and not j["is_backfill"]
    }
    waiting = {k: v for k, v in waiting.items() if v >= s.dispatch_slo_seconds}
    if waiting:
        dispatched = status_queries.dispatched(conn, waiting)
        waiting = {k: v for k, v in waiting.items() if k not in dispatched}
    return report.Sli("time_to_dispatch", s.dispatch_slo_seconds, s.dispatch_slo_target,
               tuple(durations) + tuple(waiting.values()), open=len(waiting))


def _dwell(conn: Connection, cutoff: Any, now: dt.datetime, live: Sequence[Mapping[str, Any]],
           s: StatusSettings) -> report.Sli:
    """From the provider's completion (or the entry into COMPLETED_NOT_RETRIEVED) to custody."""
    cnr = State.COMPLETED_NOT_RETRIEVED.value
    durations, failed = report.dwell_samples(status_queries.dwell_events(conn, cutoff))
    waiting = [seconds_between(now, j["state_entered_at"]) for j in live if j["state"] == cnr]
    waiting = [w for w in waiting if w >= s.dwell_slo_seconds]
    return report.Sli("unretrieved_dwell", s.dwell_slo_seconds, s.dwell_slo_target,
               tuple(durations) + tuple(waiting), open=len(waiting), failed=failed)


def _overdue_polls(conn: Connection, cutoff: Any, now: dt.datetime, live: Sequence[Mapping[str, Any]],
                   s: StatusSettings) -> report.Sli:
    """How late each provider observation ran: its `at` minus the `due_at` it was waiting for."""
    rows = status_queries.poll_entries(conn, cutoff)
    durations = [d for d in (report.poll_lateness(naive_utc(r.at), r.detail) for r in rows) if d is not None]
    watched = {st.value for st in CUSTODY_PENDING}
    late = [
        seconds_between(now, j["next_attempt_at"]) for j in live
        if j["state"] in watched and (j["lease_expiry"] is None or naive_utc(j["lease_expiry"]) < now)
    ]
    late = [d for d in late if d >= s.overdue_poll_slo_seconds]
    return report.Sli("overdue_polls", s.overdue_poll_slo_seconds, s.overdue_poll_slo_target,
               tuple(durations) + tuple(late), open=len(late))


def _spend(conn: Connection, since: dt.date) -> tuple[report.Spend, ...]:
    return tuple(report.Spend(p, d, int(i or 0), int(o or 0), int(t or 0))
                 for p, d, i, o, t in status_queries.tokens_by_slot(conn, since))


# -- error budgets ----------------------------------------------------------------------


def error_budgets(conn: Connection, now: dt.datetime, live: Sequence[Mapping[str, Any]] | None,
                  s: StatusSettings) -> tuple[error_budget.Budget, ...]:
    """Each latency SLO's error budget over `[status] error_budget_days` (the overdue polls' over
    the SLI window at most: a sample per poll, too many to read a month of every minute), from
    the journal: each sample's time and whether it met its SLO."""
    if live is None:
        live = status_queries.live_jobs(conn)
    window = s.error_budget_days * 86400
    since = clock.now(conn, -window)
    poll_window = min(window, s.window_hours * 3600)
    return (
        error_budget.compute("time_to_dispatch", s.dispatch_slo_target,
                             _dispatch_samples(conn, since, now, live, s), now, window),
        error_budget.compute("unretrieved_dwell", s.dwell_slo_target,
                             _dwell_samples(conn, since, now, live, s), now, window),
        error_budget.compute("overdue_polls", s.overdue_poll_slo_target,
                             _poll_samples(conn, clock.now(conn, -poll_window), now, live, s), now, poll_window),
    )


def spent_budgets(conn: Connection, settings: Settings) -> list[str]:
    """The SLOs whose error budget is spent now: a change freeze while any is."""
    return error_budget.freeze_reasons(error_budgets(conn, clock.read_now(conn), None, settings.status))


def _dispatch_samples(conn: Connection, since: Any, now: dt.datetime, live: Sequence[Mapping[str, Any]],
                      s: StatusSettings) -> list[tuple[dt.datetime, bool]]:
    """(first CREATE_IN_FLIGHT, within the SLO) per first dispatch since `since`; a slot still
    waiting past the SLO is a bad sample now (backfills left out, as in the SLI)."""
    rows = status_queries.first_dispatches_since(conn, since)
    samples = [(naive_utc(r.first_at),
                seconds_between(naive_utc(r.first_at), slot_opened(r.opens_at, r.created_at)) < s.dispatch_slo_seconds)
               for r in rows]
    waiting = [x["id"] for x in live if x["state"] in AWAITING_DISPATCH
               and not x["is_backfill"]
               and seconds_between(now, slot_opened(x["opens_at"], x["created_at"])) >= s.dispatch_slo_seconds]
    if waiting:
        dispatched = status_queries.dispatched(conn, waiting)
        samples += [(now, False) for x in waiting if x not in dispatched]
    return samples


def _dwell_samples(conn: Connection, since: Any, now: dt.datetime, live: Sequence[Mapping[str, Any]],
                   s: StatusSettings) -> list[tuple[dt.datetime, bool]]:
    cnr = State.COMPLETED_NOT_RETRIEVED.value
    timed, lost = report.timed_dwell_samples(status_queries.dwell_events(conn, since))
    samples = [(at, d < s.dwell_slo_seconds) for at, d in timed] + [(at, False) for at in lost]
    samples += [(now, False) for x in live if x["state"] == cnr
                and seconds_between(now, x["state_entered_at"]) >= s.dwell_slo_seconds]
    return samples


def _poll_samples(conn: Connection, since: Any, now: dt.datetime, live: Sequence[Mapping[str, Any]],
                  s: StatusSettings) -> list[tuple[dt.datetime, bool]]:
    rows = status_queries.poll_entries(conn, since)
    samples = []
    for r in rows:
        late = report.poll_lateness(naive_utc(r.at), r.detail)
        if late is not None:
            samples.append((naive_utc(r.at), late < s.overdue_poll_slo_seconds))
    watched = {st.value for st in CUSTODY_PENDING}
    samples += [(now, False) for x in live if x["state"] in watched
                and (x["lease_expiry"] is None or naive_utc(x["lease_expiry"]) < now)
                and seconds_between(now, x["next_attempt_at"]) >= s.overdue_poll_slo_seconds]
    return samples


# -- the host: disk headroom and clock agreement --------------------------------------------


def watched_paths(settings: Settings, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """role -> path of every place iipub writes on this host."""
    paths: dict[str, str] = {}
    ledger = settings.ledger_path()
    if ledger is not None:
        paths["ledger"] = str(ledger.parent)
    if settings.static_sink is not None:
        paths["static_root"] = os.path.abspath(settings.static_sink.root)
    sqlite = db.sqlite_file(settings.database_url)
    if sqlite is not None:
        paths["database"] = os.path.dirname(os.path.abspath(sqlite))
    if settings.status.log_dir:
        paths["logs"] = settings.status.log_dir
    paths.update(extra or {})
    return paths


def disks(settings: Settings, extra: Mapping[str, str] | None = None) -> tuple[report.Disk, ...]:
    """Free space and inodes of each filesystem holding a watched path (one entry per filesystem,
    with every role it holds); a path not made yet is measured at its nearest existing folder."""
    found: dict[int | str, tuple[list[str], str, os.statvfs_result | None, str | None]] = {}
    for role, path in watched_paths(settings, extra).items():
        where = _existing(path)
        try:
            key: int | str = os.stat(where).st_dev
            vfs: os.statvfs_result | None = os.statvfs(where)
            error = None
        except OSError as exc:
            key, vfs, error = where, None, exc.strerror or str(exc)
        if key in found:
            found[key][0].append(role)
        else:
            found[key] = ([role], where, vfs, error)
    out = []
    for roles, where, vfs, error in found.values():
        if vfs is None:
            out.append(report.Disk(tuple(roles), where, 0, 0, error=error))
            continue
        out.append(report.Disk(tuple(roles), where, vfs.f_bavail * vfs.f_frsize, vfs.f_blocks * vfs.f_frsize,
                               vfs.f_favail if vfs.f_files else None, vfs.f_files or None))
    return tuple(out)


def with_growth(found: tuple[report.Disk, ...], first: Mapping[str, tuple[dt.datetime, int]],
                now: dt.datetime) -> tuple[report.Disk, ...]:
    """Each disk with the rate it fills since its oldest sample of the last day (an hour of
    samples at least: less says nothing about a trend)."""
    out = []
    for d in found:
        sample = first.get(d.path)
        hours = seconds_between(now, sample[0]) / 3600 if sample is not None else 0.0
        if sample is None or d.error is not None or hours < 1:
            out.append(d)
            continue
        out.append(dataclasses.replace(d, filling_bytes_per_hour=(sample[1] - d.free_bytes) / hours))
    return tuple(out)


def _existing(path: str) -> str:
    current = os.path.abspath(path)
    while not os.path.exists(current) and os.path.dirname(current) != current:
        current = os.path.dirname(current)
    return current


def host_clock(conn: Connection) -> report.ClockCheck:
    """The database's clock (without the drill offset) against this host's, read around one query."""
    before = time.time()
    value = status_queries.database_clock(conn)
    after = time.time()
    db_now = dt.datetime.fromisoformat(value) if isinstance(value, str) else value
    db_seconds = naive_utc(db_now).replace(tzinfo=dt.UTC).timestamp()
    return report.ClockCheck(db_seconds - (before + after) / 2, (after - before) / 2)
