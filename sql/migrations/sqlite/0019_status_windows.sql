-- See mysql/0019_status_windows.sql.

CREATE INDEX IF NOT EXISTS ix_job_events_to_at ON job_events (to_state, at);
CREATE INDEX IF NOT EXISTS ix_job_events_from_at ON job_events (from_state, at);
CREATE INDEX IF NOT EXISTS ix_job_events_job_to ON job_events (job_id, to_state, at);
CREATE INDEX IF NOT EXISTS ix_runs_command_id ON runs (command, id);
