-- Schema version 4 (Postgres): a lighter checkpoint commit. The twin of
-- migrations/sqlite/0004_explicit_task_rows.sql.
--
-- The exactly-once guard moves into the commit statements. Every write of a
-- checkpoint after 0 (the store's checkpoint statement and its group-commit
-- form) moves the run's row (which locks it) and inserts the checkpoint from
-- the moved row, and only where last_seq = seq - 1, the run is active and
-- the lease fence holds; a commit that does not match writes nothing. Checkpoint 0 is inserted with its
-- run, in the statement that creates the run (a duplicate run id is refused
-- by runs_pkey). The per-row trigger checked the same thing again; it and
-- the foreign keys below were about a quarter of the server's CPU per node
-- step (`host bench postgres`: about 375 µs before, 290 µs after). Every
-- statement here may run again on a database that has it already.
DROP TRIGGER IF EXISTS checkpoints_in_sequence ON checkpoints;
DROP FUNCTION IF EXISTS skillhost_checkpoints_in_sequence();

-- The history rows written with every checkpoint (checkpoints, steps, task
-- rows) are inserted from their run's moved (locked) row, so they cannot name a
-- missing run, and a foreign key check per row only repeated that lookup.
-- Pruning deletes them with their runs, in the same transaction. Map items,
-- journal entries and artifacts (off the per-step path) keep theirs.
ALTER TABLE checkpoints DROP CONSTRAINT IF EXISTS checkpoints_run_id_fkey;
ALTER TABLE steps DROP CONSTRAINT IF EXISTS steps_run_id_fkey;
ALTER TABLE task_checkpoints DROP CONSTRAINT IF EXISTS task_checkpoints_run_id_fkey;

-- Task rows are written only for runs with an explicit task id; a run
-- without one is still its own task, read from the run and its checkpoint
-- at last_seq. Its old row goes.
DELETE FROM task_checkpoints AS t USING runs AS r
WHERE r.id = t.run_id AND r.task_id IS NULL AND t.task_id = t.run_id;

-- Checkpoint 0 holds a run's whole initial state, and every 16th checkpoint
-- a snapshot; values that large are compressed. lz4 compresses a typical
-- state in about a tenth of pglz's time to the same size. Rows written
-- before keep pglz (both stay readable); a server built without lz4 keeps
-- pglz for everything.
DO $$
BEGIN
    ALTER TABLE checkpoints ALTER COLUMN state SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    NULL;
END
$$;
