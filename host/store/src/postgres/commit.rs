//! Postgres: everything that writes a run's history. A checkpoint commit,
//! a new run and a finish are one statement each (one round trip, COMMIT
//! included) and are batched with concurrent ones (`group.rs`); failed
//! steps, map items and artifacts are guarded by the run's lease in the
//! same statement or transaction. Retried writes ([`PgStore::retrying`])
//! take "already there" as their own earlier success only after a broken
//! connection ([`StoreError::may_have_committed`]).
//!
//! Must not: read outside a write's own checks (`read.rs` does), or take
//! a lock beyond the run's row.

use std::fmt::Display;
use std::sync::LazyLock;

use super::pooler::Conn;
use sqlx::Postgres;
use sqlx::error::ErrorKind;
use sqlx::postgres::PgArguments;
use sqlx::query::QueryScalar;

use super::PgStore;
use super::group::Answer;
use super::queue::NOW_MS;
use crate::checkpoint::START_NODE;
use crate::codec::{ACTIVE, Codec, JournalBinds, StepBinds, now_ms};
use crate::error::StoreError;
use crate::lease::{Admission, Lease, RunOptions, holds, lease_lost, ttl_ms};
use crate::prepared::{
    CommitExtras, PreparedArtifact, PreparedCommit, PreparedFinish, PreparedMapItem, PreparedRun,
    PreparedStep,
};
use crate::read::Reads;
use crate::refusal::{self, Decision};
use crate::run::{NewRun, RunStatus};
use crate::wait::RunPosition;

/// The run ($1) while the lease fence ($2 owner, $3 generation; NULL: no
/// fence) holds, locked against a takeover (`FOR SHARE`) until COMMIT: the
/// guard of writes that belong to a run but are not checkpoints (failed
/// steps, map items, artifacts).
const FENCED_RUN: &str = "SELECT id FROM runs WHERE id = $1 \
     AND ($2::text IS NULL OR (lease_owner = $2 AND lease_generation = $3)) FOR SHARE";

/// A failed step, written only while [`FENCED_RUN`] holds; counts the run
/// rows found (0: missing or fenced out). Built once, not per call.
static FAILED_STEP_STATEMENT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH f AS ({FENCED_RUN}), \
         s AS (INSERT INTO steps (run_id, seq, node_id, attempt, status, started_at, \
             duration_us, input_hash, output_hash, error, fuel_consumed, memory_peak_bytes, \
             detail) SELECT f.id, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15 \
             FROM f), \
         u AS (UPDATE runs SET updated_at = $16 FROM f WHERE runs.id = f.id) \
         SELECT COUNT(*) FROM f"
    )
});

/// A map item, written only while [`FENCED_RUN`] holds (the first durable
/// output wins); counts the run rows found.
static MAP_ITEM_STATEMENT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH f AS ({FENCED_RUN}), \
         i AS (INSERT INTO map_items (run_id, node_id, visit, item_index, output, \
             output_hash, duration_us, fuel_consumed, created_at, attempt, journal, digest) \
             SELECT f.id, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14 FROM f \
             ON CONFLICT (run_id, node_id, visit, item_index) DO NOTHING) \
         SELECT COUNT(*) FROM f"
    )
});

/// Whether a run takes checkpoint `$seq` under the fence `$owner`,
/// `$generation` (owner NULL: no fence), its columns prefixed by `$runs`:
/// it is active, no cancel was asked for, `seq` is its `last_seq + 1` (the
/// exactly-once guard) and the fence holds. The one condition of
/// [`CHECKPOINT_STATEMENT`] and of `group.rs`'s batch; a macro, so that
/// both are built with `concat!`.
macro_rules! takes_checkpoint {
    ($runs:literal, $seq:literal, $owner:literal, $generation:literal) => {
        concat!(
            $runs,
            "last_seq = ",
            $seq,
            " - 1 AND ",
            $runs,
            "status IN ('queued', 'running', 'waiting') AND ",
            $runs,
            "cancel_requested_at IS NULL AND (",
            $owner,
            " IS NULL OR (",
            $runs,
            "lease_owner = ",
            $owner,
            " AND ",
            $runs,
            "lease_generation = ",
            $generation,
            "))"
        )
    };
}
pub(super) use takes_checkpoint;

