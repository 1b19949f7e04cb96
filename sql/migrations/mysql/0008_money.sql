-- Money controls. `spend`: one row per paid create, written in the same transaction as its
-- dispatch (so it is counted by PAYMENT time, `paid_at`, the database clock at the dispatch),
-- updated with the create's outcome and, once the output is in custody, with the usage the
-- provider reported. A row counts against the daily ceilings at its reported total, or at its
-- `estimated_tokens` while that is unknown (in flight, outcome unknown, accepted not finished);
-- a provably refused or rejected create counts nothing. `spend_overrides`: an operator's audited
-- raise of a ceiling (`iipub budget override`). `spend_notes`: a ceiling reached on a day is
-- journaled and logged once (the primary key makes that once across processes).

CREATE TABLE IF NOT EXISTS spend (
    id                BIGINT       NOT NULL AUTO_INCREMENT,
    job_id            VARCHAR(36)  NOT NULL,
    attempt           INT          NOT NULL,
    product           VARCHAR(64)  NOT NULL,
    edition_date      DATE         NOT NULL,
    model             VARCHAR(128) NOT NULL,
    tier_asked        VARCHAR(16)  NOT NULL,            -- flex | default
    tier_reported     VARCHAR(16)  NULL,                -- the `service_tier` the response reports
    state             VARCHAR(16)  NOT NULL,            -- in_flight | accepted | unknown | settled | refused | rejected
    response_id       VARCHAR(128) NULL,
    estimated_tokens  BIGINT       NOT NULL,
    input_tokens      BIGINT       NULL,
    output_tokens     BIGINT       NULL,
    total_tokens      BIGINT       NULL,
    paid_at           DATETIME(6)  NOT NULL,
    updated_at        DATETIME(6)  NOT NULL,
    PRIMARY KEY (id),
    KEY ix_spend_paid (paid_at),
    KEY ix_spend_job (job_id, attempt),
    KEY ix_spend_state (state)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS spend_overrides (
    id            BIGINT       NOT NULL AUTO_INCREMENT,
    scope         VARCHAR(64)  NOT NULL,                -- '*' (the global ceiling) or a product name
    extra_tokens  BIGINT       NOT NULL,
    reason        TEXT         NOT NULL,
    granted_by    VARCHAR(128) NOT NULL,
    granted_at    DATETIME(6)  NOT NULL,
    until_at      DATETIME(6)  NOT NULL,
    PRIMARY KEY (id),
    KEY ix_spend_overrides_until (until_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS spend_notes (
    day       DATE         NOT NULL,
    scope     VARCHAR(64)  NOT NULL,
    noted_at  DATETIME(6)  NOT NULL,
    PRIMARY KEY (day, scope)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
