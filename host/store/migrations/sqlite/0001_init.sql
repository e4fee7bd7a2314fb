-- Skillhost store, schema version 1 (SQLite).
--
-- The Postgres twin (migrations/postgres/0001_init.sql) must define the same
-- tables, columns and constraints. Conventions, both backends: JSON is TEXT;
-- times are Unix milliseconds (INTEGER); durations are microseconds; sizes,
-- counters and sequence numbers are INTEGER (i64). The migration runner
-- records schema_version in skillhost_meta after each file.

-- Marks the database as ours; a database with tables but without this marker
-- is never written to.
CREATE TABLE skillhost_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;

INSERT INTO skillhost_meta (key, value) VALUES ('application', 'skillhost');

CREATE TABLE runs (
    id               TEXT PRIMARY KEY,
    scenario_name    TEXT NOT NULL,
    scenario_path    TEXT NOT NULL,
    scenario_digest  TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN
                         ('queued', 'running', 'waiting', 'completed', 'failed', 'cancelled')),
    input            TEXT NOT NULL,
    result           TEXT,
    error            TEXT,
    -- The node the run executes next (or the one that failed).
    current_node     TEXT,
    -- Sequence number of the last checkpoint; the exactly-once guard.
    last_seq         INTEGER NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_expires_at INTEGER,
    -- Bumped when the lease changes hands; fences a runner that lost it.
    lease_generation INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
) STRICT;

CREATE INDEX runs_by_created ON runs (created_at DESC, id DESC);
CREATE INDEX runs_by_status ON runs (status, created_at DESC, id DESC);

-- Append-only. Every row stores the node's changes; seq 0 and every 16th
-- also store the full state. state_hash is the hash of the full state at
-- this seq, checked whenever a state is rebuilt.
CREATE TABLE checkpoints (
    run_id      TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL CHECK (seq >= 0),
    node_id     TEXT NOT NULL,
    next_nodes  TEXT NOT NULL,
    is_snapshot INTEGER NOT NULL CHECK (is_snapshot IN (0, 1)),
    state       TEXT,
    changes     TEXT NOT NULL,
    state_hash  TEXT NOT NULL,
    visits      TEXT NOT NULL,
    bytes       INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (run_id, seq),
    CHECK (is_snapshot = 0 OR state IS NOT NULL)
) STRICT, WITHOUT ROWID;

-- The exactly-once guard, in the schema so no writer can get around it: a
-- checkpoint after 0 must be the run's last_seq + 1, and only while the run
-- is active. (The store also moves last_seq in the same transaction.)
CREATE TRIGGER checkpoints_in_sequence BEFORE INSERT ON checkpoints
WHEN NEW.seq > 0 AND NOT EXISTS (
    SELECT 1 FROM runs
    WHERE id = NEW.run_id AND last_seq = NEW.seq - 1
      AND status IN ('queued', 'running', 'waiting'))
BEGIN
    SELECT RAISE(ABORT, 'skillhost: checkpoint out of sequence');
END;

-- One row per node attempt; seq is the checkpoint a successful attempt made.
CREATE TABLE steps (
    id                INTEGER PRIMARY KEY,
    run_id            TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq               INTEGER,
    node_id           TEXT NOT NULL,
    attempt           INTEGER NOT NULL,
    status            TEXT NOT NULL,
    started_at        INTEGER NOT NULL,
    duration_us       INTEGER NOT NULL,
    input_hash        TEXT,
    output_hash       TEXT,
    error             TEXT,
    fuel_consumed     INTEGER,
    memory_peak_bytes INTEGER,
    detail            TEXT
) STRICT;

CREATE INDEX steps_by_run ON steps (run_id, id);

-- Finished items of map nodes, written before the node commits.
CREATE TABLE map_items (
    run_id        TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    node_id       TEXT NOT NULL,
    visit         INTEGER NOT NULL,
    item_index    INTEGER NOT NULL,
    output        TEXT NOT NULL,
    output_hash   TEXT NOT NULL,
    duration_us   INTEGER NOT NULL,
    fuel_consumed INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (run_id, node_id, visit, item_index)
) STRICT, WITHOUT ROWID;

-- Recorded host calls, for replay.
CREATE TABLE journal (
    id         INTEGER PRIMARY KEY,
    run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    node_id    TEXT NOT NULL,
    kind       TEXT NOT NULL,
    request    TEXT NOT NULL,
    response   TEXT NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

CREATE INDEX journal_by_run ON journal (run_id, seq, id);

-- Content-addressed bytes, shared by every artifact with the same digest.
CREATE TABLE blobs (
    digest     TEXT PRIMARY KEY,
    size       INTEGER NOT NULL,
    bytes      BLOB NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE artifacts (
    run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    digest     TEXT NOT NULL REFERENCES blobs (digest),
    media_type TEXT NOT NULL,
    size       INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, name)
) STRICT, WITHOUT ROWID;

CREATE INDEX artifacts_by_digest ON artifacts (digest);
