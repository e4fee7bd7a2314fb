-- Schema version 4 (SQLite): the twin of
-- migrations/postgres/0004_explicit_task_rows.sql, for what applies here: task
-- rows only for runs that have a task id (the exactly-once trigger and the
-- foreign keys stay; SQLite has one writer, and they cost it little).
-- A run without one is its own task, and `current_checkpoint` answers for it
-- from the run's last checkpoint, so the row every such run upserted at each
-- checkpoint is no longer written; the ones already written go.
DELETE FROM task_checkpoints
WHERE task_id = run_id
  AND run_id IN (SELECT id FROM runs WHERE task_id IS NULL);
