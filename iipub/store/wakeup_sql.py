"""The wake-up's SQL as plain text (`iipub.observe.wakeup` is the rule): what the check asks with
the database driver alone before anything else loads (`observe.idle_check`), and what a full run's
recorder (`observe.wakeup_store`, through `store.wakeups`) asks with the same driver so equal data
gives equal values. No SQLAlchemy here: the check imports this module.

Every statement reads through an index or a table that stays small, so an idle minute costs the
same against ten years of history as against a new database:

- the history tables (jobs, tracks, the journal, editions, outbox, deliveries, spend, provider
  deletes) by high-water marks on their primary keys and indexed time columns, and by aggregates
  over their *live* rows only (jobs not DELETED, tracks not PUBLISHED, outbox rows not
  published, webhook deliveries not settled), which an index on the state reaches;
- the small tables (the clock, the gate, holds, cool-downs, orphans, ...) whole;
- what is due by the clock now, through the due indexes (a row made due by hand, without a
  fenced write, changes the answer too).

Rows that leave the live set (published, deleted) leave through a journaled transition or a
publication, which the marks see; rows deleted from history (`relay --prune`) make nothing due.
"""

from __future__ import annotations

# `states.ACTIVE`, `states.TRACK_ACTIVE` and `states.CUSTODY_WATCHED` as text (that module's enums
# would cost the idle path its import; tests/unit/observe/test_wakeup.py holds them equal).
ACTIVE_STATES = ("ACCEPTED", "CLEANUP_PENDING", "COMPLETED_NOT_RETRIEVED", "COMPOSED_NOT_SAVED", "CREATE_ELIGIBLE",
                 "CREATE_IN_FLIGHT", "IN_PROGRESS", "NO_JOB", "PROVIDER_EXPIRED_OR_MISSING", "PUBLISHED", "QUEUED",
                 "READY_TO_COMPOSE", "RETRIEVED_NOT_VALIDATED")
TRACK_ACTIVE_STATES = ("COMPOSED_NOT_SAVED", "READY_TO_COMPOSE", "RETRIEVED_NOT_VALIDATED")
CUSTODY_WATCHED_STATES = ("MANUALLY_SUSPENDED", "QUARANTINED")
# Every job state but the terminal one (`states.State` less `states.TERMINAL`), and every track
# state but its last two (`states.TRACK_STATES` less PUBLISHED and DELETED): the live rows, which stay few.
LIVE_JOB_STATES = ("ACCEPTED", "CLEANUP_PENDING", "COMPLETED_NOT_RETRIEVED", "COMPOSED_NOT_SAVED",
                   "CREATE_ELIGIBLE", "CREATE_IN_FLIGHT", "IN_PROGRESS", "MANUALLY_SUSPENDED", "NO_JOB",
                   "PROVIDER_EXPIRED_OR_MISSING", "PUBLISHED", "QUARANTINED", "QUEUED", "READY_TO_COMPOSE",
                   "RETRIEVED_NOT_VALIDATED", "SAVED_NOT_PUBLIC", "VALIDATION_FAILED_RETAINED")
LIVE_TRACK_STATES = ("COMPOSED_NOT_SAVED", "QUARANTINED", "READY_TO_COMPOSE", "RETRIEVED_NOT_VALIDATED",
                     "SAVED_NOT_PUBLIC", "VALIDATION_FAILED_RETAINED")
# The state the relay moves jobs and tracks out of (leasing them to do so).
RELAY_STATE = "SAVED_NOT_PUBLIC"


def listed(states: tuple[str, ...]) -> str:
    return ", ".join(f"'{s}'" for s in states)


