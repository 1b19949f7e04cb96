-- Cutover from a legacy poller (`iipub adopt`, `export --in-flight`, `pause --everything`).
-- jobs.origin = 'adopted' marks a slot whose response a legacy system started and `iipub adopt`
-- took over (its response carries no iipub metadata: the row is what makes iipub its owner);
-- adopted_at is when. create_gate.paused_everything is the immediate abort: every automated
-- command only records its heartbeat until `iipub unpause`.

ALTER TABLE jobs ADD COLUMN origin VARCHAR(16) NULL, ADD COLUMN adopted_at DATETIME(6) NULL;
ALTER TABLE create_gate ADD COLUMN paused_everything BOOLEAN NOT NULL DEFAULT 0;
