-- See mysql/0009_tracks.sql.

CREATE TABLE IF NOT EXISTS tracks (
    id                VARCHAR(36)  NOT NULL PRIMARY KEY,
    job_id            VARCHAR(36)  NOT NULL,
    product           VARCHAR(64)  NOT NULL,
    edition_date      DATE         NOT NULL,
    lang              VARCHAR(8)   NOT NULL,
    state             VARCHAR(32)  NOT NULL,
    version           BIGINT       NOT NULL,
    lease_owner       VARCHAR(128) NULL,
    lease_expiry      DATETIME     NULL,
    next_attempt_at   DATETIME     NOT NULL,
    retry_count       INTEGER      NOT NULL DEFAULT 0,
    payload           TEXT         NULL,
    payload_sha256    VARCHAR(64)  NULL,
    source_sha256     VARCHAR(64)  NULL,
    composed          TEXT         NULL,
    composed_sha256   VARCHAR(64)  NULL,
    quarantine_reason VARCHAR(64)  NULL,
    last_error        TEXT         NULL,
    suspended_from    VARCHAR(32)  NULL,
    created_at        DATETIME     NOT NULL,
    updated_at        DATETIME     NOT NULL,
    state_entered_at  DATETIME     NOT NULL,
    UNIQUE (product, edition_date, lang),
    UNIQUE (job_id, lang)
);
CREATE INDEX IF NOT EXISTS ix_tracks_due ON tracks (state, next_attempt_at);

ALTER TABLE job_events ADD COLUMN lang VARCHAR(8) NULL;
