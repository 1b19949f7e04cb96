-- See mysql/0013_config_identity.sql.

CREATE TABLE IF NOT EXISTS config_identity (
    id             INTEGER       NOT NULL PRIMARY KEY AUTOINCREMENT,
    at             DATETIME      NOT NULL,
    kind           VARCHAR(16)   NOT NULL,
    config_path    VARCHAR(1024) NULL,
    config_sha256  CHAR(64)      NULL,
    ledger_path    VARCHAR(1024) NULL,
    static_root    VARCHAR(1024) NULL,
    command        VARCHAR(64)   NOT NULL,
    by_whom        VARCHAR(255)  NOT NULL,
    host           VARCHAR(255)  NOT NULL,
    reason         TEXT          NULL,
    during_freeze  BOOLEAN       NOT NULL DEFAULT FALSE
);
CREATE INDEX IF NOT EXISTS ix_config_identity_at ON config_identity (at);

CREATE TABLE IF NOT EXISTS disk_samples (
    id          INTEGER       NOT NULL PRIMARY KEY AUTOINCREMENT,
    at          DATETIME      NOT NULL,
    path        VARCHAR(1024) NOT NULL,
    free_bytes  BIGINT        NOT NULL,
    size_bytes  BIGINT        NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_disk_samples_at ON disk_samples (at);
