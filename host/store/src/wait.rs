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

use crate::error::StoreError;
use crate::lease::{Lease, holds, lease_lost};
use crate::refusal;
use crate::run::RunStatus;

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

/// What a wait, an answer or a cancel reads of its run first, under the
/// run's lock (SQLite's write lock, Postgres's `FOR UPDATE`), and decides
/// from, and what a refused checkpoint reads to say why: the verdicts below
/// are the rules, written once for both backends.
#[derive(Debug, Clone)]
pub(crate) struct RunPosition {
    pub status: String,
    pub last_seq: i64,
    pub wait_deadline: Option<i64>,
    pub cancel_requested_at: Option<i64>,
    pub cancel_requested_by: Option<String>,
    pub lease_owner: Option<String>,
    pub lease_generation: i64,
    pub lease_expires_at: Option<i64>,
}

/// The columns [`RunPosition`] is read from, in its order.
pub(crate) const POSITION_COLUMNS: &str = "status, last_seq, wait_deadline, \
     cancel_requested_at, cancel_requested_by, lease_owner, lease_generation, lease_expires_at";

/// What a run starting to wait does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitVerdict {
    /// It waits there already (an earlier attempt committed and its answer
    /// was lost): nothing to write; its deadline.
    Already(Option<i64>),
    /// Record the wait and put the run in `waiting`.
    Write,
}

/// What a cancel does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CancelVerdict {
    /// The run is queued or waiting (this status): it ends now.
    Now(RunStatus),
    /// The run is running: record a request.
    Request,
}

impl RunPosition {
    /// Why checkpoint `seq` of run `run_id`, whose row is `run` (None: no
    /// such run), was not taken under `fence`: the lease was lost (before
    /// whatever else moved on since), a cancel was asked for, the run is
    /// finished, or the checkpoint is not the next in sequence.
    pub fn checkpoint_refused(
        run: Option<&RunPosition>,
        db: &str,
        run_id: &str,
        seq: i64,
        fence: Option<&Lease>,
    ) -> StoreError {
        let Some(run) = run else {
            return refusal::run_not_found(db, run_id);
        };
        if let Some(fence) = fence
            && !holds(fence, run.lease_owner.as_deref(), run.lease_generation)
        {
            return lease_lost(
                db,
                fence,
                run.lease_owner.as_deref(),
                run.lease_generation,
                run.lease_expires_at,
            );
        }
        if !refusal::is_finished(&run.status)
            && let Some(cancelled) = refusal::cancel_requested(
                db,
                run_id,
                (run.cancel_requested_at, run.cancel_requested_by.clone()),
            )
        {
            return cancelled;
        }
        refusal::not_next(db, run_id, seq, Some((run.status.as_str(), run.last_seq)))
    }

    /// Whether run `run_id` may wait at checkpoint `seq` under `fence`:
    /// it waits there already; or the lease was lost, a cancel was asked
    /// for, or the run finished or moved on (refused); or it may.
    pub fn wait(
        &self,
        db: &str,
        run_id: &str,
        seq: i64,
        fence: Option<&Lease>,
    ) -> Result<WaitVerdict, StoreError> {
        if self.status == RunStatus::Waiting.as_str() && self.last_seq == seq {
            return Ok(WaitVerdict::Already(self.wait_deadline));
        }
        if let Some(fence) = fence
            && !holds(fence, self.lease_owner.as_deref(), self.lease_generation)
        {
            return Err(lease_lost(
                db,
                fence,
                self.lease_owner.as_deref(),
                self.lease_generation,
                self.lease_expires_at,
            ));
        }
        if let Some(cancelled) = refusal::cancel_requested(
            db,
            run_id,
            (self.cancel_requested_at, self.cancel_requested_by.clone()),
        ) {
            return Err(cancelled);
        }
        if refusal::is_finished(&self.status) || self.last_seq != seq {
            return Err(refusal::not_next(
                db,
                run_id,
                format_args!("{seq} (to wait at)"),
                Some((self.status.as_str(), self.last_seq)),
            ));
        }
        Ok(WaitVerdict::Write)
    }

    /// Whether an answer for the wait at `seq` may be recorded at `now`:
    /// only while the run waits there and its deadline has not passed.
    pub fn answer(&self, db: &str, run_id: &str, seq: i64, now: i64) -> Result<(), StoreError> {
        let waiting = self.status == RunStatus::Waiting.as_str() && self.last_seq == seq;
        if !waiting || self.wait_deadline.is_some_and(|d| d <= now) {
            return Err(refusal::not_waiting(
                db,
                run_id,
                &self.status,
                self.wait_deadline,
            ));
        }
        Ok(())
    }

