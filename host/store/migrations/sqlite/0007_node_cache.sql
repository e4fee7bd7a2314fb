-- Schema version 7 (SQLite): the node cache. The twin of
-- migrations/postgres/0007_node_cache.sql.
--
-- One row per cache key (the SHA-256 of a component's digest, a node's
-- grants and its canonical input; the engine computes it): the output a
-- call of that component with those grants and that input returned, its
-- hash, the run, seq and node whose commit wrote it (in the same
-- transaction as that step's checkpoint), when it was written and when it
-- expires, and a digest over all of it, checked when it is read
-- (`cache.rs`). A later commit of the same key replaces the row. Pruning
-- deletes the rows of the runs it deletes, and expired rows. No foreign
-- key: the rows outlive nothing but are deleted explicitly, as on Postgres.
CREATE TABLE node_cache (
    key         TEXT PRIMARY KEY,
    output      TEXT NOT NULL,
    output_hash TEXT NOT NULL,
    run_id      TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    node_id     TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    digest      TEXT NOT NULL
) STRICT;

CREATE INDEX node_cache_by_run ON node_cache (run_id);
