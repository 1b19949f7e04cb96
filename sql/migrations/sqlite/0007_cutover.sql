-- See mysql/0007_cutover.sql.

ALTER TABLE jobs ADD COLUMN origin VARCHAR(16) NULL;
ALTER TABLE jobs ADD COLUMN adopted_at DATETIME NULL;
ALTER TABLE create_gate ADD COLUMN paused_everything BOOLEAN NOT NULL DEFAULT 0;
