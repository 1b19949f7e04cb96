-- See mysql/0011_ledger_book.sql.

CREATE TABLE IF NOT EXISTS ledger_book (
    name           VARCHAR(16)   NOT NULL PRIMARY KEY,
    ledger_id      VARCHAR(64)   NOT NULL,
    path           VARCHAR(1024) NOT NULL,
    base_spend_id  BIGINT        NOT NULL,
    opened_at      DATETIME      NOT NULL
);
