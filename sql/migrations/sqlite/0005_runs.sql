-- See mysql/0005_runs.sql.

CREATE TABLE IF NOT EXISTS runs (
    id           INTEGER      NOT NULL PRIMARY KEY AUTOINCREMENT,
    command      VARCHAR(16)  NOT NULL,
    host         VARCHAR(255) NOT NULL,
    pid          INTEGER      NOT NULL,
    worker       VARCHAR(128) NOT NULL,
    started_at   DATETIME     NOT NULL,
    finished_at  DATETIME     NULL,
    ok           BOOLEAN      NULL,
    summary      TEXT         NULL,
    error        TEXT         NULL
);
CREATE INDEX IF NOT EXISTS ix_runs_command_finished ON runs (command, finished_at);
CREATE INDEX IF NOT EXISTS ix_runs_started ON runs (started_at);
