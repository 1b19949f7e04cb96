-- The wake-up check (iipub/wakeup.py): what the last full `reconcile` / `relay` run left for
-- the next run, which asks with the driver alone whether anything can be due before it loads
-- the rest of iipub. A missing row, a NULL next_at or any difference means a full run.

CREATE TABLE IF NOT EXISTS wakeups (
    command      VARCHAR(16)  NOT NULL,            -- reconcile | relay
    next_at      DATETIME(6)  NULL,                -- the earliest time anything falls due; NULL: now
    signature    VARCHAR(64)  NOT NULL,            -- sha256 of the tables' aggregates it was computed from
    identity     VARCHAR(64)  NOT NULL,            -- sha256 of the version, working directory, IIPUB_*/OPENAI_* (secrets as set/unset)
    files        TEXT         NOT NULL,            -- JSON: watched file -> [size, mtime_ns, inode] or null
    idle_summary TEXT         NOT NULL,            -- JSON: the summary an idle run prints
    recorded_at  DATETIME(6)  NOT NULL,
    PRIMARY KEY (command)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
