-- `status --check` and `status --prometheus` cost the same against ten years of history as
-- against a new database (issue 47): the journal rows behind the SLIs and their error budgets
-- (dispatches in the window, entries into and out of COMPLETED_NOT_RETRIEVED, exits from
-- CREATE_IN_FLIGHT) are read by state and time, so a month's window reads its matching rows
-- only, not every entry of the month, and each dispatched job's first
-- dispatch by its own entries into that state; the newest runs of a command by its id.
ALTER TABLE job_events ADD INDEX ix_job_events_to_at (to_state, at),
    ADD INDEX ix_job_events_from_at (from_state, at),
    ADD INDEX ix_job_events_job_to (job_id, to_state, at);
ALTER TABLE runs ADD INDEX ix_runs_command_id (command, id);
