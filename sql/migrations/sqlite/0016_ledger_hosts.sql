-- See mysql/0016_ledger_hosts.sql.

ALTER TABLE ledger_book ADD COLUMN host VARCHAR(255) NULL;
ALTER TABLE spend ADD COLUMN ledger_id VARCHAR(64) NULL;
