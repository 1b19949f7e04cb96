-- Language tracks (PRODUCT.md section 15). One paid generation per (product, date) stays the
-- money unit on `jobs`; after custody and the shared validation the payload forks into one
-- `tracks` row per configured language, with its own state, fencing version and lease. A track
-- keeps its own language's part of the payload (its custody), validates it, composes, saves
-- its edition with the outbox rows in one transaction and is published on its own. The journal
-- records a track's transitions in `job_events` with the track's `lang` (NULL: the slot's row).

CREATE TABLE IF NOT EXISTS tracks (
    id                VARCHAR(36)  NOT NULL,
    job_id            VARCHAR(36)  NOT NULL,
    product           VARCHAR(64)  NOT NULL,
    edition_date      DATE         NOT NULL,
    lang              VARCHAR(8)   NOT NULL,
    state             VARCHAR(32)  NOT NULL,
    version           BIGINT       NOT NULL,
    lease_owner       VARCHAR(128) NULL,
    lease_expiry      DATETIME(6)  NULL,
    next_attempt_at   DATETIME(6)  NOT NULL,
    retry_count       INT          NOT NULL DEFAULT 0,
    payload           LONGTEXT     NULL,                -- this language's part: {"<lang>": {...}}
    payload_sha256    VARCHAR(64)  NULL,
    source_sha256     VARCHAR(64)  NULL,                -- the slot's payload it was forked from
    composed          LONGTEXT     NULL,
    composed_sha256   VARCHAR(64)  NULL,
    quarantine_reason VARCHAR(64)  NULL,
    last_error        TEXT         NULL,
    suspended_from    VARCHAR(32)  NULL,
    created_at        DATETIME(6)  NOT NULL,
    updated_at        DATETIME(6)  NOT NULL,
    state_entered_at  DATETIME(6)  NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uq_tracks_slot_lang (product, edition_date, lang),
    UNIQUE KEY uq_tracks_job_lang (job_id, lang),
    KEY ix_tracks_due (state, next_attempt_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

ALTER TABLE job_events ADD COLUMN lang VARCHAR(8) NULL;
