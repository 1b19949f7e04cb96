-- See mysql/0008_money.sql.

CREATE TABLE IF NOT EXISTS spend (
    id                INTEGER      NOT NULL PRIMARY KEY AUTOINCREMENT,
    job_id            VARCHAR(36)  NOT NULL,
    attempt           INTEGER      NOT NULL,
    product           VARCHAR(64)  NOT NULL,
    edition_date      DATE         NOT NULL,
    model             VARCHAR(128) NOT NULL,
    tier_asked        VARCHAR(16)  NOT NULL,
    tier_reported     VARCHAR(16)  NULL,
    state             VARCHAR(16)  NOT NULL,
    response_id       VARCHAR(128) NULL,
    estimated_tokens  BIGINT       NOT NULL,
    input_tokens      BIGINT       NULL,
    output_tokens     BIGINT       NULL,
    total_tokens      BIGINT       NULL,
    paid_at           DATETIME     NOT NULL,
    updated_at        DATETIME     NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_spend_paid ON spend (paid_at);
CREATE INDEX IF NOT EXISTS ix_spend_job ON spend (job_id, attempt);
CREATE INDEX IF NOT EXISTS ix_spend_state ON spend (state);

CREATE TABLE IF NOT EXISTS spend_overrides (
    id            INTEGER      NOT NULL PRIMARY KEY AUTOINCREMENT,
    scope         VARCHAR(64)  NOT NULL,
    extra_tokens  BIGINT       NOT NULL,
    reason        TEXT         NOT NULL,
    granted_by    VARCHAR(128) NOT NULL,
    granted_at    DATETIME     NOT NULL,
    until_at      DATETIME     NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_spend_overrides_until ON spend_overrides (until_at);

CREATE TABLE IF NOT EXISTS spend_notes (
    day       DATE         NOT NULL,
    scope     VARCHAR(64)  NOT NULL,
    noted_at  DATETIME     NOT NULL,
    PRIMARY KEY (day, scope)
);
