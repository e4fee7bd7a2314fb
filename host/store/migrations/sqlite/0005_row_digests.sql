-- Schema version 5 (SQLite): digests of what a resume trusts. The twin of
-- migrations/postgres/0005_row_digests.sql.
--
-- runs.digest pins a run's input, id and scenario (name, path, digest);
-- checkpoints.digest pins a checkpoint's next nodes, visit counts, changes,
-- and its run, seq, node and state hash (the state hash pins the state).
-- Both are written by the store with every run and checkpoint and checked
-- whenever one is read back (`checkpoint.rs`). Runs that exist already are
-- marked `legacy`: their rows written before this version have no digest
-- and are accepted on their state hash alone, and their checkpoints from
-- the next one on carry digests. A run of any other kind without a digest,
-- or a checkpoint of one without a digest, is refused as corrupt.
ALTER TABLE runs ADD COLUMN digest TEXT;
ALTER TABLE checkpoints ADD COLUMN digest TEXT;
UPDATE runs SET digest = 'legacy';
