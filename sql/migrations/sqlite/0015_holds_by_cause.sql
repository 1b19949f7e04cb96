-- See mysql/0015_holds_by_cause.sql.
ALTER TABLE product_holds ADD COLUMN cause VARCHAR(16) NOT NULL DEFAULT 'parameter';
ALTER TABLE product_holds ADD COLUMN cap_tokens BIGINT NULL;
ALTER TABLE product_holds ADD COLUMN limit_tokens BIGINT NULL;
ALTER TABLE product_holds ADD COLUMN requested_tokens BIGINT NULL;

CREATE TABLE IF NOT EXISTS model_holds (
    model       VARCHAR(128) NOT NULL PRIMARY KEY,
    scope       VARCHAR(255) NOT NULL,
    cause       VARCHAR(16)  NOT NULL,
    message     TEXT         NULL,
    job_id      VARCHAR(36)  NULL,
    worker      VARCHAR(128) NOT NULL,
    held_at     DATETIME     NOT NULL,
    checked_at  DATETIME     NOT NULL
);
