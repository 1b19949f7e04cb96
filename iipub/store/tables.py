"""The table definitions: the schema of `sql/migrations/<dialect>/` for SQLAlchemy Core (a test
proves the two agree), with the column types that differ by dialect."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

metadata = sa.MetaData()



def _for(dialect: Dialect, generic: TypeEngine[Any], mysql_type: str, **args: Any) -> TypeEngine[Any]:
    """`generic`, or on MySQL/MariaDB the named type of that dialect: imported on a MySQL
    connection only, so a SQLite run never loads the MySQL dialect."""
    if dialect.name not in ("mysql", "mariadb"):
        return dialect.type_descriptor(generic)
    from sqlalchemy.dialects import mysql

    return dialect.type_descriptor(getattr(mysql, mysql_type)(**args))


class _Time(TypeDecorator[dt.datetime]):
    """DATETIME(6) on MySQL (microseconds); six-digit text on SQLite (SQLAlchemy's own format)."""

    impl = sa.DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        return _for(dialect, sa.DateTime(), "DATETIME", fsp=6)


class _LongText(TypeDecorator[str]):
    """LONGTEXT on MySQL (payloads past TEXT's 64 KiB); TEXT elsewhere."""

    impl = sa.Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        return _for(dialect, sa.Text(), "LONGTEXT")


Time = _Time()
LongText = _LongText()

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("product", sa.String(64), nullable=False),
    sa.Column("edition_date", sa.Date, nullable=False),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("is_backfill", sa.Boolean, nullable=False),
    sa.Column("opens_at", Time, nullable=False),
    sa.Column("next_attempt_at", Time, nullable=False),
    sa.Column("lease_owner", sa.String(128)),
    sa.Column("lease_expiry", Time),
    sa.Column("generation_attempts", sa.Integer, nullable=False),
    sa.Column("poll_count", sa.Integer, nullable=False),
    sa.Column("retry_count", sa.Integer, nullable=False),
    sa.Column("response_id", sa.String(128)),
    sa.Column("config_fingerprint", sa.String(64)),
    sa.Column("payload", LongText),
    sa.Column("payload_sha256", sa.String(64)),
    sa.Column("composed", LongText),
    sa.Column("composed_sha256", sa.String(64)),
    sa.Column("input_tokens", sa.BigInteger, nullable=False),
    sa.Column("output_tokens", sa.BigInteger, nullable=False),
    sa.Column("total_tokens", sa.BigInteger, nullable=False),
    sa.Column("quarantine_reason", sa.String(64)),
    sa.Column("last_error", sa.Text),
    sa.Column("suspended_from", sa.String(32)),
    sa.Column("kill_requested", sa.Boolean, nullable=False),
    sa.Column("created_at", Time, nullable=False),
    sa.Column("updated_at", Time, nullable=False),
    sa.Column("state_entered_at", Time, nullable=False),
    # `adopted` when `iipub adopt` took the slot's response over from a legacy system (the
    # response carries no iipub metadata: this row is what makes iipub its owner); NULL otherwise.
    sa.Column("origin", sa.String(16)),
    sa.Column("adopted_at", Time),
    # How the custody's response ended when validation cannot say it (`max_output_tokens`,
    # `refusal`); and the scope (organization, project, key fingerprint) its create was sent under.
    sa.Column("output_end", sa.String(32)),
    sa.Column("create_scope", sa.String(255)),
    # When the custody watch reads a parked job's response next (NULL: at the next tick); not a
    # state write, so neither versioned nor journaled.
    sa.Column("custody_watch_at", Time),
    sa.UniqueConstraint("product", "edition_date", name="uq_jobs_slot"),
    sa.Index("ix_jobs_due", "state", "next_attempt_at"),
    sa.Index("ix_jobs_response", "response_id"),
    sa.Index("ix_jobs_edition_date", "edition_date"),
    sa.Index("ix_jobs_product_state", "product", "state"),
)

job_events = sa.Table(
    "job_events",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(36), nullable=False),
    sa.Column("from_state", sa.String(32)),
    sa.Column("to_state", sa.String(32), nullable=False),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("worker", sa.String(128), nullable=False),
    sa.Column("reason", sa.String(64), nullable=False),
    sa.Column("detail", sa.Text),
    sa.Column("at", Time, nullable=False),
    # The language track the entry is about; NULL for the slot's own row (`jobs`).
    sa.Column("lang", sa.String(8)),
    sa.Index("ix_job_events_job", "job_id", "id"),
    sa.Index("ix_job_events_at", "at"),
    sa.Index("ix_job_events_to_at", "to_state", "at"),
    sa.Index("ix_job_events_from_at", "from_state", "at"),
    sa.Index("ix_job_events_job_to", "job_id", "to_state", "at"),
)

