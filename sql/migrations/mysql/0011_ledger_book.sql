-- The spend ledger this database writes to, remembered by the database (issue 37): the
-- identity of the ledger (`ledger_id`, written into the file as an `open` line of this
-- installation) and the position it had reached (`base_spend_id`: every `spend` row after it
-- wrote an intent line after that open line). A ledger missing, replaced, truncated or behind
-- the database holds new creates until an operator acknowledges it (`iipub ledger acknowledge`),
-- which opens a new ledger identity here and in the file.

CREATE TABLE IF NOT EXISTS ledger_book (
    name           VARCHAR(16)  NOT NULL,     -- always 'this': one row
    ledger_id      VARCHAR(64)  NOT NULL,
    path           VARCHAR(1024) NOT NULL,    -- where the ledger was when it was opened
    base_spend_id  BIGINT       NOT NULL,     -- spend rows after this one are in the ledger
    opened_at      DATETIME(6)  NOT NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
