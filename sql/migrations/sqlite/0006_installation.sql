-- See mysql/0006_installation.sql.

CREATE TABLE IF NOT EXISTS installation (
    name             VARCHAR(16)  NOT NULL PRIMARY KEY,
    installation_id  VARCHAR(64)  NOT NULL,
    created_at       DATETIME     NOT NULL
);

CREATE TABLE IF NOT EXISTS orphan_details (
    response_id      VARCHAR(128) NOT NULL PRIMARY KEY,
    installation_id  VARCHAR(64)  NULL,
    fingerprint      VARCHAR(64)  NULL,
    metadata         TEXT         NULL,
    fate             VARCHAR(16)  NULL,
    fate_job_id      VARCHAR(36)  NULL,
    fate_reason      TEXT         NULL,
    fate_by          VARCHAR(128) NULL,
    fate_at          DATETIME     NULL
);

CREATE TABLE IF NOT EXISTS provider_deletes (
    id           INTEGER      NOT NULL PRIMARY KEY AUTOINCREMENT,
    response_id  VARCHAR(128) NOT NULL,
    job_id       VARCHAR(36)  NULL,
    basis        VARCHAR(16)  NOT NULL,
    worker       VARCHAR(128) NOT NULL,
    at           DATETIME     NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_provider_deletes_response ON provider_deletes (response_id);

CREATE TABLE IF NOT EXISTS read_cooldown (
    name      VARCHAR(16)  NOT NULL PRIMARY KEY,
    until_at  DATETIME     NOT NULL,
    worker    VARCHAR(128) NOT NULL,
    set_at    DATETIME     NOT NULL
);
