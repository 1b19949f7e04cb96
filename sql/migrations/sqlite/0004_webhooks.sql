-- See mysql/0004_webhooks.sql.

CREATE TABLE IF NOT EXISTS webhook_deliveries (
    webhook_id        VARCHAR(255) NOT NULL PRIMARY KEY,
    event_type        VARCHAR(64)  NOT NULL,
    event_id          VARCHAR(255) NULL,
    response_id       VARCHAR(128) NULL,
    job_id            VARCHAR(36)  NULL,
    outcome           VARCHAR(32)  NOT NULL,
    detail            TEXT         NULL,
    event_created_at  DATETIME     NULL,
    received_at       DATETIME     NOT NULL,
    settled_at        DATETIME     NULL
);
CREATE INDEX IF NOT EXISTS ix_webhook_deliveries_received ON webhook_deliveries (received_at);
CREATE INDEX IF NOT EXISTS ix_webhook_deliveries_response ON webhook_deliveries (response_id);
CREATE INDEX IF NOT EXISTS ix_webhook_deliveries_outcome ON webhook_deliveries (outcome);

CREATE TABLE IF NOT EXISTS webhook_misses (
    response_id  VARCHAR(128) NOT NULL PRIMARY KEY,
    job_id       VARCHAR(36)  NOT NULL,
    noticed_at   DATETIME     NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_webhook_misses_noticed ON webhook_misses (noticed_at);

CREATE TABLE IF NOT EXISTS orphans (
    response_id        VARCHAR(128) NOT NULL PRIMARY KEY,
    named_job_id       VARCHAR(64)  NULL,
    slot               VARCHAR(128) NULL,
    attempt            VARCHAR(16)  NULL,
    status             VARCHAR(32)  NOT NULL,
    why                TEXT         NOT NULL,
    output             TEXT         NULL,
    output_sha256      VARCHAR(64)  NULL,
    output_tokens      BIGINT       NULL,
    total_tokens       BIGINT       NULL,
    first_seen_at      DATETIME     NOT NULL,
    remote_deleted_at  DATETIME     NULL
);
CREATE INDEX IF NOT EXISTS ix_orphans_seen ON orphans (first_seen_at);
