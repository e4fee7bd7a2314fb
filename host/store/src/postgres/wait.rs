//! Postgres: a run starting to wait, an answer, a cancel. Each is one
//! transaction that locks the run's row (`FOR UPDATE`) and decides from it
//! as it is then (the rules are `store::wait`'s). Times are this host's
//! clock, as for every other row's `updated_at`; a wait's deadline is
//! compared with the database's clock where workers claim timed-out waits.

use serde_json::Value;
use sqlx::{Postgres, Transaction};

use super::PgStore;
use crate::codec::{Codec, now_ms};
use crate::error::StoreError;
use crate::lease::{Lease, holds, lease_lost};
use crate::refusal;
use crate::run::RunStatus;
use crate::wait::{Cancelled, NewWait};

/// What a wait, answer or cancel reads of the run first: status, last seq,
/// wait deadline, cancel request (when, by whom), lease (holder,
/// generation, expiry).
type RunPosition = (
    String,
    i64,
    Option<i64>,
    Option<i64>,
    Option<String>,
    Option<String>,
    i64,
    Option<i64>,
);

impl PgStore {
    async fn position(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        run_id: &str,
        action: &str,
    ) -> Result<RunPosition, StoreError> {
        sqlx::query_as::<_, RunPosition>(
            "SELECT status, last_seq, wait_deadline, cancel_requested_at, cancel_requested_by, \
                 lease_owner, lease_generation, lease_expires_at \
             FROM runs WHERE id = $1 FOR UPDATE",
        )
        .bind(run_id)
        .fetch_optional(&mut **tx)
        .await
        .map_err(|e| self.error(e, action))?
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
        let action = &action;
        let seq = self.int(wait.seq, "checkpoint seq")?;
        let schema = wait.answer_schema.to_string();
        let schema = &schema;
        let timeout = wait
            .timeout_ms
            .map(|ms| self.int(ms, "wait timeout"))
            .transpose()?;
        // Safe to repeat: a wait already there is kept, and the run is
        // waiting either way.
        self.retrying(|_| async move {
            let now = now_ms();
            let mut tx = self.pool.begin().await.map_err(|e| self.error(e, action))?;
            let (status, last_seq, deadline, cancel_at, cancel_by, holder, generation, expires) =
                self.position(&mut tx, run_id, action).await?;
            if status == RunStatus::Waiting.as_str() && last_seq == seq {
                // An earlier attempt committed, and its answer was lost.
                release(tx).await;
                return Ok(deadline);
            }
            if let Some(fence) = fence
                && !holds(fence, holder.as_deref(), generation)
            {
                return refuse(
                    tx,
                    lease_lost(&self.db, fence, holder.as_deref(), generation, expires),
                )
                .await;
            }
            if let Some(cancelled) =
                refusal::cancel_requested(&self.db, run_id, (cancel_at, cancel_by))
            {
                return refuse(tx, cancelled).await;
            }
            if refusal::is_finished(&status) || last_seq != seq {
                let refused = refusal::not_next(
                    &self.db,
                    run_id,
                    format_args!("{seq} (to wait at)"),
                    Some((status.as_str(), last_seq)),
                );
                return refuse(tx, refused).await;
            }
            sqlx::query(
                "INSERT INTO waits (run_id, seq, node_id, prompt, answer_schema, created_at, \
                     deadline) VALUES ($1, $2, $3, $4, $5, $6, $6 + $7) \
                 ON CONFLICT (run_id, seq) DO NOTHING",
            )
            .bind(run_id)
            .bind(seq)
            .bind(&wait.node_id)
            .bind(&wait.prompt)
            .bind(schema)
            .bind(now)
            .bind(timeout)
            .execute(&mut *tx)
            .await
            .map_err(|e| self.error(e, action))?;
            let deadline: Option<i64> = sqlx::query_scalar(
                "UPDATE runs SET status = 'waiting', lease_owner = NULL, \
                     lease_expires_at = NULL, heartbeat_at = NULL, updated_at = $3, \
                     wait_deadline = (SELECT deadline FROM waits WHERE run_id = $1 AND seq = $2) \
                 WHERE id = $1 RETURNING wait_deadline",
            )
            .bind(run_id)
            .bind(seq)
            .bind(now)
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| self.error(e, action))?;
            tx.commit().await.map_err(|e| self.error(e, action))?;
            Ok(deadline)
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
        let action = &action;
        let seq = self.int(seq, "checkpoint seq")?;
        let answer = answer.to_string();
        let answer = &answer;
        // Not retried: after a broken connection the answer may be recorded,
        // and a second attempt would be refused as answered twice.
        let now = now_ms();
        let mut tx = self.pool.begin().await.map_err(|e| self.error(e, action))?;
        let (status, last_seq, deadline, ..) = self.position(&mut tx, run_id, action).await?;
        let waiting = status == RunStatus::Waiting.as_str() && last_seq == seq;
        if !waiting || deadline.is_some_and(|d| d <= now) {
            return refuse(
                tx,
                refusal::not_waiting(&self.db, run_id, &status, deadline),
            )
            .await;
        }
        let answered = sqlx::query(
            "UPDATE waits SET answer = $3, answered_by = $4, answered_at = $5 \
             WHERE run_id = $1 AND seq = $2 AND answer IS NULL",
        )
        .bind(run_id)
        .bind(seq)
        .bind(answer)
        .bind(by)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(|e| self.error(e, action))?
        .rows_affected();
        if answered != 1 {
            return refuse(tx, refusal::not_waiting(&self.db, run_id, "answered", None)).await;
        }
        sqlx::query(
            "UPDATE runs SET status = 'queued', wait_deadline = NULL, updated_at = $2 \
             WHERE id = $1",
        )
        .bind(run_id)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(|e| self.error(e, action))?;
        tx.commit().await.map_err(|e| self.error(e, action))
    }

    pub async fn cancel_run(
        &self,
        run_id: &str,
        by: &str,
        error: &Value,
    ) -> Result<Cancelled, StoreError> {
        let action = format!("cancelling run `{run_id}`");
        let action = &action;
        let error = error.to_string();
        let error = &error;
        // Safe to repeat: a cancelled run is refused as finished, which the
        // caller sees only if the first attempt did not commit.
        self.retrying(|_| async move {
            let now = now_ms();
            let mut tx = self.pool.begin().await.map_err(|e| self.error(e, action))?;
            let (status, ..) = self.position(&mut tx, run_id, action).await?;
            let status: RunStatus = status
                .parse()
                .map_err(|e| self.corrupt(format_args!("status of run `{run_id}`"), e))?;
            let done = match status {
                RunStatus::Queued | RunStatus::Waiting => {
                    sqlx::query(
                        "UPDATE runs SET status = 'cancelled', error = $2, lease_owner = NULL, \
                             lease_expires_at = NULL, heartbeat_at = NULL, \
                             wait_deadline = NULL, updated_at = $3 \
                         WHERE id = $1",
                    )
                    .bind(run_id)
                    .bind(error)
                    .bind(now)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| self.error(e, action))?;
                    Cancelled::Now(status)
                }
                RunStatus::Running => {
                    sqlx::query(
                        "UPDATE runs SET \
                             cancel_requested_at = COALESCE(cancel_requested_at, $2), \
                             cancel_requested_by = COALESCE(cancel_requested_by, $3) \
                         WHERE id = $1",
                    )
                    .bind(run_id)
                    .bind(now)
                    .bind(by)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| self.error(e, action))?;
                    Cancelled::Requested
                }
                finished => {
                    return refuse(tx, refusal::nothing_to_cancel(&self.db, run_id, finished))
                        .await;
                }
            };
            tx.commit().await.map_err(|e| self.error(e, action))?;
            Ok(done)
        })
        .await
    }
}

/// Ends a transaction that refuses what it was asked, before the refusal is
/// returned. Dropping it would roll it back only when its connection is next
/// used: until then the run's row stays locked (`position` reads it `FOR
/// UPDATE`), and a claim, which skips locked rows, would pass over a run it
/// may take.
async fn refuse<T>(tx: Transaction<'_, Postgres>, error: StoreError) -> Result<T, StoreError> {
    release(tx).await;
    Err(error)
}

/// Rolls back a transaction that wrote nothing, releasing its locks now.
async fn release(tx: Transaction<'_, Postgres>) {
    // A failed rollback leaves nothing to undo: the connection is closed
    // and the server ends its transaction.
    let _ = tx.rollback().await;
}
