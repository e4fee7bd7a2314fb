-- Schema version 10 (Postgres): runs that wait for a person, and cancelling
-- runs. The twin of migrations/sqlite/0010_approvals_cancel.sql. Every
-- statement here may run again on a database that has it already.

-- A waiting run's deadline (Unix ms; NULL: it waits for ever, or it is not
-- waiting): workers claim a waiting run once it passed, so that its
-- approval node takes its `on_timeout` route.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS wait_deadline BIGINT;
-- A cancel asked for while the run was running: the checkpoint statements
-- refuse its next checkpoint (one more condition on the row they update
-- anyway) and the run ends as cancelled. Not indexed, so a checkpoint's
-- update of the run's row stays in place (see 0003).
ALTER TABLE runs ADD COLUMN IF NOT EXISTS cancel_requested_at BIGINT;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS cancel_requested_by TEXT;

-- What workers scan for waits that timed out.
CREATE INDEX IF NOT EXISTS runs_wait_due ON runs (wait_deadline) WHERE status = 'waiting';

-- One row per wait of a run: the checkpoint (seq) the run stands at when it
-- reached the approval node, the prompt and the answer's JSON Schema as they
-- were shown, its deadline, and once answered, the answer with who gave it
-- and when. Written in the transaction that puts the run in `waiting`;
-- answered in the one that queues it again.
CREATE TABLE IF NOT EXISTS waits (
    run_id        TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq           BIGINT NOT NULL,
    node_id       TEXT NOT NULL,
    prompt        TEXT NOT NULL,
    answer_schema TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    deadline      BIGINT,
    answer        TEXT,
    answered_by   TEXT,
    answered_at   BIGINT,
    PRIMARY KEY (run_id, seq)
);
