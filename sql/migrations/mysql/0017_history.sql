-- A database's age costs nothing per minute (issue 47): every per-minute query reads through an
-- index, and the wake-up rows are kept per place (host, working directory, configuration), so
-- several hosts on one database each keep their own idle minutes.

-- The wake-up check's high-water marks (iipub/store/wakeup_sql.py): the newest change of each
-- history table, read from an index instead of an aggregate over every row.
ALTER TABLE outbox_deliveries ADD INDEX ix_outbox_deliveries_updated (updated_at);
ALTER TABLE spend ADD INDEX ix_spend_updated (updated_at);
ALTER TABLE webhook_deliveries ADD INDEX ix_webhook_deliveries_settled (settled_at);

-- What `status` and the metrics textfile read each minute, by index: parked deliveries, the
-- spend of the last days by edition date, the newest webhook of a kind.
ALTER TABLE outbox_deliveries ADD INDEX ix_outbox_deliveries_parked (parked_at);
ALTER TABLE jobs ADD INDEX ix_jobs_edition_date (edition_date);
ALTER TABLE webhook_deliveries ADD INDEX ix_webhook_deliveries_type (event_type, received_at);
-- The counts by state `status` shows read these narrow indexes, not the rows with their payloads.
ALTER TABLE jobs ADD INDEX ix_jobs_product_state (product, state);
ALTER TABLE tracks ADD INDEX ix_tracks_product_lang_state (product, lang, state);
-- The ledger check's count of the paid creates written to one ledger (0016's column), likewise.
ALTER TABLE spend ADD INDEX ix_spend_ledger_state (ledger_id, state);

-- The wake-up rows are a cache a full run rebuilds: the old rows (one per command) go, and the
-- table is keyed by place as well.
DELETE FROM wakeups;

ALTER TABLE wakeups ADD COLUMN place VARCHAR(64) NOT NULL AFTER command,   -- sha256 of the host name, working directory and $IIPUB_CONFIG
    ADD COLUMN host      VARCHAR(255) NOT NULL AFTER place,     -- the host name, for a reader
    ADD COLUMN env_names TEXT         NOT NULL AFTER identity,  -- JSON: the variables the settings name (in the identity)
    DROP PRIMARY KEY,
    ADD PRIMARY KEY (command, place);
