-- See mysql/0014_wakeups.sql.

CREATE TABLE IF NOT EXISTS wakeups (
    command      VARCHAR(16)  NOT NULL PRIMARY KEY,
    next_at      DATETIME     NULL,
    signature    VARCHAR(64)  NOT NULL,
    identity     VARCHAR(64)  NOT NULL,
    files        TEXT         NOT NULL,
    idle_summary TEXT         NOT NULL,
    recorded_at  DATETIME     NOT NULL
);
