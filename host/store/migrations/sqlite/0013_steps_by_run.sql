-- Schema version 13 (SQLite): a run's steps clustered by run.
-- The twin of migrations/postgres/0013_steps_by_run.sql (which changes
-- nothing).
--
-- `steps` was a rowid table with an index on (run_id, id): every step row
-- written dirtied a page of each, so a node's commit wrote four pages to
-- the WAL (the run's row, its checkpoint, its step, the step's index
-- entry). Keyed by (run_id, id) in one B-tree, a step is one page, and a
-- commit with `--durability full` syncs three. `id` orders a run's steps:
-- the writer gives a new step the run's largest id plus one
-- (`sqlite/commit.rs`), and the rows copied here keep theirs.
CREATE TABLE steps_clustered (
    run_id            TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    id                INTEGER NOT NULL,
    seq               INTEGER,
    node_id           TEXT NOT NULL,
    attempt           INTEGER NOT NULL,
    status            TEXT NOT NULL,
    started_at        INTEGER NOT NULL,
    duration_us       INTEGER NOT NULL,
    input_hash        TEXT,
    output_hash       TEXT,
    error             TEXT,
    fuel_consumed     INTEGER,
    memory_peak_bytes INTEGER,
    detail            TEXT,
    PRIMARY KEY (run_id, id)
) STRICT, WITHOUT ROWID;
INSERT INTO steps_clustered (run_id, id, seq, node_id, attempt, status, started_at,
                             duration_us, input_hash, output_hash, error, fuel_consumed,
                             memory_peak_bytes, detail)
    SELECT run_id, id, seq, node_id, attempt, status, started_at, duration_us, input_hash,
           output_hash, error, fuel_consumed, memory_peak_bytes, detail
    FROM steps;
DROP TABLE steps;
ALTER TABLE steps_clustered RENAME TO steps;