# What each table contributes to the signature: (table, aggregates, the rows they read). Each
# changes with any insert, update or delete a writer makes that can make work due. Left out:
# `runs` (heartbeats, written by idle runs too), `wakeups` itself and `disk_samples`
# (observation; the relay's row wakes it for the next sample). Every other table must be named
# here (tests/unit/observe/test_wakeup.py checks it against the schema).
SIGNED: tuple[tuple[str, str, str], ...] = (
    # A fenced write adds 1 to `version`; a claim sets the lease; a new slot is inserted live.
    ("jobs", ("COUNT(*), SUM(version), MAX(updated_at), MAX(next_attempt_at), MAX(lease_expiry), "
              "MAX(custody_watch_at)"), f"state IN ({listed(LIVE_JOB_STATES)})"),
    ("tracks", "COUNT(*), SUM(version), MAX(updated_at), MAX(next_attempt_at), MAX(lease_expiry)",
     f"state IN ({listed(LIVE_TRACK_STATES)})"),
    # One MIN or MAX per statement part: SQLite reads a single one from its index's end, two scan.
    ("job_events", "MAX(id)", ""),
    ("editions", "MAX(id)", ""),
    ("outbox", "MAX(id)", ""),
    ("outbox", "COUNT(*), SUM(version), SUM(attempts), MAX(next_attempt_at), MAX(lease_expiry)",
     "published_at IS NULL"),
    ("outbox_deliveries", "MAX(id)", ""),
    ("outbox_deliveries", "MAX(updated_at)", ""),
    ("spend", "MAX(id)", ""),
    ("spend", "MAX(updated_at)", ""),
    ("provider_deletes", "MAX(id)", ""),
    ("gate_events", "MAX(id)", ""),
    ("webhook_deliveries", "MAX(received_at)", ""),
    ("webhook_deliveries", "MAX(settled_at)", ""),
    ("webhook_deliveries", "COUNT(*), MAX(received_at)", "settled_at IS NULL"),
    ("config_identity", "MAX(id)", ""),
    ("spend_overrides", "MAX(id)", ""),
    ("clock", "COUNT(*), MAX(offset_us)", ""),
    ("create_gate", "COUNT(*), MAX(version), MAX(updated_at), MAX(cooldown_until), MAX(probe_after)", ""),
    ("republish_grants", "COUNT(*), MAX(granted_at)", ""),
    ("webhook_misses", "COUNT(*), MAX(noticed_at)", ""),
    ("orphans", "COUNT(*), MAX(first_seen_at), COUNT(output_sha256), COUNT(remote_deleted_at)", ""),
    ("orphan_details", "COUNT(*), COUNT(fate_at), MAX(fate_at)", ""),
    ("installation", "COUNT(*), MAX(installation_id)", ""),
    ("read_cooldown", "COUNT(*), MAX(until_at), MAX(set_at)", ""),
    ("spend_notes", "COUNT(*), MAX(noted_at)", ""),
    ("product_holds", "COUNT(*), MAX(held_at), MAX(request_fingerprint)", ""),
    ("model_holds", "COUNT(*), MAX(held_at), MAX(checked_at)", ""),
    ("ledger_book", "COUNT(*), MAX(ledger_id), MAX(opened_at), MAX(base_spend_id)", ""),
    ("schema_migrations", "COUNT(*), MAX(version)", ""),
)
# `edition_changes` is written only with an outbox row, in the same transaction: the outbox's marks see it.
UNSIGNED = frozenset({"runs", "wakeups", "disk_samples", "edition_changes"})


def now_sql(family: str) -> str:
    """The database clock with the drill offset, in the form the columns hold: what
    `iipub.store.clock.now` computes, as plain SQL."""
    offset = "COALESCE((SELECT offset_us FROM clock WHERE id = 1), 0)"
    if family == "mysql":
        return f"TIMESTAMPADD(MICROSECOND, {offset}, UTC_TIMESTAMP(6))"
    modifier = f"printf('%+.6f seconds', {offset} / 1000000.0)"
    return (f"strftime('%Y-%m-%d %H:%M:%S', 'now', {modifier}) || "
            f"substr(strftime('%f', 'now', {modifier}), 3, 4) || '000'")


def signature_sql(family: str) -> str:
    """One statement, one row: every table's marks side by side, and how many jobs, tracks,
    outbox events and custody watches are due by the clock now (a row made due by hand or by
    time passing changes it too). The check and the recorder read it with the same driver."""
    now = now_sql(family)
    unleased = f"(lease_expiry IS NULL OR lease_expiry < {now})"
    watched = listed(CUSTODY_WATCHED_STATES)
    due = (f"(SELECT COUNT(*) FROM jobs WHERE state IN ({listed(ACTIVE_STATES)}) AND next_attempt_at <= {now} "
           f"AND {unleased}) AS due_jobs, "
           f"(SELECT COUNT(*) FROM tracks WHERE state IN ({listed(TRACK_ACTIVE_STATES)}) AND next_attempt_at <= {now} "
           f"AND {unleased}) AS due_tracks, "
           f"(SELECT COUNT(*) FROM outbox WHERE published_at IS NULL AND next_attempt_at <= {now} "
           f"AND {unleased}) AS due_events, "
           f"(SELECT COUNT(*) FROM jobs WHERE state IN ({watched}) AND response_id IS NOT NULL AND payload IS NULL "
           f"AND (custody_watch_at IS NULL OR custody_watch_at <= {now}) AND {unleased}) AS due_watches")
    parts = [f"(SELECT {cols} FROM {table}{f' WHERE {where}' if where else ''}) AS s{i}"
             for i, (table, cols, where) in enumerate(SIGNED)]
    return f"SELECT * FROM {', '.join(parts)}, (SELECT {due}) AS due"


def asleep_sql(family: str, placeholder: str) -> str:
    """The recorded row of one command at one place, and whether the clock is still before its
    `next_at` (by primary key)."""
    return (f"SELECT next_at, signature, identity, files, idle_summary, "
            f"CASE WHEN next_at IS NOT NULL AND {now_sql(family)} < next_at THEN 1 ELSE 0 END, env_names "
            f"FROM wakeups WHERE command = {placeholder} AND place = {placeholder}")


NEWEST_MIGRATION_SQL = "SELECT MAX(version) FROM schema_migrations"


def heartbeat_sql(family: str, placeholder: str) -> str:
    """An idle run's `runs` row: what every run records."""
    now = now_sql(family)
    p = placeholder
    return (f"INSERT INTO runs (command, host, pid, worker, started_at, finished_at, ok, summary) "
            f"VALUES ({p}, {p}, {p}, {p}, {now}, {now}, 1, {p})")