/// [`CHECKPOINT_STATEMENT`] with `$set` the run row's status columns.
macro_rules! checkpoint_statement {
    ($set:literal) => {
        concat!(
            "\
    WITH r AS ( \
        UPDATE runs SET last_seq = $2, current_node = $3, updated_at = $4, ",
            $set,
            " \
        WHERE id = $1 AND ",
            takes_checkpoint!("", "$2", "$5::text", "$6"),
            " \
        RETURNING id, task_id), \
    c AS ( \
        INSERT INTO checkpoints (run_id, seq, node_id, next_nodes, is_snapshot, state, \
            changes, state_hash, visits, bytes, created_at, digest) \
        SELECT r.id, $2, $18, $19, $21, $22, $23, $20, $24, $25, $4, $26 FROM r), \
    s AS ( \
        INSERT INTO steps (run_id, seq, node_id, attempt, status, started_at, \
            duration_us, input_hash, output_hash, error, fuel_consumed, \
            memory_peak_bytes, detail) \
        SELECT r.id, $2, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17 FROM r), \
    t AS ( \
        INSERT INTO task_checkpoints (task_id, run_id, seq, node_id, next_nodes, \
            state_hash, updated_at) \
        SELECT r.task_id, r.id, $2, $18, $19, $20, $4 FROM r WHERE r.task_id IS NOT NULL \
        ON CONFLICT (task_id) DO UPDATE SET run_id = excluded.run_id, \
            seq = excluded.seq, node_id = excluded.node_id, \
            next_nodes = excluded.next_nodes, state_hash = excluded.state_hash, \
            updated_at = excluded.updated_at) \
    SELECT 1 FROM r"
        )
    };
}

/// One checkpoint commit as one statement. It moves the run's row
/// (`last_seq`, `current_node`) only if the run takes the checkpoint: the
/// lease fence holds ($5 owner, $6 generation; NULL: no fence), the run is
/// active and `seq` is its `last_seq + 1` (the exactly-once guard). The
/// UPDATE locks the row; a writer that waited for the lock re-checks the
/// conditions on the row as the holder left it (Postgres evaluates them
/// again on the newest version), so of two writers of the same seq the
/// second updates nothing. Everything else hangs off the moved row: the
/// checkpoint and the step row are inserted and, for a run with a task id,
/// the task row is upserted. A commit the run does not take writes nothing
/// at all and the statement returns no row; [`PgStore::why_not_written`]
/// then says why. (Updating first, rather than locking the row with
/// `SELECT … FOR UPDATE` and then updating it, saves a lock record per
/// commit.)
const CHECKPOINT_STATEMENT: &str = checkpoint_statement!("status = 'running'");

/// [`CHECKPOINT_STATEMENT`] of a run's last step, which ends the run in the
/// same statement: its status ($27), result ($28) and error ($29), its
/// lease released, as [`PgStore::update_finished`] sets them.
const FINISHING_CHECKPOINT_STATEMENT: &str = checkpoint_statement!(
    "status = $27, result = $28, error = $29, lease_owner = NULL, \
     lease_expires_at = NULL, heartbeat_at = NULL"
);

impl PgStore {
    fn write_error(&self, source: sqlx::Error, run_id: &str, action: impl Display) -> StoreError {
        match &source {
            sqlx::Error::Database(e) if e.kind() == ErrorKind::ForeignKeyViolation => {
                StoreError::RunNotFound {
                    db: self.db.clone(),
                    run_id: run_id.to_owned(),
                }
            }
            _ => self.error(source, action),
        }
    }

    pub async fn create_run(
        &self,
        run: &NewRun,
        prepared: PreparedRun,
        options: &RunOptions,
    ) -> Result<Admission, StoreError> {
        if options.is_plain() {
            return self
                .retrying_with(prepared, |prepared, maybe_done| async move {
                    match self.create_run_once(prepared).await {
                        // An earlier attempt may have committed before the
                        // connection broke. (Otherwise the run is another
                        // caller's: a conflict.)
                        (back, Err(e))
                            if maybe_done && e.is_conflict() && self.is_same_run(run).await =>
                        {
                            (back, Ok(()))
                        }
                        other => other,
                    }
                })
                .await
                .map(|()| Admission::Created);
        }
        let prepared = &prepared;
        self.retrying(|maybe_done| async move {
            match self.create_keyed_once(run, prepared, options).await {
                Err(e) if maybe_done && e.is_conflict() && self.is_same_run(run).await => {
                    Ok(Admission::Created)
                }
                // The key's run is this one: an earlier attempt committed.
                Ok(Admission::Existing { run_id }) if maybe_done && run_id == run.id => {
                    Ok(Admission::Created)
                }
                other => other,
            }
        })
        .await
    }

