-- An operator's permission (`iipub republish`) for a job's editions to replace pages that are
-- already live with different content; without one the static sink parks such an event.

CREATE TABLE IF NOT EXISTS republish_grants (
    job_id      CHAR(36)     NOT NULL,
    granted_by  VARCHAR(128) NOT NULL,
    reason      TEXT         NOT NULL,
    granted_at  DATETIME(6)  NOT NULL,
    PRIMARY KEY (job_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
