-- See mysql/0017_history.sql.

CREATE INDEX IF NOT EXISTS ix_outbox_deliveries_updated ON outbox_deliveries (updated_at);
CREATE INDEX IF NOT EXISTS ix_spend_updated ON spend (updated_at);
CREATE INDEX IF NOT EXISTS ix_webhook_deliveries_settled ON webhook_deliveries (settled_at);

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
