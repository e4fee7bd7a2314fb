-- Schema version 11 (Postgres): the `kv` capability's data, kept in the
-- store so that it outlives the process that wrote it and every worker on
-- the store shares it. The twin of migrations/sqlite/0011_kv.sql. Every
-- statement here may run again on a database that has it already.

-- One row per key of a namespace (the name a node's `kv` grant gives).
-- Keys are at most 1024 bytes and values at most 1 MiB (the capability
-- checks both before a write reaches the store). COLLATE "C": keys sort and
-- compare by their bytes, as on SQLite, so a prefix listing is the same on
-- both backends.
CREATE TABLE IF NOT EXISTS kv (
    namespace  TEXT NOT NULL,
    key        TEXT COLLATE "C" NOT NULL,
    value      BYTEA NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (namespace, key)
);
