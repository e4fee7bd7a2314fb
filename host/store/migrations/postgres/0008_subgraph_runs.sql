-- Schema version 8 (Postgres): child runs. The twin of
-- migrations/sqlite/0008_subgraph_runs.sql, which says what the columns
-- hold. Every statement here may run again on a database that has it
-- already.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS parent_run_id TEXT
    GENERATED ALWAYS AS (CAST(provenance AS jsonb) -> 'parent' ->> 'run_id') STORED;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS parent_node TEXT
    GENERATED ALWAYS AS (CAST(provenance AS jsonb) -> 'parent' ->> 'node') STORED;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS parent_visit BIGINT
    GENERATED ALWAYS AS (CAST(CAST(provenance AS jsonb) -> 'parent' ->> 'visit' AS BIGINT)) STORED;

CREATE INDEX IF NOT EXISTS runs_by_parent ON runs (parent_run_id, parent_node, parent_visit)
    WHERE parent_run_id IS NOT NULL;