    async fn is_same_run(&self, run: &NewRun) -> bool {
        matches!(self.run(&run.id).await, Ok(Some(row))
            if row.scenario_digest == run.scenario_digest && row.input == run.input)
    }

    async fn create_run_once(&self, prepared: PreparedRun) -> Answer<PreparedRun> {
        match &self.group {
            Some(group) => group.create(prepared, &self.db).await,
            None => {
                let result = self.insert_run(&prepared).await;
                (Some(prepared), result)
            }
        }
    }

    /// A run with flow control or a key, in one transaction: the run as
    /// [`insert_run`](Self::insert_run) writes it, its flow control, then
    /// its keys. A key another transaction holds (it waits for that one to
    /// end) rolls everything back and names the holder. Not grouped: these
    /// are the rare runs, and each must see the others' keys.
    async fn create_keyed_once(
        &self,
        run: &NewRun,
        prepared: &PreparedRun,
        options: &RunOptions,
    ) -> Result<Admission, StoreError> {
        let action = format!("creating run `{}`", run.id);
        let action = action.as_str();
        self.transaction(action, async |conn| {
            self.insert_run_on(&mut *conn, prepared).await?;
            sqlx::query(
                "UPDATE runs SET priority = $2, concurrency_limit = $3, concurrency_key = $4 \
                 WHERE id = $1",
            )
            .bind(&run.id)
            .bind(options.priority)
            .bind(options.concurrency_limit.map(i64::from))
            .bind(&options.concurrency_key)
            .execute(&mut *conn)
            .await
            .map_err(|e| self.error(e, action))?;
            if let Some(idempotency) = &options.idempotency {
                // A live key is left alone (`WHERE` false: no row returned); an
                // expired one is taken over.
                let taken: Option<String> = sqlx::query_scalar(&format!(
                    "INSERT INTO idempotency_keys (key, run_id, created_at, expires_at) \
                     VALUES ($1, $2, {NOW_MS}, {NOW_MS} + $3) \
                     ON CONFLICT (key) DO UPDATE SET run_id = excluded.run_id, \
                       created_at = excluded.created_at, expires_at = excluded.expires_at \
                     WHERE idempotency_keys.expires_at <= excluded.created_at \
                     RETURNING run_id"
                ))
                .bind(&idempotency.key)
                .bind(&run.id)
                .bind(ttl_ms(idempotency.ttl))
                .fetch_optional(&mut *conn)
                .await
                .map_err(|e| self.error(e, action))?;
                if taken.is_none() {
                    // A fresh statement sees the holder's committed row.
                    let holder: String =
                        sqlx::query_scalar("SELECT run_id FROM idempotency_keys WHERE key = $1")
                            .bind(&idempotency.key)
                            .fetch_one(&mut *conn)
                            .await
                            .map_err(|e| self.error(e, action))?;
                    return Ok(Decision::Leave(Admission::Existing { run_id: holder }));
                }
            }
            if let Some(tick) = &options.schedule_tick {
                let taken: Option<String> = sqlx::query_scalar(&format!(
                    "INSERT INTO schedule_ticks (scenario_name, schedule, tick_ms, run_id, \
                         created_at) \
                     VALUES ($1, $2, $3, $4, {NOW_MS}) ON CONFLICT DO NOTHING RETURNING run_id"
                ))
                .bind(&run.scenario_name)
                .bind(&tick.schedule)
                .bind(tick.tick_ms)
                .bind(&run.id)
                .fetch_optional(&mut *conn)
                .await
                .map_err(|e| self.error(e, action))?;
                if taken.is_none() {
                    let holder: String = sqlx::query_scalar(
                        "SELECT run_id FROM schedule_ticks \
                         WHERE scenario_name = $1 AND schedule = $2 AND tick_ms = $3",
                    )
                    .bind(&run.scenario_name)
                    .bind(&tick.schedule)
                    .bind(tick.tick_ms)
                    .fetch_one(&mut *conn)
                    .await
                    .map_err(|e| self.error(e, action))?;
                    return Ok(Decision::Leave(Admission::Existing { run_id: holder }));
                }
            }
            Ok(Decision::Commit(Admission::Created))
        })
        .await
    }

