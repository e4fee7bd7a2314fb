-- Schema version 12 (Postgres): kv namespaces scoped, and what each holds.
-- The twin of migrations/sqlite/0012_kv_scopes.sql. Every statement here
-- may run again on a database that has it already.

-- A namespace is a scope and a name: `scenario:NAME` for a scenario's own
-- namespaces, `shared` for those shared on purpose, '' for namespaces
-- outside any scenario. Every row written before is unscoped (''); the
-- first scenario that then uses a namespace of its name takes its rows
-- (`store/src/kv.rs`).
ALTER TABLE kv ADD COLUMN IF NOT EXISTS scope TEXT NOT NULL DEFAULT '';
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_catalog.pg_constraint
        WHERE conrelid = 'kv'::regclass AND contype = 'p' AND cardinality(conkey) = 3
    ) THEN
        ALTER TABLE kv DROP CONSTRAINT IF EXISTS kv_pkey;
        ALTER TABLE kv ADD CONSTRAINT kv_pkey PRIMARY KEY (scope, namespace, key);
    END IF;
END
$$;

-- What each namespace holds, as its quota counts it: keys, and the bytes of
-- its keys (UTF-8) and values. Written in the same transaction as the rows.
CREATE TABLE IF NOT EXISTS kv_usage (
    scope     TEXT NOT NULL,
    namespace TEXT NOT NULL,
    keys      BIGINT NOT NULL,
    bytes     BIGINT NOT NULL,
    PRIMARY KEY (scope, namespace)
);
INSERT INTO kv_usage (scope, namespace, keys, bytes)
    SELECT scope, namespace, count(*), sum(octet_length(key) + length(value))
    FROM kv GROUP BY scope, namespace
ON CONFLICT (scope, namespace) DO NOTHING;
