-- Schema version 8 (SQLite): child runs. The twin of
-- migrations/postgres/0008_subgraph_runs.sql.
--
-- A subgraph node runs another scenario as a child run of its own. The
-- link to its parent (the parent's run id, the subgraph node and which
-- visit of it) is part of the child's provenance, written with the run and
-- pinned by the run's digest; these columns are computed from it, so the
-- link has one source and the write path is unchanged. `runs_by_parent`
-- finds a run's children: `host runs show`, and a resumed parent's
-- subgraph node finding the child it started.
ALTER TABLE runs ADD COLUMN parent_run_id TEXT
    GENERATED ALWAYS AS (json_extract(provenance, '$.parent.run_id')) VIRTUAL;
ALTER TABLE runs ADD COLUMN parent_node TEXT
    GENERATED ALWAYS AS (json_extract(provenance, '$.parent.node')) VIRTUAL;
ALTER TABLE runs ADD COLUMN parent_visit INTEGER
    GENERATED ALWAYS AS (json_extract(provenance, '$.parent.visit')) VIRTUAL;

CREATE INDEX runs_by_parent ON runs (parent_run_id, parent_node, parent_visit)
    WHERE parent_run_id IS NOT NULL;
