//! Postgres: a run starting to wait, an answer, a cancel. Each is one
//! transaction (`tx.rs`) that locks the run's row (`FOR UPDATE`) and
//! executes the verdict `store::wait` gives on it as it is then. Times are
//! this host's clock, as for every other row's `updated_at`; a wait's
//! deadline is compared with the database's clock where workers claim
//! timed-out waits.

use std::sync::LazyLock;

use super::pooler::Conn;

use super::PgStore;
use crate::codec::{Codec, now_ms};
use crate::error::StoreError;
use crate::prepared::{PreparedAnswer, PreparedCancel, PreparedWait};
use crate::refusal::{self, Decision};
use crate::wait::{self, CancelVerdict, POSITION_COLUMNS, RunPosition, WaitVerdict};

static POSITION: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {POSITION_COLUMNS} FROM runs WHERE id = $1 FOR UPDATE"));
static READ_POSITION: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {POSITION_COLUMNS} FROM runs WHERE id = $1"));

type PositionRow = (
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
    /// The run's row, locked until the transaction ends.
    async fn position(
        &self,
        conn: &mut Conn,
        run_id: &str,
        action: &str,
    ) -> Result<RunPosition, StoreError> {
        let row = sqlx::query_as::<_, PositionRow>(POSITION.as_str())
            .bind(run_id)
            .fetch_optional(conn)
            .await
            .map_err(|e| self.error(e, action))?
            .ok_or_else(|| refusal::run_not_found(&self.db, run_id))?;
        Ok(position(row))
    }

    /// The run's row as it is now, unlocked (None: no such run).
    pub(super) async fn read_position<'e>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
        run_id: &str,
        action: &str,
    ) -> Result<Option<RunPosition>, StoreError> {
        let row = sqlx::query_as::<_, PositionRow>(READ_POSITION.as_str())
            .bind(run_id)
            .fetch_optional(executor)
            .await
            .map_err(|e| self.error(e, action))?;
        Ok(row.map(position))
    }

    pub async fn wait_run(&self, p: &PreparedWait<'_>) -> Result<Option<i64>, StoreError> {
        let run_id = p.wait.run_id.as_str();
        let action = &p.action();
        // Safe to repeat: a wait already there is kept, and the run is
        // waiting either way.
        self.retrying(|_| async move {
            self.transaction(action, async |conn| {
                let now = now_ms();
                let position = self.position(conn, run_id, action).await?;
                if let WaitVerdict::Already(deadline) =
                    position.wait(&self.db, run_id, p.seq, p.fence)?
                {
                    return Ok(Decision::Leave(deadline));
                }
                sqlx::query(
                    "INSERT INTO waits (run_id, seq, node_id, prompt, answer_schema, \
                         created_at, deadline) VALUES ($1, $2, $3, $4, $5, $6, $6 + $7) \
                     ON CONFLICT (run_id, seq) DO NOTHING",
                )
                .bind(run_id)
                .bind(p.seq)
                .bind(&p.wait.node_id)
                .bind(&p.wait.prompt)
                .bind(&p.answer_schema)
                .bind(now)
                .bind(p.timeout_ms)
                .execute(&mut *conn)
                .await
                .map_err(|e| self.error(e, action))?;
                let deadline: Option<i64> = sqlx::query_scalar(
                    "UPDATE runs SET status = 'waiting', lease_owner = NULL, \
                         lease_expires_at = NULL, heartbeat_at = NULL, updated_at = $3, \
                         wait_deadline = (SELECT deadline FROM waits \
                             WHERE run_id = $1 AND seq = $2) \
                     WHERE id = $1 RETURNING wait_deadline",
                )
                .bind(run_id)
                .bind(p.seq)
                .bind(now)
                .fetch_one(&mut *conn)
                .await
                .map_err(|e| self.error(e, action))?;
                Ok(Decision::Commit(deadline))
            })
            .await
        })
        .await
    }

    pub async fn answer_wait(&self, p: &PreparedAnswer<'_>) -> Result<(), StoreError> {
        let action = &p.action();
        // Retried only while certainly unwritten (no connection, a standby
        // mid-failover): after a broken connection the answer may be
        // recorded, and a second attempt would be refused as answered twice.
        self.retrying_while_unwritten(|| async move {
            self.transaction(action, async |conn| {
                let position = self.position(conn, p.run_id, action).await?;
                position.answer(&self.db, p.run_id, p.seq, p.now)?;
                let answered = sqlx::query(
                    "UPDATE waits SET answer = $3, answered_by = $4, answered_at = $5 \
                     WHERE run_id = $1 AND seq = $2 AND answer IS NULL",
                )
                .bind(p.run_id)
                .bind(p.seq)
                .bind(&p.answer)
                .bind(p.by)
                .bind(p.now)
                .execute(&mut *conn)
                .await
                .map_err(|e| self.error(e, action))?
                .rows_affected();
                wait::answered(&self.db, p.run_id, answered)?;
                sqlx::query(
                    "UPDATE runs SET status = 'queued', wait_deadline = NULL, updated_at = $2 \
                     WHERE id = $1",
                )
                .bind(p.run_id)
                .bind(p.now)
                .execute(&mut *conn)
                .await
                .map_err(|e| self.error(e, action))?;
                Ok(Decision::Commit(()))
            })
            .await
        })
        .await
    }

    pub async fn cancel_run(
        &self,
        p: &PreparedCancel<'_>,
    ) -> Result<crate::wait::Cancelled, StoreError> {
        let action = &p.action();
        // Safe to repeat: a cancelled run is refused as finished, which the
        // caller sees only if the first attempt did not commit.
        self.retrying(|_| async move {
            self.transaction(action, async |conn| {
                let now = now_ms();
                let position = self.position(conn, p.run_id, action).await?;
                let done = match position.cancel(&self.db, p.run_id)? {
                    CancelVerdict::Now(status) => {
                        sqlx::query(
                            "UPDATE runs SET status = 'cancelled', error = $2, \
                                 lease_owner = NULL, lease_expires_at = NULL, \
                                 heartbeat_at = NULL, wait_deadline = NULL, updated_at = $3 \
                             WHERE id = $1",
                        )
                        .bind(p.run_id)
                        .bind(&p.error)
                        .bind(now)
                        .execute(&mut *conn)
                        .await
                        .map_err(|e| self.error(e, action))?;
                        crate::wait::Cancelled::Now(status)
                    }
                    CancelVerdict::Request => {
                        sqlx::query(
                            "UPDATE runs SET \
                                 cancel_requested_at = COALESCE(cancel_requested_at, $2), \
                                 cancel_requested_by = COALESCE(cancel_requested_by, $3) \
                             WHERE id = $1",
                        )
                        .bind(p.run_id)
                        .bind(now)
                        .bind(p.by)
                        .execute(&mut *conn)
                        .await
                        .map_err(|e| self.error(e, action))?;
                        crate::wait::Cancelled::Requested
                    }
                };
                Ok(Decision::Commit(done))
            })
            .await
        })
        .await
    }
}

fn position(row: PositionRow) -> RunPosition {
    let (status, last_seq, wait_deadline, cancel_at, cancel_by, owner, generation, expires) = row;
    RunPosition {
        status,
        last_seq,
        wait_deadline,
        cancel_requested_at: cancel_at,
        cancel_requested_by: cancel_by,
        lease_owner: owner,
        lease_generation: generation,
        lease_expires_at: expires,
    }
}
