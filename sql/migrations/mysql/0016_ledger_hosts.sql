-- Several hosts, each with its own spend ledger (docs/scale-out.md): the database knows every
-- ledger it was written to, one `ledger_book` row per ledger (`name`: a key of the host and the
-- ledger's path; the row of a database from before this migration keeps `this` and belongs to the
-- host that first finds its open line in its file), and which ledger each paid create's intent
-- line went to (`spend.ledger_id`). A host's ledger is checked against its own creates only: a
-- second host's ledger is not "replaced", and acknowledging one host's ledger moves nothing to
-- another. A shared file on storage every host sees works the same way (one open line per host).

ALTER TABLE ledger_book ADD COLUMN host VARCHAR(255) NULL;
ALTER TABLE spend ADD COLUMN ledger_id VARCHAR(64) NULL;
