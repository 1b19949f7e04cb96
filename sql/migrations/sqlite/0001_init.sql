-- iipub schema, SQLite (the embedded default). The same tables, keys and indexes as
-- mysql/0001_init.sql; times are text 'YYYY-MM-DD HH:MM:SS.ffffff' UTC (one format, so
-- text order is time order).

CREATE TABLE IF NOT EXISTS jobs (
    id                  VARCHAR(36)  NOT NULL PRIMARY KEY,
    product             VARCHAR(64)  NOT NULL,
    edition_date        DATE         NOT NULL,
    state               VARCHAR(32)  NOT NULL,
    version             BIGINT       NOT NULL,
    priority            INTEGER      NOT NULL,
    is_backfill         BOOLEAN      NOT NULL,
    opens_at            DATETIME     NOT NULL,
    next_attempt_at     DATETIME     NOT NULL,
    lease_owner         VARCHAR(128) NULL,
    lease_expiry        DATETIME     NULL,
    generation_attempts INTEGER      NOT NULL,
    poll_count          INTEGER      NOT NULL,
    retry_count         INTEGER      NOT NULL,
    response_id         VARCHAR(128) NULL,
    config_fingerprint  VARCHAR(64)  NULL,
    payload             TEXT         NULL,
    payload_sha256      VARCHAR(64)  NULL,
    composed            TEXT         NULL,
    composed_sha256     VARCHAR(64)  NULL,
    input_tokens        BIGINT       NOT NULL,
    output_tokens       BIGINT       NOT NULL,
    total_tokens        BIGINT       NOT NULL,
    quarantine_reason   VARCHAR(64)  NULL,
    last_error          TEXT         NULL,
    suspended_from      VARCHAR(32)  NULL,
    kill_requested      BOOLEAN      NOT NULL,
    created_at          DATETIME     NOT NULL,
    updated_at          DATETIME     NOT NULL,
    state_entered_at    DATETIME     NOT NULL,
    CONSTRAINT uq_jobs_slot UNIQUE (product, edition_date)
);
CREATE INDEX IF NOT EXISTS ix_jobs_due ON jobs (state, next_attempt_at);
CREATE INDEX IF NOT EXISTS ix_jobs_response ON jobs (response_id);

CREATE TABLE IF NOT EXISTS job_events (
    id          INTEGER      NOT NULL PRIMARY KEY AUTOINCREMENT,
    job_id      VARCHAR(36)  NOT NULL,
    from_state  VARCHAR(32)  NULL,
    to_state    VARCHAR(32)  NOT NULL,
    version     BIGINT       NOT NULL,
    worker      VARCHAR(128) NOT NULL,
    reason      VARCHAR(64)  NOT NULL,
    detail      TEXT         NULL,
    at          DATETIME     NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_job_events_job ON job_events (job_id, id);
CREATE INDEX IF NOT EXISTS ix_job_events_at ON job_events (at);

CREATE TABLE IF NOT EXISTS editions (
    id           INTEGER      NOT NULL PRIMARY KEY AUTOINCREMENT,
    job_id       VARCHAR(36)  NOT NULL,
    product      VARCHAR(64)  NOT NULL,
    edition_date DATE         NOT NULL,
    lang         VARCHAR(8)   NOT NULL,
    title        VARCHAR(400) NOT NULL,
    content      TEXT         NOT NULL,
    sha256       VARCHAR(64)  NOT NULL,
    created_at   DATETIME     NOT NULL,
    CONSTRAINT uq_editions_slot_lang UNIQUE (product, edition_date, lang)
);
CREATE INDEX IF NOT EXISTS ix_editions_job ON editions (job_id);

CREATE TABLE IF NOT EXISTS outbox (
    id              INTEGER      NOT NULL PRIMARY KEY AUTOINCREMENT,
    event_id        VARCHAR(36)  NOT NULL,
    job_id          VARCHAR(36)  NOT NULL,
    edition_id      BIGINT       NOT NULL,
    event_type      VARCHAR(64)  NOT NULL,
    payload         TEXT         NOT NULL,
    version         BIGINT       NOT NULL,
    lease_owner     VARCHAR(128) NULL,
    lease_expiry    DATETIME     NULL,
    attempts        INTEGER      NOT NULL,
    next_attempt_at DATETIME     NOT NULL,
    first_failed_at DATETIME     NULL,
    published_at    DATETIME     NULL,
    last_error      TEXT         NULL,
    created_at      DATETIME     NOT NULL,
    CONSTRAINT uq_outbox_event UNIQUE (event_id)
);
CREATE INDEX IF NOT EXISTS ix_outbox_due ON outbox (published_at, next_attempt_at);
CREATE INDEX IF NOT EXISTS ix_outbox_job ON outbox (job_id);

CREATE TABLE IF NOT EXISTS outbox_deliveries (
    id           INTEGER     NOT NULL PRIMARY KEY AUTOINCREMENT,
    event_id     VARCHAR(36) NOT NULL,
    sink         VARCHAR(32) NOT NULL,
    attempts     INTEGER     NOT NULL,
    delivered_at DATETIME    NULL,
    parked_at    DATETIME    NULL,
    last_error   TEXT        NULL,
    updated_at   DATETIME    NOT NULL,
    CONSTRAINT uq_deliveries_event_sink UNIQUE (event_id, sink)
);

CREATE TABLE IF NOT EXISTS clock (
    id        INTEGER NOT NULL PRIMARY KEY,
    offset_us BIGINT  NOT NULL
);

INSERT OR IGNORE INTO clock (id, offset_us) VALUES (1, 0);
