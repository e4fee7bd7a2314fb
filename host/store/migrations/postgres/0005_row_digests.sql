-- Schema version 5 (Postgres): digests of what a resume trusts. The twin of
-- migrations/sqlite/0005_row_digests.sql, which says what they cover and how
-- runs created before this version are treated. Every statement here may
-- run again on a database that has it already.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS digest TEXT;
ALTER TABLE checkpoints ADD COLUMN IF NOT EXISTS digest TEXT;
UPDATE runs SET digest = 'legacy' WHERE digest IS NULL;