# One row per (slot, language) once the slot's payload has forked (PRODUCT.md section 15): its
# own state, fencing version and lease; `payload` is this language's part (its custody).
tracks = sa.Table(
    "tracks",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("job_id", sa.String(36), nullable=False),
    sa.Column("product", sa.String(64), nullable=False),
    sa.Column("edition_date", sa.Date, nullable=False),
    sa.Column("lang", sa.String(8), nullable=False),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("lease_owner", sa.String(128)),
    sa.Column("lease_expiry", Time),
    sa.Column("next_attempt_at", Time, nullable=False),
    sa.Column("retry_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("payload", LongText),
    sa.Column("payload_sha256", sa.String(64)),
    sa.Column("source_sha256", sa.String(64)),
    sa.Column("composed", LongText),
    sa.Column("composed_sha256", sa.String(64)),
    sa.Column("quarantine_reason", sa.String(64)),
    sa.Column("last_error", sa.Text),
    sa.Column("suspended_from", sa.String(32)),
    sa.Column("created_at", Time, nullable=False),
    sa.Column("updated_at", Time, nullable=False),
    sa.Column("state_entered_at", Time, nullable=False),
    sa.UniqueConstraint("product", "edition_date", "lang", name="uq_tracks_slot_lang"),
    sa.UniqueConstraint("job_id", "lang", name="uq_tracks_job_lang"),
    sa.Index("ix_tracks_due", "state", "next_attempt_at"),
    sa.Index("ix_tracks_product_lang_state", "product", "lang", "state"),
)

editions = sa.Table(
    "editions",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(36), nullable=False),
    sa.Column("product", sa.String(64), nullable=False),
    sa.Column("edition_date", sa.Date, nullable=False),
    sa.Column("lang", sa.String(8), nullable=False),
    sa.Column("title", sa.String(400), nullable=False),
    sa.Column("content", LongText, nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("created_at", Time, nullable=False),
    # Corrections and withdrawals (migration 0018): a revision that only grows, and the public status.
    sa.Column("revision", sa.Integer, nullable=False, server_default="1"),
    sa.Column("status", sa.String(16), nullable=False, server_default="live"),
    sa.UniqueConstraint("product", "edition_date", "lang", name="uq_editions_slot_lang"),
    sa.Index("ix_editions_job", "job_id"),
    sa.Index("ix_editions_status", "status"),
)
# Every change an operator made to a public edition (`iipub withdraw`, `iipub correct`), append-only.
edition_changes = sa.Table(
    "edition_changes",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("edition_id", sa.BigInteger, nullable=False),
    sa.Column("job_id", sa.String(36), nullable=False),
    sa.Column("lang", sa.String(8), nullable=False),
    sa.Column("revision", sa.Integer, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("event_id", sa.String(36), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("public_note", sa.Text),
    sa.Column("changed_by", sa.String(128), nullable=False),
    sa.Column("superseded_sha256", sa.String(64), nullable=False),
    sa.Column("superseded_content", LongText, nullable=False),
    sa.Column("sha256", sa.String(64)),
    sa.Column("created_at", Time, nullable=False),
    sa.UniqueConstraint("edition_id", "revision", name="uq_edition_changes_revision"),
    sa.Index("ix_edition_changes_job", "job_id"),
)

outbox = sa.Table(
    "outbox",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("event_id", sa.String(36), nullable=False),
    sa.Column("job_id", sa.String(36), nullable=False),
    sa.Column("edition_id", sa.BigInteger, nullable=False),
    sa.Column("event_type", sa.String(64), nullable=False),
    sa.Column("payload", LongText, nullable=False),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("lease_owner", sa.String(128)),
    sa.Column("lease_expiry", Time),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("next_attempt_at", Time, nullable=False),
    sa.Column("first_failed_at", Time),
    sa.Column("published_at", Time),
    sa.Column("last_error", sa.Text),
    sa.Column("created_at", Time, nullable=False),
    sa.Column("superseded_by", sa.String(36)),  # the later revision's event that replaced it (migration 0018)
    sa.UniqueConstraint("event_id", name="uq_outbox_event"),
    sa.Index("ix_outbox_due", "published_at", "next_attempt_at"),
    sa.Index("ix_outbox_job", "job_id"),
)

outbox_deliveries = sa.Table(
    "outbox_deliveries",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("event_id", sa.String(36), nullable=False),
    sa.Column("sink", sa.String(32), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("delivered_at", Time),
    sa.Column("parked_at", Time),
    sa.Column("last_error", sa.Text),
    sa.Column("updated_at", Time, nullable=False),
    sa.UniqueConstraint("event_id", "sink", name="uq_deliveries_event_sink"),
    sa.Index("ix_outbox_deliveries_updated", "updated_at"),
    sa.Index("ix_outbox_deliveries_parked", "parked_at"),
)

clock = sa.Table(
    "clock",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("offset_us", sa.BigInteger, nullable=False),
)

create_gate = sa.Table(
    "create_gate",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("breaker", sa.String(16), nullable=False),
    sa.Column("breaker_reason", sa.String(64)),
    sa.Column("breaker_detail", sa.Text),
    sa.Column("opened_at", Time),
    sa.Column("open_count", sa.Integer, nullable=False),
    sa.Column("probe_after", Time),
    sa.Column("probe_owner", sa.String(128)),
    sa.Column("probe_expiry", Time),
    sa.Column("last_ok_at", Time),
    sa.Column("cooldown_until", Time),
    sa.Column("paused", sa.Boolean, nullable=False),
    sa.Column("paused_reason", sa.Text),
    sa.Column("paused_by", sa.String(128)),
    sa.Column("paused_at", Time),
    sa.Column("window_start", Time),
    sa.Column("window_creates", sa.Integer, nullable=False),
    sa.Column("updated_at", Time, nullable=False),
    # `pause --everything`: every automated command only records its heartbeat.
    sa.Column("paused_everything", sa.Boolean, nullable=False, server_default=sa.false()),
)

gate_events = sa.Table(
    "gate_events",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("worker", sa.String(128), nullable=False),
    sa.Column("detail", sa.Text),
    sa.Column("at", Time, nullable=False),
    sa.Index("ix_gate_events_at", "at"),
)

republish_grants = sa.Table(
    "republish_grants",
    metadata,
    sa.Column("job_id", sa.String(36), primary_key=True),
    sa.Column("granted_by", sa.String(128), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("granted_at", Time, nullable=False),
)

webhook_deliveries = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column("webhook_id", sa.String(255), primary_key=True),
    sa.Column("event_type", sa.String(64), nullable=False),
    sa.Column("event_id", sa.String(255)),
    sa.Column("response_id", sa.String(128)),
    sa.Column("job_id", sa.String(36)),
    sa.Column("outcome", sa.String(32), nullable=False),
    sa.Column("detail", sa.Text),
    sa.Column("event_created_at", Time),
    sa.Column("received_at", Time, nullable=False),
    sa.Column("settled_at", Time),
    sa.Index("ix_webhook_deliveries_received", "received_at"),
    sa.Index("ix_webhook_deliveries_response", "response_id"),
    sa.Index("ix_webhook_deliveries_outcome", "outcome"),
    sa.Index("ix_webhook_deliveries_settled", "settled_at"),
    sa.Index("ix_webhook_deliveries_type", "event_type", "received_at"),
)

webhook_misses = sa.Table(
    "webhook_misses",
    metadata,
    sa.Column("response_id", sa.String(128), primary_key=True),
    sa.Column("job_id", sa.String(36), nullable=False),
    sa.Column("noticed_at", Time, nullable=False),
    sa.Index("ix_webhook_misses_noticed", "noticed_at"),
)

orphans = sa.Table(
    "orphans",
    metadata,
    sa.Column("response_id", sa.String(128), primary_key=True),
    sa.Column("named_job_id", sa.String(64)),
    sa.Column("slot", sa.String(128)),
    sa.Column("attempt", sa.String(16)),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("why", sa.Text, nullable=False),
    sa.Column("output", LongText),
    sa.Column("output_sha256", sa.String(64)),
    sa.Column("output_tokens", sa.BigInteger),
    sa.Column("total_tokens", sa.BigInteger),
    sa.Column("first_seen_at", Time, nullable=False),
    sa.Column("remote_deleted_at", Time),
    sa.Index("ix_orphans_seen", "first_seen_at"),
)

# This database's installation id, one row (`iipub.store.installation`).
installation = sa.Table(
    "installation",
    metadata,
    sa.Column("name", sa.String(16), primary_key=True),
    sa.Column("installation_id", sa.String(64), nullable=False),
    sa.Column("created_at", Time, nullable=False),
)

# The spend ledger this database writes to: its identity and the position it had reached (0011).
ledger_book = sa.Table(
    "ledger_book",
    metadata,
    sa.Column("name", sa.String(16), primary_key=True),
    sa.Column("ledger_id", sa.String(64), nullable=False),
    sa.Column("path", sa.String(1024), nullable=False),
    sa.Column("base_spend_id", sa.BigInteger, nullable=False),
    sa.Column("opened_at", Time, nullable=False),
    sa.Column("host", sa.String(255)),  # the host whose ledger it is (0016; NULL: not claimed yet)
)

# What an orphan's metadata claimed in full, and the operator's decision about it.
orphan_details = sa.Table(
    "orphan_details",
    metadata,
    sa.Column("response_id", sa.String(128), primary_key=True),
    sa.Column("installation_id", sa.String(64)),
    sa.Column("fingerprint", sa.String(64)),
    sa.Column("metadata", sa.Text),
    sa.Column("fate", sa.String(16)),
    sa.Column("fate_job_id", sa.String(36)),
    sa.Column("fate_reason", sa.Text),
    sa.Column("fate_by", sa.String(128)),
    sa.Column("fate_at", Time),
)

# Every DELETE sent to the provider, and on what authority (`iipub check` proves each was owned).
provider_deletes = sa.Table(
    "provider_deletes",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("response_id", sa.String(128), nullable=False),
    sa.Column("job_id", sa.String(36)),
    sa.Column("basis", sa.String(16), nullable=False),
    sa.Column("worker", sa.String(128), nullable=False),
    sa.Column("at", Time, nullable=False),
    sa.Index("ix_provider_deletes_response", "response_id"),
)

# A rate limit seen on a provider read, shared by every process (`iipub.money.gate`): reads only.
read_cooldown = sa.Table(
    "read_cooldown",
    metadata,
    sa.Column("name", sa.String(16), primary_key=True),
    sa.Column("until_at", Time, nullable=False),
    sa.Column("worker", sa.String(128), nullable=False),
    sa.Column("set_at", Time, nullable=False),
)

# A product whose create was refused for a parameter: its creates wait until its request changes.
product_holds = sa.Table(
    "product_holds",
    metadata,
    sa.Column("product", sa.String(64), primary_key=True),
    sa.Column("request_fingerprint", sa.String(64), nullable=False),
    sa.Column("param", sa.String(128)),
    sa.Column("code", sa.String(64)),
    sa.Column("message", sa.Text),
    sa.Column("job_id", sa.String(36)),
    sa.Column("worker", sa.String(128), nullable=False),
    sa.Column("held_at", Time, nullable=False),
    # Migration 0015: why (`parameter`, `too_large`) and, for a request too large, its figures.
    sa.Column("cause", sa.String(16), nullable=False, server_default="parameter"),
    sa.Column("cap_tokens", sa.BigInteger),
    sa.Column("limit_tokens", sa.BigInteger),
    sa.Column("requested_tokens", sa.BigInteger),
)

# A model whose creates are held (`iipub.store.model_holds`, migration 0015): the project may not
# use it, or it does not exist.
model_holds = sa.Table(
    "model_holds",
    metadata,
    sa.Column("model", sa.String(128), primary_key=True),
    sa.Column("scope", sa.String(255), nullable=False),
    sa.Column("cause", sa.String(16), nullable=False),
    sa.Column("message", sa.Text),
    sa.Column("job_id", sa.String(36)),
    sa.Column("worker", sa.String(128), nullable=False),
    sa.Column("held_at", Time, nullable=False),
    sa.Column("checked_at", Time, nullable=False),
)

# One row per `iipub reconcile` / `iipub relay` run (`iipub.observe.heartbeat`).
runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("command", sa.String(16), nullable=False),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("worker", sa.String(128), nullable=False),
    sa.Column("started_at", Time, nullable=False),
    sa.Column("finished_at", Time),
    sa.Column("ok", sa.Boolean),
    sa.Column("summary", sa.Text),
    sa.Column("error", sa.Text),
    sa.Index("ix_runs_command_finished", "command", "finished_at"),
    sa.Index("ix_runs_started", "started_at"),
    sa.Index("ix_runs_command_id", "command", "id"),
)

# What the last full `reconcile` / `relay` run left for the next run's wake-up check
# (`iipub.observe.wakeup`): when anything next falls due, and the signature it was computed from.
wakeups = sa.Table(
    "wakeups",
    metadata,
    sa.Column("command", sa.String(16), primary_key=True),
    # Per place (host, working directory, configuration): several hosts on one database each
    # keep their own idle minutes.
    sa.Column("place", sa.String(64), primary_key=True),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("next_at", Time),
    sa.Column("signature", sa.String(64), nullable=False),
    sa.Column("identity", sa.String(64), nullable=False),
    sa.Column("env_names", sa.Text, nullable=False),
    sa.Column("files", sa.Text, nullable=False),
    sa.Column("idle_summary", sa.Text, nullable=False),
    sa.Column("recorded_at", Time, nullable=False),
)

# Money controls (`iipub.money.spend`): one row per paid create, counted by payment time.
spend = sa.Table(
    "spend",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(36), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("product", sa.String(64), nullable=False),
    sa.Column("edition_date", sa.Date, nullable=False),
    sa.Column("model", sa.String(128), nullable=False),
    sa.Column("tier_asked", sa.String(16), nullable=False),
    sa.Column("tier_reported", sa.String(16)),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("response_id", sa.String(128)),
    sa.Column("estimated_tokens", sa.BigInteger, nullable=False),
    sa.Column("input_tokens", sa.BigInteger),
    sa.Column("output_tokens", sa.BigInteger),
    sa.Column("total_tokens", sa.BigInteger),
    sa.Column("paid_at", Time, nullable=False),
    sa.Column("updated_at", Time, nullable=False),
    sa.Column("ledger_id", sa.String(64)),  # the spend ledger its intent line went to (0016)
    sa.Index("ix_spend_paid", "paid_at"),
    sa.Index("ix_spend_job", "job_id", "attempt"),
    sa.Index("ix_spend_state", "state"),
    sa.Index("ix_spend_updated", "updated_at"),
    sa.Index("ix_spend_ledger_state", "ledger_id", "state"),
)

spend_overrides = sa.Table(
    "spend_overrides",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("scope", sa.String(64), nullable=False),
    sa.Column("extra_tokens", sa.BigInteger, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("granted_by", sa.String(128), nullable=False),
    sa.Column("granted_at", Time, nullable=False),
    sa.Column("until_at", Time, nullable=False),
    sa.Index("ix_spend_overrides_until", "until_at"),
)

spend_notes = sa.Table(
    "spend_notes",
    metadata,
    sa.Column("day", sa.Date, primary_key=True),
    sa.Column("scope", sa.String(64), primary_key=True),
    sa.Column("noted_at", Time, nullable=False),
)

# The configuration a database runs with (`iipub.store.config_identity`): the newest row is in force.
config_identity = sa.Table(
    "config_identity",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("at", Time, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("config_path", sa.String(1024)),
    sa.Column("config_sha256", sa.CHAR(64)),
    sa.Column("ledger_path", sa.String(1024)),
    sa.Column("static_root", sa.String(1024)),
    sa.Column("command", sa.String(64), nullable=False),
    sa.Column("by_whom", sa.String(255), nullable=False),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("reason", sa.Text),
    sa.Column("during_freeze", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Index("ix_config_identity_at", "at"),
)

# Free space of the filesystems iipub writes to, every ten minutes (`iipub.observe.disk_samples`).
disk_samples = sa.Table(
    "disk_samples",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("at", Time, nullable=False),
    sa.Column("path", sa.String(1024), nullable=False),
    sa.Column("free_bytes", sa.BigInteger, nullable=False),
    sa.Column("size_bytes", sa.BigInteger, nullable=False),
    sa.Index("ix_disk_samples_at", "at"),
)

schema_migrations = sa.Table(
    "schema_migrations",
    metadata,
    sa.Column("version", sa.String(16), primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("checksum", sa.String(64), nullable=False),
    sa.Column("applied_at", Time, nullable=False),
)
