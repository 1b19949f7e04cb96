-- See mysql/0012_custody_watch.sql.

ALTER TABLE jobs ADD COLUMN custody_watch_at DATETIME NULL;
