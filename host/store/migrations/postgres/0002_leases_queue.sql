-- Schema version 2 (Postgres): leases with heartbeats, the run queue, the
-- current checkpoint per task, and per-scenario retention. The twin of
-- migrations/sqlite/0002_leases_queue.sql.

-- When the lease holder last renewed its lease (lease_owner and
-- lease_expires_at are in version 1).
ALTER TABLE runs ADD COLUMN heartbeat_at BIGINT;
-- The task a run works on (task-driven workflows); NULL means the run is its
-- own task (task id = run id).
ALTER TABLE runs ADD COLUMN task_id TEXT;

-- What workers scan: queued runs in order, and running runs by lease expiry
-- (to take over those whose worker died).
CREATE INDEX runs_queued ON runs (created_at, id) WHERE status = 'queued';
CREATE INDEX runs_leased ON runs (lease_expires_at) WHERE status = 'running';
-- Retention deletes finished runs by age.
CREATE INDEX runs_by_updated ON runs (updated_at) WHERE status IN ('completed', 'failed', 'cancelled');

-- Where each task stands: one row per task id, upserted in the transaction of
-- every checkpoint (the history stays append-only in `checkpoints`), so an
-- orchestrator reads it with one primary-key lookup.
CREATE TABLE task_checkpoints (
    task_id    TEXT PRIMARY KEY,
    run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq        BIGINT NOT NULL,
    node_id    TEXT NOT NULL,
    next_nodes TEXT NOT NULL,
    state_hash TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE INDEX task_checkpoints_by_run ON task_checkpoints (run_id);

-- How long finished runs of a scenario are kept (`host runs prune`).
CREATE TABLE retention (
    scenario_name TEXT PRIMARY KEY,
    keep_ms       BIGINT NOT NULL CHECK (keep_ms >= 0)
);
