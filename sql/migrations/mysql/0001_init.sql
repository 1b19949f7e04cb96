-- iipub schema, MySQL 8 / MariaDB 10.6+. All times are UTC DATETIME(6) from the database clock.

CREATE TABLE IF NOT EXISTS jobs (
    id                  CHAR(36)     NOT NULL,
    product             VARCHAR(64)  NOT NULL,
    edition_date        DATE         NOT NULL,
    state               VARCHAR(32)  NOT NULL,
    version             BIGINT       NOT NULL,       -- the fencing token, +1 on every write
    priority            INT          NOT NULL,       -- lower runs first
    is_backfill         BOOLEAN      NOT NULL,
    opens_at            DATETIME(6)  NOT NULL,       -- when the slot's window opens
    next_attempt_at     DATETIME(6)  NOT NULL,       -- backoff: not due before this
    lease_owner         VARCHAR(128) NULL,
    lease_expiry        DATETIME(6)  NULL,
    generation_attempts INT          NOT NULL,       -- paid creates (money)
    poll_count          INT          NOT NULL,       -- observations of the current response
    retry_count         INT          NOT NULL,       -- consecutive transient failures of the current step (backoff)
    response_id         VARCHAR(128) NULL,
    config_fingerprint  CHAR(64)     NULL,
    payload             LONGTEXT     NULL,           -- the provider output, once in custody
    payload_sha256      CHAR(64)     NULL,
    composed            LONGTEXT     NULL,           -- per-language artifacts (JSON)
    composed_sha256     CHAR(64)     NULL,
    input_tokens        BIGINT       NOT NULL,
    output_tokens       BIGINT       NOT NULL,
    total_tokens        BIGINT       NOT NULL,
    quarantine_reason   VARCHAR(64)  NULL,
    last_error          TEXT         NULL,
    suspended_from      VARCHAR(32)  NULL,           -- the state `resume` returns to
    kill_requested      BOOLEAN      NOT NULL,       -- permits a remote delete without custody
    created_at          DATETIME(6)  NOT NULL,
    updated_at          DATETIME(6)  NOT NULL,
    state_entered_at    DATETIME(6)  NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uq_jobs_slot (product, edition_date),
    KEY ix_jobs_due (state, next_attempt_at),
    KEY ix_jobs_response (response_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS job_events (
    id          BIGINT       NOT NULL AUTO_INCREMENT,
    job_id      CHAR(36)     NOT NULL,
    from_state  VARCHAR(32)  NULL,
    to_state    VARCHAR(32)  NOT NULL,
    version     BIGINT       NOT NULL,
    worker      VARCHAR(128) NOT NULL,
    reason      VARCHAR(64)  NOT NULL,
    detail      TEXT         NULL,                   -- JSON
    at          DATETIME(6)  NOT NULL,
    PRIMARY KEY (id),
    KEY ix_job_events_job (job_id, id),
    KEY ix_job_events_at (at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS editions (
    id           BIGINT       NOT NULL AUTO_INCREMENT,
    job_id       CHAR(36)     NOT NULL,
    product      VARCHAR(64)  NOT NULL,
    edition_date DATE         NOT NULL,
    lang         VARCHAR(8)   NOT NULL,
    title        VARCHAR(400) NOT NULL,
    content      LONGTEXT     NOT NULL,
    sha256       CHAR(64)     NOT NULL,
    created_at   DATETIME(6)  NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uq_editions_slot_lang (product, edition_date, lang),
    KEY ix_editions_job (job_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS outbox (
    id              BIGINT       NOT NULL AUTO_INCREMENT,
    event_id        CHAR(36)     NOT NULL,
    job_id          CHAR(36)     NOT NULL,
    edition_id      BIGINT       NOT NULL,
    event_type      VARCHAR(64)  NOT NULL,
    payload         LONGTEXT     NOT NULL,
    version         BIGINT       NOT NULL,
    lease_owner     VARCHAR(128) NULL,
    lease_expiry    DATETIME(6)  NULL,
    attempts        INT          NOT NULL,
    next_attempt_at DATETIME(6)  NOT NULL,
    first_failed_at DATETIME(6)  NULL,
    published_at    DATETIME(6)  NULL,
    last_error      TEXT         NULL,
    created_at      DATETIME(6)  NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uq_outbox_event (event_id),
    KEY ix_outbox_due (published_at, next_attempt_at),
    KEY ix_outbox_job (job_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS outbox_deliveries (
    id           BIGINT      NOT NULL AUTO_INCREMENT,
    event_id     CHAR(36)    NOT NULL,
    sink         VARCHAR(32) NOT NULL,
    attempts     INT         NOT NULL,
    delivered_at DATETIME(6) NULL,
    parked_at    DATETIME(6) NULL,
    last_error   TEXT        NULL,
    updated_at   DATETIME(6) NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uq_deliveries_event_sink (event_id, sink)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The database clock's drill offset: tests and fault drills move time forward here.
CREATE TABLE IF NOT EXISTS clock (
    id        INT    NOT NULL,
    offset_us BIGINT NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB;

INSERT IGNORE INTO clock (id, offset_us) VALUES (1, 0);
