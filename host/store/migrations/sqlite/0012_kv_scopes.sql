-- Schema version 12 (SQLite): kv namespaces scoped, and what each holds.
-- The twin of migrations/postgres/0012_kv_scopes.sql.

-- A namespace is a scope and a name: `scenario:NAME` for a scenario's own
-- namespaces, `shared` for those shared on purpose, '' for namespaces
-- outside any scenario. Every row written before is unscoped (''); the
-- first scenario that then uses a namespace of its name takes its rows
-- (`store/src/kv.rs`). SQLite cannot change a primary key in place, so
-- the table is rebuilt.
CREATE TABLE kv_scoped (
    scope      TEXT NOT NULL,
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      BLOB NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (scope, namespace, key)
);
INSERT INTO kv_scoped (scope, namespace, key, value, updated_at)
    SELECT '', namespace, key, value, updated_at FROM kv;
DROP TABLE kv;
ALTER TABLE kv_scoped RENAME TO kv;

-- What each namespace holds, as its quota counts it: keys, and the bytes of
-- its keys (UTF-8) and values. Written in the same transaction as the rows.
CREATE TABLE kv_usage (
    scope     TEXT NOT NULL,
    namespace TEXT NOT NULL,
    keys      INTEGER NOT NULL,
    bytes     INTEGER NOT NULL,
    PRIMARY KEY (scope, namespace)
);
INSERT INTO kv_usage (scope, namespace, keys, bytes)
    SELECT scope, namespace, count(*), sum(length(CAST(key AS BLOB)) + length(value))
    FROM kv GROUP BY scope, namespace;
