-- See mysql/0010_provider_fidelity.sql.
ALTER TABLE jobs ADD COLUMN output_end VARCHAR(32) NULL;
ALTER TABLE jobs ADD COLUMN create_scope VARCHAR(255) NULL;

CREATE TABLE IF NOT EXISTS product_holds (
    product             VARCHAR(64)  NOT NULL PRIMARY KEY,
    request_fingerprint VARCHAR(64)  NOT NULL,
    param               VARCHAR(128) NULL,
    code                VARCHAR(64)  NULL,
    message             TEXT         NULL,
    job_id              VARCHAR(36)  NULL,
    worker              VARCHAR(128) NOT NULL,
    held_at             DATETIME     NOT NULL
);
