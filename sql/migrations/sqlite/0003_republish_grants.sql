-- See mysql/0003_republish_grants.sql.

CREATE TABLE IF NOT EXISTS republish_grants (
    job_id      VARCHAR(36)  NOT NULL PRIMARY KEY,
    granted_by  VARCHAR(128) NOT NULL,
    reason      TEXT         NOT NULL,
    granted_at  DATETIME     NOT NULL
);
