"""The wake-up rule: whether a cron run of `reconcile` or `relay` can find anything to do, decided
before the framework loads.

About 1,436 of a day's 1,440 cron minutes find nothing due, so what an idle run costs is what
iipub mostly costs its host. A full run that found nothing to do leaves a `wakeups` row for its
command: the earliest time anything it knows of falls due (`next_at`), a signature of every
table a writer can change, the identity of the environment it ran under and the files it read.
The next run compares, with the database driver alone:

- the database's clock (with the drill offset) against `next_at`;
- the signature now against the recorded one (any write since: a transition, an operator
  command, a webhook delivery, a pause, a relay's delivery, a restore of the database);
- the environment and the watched files (configuration, prompts, ledger) against the recorded.

Any difference, any doubt, any error: the full run. The rule fails open.

This module is pure: the SQL texts, the identity of an environment, and the decision.
`idle_check` runs it with the driver alone; `wakeup_store` records it after a full run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence

from iipub import __version__
from iipub.settings import environment

COMMANDS = ("reconcile", "relay")

# What each table contributes to the signature: aggregates that change with any insert, update or
# delete a writer makes (a fenced write adds 1 to `version`; rows without one have times or ids
# that move). Left out: `runs` (heartbeats, written by idle runs too), `wakeups` itself and
# `disk_samples` (observation; the relay's row wakes it for the next sample). Every other table
# must be named here (tests/unit/observe/test_wakeup.py checks it against the schema).
SIGNED: tuple[tuple[str, str], ...] = (
    ("jobs", "COUNT(*), SUM(version), MAX(updated_at), MAX(next_attempt_at), MAX(lease_expiry)"),
    ("tracks", "COUNT(*), SUM(version), MAX(updated_at), MAX(next_attempt_at), MAX(lease_expiry)"),
    ("job_events", "COUNT(*), MAX(id)"),
    ("editions", "COUNT(*), MAX(id)"),
    ("outbox", "COUNT(*), MAX(id), SUM(version), SUM(attempts), COUNT(published_at), MAX(next_attempt_at)"),
    ("outbox_deliveries", "COUNT(*), MAX(id), SUM(attempts), MAX(updated_at), COUNT(delivered_at), COUNT(parked_at)"),
    ("clock", "COUNT(*), MAX(offset_us)"),
    ("create_gate", "COUNT(*), MAX(version), MAX(updated_at), MAX(cooldown_until), MAX(probe_after)"),
    ("gate_events", "COUNT(*), MAX(id)"),
    ("republish_grants", "COUNT(*), MAX(granted_at)"),
    ("webhook_deliveries", "COUNT(*), MAX(received_at), COUNT(settled_at), MAX(settled_at)"),
    ("webhook_misses", "COUNT(*), MAX(noticed_at)"),
    ("orphans", "COUNT(*), MAX(first_seen_at), COUNT(output_sha256), COUNT(remote_deleted_at)"),
    ("orphan_details", "COUNT(*), COUNT(fate_at), MAX(fate_at)"),
    ("installation", "COUNT(*), MAX(installation_id)"),
    ("provider_deletes", "COUNT(*), MAX(id)"),
    ("read_cooldown", "COUNT(*), MAX(until_at), MAX(set_at)"),
    ("spend", "COUNT(*), MAX(id), MAX(updated_at)"),
    ("spend_overrides", "COUNT(*), MAX(id)"),
    ("spend_notes", "COUNT(*), MAX(noted_at)"),
    ("product_holds", "COUNT(*), MAX(held_at), MAX(request_fingerprint)"),
    ("model_holds", "COUNT(*), MAX(held_at), MAX(checked_at)"),
    ("config_identity", "COUNT(*), MAX(id)"),
    ("ledger_book", "COUNT(*), MAX(ledger_id), MAX(opened_at), MAX(base_spend_id)"),
    ("schema_migrations", "COUNT(*), MAX(version)"),
)
# `edition_changes` is written only with an outbox row, in the same transaction: the outbox's signature sees it.
UNSIGNED = frozenset({"runs", "wakeups", "disk_samples", "edition_changes"})

# Variables that change how a run reports or whether the check runs, not what a run does.
_NOT_SETTINGS = ("IIPUB_TEST_", "IIPUB_LOG_", "IIPUB_WAKEUP_CHECK")
# Where the default spend ledger lives without a configuration file (`loading.default_ledger_path`).
_PATH_VARIABLES = frozenset({"HOME", "XDG_STATE_HOME"})
# Environment variables whose values are secrets: only whether they are set counts.
_SECRET_MARKS = ("KEY", "SECRET", "PASSWORD", "TOKEN", "DATABASE_URL")


# `states.ACTIVE` and `states.TRACK_ACTIVE` as text (that module's enums would cost the idle path
# its import; tests/unit/observe/test_wakeup.py holds them equal).
ACTIVE_STATES = ("ACCEPTED", "CLEANUP_PENDING", "COMPLETED_NOT_RETRIEVED", "COMPOSED_NOT_SAVED", "CREATE_ELIGIBLE",
                 "CREATE_IN_FLIGHT", "IN_PROGRESS", "NO_JOB", "PROVIDER_EXPIRED_OR_MISSING", "PUBLISHED", "QUEUED",
                 "READY_TO_COMPOSE", "RETRIEVED_NOT_VALIDATED")
TRACK_ACTIVE_STATES = ("COMPOSED_NOT_SAVED", "READY_TO_COMPOSE", "RETRIEVED_NOT_VALIDATED")
# `states.CUSTODY_WATCHED`: parked jobs whose response the custody watch reads.
CUSTODY_WATCHED_STATES = ("MANUALLY_SUSPENDED", "QUARANTINED")


def signature_sql(family: str) -> str:
    """One statement, one row: every table's aggregates side by side, and how many jobs, tracks
    outbox events and custody watches are due by the clock now (so a row made due by hand, without a fenced
    write, or by time passing, changes it too). The same driver reads it for the recorder and the
    check, so equal data gives equal values."""
    now = now_sql(family)
    unleased = f"(lease_expiry IS NULL OR lease_expiry < {now})"
    listed = ", ".join(f"'{s}'" for s in ACTIVE_STATES)
    track_listed = ", ".join(f"'{s}'" for s in TRACK_ACTIVE_STATES)
    watched = ", ".join(f"'{s}'" for s in CUSTODY_WATCHED_STATES)
    due = (f"(SELECT COUNT(*) FROM jobs WHERE state IN ({listed}) AND next_attempt_at <= {now} AND {unleased}) "
           f"AS due_jobs, "
           f"(SELECT COUNT(*) FROM tracks WHERE state IN ({track_listed}) AND next_attempt_at <= {now} "
           f"AND {unleased}) AS due_tracks, "
           f"(SELECT COUNT(*) FROM outbox WHERE published_at IS NULL AND next_attempt_at <= {now} "
           f"AND {unleased}) AS due_events, "
           f"(SELECT COUNT(*) FROM jobs WHERE state IN ({watched}) AND response_id IS NOT NULL AND payload IS NULL "
           f"AND (custody_watch_at IS NULL OR custody_watch_at <= {now}) AND {unleased}) AS due_watches")
    parts = [f"(SELECT {cols} FROM {table}) AS s{i}" for i, (table, cols) in enumerate(SIGNED)]
    return f"SELECT * FROM {', '.join(parts)}, (SELECT {due}) AS due"


def now_sql(family: str) -> str:
    """The database clock with the drill offset, in the form the columns hold: what
    `iipub.store.clock.now` computes, as plain SQL."""
    offset = "COALESCE((SELECT offset_us FROM clock WHERE id = 1), 0)"
    if family == "mysql":
        return f"TIMESTAMPADD(MICROSECOND, {offset}, UTC_TIMESTAMP(6))"
    modifier = f"printf('%+.6f seconds', {offset} / 1000000.0)"
    return (f"strftime('%Y-%m-%d %H:%M:%S', 'now', {modifier}) || "
            f"substr(strftime('%f', 'now', {modifier}), 3, 4) || '000'")


def asleep_sql(family: str, placeholder: str) -> str:
    """The recorded row of one command and whether the clock is still before its `next_at`."""
    return (f"SELECT next_at, signature, identity, files, idle_summary, "
            f"CASE WHEN next_at IS NOT NULL AND {now_sql(family)} < next_at THEN 1 ELSE 0 END "
            f"FROM wakeups WHERE command = {placeholder}")


def digest(values: Sequence[object]) -> str:
    """The signature's values as one hash (their text: the driver's own types on both sides)."""
    return hashlib.sha256(repr(tuple(values)).encode("utf-8", "backslashreplace")).hexdigest()


def identity(environ: Mapping[str, str], cwd: str) -> str:
    """What the run's settings come from besides files: iipub's version, the working directory
    (relative paths) and every variable the settings may come from (`environment.PREFIXES`).
    Secrets count only as set, or set but unusable in a header: no hash of one is stored. The
    database URL is left out: another database has its own row."""
    seen: list[tuple[str, str]] = []
    for name in sorted(environ):
        if name in _PATH_VARIABLES:
            seen.append((name, environ[name]))
            continue
        if not name.startswith(environment.PREFIXES) or name.startswith(_NOT_SETTINGS):
            continue
        secret = any(mark in name for mark in _SECRET_MARKS)
        seen.append((name, _secret_mark(environ[name]) if secret and environ[name] else environ[name]))
    text = json.dumps({"version": __version__, "cwd": cwd, "env": seen}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()


def _secret_mark(value: str) -> str:
    """A secret as the identity counts it: set, or set to something no HTTP header can carry
    (`config.HEADER_SAFE`: the full run refuses such a key, exit 78, which no idle answer may hide)."""
    return "<set>" if all("\x21" <= c <= "\x7e" for c in value) else "<unusable>"


FileMark = list[int] | None  # [size, mtime_ns, inode, ctime_ns], or None: the file was absent


class RecordedWakeup:
    """A `wakeups` row as the check reads it. (A plain class: `dataclasses` alone would cost an
    idle run a tenth of its import time.)"""

    __slots__ = ("asleep", "files", "identity", "idle_summary", "signature")

    def __init__(self, *, signature: str | None, identity: str | None, files: Mapping[str, FileMark],
                 idle_summary: str | None, asleep: bool) -> None:
        self.signature = signature
        self.identity = identity
        self.files = files
        self.idle_summary = idle_summary
        self.asleep = asleep


def parse_files(text: str | None) -> dict[str, FileMark] | None:
    """The recorded files' marks; None when the text is not what the recorder writes."""
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    out: dict[str, FileMark] = {}
    for path, mark in value.items():
        if mark is not None and not (isinstance(mark, list) and all(isinstance(x, int) for x in mark)):
            return None
        out[str(path)] = mark
    return out


def why_awake(recorded: RecordedWakeup | None, signature: str, env_identity: str,
              files_now: Mapping[str, FileMark]) -> str | None:
    """Why this run must be a full one, or None: nothing can be due, the idle answer is enough."""
    if recorded is None:
        return "no wake-up recorded"
    if not recorded.asleep:
        return "due"
    if recorded.signature != signature:
        return "database changed"
    if recorded.identity != env_identity:
        return "environment changed"
    if dict(recorded.files) != dict(files_now):
        return "files changed"
    if recorded.idle_summary is None:
        return "no idle summary"
    return None