    /// What a cancel of the run does; a finished run is refused.
    pub fn cancel(&self, db: &str, run_id: &str) -> Result<CancelVerdict, StoreError> {
        let status: RunStatus = self.status.parse().map_err(|e| StoreError::Corrupt {
            db: db.to_owned(),
            what: format!("status of run `{run_id}`"),
            detail: format!("{e}"),
        })?;
        match status {
            RunStatus::Queued | RunStatus::Waiting => Ok(CancelVerdict::Now(status)),
            RunStatus::Running => Ok(CancelVerdict::Request),
            finished => Err(refusal::nothing_to_cancel(db, run_id, finished)),
        }
    }
}

/// Whether the update that records an answer found the wait unanswered
/// (`rows` updated): a second answer is refused.
pub(crate) fn answered(db: &str, run_id: &str, rows: u64) -> Result<(), StoreError> {
    if rows == 1 {
        Ok(())
    } else {
        Err(refusal::not_waiting(db, run_id, "answered", None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(status: &str, last_seq: i64) -> RunPosition {
        RunPosition {
            status: status.into(),
            last_seq,
            wait_deadline: None,
            cancel_requested_at: None,
            cancel_requested_by: None,
            lease_owner: Some("w1".into()),
            lease_generation: 2,
            lease_expires_at: Some(0),
        }
    }

    fn lease(owner: &str, generation: u64) -> Lease {
        Lease {
            run_id: "r".into(),
            owner: owner.into(),
            generation,
            expires_at_ms: 0,
        }
    }

    #[test]
    fn a_wait_is_refused_for_a_lost_lease_a_cancel_or_a_run_that_moved_on() {
        let held = lease("w1", 2);
        assert_eq!(
            at("running", 3).wait("db", "r", 3, Some(&held)).unwrap(),
            WaitVerdict::Write
        );
        let mut waiting = at("waiting", 3);
        waiting.wait_deadline = Some(9);
        // Already there (an earlier attempt committed): kept, whoever asks.
        assert_eq!(
            waiting.wait("db", "r", 3, Some(&lease("w0", 1))).unwrap(),
            WaitVerdict::Already(Some(9))
        );
        let lost = at("running", 3).wait("db", "r", 3, Some(&lease("w0", 1)));
        assert!(lost.unwrap_err().is_lease_lost());
        let mut cancelled = at("running", 3);
        cancelled.cancel_requested_at = Some(5);
        assert!(
            cancelled
                .wait("db", "r", 3, None)
                .unwrap_err()
                .is_cancel_requested()
        );
        assert!(
            at("running", 4)
                .wait("db", "r", 3, None)
                .unwrap_err()
                .is_conflict()
        );
        assert!(
            at("completed", 3)
                .wait("db", "r", 3, None)
                .unwrap_err()
                .is_conflict()
        );
    }

    #[test]
    fn an_answer_needs_the_run_waiting_there_before_its_deadline() {
        let mut waiting = at("waiting", 3);
        waiting.wait_deadline = Some(100);
        assert!(waiting.answer("db", "r", 3, 99).is_ok());
        let late = waiting.answer("db", "r", 3, 100).unwrap_err().to_string();
        assert!(late.contains("timed out"), "{late}");
        assert!(waiting.answer("db", "r", 2, 99).is_err());
        assert!(at("queued", 3).answer("db", "r", 3, 0).is_err());
        assert!(answered("db", "r", 1).is_ok());
        let twice = answered("db", "r", 0).unwrap_err().to_string();
        assert!(twice.contains("answered already"), "{twice}");
    }

    #[test]
    fn a_cancel_ends_queued_and_waiting_runs_and_requests_a_running_ones_end() {
        assert_eq!(
            at("queued", 0).cancel("db", "r").unwrap(),
            CancelVerdict::Now(RunStatus::Queued)
        );
        assert_eq!(
            at("waiting", 2).cancel("db", "r").unwrap(),
            CancelVerdict::Now(RunStatus::Waiting)
        );
        assert_eq!(
            at("running", 2).cancel("db", "r").unwrap(),
            CancelVerdict::Request
        );
        assert!(at("failed", 2).cancel("db", "r").unwrap_err().is_conflict());
        assert!(at("bogus", 2).cancel("db", "r").unwrap_err().is_corrupt());
    }

    #[test]
    fn a_refused_checkpoint_says_why_lease_first_then_cancel_then_sequence() {
        let refused = |run: Option<&RunPosition>, fence: Option<&Lease>| {
            RunPosition::checkpoint_refused(run, "db", "r", 4, fence)
        };
        assert!(matches!(
            refused(None, None),
            StoreError::RunNotFound { .. }
        ));
        let mut run = at("running", 3);
        run.cancel_requested_at = Some(5);
        assert!(refused(Some(&run), Some(&lease("w0", 1))).is_lease_lost());
        assert!(refused(Some(&run), Some(&lease("w1", 2))).is_cancel_requested());
        // A finished run's cancel request is not why.
        run.status = "cancelled".into();
        assert!(refused(Some(&run), None).is_conflict());
        let behind = refused(Some(&at("running", 7)), None).to_string();
        assert!(
            behind.contains("checkpoint 4 does not follow the last one (7)"),
            "{behind}"
        );
    }
}