    /// Creates one run as one statement, so one round trip with its
    /// COMMIT: the run, its checkpoint 0 and, with a task id, its task row.
    /// Checkpoint 0 needs no sequence guard: it is written with its run,
    /// and a second run with the same id is refused (`runs_pkey`).
    pub(super) async fn insert_run(&self, run: &PreparedRun) -> Result<(), StoreError> {
        self.insert_run_on(&self.exec, run).await
    }

    /// [`insert_run`](Self::insert_run) on a connection or transaction.
    async fn insert_run_on<'e>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
        run: &PreparedRun,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        let checkpoint = &run.checkpoint;
        let inserted = sqlx::query(
            "WITH r AS ( \
                 INSERT INTO runs (id, scenario_name, scenario_path, scenario_digest, status, \
                     input, current_node, last_seq, created_at, updated_at, task_id, digest, \
                     provenance) \
                 VALUES ($1, $12, $13, $14, $15, $16, $17, 0, $10, $10, $11, $19, $20) \
                 RETURNING id, task_id), \
             c AS ( \
                 INSERT INTO checkpoints (run_id, seq, node_id, next_nodes, is_snapshot, \
                     state, changes, state_hash, visits, bytes, created_at, digest) \
                 SELECT r.id, 0, $2, $3, $4, $5, $6, $7, $8, $9, $10, $18 FROM r) \
             INSERT INTO task_checkpoints (task_id, run_id, seq, node_id, next_nodes, state_hash, \
                 updated_at) SELECT r.task_id, r.id, 0, $2, $3, $7, $10 FROM r \
                 WHERE r.task_id IS NOT NULL \
             ON CONFLICT (task_id) DO UPDATE SET run_id = excluded.run_id, seq = excluded.seq, \
                 node_id = excluded.node_id, next_nodes = excluded.next_nodes, \
                 state_hash = excluded.state_hash, updated_at = excluded.updated_at",
        )
        .bind(&run.id)
        .bind(START_NODE)
        .bind(&checkpoint.next_nodes)
        .bind(checkpoint.is_snapshot)
        .bind(&checkpoint.state)
        .bind(&checkpoint.changes)
        .bind(&run.state_hash)
        .bind(&checkpoint.visits)
        .bind(checkpoint.bytes as i64)
        .bind(now)
        .bind(&run.task_id)
        .bind(&run.scenario_name)
        .bind(&run.scenario_path)
        .bind(&run.scenario_digest)
        .bind(&run.status)
        .bind(&run.input)
        .bind(&run.start_node)
        .bind(&checkpoint.digest)
        .bind(&run.run_digest)
        .bind(&run.provenance)
        .execute(executor)
        .await;
        match inserted {
            Ok(_) => Ok(()),
            Err(sqlx::Error::Database(d))
                if d.kind() == ErrorKind::UniqueViolation
                    && d.constraint() == Some("runs_pkey") =>
            {
                Err(refusal::run_exists(&self.db, &run.id))
            }
            Err(e) => Err(self.error(e, format_args!("creating run `{}`", run.id))),
        }
    }

    pub async fn commit_step(
        &self,
        prepared: PreparedCommit,
        extras: &CommitExtras<'_>,
    ) -> Result<(), StoreError> {
        self.retrying_with(prepared, |prepared, maybe_done| async move {
            match self.commit_step_once(prepared, extras).await {
                (Some(back), Err(e))
                    if maybe_done && e.is_conflict() && self.already_committed(&back).await =>
                {
                    (Some(back), Ok(()))
                }
                other => other,
            }
        })
        .await
    }

    /// Whether `p` is already in the history (an earlier attempt whose
    /// COMMIT landed although its connection broke).
    async fn already_committed(&self, p: &PreparedCommit) -> bool {
        let row = sqlx::query_as::<_, (String, String)>(
            "SELECT node_id, state_hash FROM checkpoints WHERE run_id = $1 AND seq = $2",
        )
        .bind(&p.run_id)
        .bind(p.seq)
        .fetch_optional(&self.exec)
        .await;
        matches!(row, Ok(Some((node, hash))) if node == p.node_id && hash == p.state_hash)
    }

    async fn commit_step_once(
        &self,
        prepared: PreparedCommit,
        extras: &CommitExtras<'_>,
    ) -> Answer<PreparedCommit> {
        match &self.group {
            // Journal entries, artifacts and cache entries are rare: those
            // commits go alone.
            Some(group) if extras.is_empty() => group.commit(prepared, &self.db).await,
            _ => {
                let result = self.commit_direct(&prepared, extras).await;
                (Some(prepared), result)
            }
        }
    }

    /// A commit in a transaction of its own.
    pub(super) async fn commit_prepared(
        &self,
        prepared: &PreparedCommit,
    ) -> Result<(), StoreError> {
        self.commit_direct(prepared, &CommitExtras::default()).await
    }

    /// One commit in a transaction of its own. Without journal entries,
    /// artifacts or a cache entry that is one statement
    /// ([`CHECKPOINT_STATEMENT`], or [`FINISHING_CHECKPOINT_STATEMENT`] when
    /// it ends the run) in an implicit transaction: one round trip, COMMIT
    /// included.
    async fn commit_direct(
        &self,
        p: &PreparedCommit,
        extras: &CommitExtras<'_>,
    ) -> Result<(), StoreError> {
        let run_id = p.run_id.as_str();
        let seq = p.seq;
        let action = p.action();
        let action = action.as_str();
        let now = p.now;
        let sql = match p.finish {
            None => CHECKPOINT_STATEMENT,
            Some(_) => FINISHING_CHECKPOINT_STATEMENT,
        };
        let statement = sqlx::query_scalar::<_, i32>(sql)
            .bind(run_id)
            .bind(seq)
            .bind(&p.current_node)
            .bind(now)
            .bind(p.fence.as_ref().map(|lease| lease.owner.as_str()))
            .bind(p.fence_generation);
        let statement = bind_step(statement, &p.step)
            .bind(&p.node_id)
            .bind(&p.checkpoint.next_nodes)
            .bind(&p.state_hash)
            .bind(p.checkpoint.is_snapshot)
            .bind(&p.checkpoint.state)
            .bind(&p.checkpoint.changes)
            .bind(&p.checkpoint.visits)
            .bind(p.checkpoint.bytes as i64)
            .bind(&p.checkpoint.digest);
        let statement = match &p.finish {
            None => statement,
            Some(finish) => statement
                .bind(&finish.status)
                .bind(&finish.result)
                .bind(&finish.error),
        };

        if extras.is_empty() {
            // Nothing is written before COMMIT that is not in this one
            // statement, so "inside the commit" is just before it.
            crate::failpoint::hit(|| format!("in-commit:{}", p.node_id));
            let moved = statement.fetch_optional(&self.exec).await;
            return match moved {
                Ok(Some(_)) => Ok(()),
                Ok(None) => Err(self.why_not_written(&self.exec, p, action).await),
                Err(e) => Err(self.why_refused(p, e, action).await),
            };
        }

        // The statement failed (say a unique violation): the transaction is
        // aborted, so why is asked once it has ended.
        let failed = self
            .transaction(action, async |conn| {
                match statement.fetch_optional(&mut *conn).await {
                    Ok(Some(_)) => {}
                    // It wrote and locked nothing; the run's row says why.
                    Ok(None) => return Err(self.why_not_written(&mut *conn, p, action).await),
                    Err(e) => return Ok(Decision::Leave(Some(e))),
                }
                self.write_extras(conn, p, extras, action).await?;
                crate::failpoint::hit(|| format!("in-commit:{}", p.node_id));
                Ok(Decision::Commit(None))
            })
            .await?;
        match failed {
            None => Ok(()),
            Some(e) => Err(self.why_refused(p, e, action).await),
        }
    }

    /// The journal entries, cache entry and artifacts of a commit, in its
    /// transaction.
    async fn write_extras(
        &self,
        conn: &mut Conn,
        p: &PreparedCommit,
        extras: &CommitExtras<'_>,
        action: &str,
    ) -> Result<(), StoreError> {
        let (run_id, now) = (p.run_id.as_str(), p.now);
        let rows = &extras.journal;
        if !rows.is_empty() {
            let text =
                |f: fn(&JournalBinds) -> String| -> Vec<String> { rows.iter().map(f).collect() };
            sqlx::query(
                "INSERT INTO journal (run_id, seq, node_id, kind, request, response, created_at, \
                     item_index, entry_index, request_digest, digest) \
                 SELECT $1, u.seq, u.node_id, u.kind, u.request, u.response, $2, u.item_index, \
                     u.entry_index, u.request_digest, u.digest \
                 FROM UNNEST($3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], \
                     $8::bigint[], $9::bigint[], $10::text[], $11::text[]) WITH ORDINALITY \
                 AS u(seq, node_id, kind, request, response, item_index, entry_index, \
                     request_digest, digest, ord) \
                 ORDER BY u.ord",
            )
            .bind(run_id)
            .bind(now)
            .bind(rows.iter().map(|r| r.seq).collect::<Vec<i64>>())
            .bind(text(|r| r.node_id.to_owned()))
            .bind(text(|r| r.kind.to_owned()))
            .bind(text(|r| r.request.clone()))
            .bind(text(|r| r.response.clone()))
            .bind(rows.iter().map(|r| r.item).collect::<Vec<Option<i64>>>())
            .bind(rows.iter().map(|r| r.entry).collect::<Vec<i64>>())
            .bind(text(|r| r.request_digest.clone()))
            .bind(text(|r| r.digest.clone()))
            .execute(&mut *conn)
            .await
            .map_err(|e| self.error(e, action))?;
        }
        if let Some(entry) = &extras.cache {
            sqlx::query(
                "INSERT INTO node_cache (key, output, output_hash, run_id, seq, node_id, \
                     created_at, expires_at, digest) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                 ON CONFLICT (key) DO UPDATE SET output = excluded.output, \
                     output_hash = excluded.output_hash, run_id = excluded.run_id, \
                     seq = excluded.seq, node_id = excluded.node_id, \
                     created_at = excluded.created_at, expires_at = excluded.expires_at, \
                     digest = excluded.digest",
            )
            .bind(&entry.key)
            .bind(&entry.output)
            .bind(&entry.output_hash)
            .bind(run_id)
            .bind(p.seq)
            .bind(&p.node_id)
            .bind(now)
            .bind(entry.expires_at)
            .bind(&entry.digest)
            .execute(&mut *conn)
            .await
            .map_err(|e| self.error(e, action))?;
        }
        for artifact in &extras.artifacts {
            insert_artifact(&mut *conn, run_id, artifact, now)
                .await
                .map_err(|e| self.error(e, action))?;
        }
        Ok(())
    }

    /// Why [`CHECKPOINT_STATEMENT`] wrote nothing, read after the fact (on
    /// its transaction, or on the pool): the run is missing; a lost lease
    /// (before whatever else moved on since); the run is finished; or the
    /// checkpoint is not the next in sequence.
    async fn why_not_written<'e>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
        p: &PreparedCommit,
        action: &str,
    ) -> StoreError {
        match self.read_position(executor, &p.run_id, action).await {
            Ok(run) => RunPosition::checkpoint_refused(
                run.as_ref(),
                &self.db,
                &p.run_id,
                p.seq,
                p.fence.as_ref(),
            ),
            Err(e) => e,
        }
    }

    /// A [`CHECKPOINT_STATEMENT`] that failed: a checkpoint already at its
    /// seq (only a history written around the store leaves one where the
    /// run's `last_seq` does not say so) is refused like one out of
    /// sequence; anything else is a database error.
    async fn why_refused(&self, p: &PreparedCommit, e: sqlx::Error, action: &str) -> StoreError {
        if is_unique_violation(&e) {
            self.why_not_written(&self.exec, p, action).await
        } else {
            self.error(e, action)
        }
    }

    pub async fn record_failed_step(&self, p: &PreparedStep<'_>) -> Result<(), StoreError> {
        let action = p.action();
        let b = &p.step;
        // Not retried: a second copy of a failed attempt would be a lie in the
        // history, and losing one is only a missing diagnostic.
        let statement = sqlx::query_scalar(FAILED_STEP_STATEMENT.as_str())
            .bind(&b.run_id)
            .bind(p.fence.map(|lease| lease.owner.as_str()))
            .bind(p.fence_generation)
            .bind(b.seq);
        let written: i64 = bind_step(statement, b)
            .bind(p.now)
            .fetch_one(&self.exec)
            .await
            .map_err(|e| self.write_error(e, &b.run_id, &action))?;
        if written == 0 {
            return Err(self.why_not_fenced(&b.run_id, p.fence, &action).await);
        }
        Ok(())
    }

    /// Why a write guarded by [`FENCED_RUN`] found no run: it is missing,
    /// or the fence no longer holds.
    async fn why_not_fenced(
        &self,
        run_id: &str,
        fence: Option<&Lease>,
        action: &str,
    ) -> StoreError {
        let row = sqlx::query_as::<_, (Option<String>, i64, Option<i64>)>(
            "SELECT lease_owner, lease_generation, lease_expires_at FROM runs WHERE id = $1",
        )
        .bind(run_id)
        .fetch_optional(&self.exec)
        .await;
        match (row, fence) {
            (Err(e), _) => self.error(e, action),
            (Ok(Some((holder, generation, expires))), Some(fence)) => {
                lease_lost(&self.db, fence, holder.as_deref(), generation, expires)
            }
            (Ok(_), _) => refusal::run_not_found(&self.db, run_id),
        }
    }

    pub async fn finish_run(&self, prepared: PreparedFinish) -> Result<(), StoreError> {
        self.retrying_with(prepared, |prepared, maybe_done| async move {
            match self.finish_run_once(prepared).await {
                (Some(back), Err(e)) if maybe_done && e.is_conflict() => {
                    let result = match self.run(&back.run_id).await {
                        Ok(Some(run)) if run.status.as_str() == back.status => Ok(()),
                        _ => Err(e),
                    };
                    (Some(back), result)
                }
                other => other,
            }
        })
        .await
    }

    async fn finish_run_once(&self, prepared: PreparedFinish) -> Answer<PreparedFinish> {
        match &self.group {
            Some(group) => group.finish(prepared, &self.db).await,
            None => {
                let result = self.update_finished(&prepared).await;
                (Some(prepared), result)
            }
        }
    }

    /// Finishes one run as one statement (only an active run, and only
    /// while the fence holds), then says why if it did not.
    pub(super) async fn update_finished(&self, p: &PreparedFinish) -> Result<(), StoreError> {
        let action = p.action();
        let updated = sqlx::query(&format!(
            "UPDATE runs SET status = $2, result = $3, error = $4, lease_owner = NULL, \
             lease_expires_at = NULL, heartbeat_at = NULL, updated_at = $5 \
             WHERE id = $1 AND status IN {ACTIVE} \
               AND ($6::text IS NULL OR (lease_owner = $6 AND lease_generation = $7))"
        ))
        .bind(&p.run_id)
        .bind(&p.status)
        .bind(&p.result)
        .bind(&p.error)
        .bind(now_ms())
        .bind(p.fence.as_ref().map(|lease| lease.owner.as_str()))
        .bind(p.fence_generation)
        .execute(&self.exec)
        .await
        .map_err(|e| self.error(e, &action))?;
        if updated.rows_affected() == 1 {
            return Ok(());
        }
        let current = sqlx::query_as::<_, (String, Option<String>, i64, Option<i64>)>(
            "SELECT status, lease_owner, lease_generation, lease_expires_at \
             FROM runs WHERE id = $1",
        )
        .bind(&p.run_id)
        .fetch_optional(&self.exec)
        .await
        .map_err(|e| self.error(e, &action))?;
        Err(match (current, &p.fence) {
            // The lease changed hands (even if the new holder has since
            // finished the run), or it is gone from an unfinished run.
            (Some((current, holder, generation, expires)), Some(fence))
                if u64::try_from(generation) != Ok(fence.generation)
                    || (!current.parse().is_ok_and(RunStatus::is_finished)
                        && !holds(fence, holder.as_deref(), generation)) =>
            {
                lease_lost(&self.db, fence, holder.as_deref(), generation, expires)
            }
            (current, _) => refusal::already_finished(
                &self.db,
                &p.run_id,
                current.as_ref().map(|(status, ..)| status.as_str()),
            ),
        })
    }

    pub async fn record_map_item(&self, p: &PreparedMapItem<'_>) -> Result<(), StoreError> {
        let action = &p.action();
        let item = p.item;
        let owner = p.fence.map(|lease| lease.owner.as_str());
        let sql = MAP_ITEM_STATEMENT.as_str();
        // Idempotent (the first durable output wins), so safe to retry.
        let found: i64 = self
            .retrying(|_| async move {
                sqlx::query_scalar(sql)
                    .bind(&item.run_id)
                    .bind(owner)
                    .bind(p.fence_generation)
                    .bind(&item.node_id)
                    .bind(p.visit)
                    .bind(p.item_index)
                    .bind(&p.output)
                    .bind(&item.output_hash)
                    .bind(p.duration_us)
                    .bind(p.fuel_consumed)
                    .bind(now_ms())
                    .bind(p.attempt)
                    .bind(&p.journal)
                    .bind(&p.digest)
                    .fetch_one(&self.exec)
                    .await
                    .map_err(|e| self.write_error(e, &item.run_id, action))
            })
            .await?;
        if found == 0 {
            return Err(self.why_not_fenced(&item.run_id, p.fence, action).await);
        }
        Ok(())
    }

    // ---- artifacts -------------------------------------------------------------

    pub async fn put_artifact(
        &self,
        run_id: &str,
        artifact: &PreparedArtifact<'_>,
        fence: Option<&Lease>,
    ) -> Result<(), StoreError> {
        let action = format!("storing artifact `{}` of run `{run_id}`", artifact.name);
        let action = action.as_str();
        let generation = fence
            .map(|lease| self.int(lease.generation, "lease generation"))
            .transpose()?;
        let owner = fence.map(|lease| lease.owner.as_str());
        // Idempotent (content-addressed blob, upserted name).
        self.retrying(|_| async move {
            self.transaction(action, async |conn| {
                if fence.is_some() {
                    let held: Option<String> = sqlx::query_scalar(FENCED_RUN)
                        .bind(run_id)
                        .bind(owner)
                        .bind(generation)
                        .fetch_optional(&mut *conn)
                        .await
                        .map_err(|e| self.error(e, action))?;
                    if held.is_none() {
                        return Err(self.why_not_fenced(run_id, fence, action).await);
                    }
                }
                insert_artifact(&mut *conn, run_id, artifact, now_ms())
                    .await
                    .map_err(|e| self.write_error(e, run_id, action))?;
                Ok(Decision::Commit(()))
            })
            .await
        })
        .await
    }
}

