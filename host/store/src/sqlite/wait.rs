//! SQLite: a run starting to wait, an answer, a cancel. Each is one
//! transaction on the writer connection, deciding from the run's row as it
//! is under the write lock (the rules are `store::wait`'s).

use rusqlite::{OptionalExtension, Transaction, params};
use serde_json::Value;

use super::SqliteStore;
use crate::codec::{ACTIVE, Codec, now_ms};
use crate::error::StoreError;
use crate::lease::Lease;
use crate::refusal;
use crate::run::RunStatus;
use crate::wait::{Cancelled, NewWait};

/// What a wait, answer or cancel reads of the run first: status, last seq,
/// wait deadline, cancel request (when, by whom).
type RunPosition = (String, i64, Option<i64>, Option<i64>, Option<String>);

impl SqliteStore {
    fn position(
        &self,
        tx: &Transaction<'_>,
        run_id: &str,
        action: &str,
    ) -> Result<RunPosition, StoreError> {
        tx.prepare_cached(
            "SELECT status, last_seq, wait_deadline, cancel_requested_at, cancel_requested_by \
             FROM runs WHERE id = ?1",
        )
        .and_then(|mut statement| {
            statement
                .query_row(params![run_id], |row| {
                    Ok((
                        row.get(0)?,
                        row.get(1)?,
                        row.get(2)?,
                        row.get(3)?,
                        row.get(4)?,
                    ))
                })
                .optional()
        })
        .map_err(|e| self.sq(e, action))?
        .ok_or_else(|| refusal::run_not_found(&self.db, run_id))
    }

    pub async fn wait_run(
        &self,
        wait: &NewWait,
        fence: Option<&Lease>,
    ) -> Result<Option<i64>, StoreError> {
        let run_id = wait.run_id.as_str();
        let action = format!(
            "putting run `{run_id}` in waiting at node `{}`",
            wait.node_id
        );
        let seq = self.int(wait.seq, "checkpoint seq")?;
        let schema = wait.answer_schema.to_string();
        let timeout = wait
            .timeout_ms
            .map(|ms| self.int(ms, "wait timeout"))
            .transpose()?;
        let now = now_ms();
        self.write_fenced(fence, &action, |tx| {
            let (status, last_seq, _, cancel_at, cancel_by) = self.position(tx, run_id, &action)?;
            if let Some(cancelled) =
                refusal::cancel_requested(&self.db, run_id, (cancel_at, cancel_by))
            {
                return Err(cancelled);
            }
            if refusal::is_finished(&status) || last_seq != seq {
                return Err(refusal::not_next(
                    &self.db,
                    run_id,
                    format_args!("{seq} (to wait at)"),
                    Some((&status, last_seq)),
                ));
            }
            // A wait reached again at the same checkpoint keeps its first
            // deadline.
            tx.prepare_cached(
                "INSERT INTO waits (run_id, seq, node_id, prompt, answer_schema, created_at, \
                     deadline) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6 + ?7) \
                 ON CONFLICT (run_id, seq) DO NOTHING",
            )
            .and_then(|mut s| {
                s.execute(params![
                    run_id,
                    seq,
                    wait.node_id,
                    wait.prompt,
                    schema,
                    now,
                    timeout
                ])
            })
            .map_err(|e| self.sq(e, &action))?;
            tx.prepare_cached(&format!(
                "UPDATE runs SET status = 'waiting', lease_owner = NULL, \
                     lease_expires_at = NULL, heartbeat_at = NULL, updated_at = ?3, \
                     wait_deadline = (SELECT deadline FROM waits WHERE run_id = ?1 AND seq = ?2) \
                 WHERE id = ?1 AND status IN {ACTIVE} RETURNING wait_deadline"
            ))
            .and_then(|mut s| s.query_row(params![run_id, seq, now], |row| row.get(0)))
            .map_err(|e| self.sq(e, &action))
        })
        .await
    }

    pub async fn answer_wait(
        &self,
        run_id: &str,
        seq: u64,
        answer: &Value,
        by: &str,
    ) -> Result<(), StoreError> {
        let action = format!("answering run `{run_id}`");
        let seq = self.int(seq, "checkpoint seq")?;
        let answer = answer.to_string();
        let now = now_ms();
        self.writer
            .write(&action, |tx| {
                let (status, last_seq, deadline, ..) = self.position(tx, run_id, &action)?;
                let waiting = status == RunStatus::Waiting.as_str() && last_seq == seq;
                if !waiting || deadline.is_some_and(|d| d <= now) {
                    return Err(refusal::not_waiting(&self.db, run_id, &status, deadline));
                }
                let answered = tx
                    .prepare_cached(
                        "UPDATE waits SET answer = ?3, answered_by = ?4, answered_at = ?5 \
                         WHERE run_id = ?1 AND seq = ?2 AND answer IS NULL",
                    )
                    .and_then(|mut s| s.execute(params![run_id, seq, answer, by, now]))
                    .map_err(|e| self.sq(e, &action))?;
                if answered != 1 {
                    return Err(refusal::not_waiting(&self.db, run_id, "answered", None));
                }
                tx.prepare_cached(
                    "UPDATE runs SET status = 'queued', wait_deadline = NULL, updated_at = ?2 \
                     WHERE id = ?1",
                )
                .and_then(|mut s| s.execute(params![run_id, now]))
                .map_err(|e| self.sq(e, &action))?;
                Ok(())
            })
            .await
    }

    pub async fn cancel_run(
        &self,
        run_id: &str,
        by: &str,
        error: &Value,
    ) -> Result<Cancelled, StoreError> {
        let action = format!("cancelling run `{run_id}`");
        let error = error.to_string();
        let now = now_ms();
        self.writer
            .write(&action, |tx| {
                let (status, ..) = self.position(tx, run_id, &action)?;
                let status: RunStatus = status
                    .parse()
                    .map_err(|e| self.corrupt(format_args!("status of run `{run_id}`"), e))?;
                match status {
                    RunStatus::Queued | RunStatus::Waiting => {
                        tx.prepare_cached(
                            "UPDATE runs SET status = 'cancelled', error = ?2, \
                                 lease_owner = NULL, lease_expires_at = NULL, \
                                 heartbeat_at = NULL, wait_deadline = NULL, updated_at = ?3 \
                             WHERE id = ?1",
                        )
                        .and_then(|mut s| s.execute(params![run_id, error, now]))
                        .map_err(|e| self.sq(e, &action))?;
                        Ok(Cancelled::Now(status))
                    }
                    RunStatus::Running => {
                        tx.prepare_cached(
                            "UPDATE runs SET \
                                 cancel_requested_at = COALESCE(cancel_requested_at, ?2), \
                                 cancel_requested_by = COALESCE(cancel_requested_by, ?3) \
                             WHERE id = ?1",
                        )
                        .and_then(|mut s| s.execute(params![run_id, now, by]))
                        .map_err(|e| self.sq(e, &action))?;
                        Ok(Cancelled::Requested)
                    }
                    finished => Err(refusal::nothing_to_cancel(&self.db, run_id, finished)),
                }
            })
            .await
    }
}
