-- Schema version 4 (SQLite): the twin of
-- migrations/postgres/0004_explicit_task_rows.sql. Placeholder on the
-- pg-throughput branch: the SQLite half of this version (task rows only for
-- runs with an explicit task id) is written separately and replaces it.
SELECT 1;
