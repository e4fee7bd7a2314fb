-- Schema version 8 (Postgres): the queue's flow control, idempotency
-- keys and schedule ticks. The twin of
-- migrations/sqlite/0008_queue_flow_control.sql.

-- How a queued run is claimed (`queue.rs`): a higher priority first; at
-- most `concurrency_limit` runs of its scenario (by name) running at once;
-- at most one running run of its scenario with the same `concurrency_key`.
-- NULL: no limit, no key. Set when the run is created, from its scenario
-- and input, so a claim needs no scenario file.
ALTER TABLE runs ADD COLUMN priority BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN concurrency_limit BIGINT;
ALTER TABLE runs ADD COLUMN concurrency_key TEXT;

-- What workers scan: queued runs in claim order, and the running runs of a
-- scenario the limits count.
DROP INDEX runs_queued;
CREATE INDEX runs_queued ON runs (priority DESC, created_at, id) WHERE status = 'queued';
CREATE INDEX runs_running_by_scenario ON runs (scenario_name, concurrency_key)
    WHERE status = 'running';

-- `--idempotency-key`: the run a key started, until the key expires. A
-- second start with a live key gets that run instead of a new one; an
-- expired key is taken over by the next start. Written in the transaction
-- that creates the run; deleted with it.
CREATE TABLE idempotency_keys (
    key        TEXT PRIMARY KEY,
    run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX idempotency_keys_by_run ON idempotency_keys (run_id);

-- `[[schedule]]`: one row per scenario, schedule and tick (Unix ms), written
-- in the transaction that queues the tick's run, so of any number of
-- workers racing for a tick exactly one queues it. The newest row of a
-- schedule is where the next worker's catch-up starts.
CREATE TABLE schedule_ticks (
    scenario_name TEXT NOT NULL,
    schedule      TEXT NOT NULL,
    tick_ms       BIGINT NOT NULL,
    run_id        TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    created_at    BIGINT NOT NULL,
    PRIMARY KEY (scenario_name, schedule, tick_ms)
);
CREATE INDEX schedule_ticks_by_run ON schedule_ticks (run_id);
