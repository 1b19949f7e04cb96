-- Speaking the real API (PRODUCT.md section 18).
-- `output_end`: how the custody's response ended when that decides more than validation can:
-- `max_output_tokens` (incomplete at the per-call cap: parked `output_cap_reached`) or `refusal`
-- (the model refused: parked `provider_refused`); NULL otherwise.
-- `create_scope`: the organization, project and key fingerprint (never the key) the create was
-- sent under; a 404 read under another scope is not evidence of loss.
ALTER TABLE jobs ADD COLUMN output_end VARCHAR(32) NULL;
ALTER TABLE jobs ADD COLUMN create_scope VARCHAR(255) NULL;

-- A product whose create the provider refused for a parameter (400 invalid_request_error naming
-- it; nothing billed): its creates wait until its request fingerprint changes (a config fix).
CREATE TABLE IF NOT EXISTS product_holds (
    product             VARCHAR(64)  NOT NULL,
    request_fingerprint VARCHAR(64)  NOT NULL,
    param               VARCHAR(128) NULL,
    code                VARCHAR(64)  NULL,
    message             TEXT         NULL,
    job_id              VARCHAR(36)  NULL,
    worker              VARCHAR(128) NOT NULL,
    held_at             DATETIME(6)  NOT NULL,
    PRIMARY KEY (product)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
