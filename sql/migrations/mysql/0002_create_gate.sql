-- The create gate: one row every reconcile process reads before a paid create. It holds the
-- shared circuit breaker, the rate-limit cool-down, the operator's pause switch and the
-- global create rate window. gate_events journals every change of it.

CREATE TABLE IF NOT EXISTS create_gate (
    id               INT          NOT NULL,
    version          BIGINT       NOT NULL,        -- fencing token, +1 on every write
    breaker          VARCHAR(16)  NOT NULL,        -- closed | open
    breaker_reason   VARCHAR(64)  NULL,            -- create_outcome_unknown | quota_exhausted | provider_auth
    breaker_detail   TEXT         NULL,
    opened_at        DATETIME(6)  NULL,
    open_count       INT          NOT NULL,        -- failed probes in a row: the cool-down grows with it
    probe_after      DATETIME(6)  NULL,            -- no probe create before this
    probe_owner      VARCHAR(128) NULL,            -- the one worker allowed to probe
    probe_expiry     DATETIME(6)  NULL,
    last_ok_at       DATETIME(6)  NULL,            -- last accepted create
    cooldown_until   DATETIME(6)  NULL,            -- provider rate limit: no create before this
    paused           BOOLEAN      NOT NULL,
    paused_reason    TEXT         NULL,
    paused_by        VARCHAR(128) NULL,
    paused_at        DATETIME(6)  NULL,
    window_start     DATETIME(6)  NULL,            -- max_creates_per_minute window
    window_creates   INT          NOT NULL,
    updated_at       DATETIME(6)  NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

INSERT IGNORE INTO create_gate (id, version, breaker, open_count, paused, window_creates, updated_at)
    VALUES (1, 1, 'closed', 0, FALSE, 0, UTC_TIMESTAMP(6));

CREATE TABLE IF NOT EXISTS gate_events (
    id      BIGINT       NOT NULL AUTO_INCREMENT,
    kind    VARCHAR(32)  NOT NULL,                 -- pause | unpause | breaker_open | breaker_close | probe
    worker  VARCHAR(128) NOT NULL,
    detail  TEXT         NULL,                     -- JSON
    at      DATETIME(6)  NOT NULL,
    PRIMARY KEY (id),
    KEY ix_gate_events_at (at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
