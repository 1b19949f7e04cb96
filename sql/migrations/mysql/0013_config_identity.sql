-- A database knows its configuration (`iipub.config_identity`): one row each time a command
-- that writes adopts a configuration (the first one, `adopted`), finds its file edited at the
-- same place (`edited`, accepted by itself and journaled), or an operator adopts another one on
-- purpose (`iipub config accept`, `accepted`). The newest row is the configuration in force:
-- a writing command with another identity (file path, ledger path, static root) is refused.

CREATE TABLE IF NOT EXISTS config_identity (
    id             BIGINT        NOT NULL AUTO_INCREMENT,
    at             DATETIME(6)   NOT NULL,
    kind           VARCHAR(16)   NOT NULL,          -- adopted | edited | accepted
    config_path    VARCHAR(1024) NULL,              -- NULL: built-in defaults (IIPUB_CONFIG unset)
    config_sha256  CHAR(64)      NULL,              -- of the file's bytes
    ledger_path    VARCHAR(1024) NULL,              -- NULL: the ledger is off
    static_root    VARCHAR(1024) NULL,              -- NULL: no static sink
    command        VARCHAR(64)   NOT NULL,
    by_whom        VARCHAR(255)  NOT NULL,
    host           VARCHAR(255)  NOT NULL,
    reason         TEXT          NULL,
    during_freeze  BOOLEAN       NOT NULL DEFAULT FALSE,  -- changed while an error budget was spent
    PRIMARY KEY (id),
    KEY ix_config_identity_at (at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Disk headroom over time (`iipub.disk_samples`): the relay records the free space of each
-- filesystem iipub writes to every ten minutes; `status` reads the growth from them. Kept 8 days.
CREATE TABLE IF NOT EXISTS disk_samples (
    id          BIGINT        NOT NULL AUTO_INCREMENT,
    at          DATETIME(6)   NOT NULL,
    path        VARCHAR(1024) NOT NULL,            -- the folder measured (one per filesystem)
    free_bytes  BIGINT        NOT NULL,
    size_bytes  BIGINT        NOT NULL,
    PRIMARY KEY (id),
    KEY ix_disk_samples_at (at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
