-- Heartbeats: one row per `iipub reconcile` / `iipub relay` run, written when it starts and
-- again when it finishes (`finished_at` stays NULL while it runs, or if it was killed). `status`
-- reads the last finished run of each command; `--check` is CRITICAL when none finished OK
-- recently. Old rows are pruned by the runs themselves (a few days, a bounded number of rows).

CREATE TABLE IF NOT EXISTS runs (
    id           BIGINT       NOT NULL AUTO_INCREMENT,
    command      VARCHAR(16)  NOT NULL,            -- reconcile | relay
    host         VARCHAR(255) NOT NULL,
    pid          INT          NOT NULL,
    worker       VARCHAR(128) NOT NULL,            -- the worker id its journal rows carry
    started_at   DATETIME(6)  NOT NULL,
    finished_at  DATETIME(6)  NULL,                -- NULL: still running, or it died
    ok           BOOLEAN      NULL,                -- NULL until it finishes
    summary      TEXT         NULL,                -- JSON: the tick's / relay's summary (bounded)
    error        TEXT         NULL,                -- why it failed (bounded)
    PRIMARY KEY (id),
    KEY ix_runs_command_finished (command, finished_at),
    KEY ix_runs_started (started_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
