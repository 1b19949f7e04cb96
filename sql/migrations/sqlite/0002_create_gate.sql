-- The create gate (see mysql/0002_create_gate.sql): the shared circuit breaker, rate-limit
-- cool-down, pause switch and create rate window, and the journal of its changes.

CREATE TABLE IF NOT EXISTS create_gate (
    id               INTEGER      NOT NULL PRIMARY KEY,
    version          BIGINT       NOT NULL,
    breaker          VARCHAR(16)  NOT NULL,
    breaker_reason   VARCHAR(64)  NULL,
    breaker_detail   TEXT         NULL,
    opened_at        DATETIME     NULL,
    open_count       INTEGER      NOT NULL,
    probe_after      DATETIME     NULL,
    probe_owner      VARCHAR(128) NULL,
    probe_expiry     DATETIME     NULL,
    last_ok_at       DATETIME     NULL,
    cooldown_until   DATETIME     NULL,
    paused           BOOLEAN      NOT NULL,
    paused_reason    TEXT         NULL,
    paused_by        VARCHAR(128) NULL,
    paused_at        DATETIME     NULL,
    window_start     DATETIME     NULL,
    window_creates   INTEGER      NOT NULL,
    updated_at       DATETIME     NOT NULL
);

INSERT OR IGNORE INTO create_gate (id, version, breaker, open_count, paused, window_creates, updated_at)
    VALUES (1, 1, 'closed', 0, 0, 0, strftime('%Y-%m-%d %H:%M:%f000', 'now'));

CREATE TABLE IF NOT EXISTS gate_events (
    id      INTEGER      NOT NULL PRIMARY KEY AUTOINCREMENT,
    kind    VARCHAR(32)  NOT NULL,
    worker  VARCHAR(128) NOT NULL,
    detail  TEXT         NULL,
    at      DATETIME     NOT NULL
);

CREATE INDEX IF NOT EXISTS ix_gate_events_at ON gate_events (at);
