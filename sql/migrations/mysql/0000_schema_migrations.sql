-- Bookkeeping for `iipub db migrate`; applied before anything else, idempotently.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    VARCHAR(16)  NOT NULL,
    name       VARCHAR(200) NOT NULL,
    checksum   CHAR(64)     NOT NULL,
    applied_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
