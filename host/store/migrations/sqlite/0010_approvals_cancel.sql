-- Schema version 10 (SQLite): runs that wait for a person, and cancelling
-- runs. The twin of migrations/postgres/0010_approvals_cancel.sql.

-- A waiting run's deadline (Unix ms; NULL: it waits for ever, or it is not
-- waiting): workers claim a waiting run once it passed, so that its
-- approval node takes its `on_timeout` route.
ALTER TABLE runs ADD COLUMN wait_deadline INTEGER;
-- A cancel asked for while the run was running: its next checkpoint is
-- refused and the run ends as cancelled (queued and waiting runs are
-- cancelled at once and never have these set).
ALTER TABLE runs ADD COLUMN cancel_requested_at INTEGER;
ALTER TABLE runs ADD COLUMN cancel_requested_by TEXT;

-- What workers scan for waits that timed out.
CREATE INDEX runs_wait_due ON runs (wait_deadline) WHERE status = 'waiting';

-- One row per wait of a run: the checkpoint (seq) the run stands at when it
-- reached the approval node, the prompt and the answer's JSON Schema as they
-- were shown, its deadline, and once answered, the answer with who gave it
-- and when. Written in the transaction that puts the run in `waiting`;
-- answered in the one that queues it again.
CREATE TABLE waits (
    run_id        TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq           INTEGER NOT NULL,
    node_id       TEXT NOT NULL,
    prompt        TEXT NOT NULL,
    answer_schema TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    deadline      INTEGER,
    answer        TEXT,
    answered_by   TEXT,
    answered_at   INTEGER,
    PRIMARY KEY (run_id, seq)
) STRICT, WITHOUT ROWID;

-- The exactly-once guard also refuses a checkpoint of a run whose cancel was
-- asked for: the cancel takes effect at the run's next node boundary, at no
-- cost to a commit (the trigger reads the run's row anyway).
DROP TRIGGER checkpoints_in_sequence;
CREATE TRIGGER checkpoints_in_sequence BEFORE INSERT ON checkpoints
WHEN NEW.seq > 0 AND NOT EXISTS (
    SELECT 1 FROM runs
    WHERE id = NEW.run_id AND last_seq = NEW.seq - 1
      AND status IN ('queued', 'running', 'waiting')
      AND cancel_requested_at IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'skillhost: checkpoint out of sequence');
END;
