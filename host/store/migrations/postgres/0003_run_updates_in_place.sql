-- Schema version 3 (Postgres): let a checkpoint's update of its run's row be
-- a heap-only (HOT) update. The twin of
-- migrations/sqlite/0003_run_updates_in_place.sql.
--
-- Every checkpoint commit sets runs.last_seq, current_node and updated_at.
-- Postgres can update a row in place, without a new entry in each of the
-- table's indexes, only when no indexed column changes and the page has
-- room. runs_by_updated indexed updated_at, so every commit inserted into
-- all five of runs' indexes (about 4 of a commit's 13.5 WAL records).
-- Pruning, its only reader, finds finished runs through runs_by_status.
DROP INDEX runs_by_updated;
-- Room on each page for the new versions of its rows.
ALTER TABLE runs SET (fillfactor = 70);
