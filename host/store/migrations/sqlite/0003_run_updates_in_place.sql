-- Schema version 3 (SQLite): the twin of
-- migrations/postgres/0003_run_updates_in_place.sql, which drops the index
-- on runs.updated_at so that Postgres can update a run's row in place on
-- every checkpoint. SQLite drops it too, so both backends keep one schema;
-- pruning finds finished runs through runs_by_status on both.
DROP INDEX runs_by_updated;
