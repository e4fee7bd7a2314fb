-- Schema version 7 (Postgres): the node cache. The twin of
-- migrations/sqlite/0007_node_cache.sql, which says what a row holds and
-- how pruning deletes rows. Every statement here may run again on a
-- database that has it already.
CREATE TABLE IF NOT EXISTS node_cache (
    key         TEXT PRIMARY KEY,
    output      TEXT NOT NULL,
    output_hash TEXT NOT NULL,
    run_id      TEXT NOT NULL,
    seq         BIGINT NOT NULL,
    node_id     TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    digest      TEXT NOT NULL
);

CREATE INDEX IF NOT EXISTS node_cache_by_run ON node_cache (run_id);
