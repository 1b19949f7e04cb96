-- Ownership. `installation` holds this database's random installation id (one row, written by
-- `iipub db migrate` when absent: a restore of this database keeps it, another database has
-- another). Every paid create's metadata carries it (`iipub_installation`), so a response is
-- this installation's only when its metadata says so. `orphan_details` completes an orphan
-- (0004) with the metadata it carried and the operator's decision (adopted into a job, or
-- discarded). `provider_deletes` records every DELETE iipub sends to the provider and on what
-- authority (the job's output in custody, an operator kill, an operator's discard of a kept
-- orphan), so `iipub check` can prove nothing unowned was deleted.

CREATE TABLE IF NOT EXISTS installation (
    name             VARCHAR(16)  NOT NULL,     -- always 'this': one row
    installation_id  VARCHAR(64)  NOT NULL,
    created_at       DATETIME(6)  NOT NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS orphan_details (
    response_id      VARCHAR(128) NOT NULL,
    installation_id  VARCHAR(64)  NULL,         -- what its metadata claims; NULL: made before 0006
    fingerprint      VARCHAR(64)  NULL,
    metadata         TEXT         NULL,         -- JSON, bounded (untrusted)
    fate             VARCHAR(16)  NULL,         -- NULL (kept) | adopted | discarded
    fate_job_id      CHAR(36)     NULL,
    fate_reason      TEXT         NULL,
    fate_by          VARCHAR(128) NULL,
    fate_at          DATETIME(6)  NULL,
    PRIMARY KEY (response_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS provider_deletes (
    id           BIGINT       NOT NULL AUTO_INCREMENT,
    response_id  VARCHAR(128) NOT NULL,
    job_id       CHAR(36)     NULL,             -- NULL: an orphan's
    basis        VARCHAR(16)  NOT NULL,         -- custody | kill | discard
    worker       VARCHAR(128) NOT NULL,
    at           DATETIME(6)  NOT NULL,
    PRIMARY KEY (id),
    KEY ix_provider_deletes_response (response_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS read_cooldown (
    name      VARCHAR(16)  NOT NULL,            -- always 'reads'
    until_at  DATETIME(6)  NOT NULL,            -- provider reads wait until then (at most 60 s ahead)
    worker    VARCHAR(128) NOT NULL,
    set_at    DATETIME(6)  NOT NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
