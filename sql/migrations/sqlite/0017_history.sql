-- See mysql/0017_history.sql.

CREATE INDEX IF NOT EXISTS ix_outbox_deliveries_updated ON outbox_deliveries (updated_at);
CREATE INDEX IF NOT EXISTS ix_spend_updated ON spend (updated_at);
CREATE INDEX IF NOT EXISTS ix_webhook_deliveries_settled ON webhook_deliveries (settled_at);
CREATE INDEX IF NOT EXISTS ix_outbox_deliveries_parked ON outbox_deliveries (parked_at);
CREATE INDEX IF NOT EXISTS ix_jobs_edition_date ON jobs (edition_date);
CREATE INDEX IF NOT EXISTS ix_webhook_deliveries_type ON webhook_deliveries (event_type, received_at);
CREATE INDEX IF NOT EXISTS ix_jobs_product_state ON jobs (product, state);
CREATE INDEX IF NOT EXISTS ix_tracks_product_lang_state ON tracks (product, lang, state);
CREATE INDEX IF NOT EXISTS ix_spend_ledger_state ON spend (ledger_id, state);

DROP TABLE IF EXISTS wakeups;

CREATE TABLE IF NOT EXISTS wakeups (
    command      VARCHAR(16)  NOT NULL,
    place        VARCHAR(64)  NOT NULL,
    host         VARCHAR(255) NOT NULL,
    next_at      DATETIME     NULL,
    signature    VARCHAR(64)  NOT NULL,
    identity     VARCHAR(64)  NOT NULL,
    env_names    TEXT         NOT NULL,
    files        TEXT         NOT NULL,
    idle_summary TEXT         NOT NULL,
    recorded_at  DATETIME     NOT NULL,
    PRIMARY KEY (command, place)
);
