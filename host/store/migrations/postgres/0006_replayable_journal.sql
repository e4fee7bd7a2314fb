-- Schema version 6 (Postgres): a journal a replay can trust, and what code
-- a run used. The twin of migrations/sqlite/0006_replayable_journal.sql,
-- which says what each column holds and how rows written before this
-- version are treated. Every statement here may run again on a database
-- that has it already.
ALTER TABLE journal ADD COLUMN IF NOT EXISTS item_index BIGINT;
ALTER TABLE journal ADD COLUMN IF NOT EXISTS entry_index BIGINT;
ALTER TABLE journal ADD COLUMN IF NOT EXISTS request_digest TEXT;
ALTER TABLE journal ADD COLUMN IF NOT EXISTS digest TEXT;
UPDATE journal SET digest = 'legacy' WHERE digest IS NULL;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS provenance TEXT;
ALTER TABLE map_items ADD COLUMN IF NOT EXISTS attempt BIGINT;
ALTER TABLE map_items ADD COLUMN IF NOT EXISTS journal TEXT;
ALTER TABLE map_items ADD COLUMN IF NOT EXISTS digest TEXT;
