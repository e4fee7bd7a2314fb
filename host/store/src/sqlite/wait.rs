//! SQLite: a run starting to wait, an answer, a cancel. Each is one
//! transaction on the writer connection, executing the verdict
//! `store::wait` gives on the run's row as it is under the write lock.

use std::sync::LazyLock;

use rusqlite::{OptionalExtension, Transaction, params};

use super::SqliteStore;
use crate::codec::ACTIVE;
use crate::error::StoreError;
use crate::prepared::{PreparedAnswer, PreparedCancel, PreparedWait};
use crate::refusal::{self, Decision};
use crate::wait::{self, CancelVerdict, Cancelled, POSITION_COLUMNS, RunPosition, WaitVerdict};

static POSITION: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {POSITION_COLUMNS} FROM runs WHERE id = ?1"));

impl SqliteStore {
    /// The run's row as a write's verdicts read it (`store::wait`).
    pub(super) fn position(
        &self,
        tx: &Transaction<'_>,
        run_id: &str,
        action: &str,
    ) -> Result<RunPosition, StoreError> {
        tx.prepare_cached(POSITION.as_str())
            .and_then(|mut statement| {
                statement
                    .query_row(params![run_id], |row| {
                        Ok(RunPosition {
                            status: row.get(0)?,
                            last_seq: row.get(1)?,
                            wait_deadline: row.get(2)?,
                            cancel_requested_at: row.get(3)?,
                            cancel_requested_by: row.get(4)?,
                            lease_owner: row.get(5)?,
                            lease_generation: row.get(6)?,
                            lease_expires_at: row.get(7)?,
                        })
                    })
                    .optional()
            })
            .map_err(|e| self.sq(e, action))?
            .ok_or_else(|| refusal::run_not_found(&self.db, run_id))
    }

    pub async fn wait_run(&self, p: &PreparedWait<'_>) -> Result<Option<i64>, StoreError> {
        let run_id = p.wait.run_id.as_str();
        let action = p.action();
        let now = crate::codec::now_ms();
        self.transaction(&action, |tx| {
            let position = self.position(tx, run_id, &action)?;
            if let WaitVerdict::Already(deadline) =
                position.wait(&self.db, run_id, p.seq, p.fence)?
            {
                return Ok(Decision::Leave(deadline));
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
                    p.seq,
                    p.wait.node_id,
                    p.wait.prompt,
                    p.answer_schema,
                    now,
                    p.timeout_ms
                ])
            })
            .map_err(|e| self.sq(e, &action))?;
            tx.prepare_cached(&format!(
                "UPDATE runs SET status = 'waiting', lease_owner = NULL, \
                     lease_expires_at = NULL, heartbeat_at = NULL, updated_at = ?3, \
                     wait_deadline = (SELECT deadline FROM waits WHERE run_id = ?1 AND seq = ?2) \
                 WHERE id = ?1 AND status IN {ACTIVE} RETURNING wait_deadline"
            ))
            .and_then(|mut s| s.query_row(params![run_id, p.seq, now], |row| row.get(0)))
            .map(Decision::Commit)
            .map_err(|e| self.sq(e, &action))
        })
        .await
    }

    pub async fn answer_wait(&self, p: &PreparedAnswer<'_>) -> Result<(), StoreError> {
        let action = p.action();
        self.transaction(&action, |tx| {
            let position = self.position(tx, p.run_id, &action)?;
            position.answer(&self.db, p.run_id, p.seq, p.now)?;
            let answered = tx
                .prepare_cached(
                    "UPDATE waits SET answer = ?3, answered_by = ?4, answered_at = ?5 \
                     WHERE run_id = ?1 AND seq = ?2 AND answer IS NULL",
                )
                .and_then(|mut s| s.execute(params![p.run_id, p.seq, p.answer, p.by, p.now]))
                .map_err(|e| self.sq(e, &action))?;
            wait::answered(&self.db, p.run_id, answered as u64)?;
            tx.prepare_cached(
                "UPDATE runs SET status = 'queued', wait_deadline = NULL, updated_at = ?2 \
                 WHERE id = ?1",
            )
            .and_then(|mut s| s.execute(params![p.run_id, p.now]))
            .map_err(|e| self.sq(e, &action))?;
            Ok(Decision::Commit(()))
        })
        .await
    }

    pub async fn cancel_run(&self, p: &PreparedCancel<'_>) -> Result<Cancelled, StoreError> {
        let action = p.action();
        let now = crate::codec::now_ms();
        self.transaction(&action, |tx| {
            let position = self.position(tx, p.run_id, &action)?;
            let done = match position.cancel(&self.db, p.run_id)? {
                CancelVerdict::Now(status) => {
                    tx.prepare_cached(
                        "UPDATE runs SET status = 'cancelled', error = ?2, \
                             lease_owner = NULL, lease_expires_at = NULL, \
                             heartbeat_at = NULL, wait_deadline = NULL, updated_at = ?3 \
                         WHERE id = ?1",
                    )
                    .and_then(|mut s| s.execute(params![p.run_id, p.error, now]))
                    .map_err(|e| self.sq(e, &action))?;
                    Cancelled::Now(status)
                }
                CancelVerdict::Request => {
                    tx.prepare_cached(
                        "UPDATE runs SET \
                             cancel_requested_at = COALESCE(cancel_requested_at, ?2), \
                             cancel_requested_by = COALESCE(cancel_requested_by, ?3) \
                         WHERE id = ?1",
                    )
                    .and_then(|mut s| s.execute(params![p.run_id, now, p.by]))
                    .map_err(|e| self.sq(e, &action))?;
                    Cancelled::Requested
                }
            };
            Ok(Decision::Commit(done))
        })
        .await
    }
}
