-- Bookkeeping for `iipub db migrate`; applied before anything else, idempotently.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    VARCHAR(16)  NOT NULL PRIMARY KEY,
    name       VARCHAR(200) NOT NULL,
    checksum   VARCHAR(64)  NOT NULL,
    applied_at DATETIME     NOT NULL
);
