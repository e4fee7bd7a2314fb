-- Schema version 13 (Postgres): nothing changes.
-- The twin of migrations/sqlite/0013_steps_by_run.sql, which clusters
-- SQLite's steps by run so a node's commit writes one page fewer. On
-- Postgres a commit is one statement whose heap and index writes are
-- logged in the WAL record by record, not page by page, so there is
-- nothing to gain; the version stays in step with SQLite's.
SELECT 1;
