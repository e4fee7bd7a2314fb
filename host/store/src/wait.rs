//! Runs that wait for a person, and cancelling runs: what the store keeps
//! of a wait (its prompt, the JSON Schema of the answer, its deadline, and
//! once answered the answer, who gave it and when) and what a cancel did.
//!
//! The rules, the same on both backends (`sqlite/wait.rs`,
//! `postgres/wait.rs`): a run waits at its last checkpoint, holding no
//! lease; an answer is recorded only while the run waits at that checkpoint,
//! before its deadline, and only once, in the transaction that queues the
//! run again; a queued or waiting run is cancelled at once, a running one
//! gets a cancel request that refuses its next checkpoint. Must not: check
//! an answer against its schema (the engine does, before it is written).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What [`Store::wait_run`](crate::Store::wait_run) records.
#[derive(Debug, Clone, PartialEq)]
pub struct NewWait {
    pub run_id: String,
    /// The checkpoint the run waits at: its last one.
    pub seq: u64,
    /// The approval node.
    pub node_id: String,
    pub prompt: String,
    /// The JSON Schema an answer must fit.
    pub answer_schema: Value,
    /// How long the run waits before its `on_timeout` route; None: for ever.
    pub timeout_ms: Option<u64>,
}

/// A wait as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitRow {
    pub run_id: String,
    pub seq: u64,
    pub node_id: String,
    pub prompt: String,
    pub answer_schema: Value,
    pub created_at_ms: i64,
    pub deadline_ms: Option<i64>,
    pub answer: Option<Value>,
    pub answered_by: Option<String>,
    pub answered_at_ms: Option<i64>,
}

impl WaitRow {
    /// Whether the wait's deadline has passed at `now_ms` (never, without
    /// one).
    pub fn is_due(&self, now_ms: i64) -> bool {
        self.deadline_ms.is_some_and(|deadline| deadline <= now_ms)
    }
}

/// What [`Store::cancel_run`](crate::Store::cancel_run) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// The run was queued or waiting (the status it had): it is cancelled.
    Now(crate::RunStatus),
    /// The run is running: it ends as cancelled at its next node boundary.
    Requested,
}
