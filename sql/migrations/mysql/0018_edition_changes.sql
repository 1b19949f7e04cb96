-- Corrections and withdrawals (PRODUCT.md section 26). An edition has a revision that only
-- grows and a status on the public site (live | corrected | withdrawn); every change an
-- operator made to it is one append-only `edition_changes` row, with what it replaced (the
-- superseded content is kept: evidence is never deleted) and the outbox event announcing it.

ALTER TABLE editions ADD COLUMN revision INT NOT NULL DEFAULT 1;
ALTER TABLE editions ADD COLUMN status VARCHAR(16) NOT NULL DEFAULT 'live';
-- An event a later revision of its edition replaced before every sink had it.
ALTER TABLE outbox ADD COLUMN superseded_by CHAR(36) NULL;
CREATE INDEX ix_editions_status ON editions (status);

CREATE TABLE IF NOT EXISTS edition_changes (
    id                 BIGINT       NOT NULL AUTO_INCREMENT,
    edition_id         BIGINT       NOT NULL,
    job_id             CHAR(36)     NOT NULL,
    lang               VARCHAR(8)   NOT NULL,
    revision           INT          NOT NULL,            -- the edition's revision this change made
    kind               VARCHAR(16)  NOT NULL,            -- withdrawn | corrected
    event_id           CHAR(36)     NOT NULL,            -- the outbox event that announces it
    reason             TEXT         NOT NULL,            -- the operator's, internal
    public_note        TEXT         NULL,                -- shown on the site and sent to the CMS
    changed_by         VARCHAR(128) NOT NULL,
    superseded_sha256  CHAR(64)     NOT NULL,            -- what was public before
    superseded_content LONGTEXT     NOT NULL,
    sha256             CHAR(64)     NULL,                -- the correction's artifact (NULL: withdrawn)
    created_at         DATETIME(6)  NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uq_edition_changes_revision (edition_id, revision),
    KEY ix_edition_changes_job (job_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
