-- Schema version 11 (SQLite): the `kv` capability's data, kept in the store
-- so that it outlives the process that wrote it and every worker on the
-- store shares it. The twin of migrations/postgres/0011_kv.sql.

-- One row per key of a namespace (the name a node's `kv` grant gives).
-- Keys are at most 1024 bytes and values at most 1 MiB (the capability
-- checks both before a write reaches the store).
CREATE TABLE kv (
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      BLOB NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (namespace, key)
);
