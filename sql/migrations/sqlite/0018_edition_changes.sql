-- See mysql/0018_edition_changes.sql.

ALTER TABLE editions ADD COLUMN revision INTEGER NOT NULL DEFAULT 1;
ALTER TABLE editions ADD COLUMN status VARCHAR(16) NOT NULL DEFAULT 'live';
-- An event a later revision of its edition replaced before every sink had it.
ALTER TABLE outbox ADD COLUMN superseded_by VARCHAR(36) NULL;
CREATE INDEX IF NOT EXISTS ix_editions_status ON editions (status);

CREATE TABLE IF NOT EXISTS edition_changes (
    id                 INTEGER      NOT NULL PRIMARY KEY AUTOINCREMENT,
    edition_id         BIGINT       NOT NULL,
    job_id             VARCHAR(36)  NOT NULL,
    lang               VARCHAR(8)   NOT NULL,
    revision           INTEGER      NOT NULL,
    kind               VARCHAR(16)  NOT NULL,
    event_id           VARCHAR(36)  NOT NULL,
    reason             TEXT         NOT NULL,
    public_note        TEXT         NULL,
    changed_by         VARCHAR(128) NOT NULL,
    superseded_sha256  VARCHAR(64)  NOT NULL,
    superseded_content TEXT         NOT NULL,
    sha256             VARCHAR(64)  NULL,
    created_at         DATETIME     NOT NULL,
    CONSTRAINT uq_edition_changes_revision UNIQUE (edition_id, revision)
);
CREATE INDEX IF NOT EXISTS ix_edition_changes_job ON edition_changes (job_id);
