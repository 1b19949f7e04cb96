-- Provider webhooks. Every verified delivery is recorded once, by its `webhook-id` (a replay
-- or duplicate finds its row and changes nothing); `outcome` says what it did. A completion a
-- poll found before any webhook announced it is a miss: while a miss is newer than the last
-- delivery, polling does not relax. An orphan is a paid response no job owns; its output is
-- kept here before anything deletes it remotely.

CREATE TABLE IF NOT EXISTS webhook_deliveries (
    webhook_id        VARCHAR(255) NOT NULL,
    event_type        VARCHAR(64)  NOT NULL,
    event_id          VARCHAR(255) NULL,
    response_id       VARCHAR(128) NULL,
    job_id            CHAR(36)     NULL,
    outcome           VARCHAR(32)  NOT NULL,   -- received | custody | polled | deferred | no_op | ...
    detail            TEXT         NULL,
    event_created_at  DATETIME(6)  NULL,
    received_at       DATETIME(6)  NOT NULL,
    settled_at        DATETIME(6)  NULL,
    PRIMARY KEY (webhook_id),
    KEY ix_webhook_deliveries_received (received_at),
    KEY ix_webhook_deliveries_response (response_id),
    KEY ix_webhook_deliveries_outcome (outcome)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS webhook_misses (
    response_id  VARCHAR(128) NOT NULL,
    job_id       CHAR(36)     NOT NULL,
    noticed_at   DATETIME(6)  NOT NULL,
    PRIMARY KEY (response_id),
    KEY ix_webhook_misses_noticed (noticed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS orphans (
    response_id        VARCHAR(128) NOT NULL,
    named_job_id       VARCHAR(64)  NULL,      -- what its metadata claims (untrusted)
    slot               VARCHAR(128) NULL,
    attempt            VARCHAR(16)  NULL,
    status             VARCHAR(32)  NOT NULL,
    why                TEXT         NOT NULL,
    output             LONGTEXT     NULL,
    output_sha256      CHAR(64)     NULL,
    output_tokens      BIGINT       NULL,
    total_tokens       BIGINT       NULL,
    first_seen_at      DATETIME(6)  NOT NULL,
    remote_deleted_at  DATETIME(6)  NULL,
    PRIMARY KEY (response_id),
    KEY ix_orphans_seen (first_seen_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
