"""The database: engines, tables, the clock, migrations, and the only writers of jobs, tracks,
outbox and deliveries rows."""
