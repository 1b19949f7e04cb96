-- Holds that fit the cause (a real account's limits).
-- A product's creates are held for a refused parameter (as before) or for a request too large for
-- the organization's tokens-per-minute limit (`cause` too_large, with the output cap sent, the
-- limit and the tokens the API said it was asked for).
ALTER TABLE product_holds ADD COLUMN cause VARCHAR(16) NOT NULL DEFAULT 'parameter';
ALTER TABLE product_holds ADD COLUMN cap_tokens BIGINT NULL;
ALTER TABLE product_holds ADD COLUMN limit_tokens BIGINT NULL;
ALTER TABLE product_holds ADD COLUMN requested_tokens BIGINT NULL;

-- A model the project may not use (403) or that does not exist (404 model_not_found): the creates
-- of every product on it are held, once, under the scope the refusal came from; `checked_at` is
-- when the provider was last asked, free of charge, whether the model can be used now.
CREATE TABLE IF NOT EXISTS model_holds (
    model       VARCHAR(128) NOT NULL,
    scope       VARCHAR(255) NOT NULL,
    cause       VARCHAR(16)  NOT NULL,
    message     TEXT         NULL,
    job_id      VARCHAR(36)  NULL,
    worker      VARCHAR(128) NOT NULL,
    held_at     DATETIME(6)  NOT NULL,
    checked_at  DATETIME(6)  NOT NULL,
    PRIMARY KEY (model)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