/// Binds a step's columns from its node to its detail (11 parameters), in
/// the order both [`CHECKPOINT_STATEMENT`] and [`FAILED_STEP_STATEMENT`]
/// take them.
fn bind_step<'q, O>(
    query: QueryScalar<'q, Postgres, O, PgArguments>,
    step: &'q StepBinds,
) -> QueryScalar<'q, Postgres, O, PgArguments> {
    query
        .bind(&step.node_id)
        .bind(step.attempt)
        .bind(&step.status)
        .bind(step.started_at)
        .bind(step.duration_us)
        .bind(&step.input_hash)
        .bind(&step.output_hash)
        .bind(&step.error)
        .bind(step.fuel_consumed)
        .bind(step.memory_peak_bytes)
        .bind(&step.detail)
}

fn is_unique_violation(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(e) if e.kind() == ErrorKind::UniqueViolation)
}

async fn insert_artifact(
    conn: &mut Conn,
    run_id: &str,
    artifact: &PreparedArtifact<'_>,
    now: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "WITH b AS (INSERT INTO blobs (digest, size, bytes, created_at) VALUES ($3, $5, $6, $7) \
             ON CONFLICT (digest) DO NOTHING) \
         INSERT INTO artifacts (run_id, name, digest, media_type, size, created_at) \
         VALUES ($1, $2, $3, $4, $5, $7) \
         ON CONFLICT (run_id, name) DO UPDATE SET digest = excluded.digest, \
         media_type = excluded.media_type, size = excluded.size, created_at = excluded.created_at",
    )
    .bind(run_id)
    .bind(artifact.name)
    .bind(&artifact.digest)
    .bind(artifact.media_type)
    .bind(artifact.size)
    .bind(artifact.bytes)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(())
}
