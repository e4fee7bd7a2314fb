//! Group commit for Postgres: checkpoint commits of concurrent runs are
//! batched into shared transactions (runs' last steps, which end their runs
//! too, in a statement of their own beside the others).
//!
//! Commits queue on a channel; an executor takes whatever is queued (up to
//! [`MAX_BATCH`], one commit per run) and writes it as one statement in one
//! implicit transaction ([`BATCH_STATEMENT`]): one round trip and one WAL
//! flush for the whole batch. The statement moves (and so locks) the runs'
//! rows and leaves out a commit the run does not take (its lease fence does
//! not hold, the run is not active, or it is not the run's next
//! checkpoint): that commit writes nothing. Then every commit that was left out, or all of them if
//! the database refused the statement, is committed alone and hears its own
//! verdict. Refusals are rare (a lost lease, a second runner), so they pay
//! and the common case does not. Each
//! caller waits for the COMMIT that carries its checkpoint, so a node still
//! proceeds only once its own checkpoint is durable. There is no timer: the
//! wait is bounded by one batch in flight (up to [`EXECUTORS`] run at
//! once), so a lone run pays nothing but a channel hop (a batch of one takes
//! the ordinary path), and under load batches fill while the previous ones
//! commit. Reads, leases and every other write go straight to the pool.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};

use super::PgStore;
use super::commit::takes_checkpoint;
use crate::checkpoint::START_NODE;
use crate::codec::{ACTIVE, now_ms};
use crate::error::{DatabaseFailure, StoreError};
use crate::prepared::{PreparedCommit as Prepared, PreparedFinish, PreparedRun};

/// Most writes of one kind in one statement.
pub(super) const MAX_BATCH: usize = 64;
/// Batches in flight at once (one can be in its fsync while the next builds).
pub(super) const EXECUTORS: usize = 2;

/// A queued write and where its outcome goes, with the write itself (so
/// that a retry has it without a copy).
pub(super) struct Queued<T> {
    item: T,
    reply: oneshot::Sender<(T, Result<(), StoreError>)>,
}

impl<T> Queued<T> {
    fn answer(self, result: Result<(), StoreError>) {
        let _ = self.reply.send((self.item, result));
    }
}

/// What a grouped write hears: its outcome, and the write back (None: the
/// group is gone).
pub(super) type Answer<T> = (Option<T>, Result<(), StoreError>);

/// The writes that are grouped: checkpoint commits, new runs, finished runs.
enum Op {
    Checkpoint(Queued<Prepared>),
    Create(Queued<PreparedRun>),
    Finish(Queued<PreparedFinish>),
}

/// The queue in front of the executors.
#[derive(Debug)]
pub(super) struct Group {
    tx: mpsc::UnboundedSender<Op>,
}

impl Group {
    /// Starts the executors for `store` (a handle without a group of its own).
    pub fn start(store: PgStore) -> Arc<Group> {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(collect(store, rx));
        Arc::new(Group { tx })
    }

    /// Queues a checkpoint commit and waits for its transaction's outcome.
    pub async fn commit(&self, prepared: Prepared, db: &str) -> Answer<Prepared> {
        self.queue(Op::Checkpoint, prepared, db).await
    }

    /// Queues a new run and waits for its transaction's outcome.
    pub async fn create(&self, run: PreparedRun, db: &str) -> Answer<PreparedRun> {
        self.queue(Op::Create, run, db).await
    }

    /// Queues a run's final status and waits for its transaction's outcome.
    pub async fn finish(&self, finish: PreparedFinish, db: &str) -> Answer<PreparedFinish> {
        self.queue(Op::Finish, finish, db).await
    }

    async fn queue<T>(&self, op: fn(Queued<T>) -> Op, item: T, db: &str) -> Answer<T> {
        let (reply, answer) = oneshot::channel();
        let closed = || StoreError::Database {
            db: db.to_owned(),
            action: "writing to the database (group commit)".into(),
            source: DatabaseFailure::from_sqlx(sqlx::Error::PoolClosed),
        };
        if self.tx.send(op(Queued { item, reply })).is_err() {
            return (None, Err(closed()));
        }
        match answer.await {
            Ok((item, result)) => (Some(item), result),
            Err(_) => (None, Err(closed())),
        }
    }
}

async fn collect(store: PgStore, mut rx: mpsc::UnboundedReceiver<Op>) {
    let slots = Arc::new(Semaphore::new(EXECUTORS));
    while let Some(first) = rx.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        // Everything that queued while the executors were busy.
        let (mut checkpoints, mut creates, mut finishes) = (Vec::new(), Vec::new(), Vec::new());
        let mut next = Some(first);
        while let Some(op) = next.take() {
            match op {
                Op::Checkpoint(q) => checkpoints.push(q),
                Op::Create(q) => creates.push(q),
                Op::Finish(q) => finishes.push(q),
            }
            if checkpoints.len().max(creates.len()).max(finishes.len()) < MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        // A run's last step, which ends the run too, has a statement of its
        // own, so the ordinary one stays as it is.
        let (lasts, checkpoints): (Vec<_>, Vec<_>) = checkpoints
            .into_iter()
            .partition(|q: &Queued<Prepared>| q.item.finish.is_some());
        let store = store.clone();
        // Each kind is one statement; they run side by side and share the
        // server's WAL flush.
        tokio::spawn(async move {
            tokio::join!(
                store.settle(checkpoints),
                store.settle(lasts),
                store.settle(creates),
                store.settle(finishes),
            );
            drop(slot);
        });
    }
}

/// A kind of grouped write: how one is written alone (the ordinary path,
/// with its own verdict) and how a batch is written as one statement.
trait Batched: Sized {
    /// The run it writes to: a run appears at most once per statement.
    fn run_id(&self) -> &str;
    fn describe(&self) -> String;
    async fn alone(&self, store: &PgStore) -> Result<(), StoreError>;
    /// Writes the batch and returns the ordinals (from 1) of the items it
    /// wrote; the others wrote nothing and are written alone for their
    /// verdict.
    async fn write(store: &PgStore, batch: &[Queued<Self>]) -> Result<Vec<i64>, sqlx::Error>;
}

impl Batched for Prepared {
    fn run_id(&self) -> &str {
        &self.run_id
    }
    fn describe(&self) -> String {
        format!(
            "committing checkpoint {} of run `{}` (in a group of commits)",
            self.seq, self.run_id
        )
    }
    async fn alone(&self, store: &PgStore) -> Result<(), StoreError> {
        store.commit_prepared(self).await
    }
    /// A batch is all last steps or none (`collect` keeps them apart).
    async fn write(store: &PgStore, batch: &[Queued<Self>]) -> Result<Vec<i64>, sqlx::Error> {
        store.write_checkpoints(batch).await
    }
}

impl Batched for PreparedRun {
    fn run_id(&self) -> &str {
        &self.id
    }
    fn describe(&self) -> String {
        format!("creating run `{}` (in a group of writes)", self.id)
    }
    async fn alone(&self, store: &PgStore) -> Result<(), StoreError> {
        store.insert_run(self).await
    }
    async fn write(store: &PgStore, batch: &[Queued<Self>]) -> Result<Vec<i64>, sqlx::Error> {
        store.write_creates(batch).await
    }
}

impl Batched for PreparedFinish {
    fn run_id(&self) -> &str {
        &self.run_id
    }
    fn describe(&self) -> String {
        format!(
            "finishing run `{}` as {} (in a group of writes)",
            self.run_id, self.status
        )
    }
    async fn alone(&self, store: &PgStore) -> Result<(), StoreError> {
        store.update_finished(self).await
    }
    async fn write(store: &PgStore, batch: &[Queued<Self>]) -> Result<Vec<i64>, sqlx::Error> {
        store.write_finishes(batch).await
    }
}

impl PgStore {
    /// Writes `batch` and answers every caller.
    async fn settle<T: Batched>(&self, batch: Vec<Queued<T>>) {
        if batch.len() <= 1 {
            for queued in batch {
                self.alone(queued).await;
            }
            return;
        }
        // Two writes to one run never share a statement (two commits of one
        // run only come from two runners, one of them fenced out): the later
        // ones go alone once the batch is done, and meet its result.
        let mut seen = HashSet::new();
        let (batch, again): (Vec<Queued<T>>, Vec<Queued<T>>) = batch
            .into_iter()
            .partition(|q| seen.insert(q.item.run_id().to_owned()));
        match T::write(self, &batch)
            .await
            .map_err(DatabaseFailure::from_sqlx)
        {
            Ok(written) => {
                for (i, queued) in batch.into_iter().enumerate() {
                    if written.contains(&(i as i64 + 1)) {
                        queued.answer(Ok(()));
                    } else {
                        // Fenced out, its run is gone or already there:
                        // alone, it hears why.
                        self.alone(queued).await;
                    }
                }
            }
            Err(failure) if failure.is_transient() => {
                // Every write of the failed transaction hears why, with the
                // same transient verdict (and whether it may have committed
                // all the same), so each retries on its own.
                for queued in batch {
                    let error = StoreError::Database {
                        db: self.db.clone(),
                        action: queued.item.describe(),
                        source: failure.clone(),
                    };
                    queued.answer(Err(error));
                }
            }
            // The database refused the batch (say a checkpoint that is
            // already there although its run's last_seq does not say so):
            // each write alone gets its own verdict.
            Err(_) => {
                for queued in batch {
                    self.alone(queued).await;
                }
            }
        }
        for queued in again {
            self.alone(queued).await;
        }
    }

    async fn alone<T: Batched>(&self, queued: Queued<T>) {
        let result = queued.item.alone(self).await;
        queued.answer(result);
    }

    /// Writes the batch in one statement (one implicit transaction) and
    /// returns the ordinals (from 1) of the commits it wrote: the others
    /// were fenced out, out of sequence, for a finished run or a missing
    /// one, and wrote nothing.
    async fn write_checkpoints(&self, batch: &[Queued<Prepared>]) -> Result<Vec<i64>, sqlx::Error> {
        let c: Vec<&Prepared> = batch.iter().map(|q| &q.item).collect();
        // The columns borrow from the batch: nothing is copied but into
        // the statement's buffer.
        let text = |f: fn(&Prepared) -> &str| -> Vec<&str> { c.iter().map(|p| f(p)).collect() };
        let opt = |f: fn(&Prepared) -> Option<&str>| -> Vec<Option<&str>> {
            c.iter().map(|p| f(p)).collect()
        };
        let int = |f: fn(&Prepared) -> i64| -> Vec<i64> { c.iter().map(|p| f(p)).collect() };
        let opt_int = |f: fn(&Prepared) -> Option<i64>| -> Vec<Option<i64>> {
            c.iter().map(|p| f(p)).collect()
        };
        for p in &c {
            crate::failpoint::hit(|| format!("in-commit:{}", p.node_id));
        }
        let lasts = c.iter().all(|p| p.finish.is_some());
        let sql = if lasts {
            FINISHING_BATCH_STATEMENT
        } else {
            BATCH_STATEMENT
        };
        let statement = sqlx::query_scalar(sql)
            .bind(text(|p| &p.run_id))
            .bind(int(|p| p.seq))
            .bind(opt(|p| p.current_node.as_deref()))
            .bind(now_ms())
            .bind(opt(|p| p.fence.as_ref().map(|f| f.owner.as_str())))
            .bind(opt_int(|p| p.fence_generation))
            .bind(text(|p| &p.node_id))
            .bind(text(|p| &p.checkpoint.next_nodes))
            .bind(
                c.iter()
                    .map(|p| p.checkpoint.is_snapshot)
                    .collect::<Vec<bool>>(),
            )
            .bind(opt(|p| p.checkpoint.state.as_deref()))
            .bind(text(|p| &p.checkpoint.changes))
            .bind(text(|p| &p.state_hash))
            .bind(text(|p| &p.checkpoint.visits))
            .bind(int(|p| p.checkpoint.bytes as i64))
            .bind(text(|p| &p.step.node_id))
            .bind(int(|p| p.step.attempt))
            .bind(text(|p| &p.step.status))
            .bind(int(|p| p.step.started_at))
            .bind(int(|p| p.step.duration_us))
            .bind(opt(|p| p.step.input_hash.as_deref()))
            .bind(opt(|p| p.step.output_hash.as_deref()))
            .bind(opt(|p| p.step.error.as_deref()))
            .bind(opt_int(|p| p.step.fuel_consumed))
            .bind(opt_int(|p| p.step.memory_peak_bytes))
            .bind(opt(|p| p.step.detail.as_deref()))
            .bind(text(|p| &p.checkpoint.digest));
        let statement = if lasts {
            let finish = |f: fn(&PreparedFinish) -> Option<&str>| -> Vec<Option<&str>> {
                c.iter().map(|p| p.finish.as_deref().and_then(f)).collect()
            };
            statement
                .bind(finish(|f| Some(f.status.as_str())))
                .bind(finish(|f| f.result.as_deref()))
                .bind(finish(|f| f.error.as_deref()))
        } else {
            statement
        };
        statement.fetch_all(&self.exec).await
    }

    /// New runs in one statement ([`CREATE_STATEMENT`]).
    async fn write_creates(&self, batch: &[Queued<PreparedRun>]) -> Result<Vec<i64>, sqlx::Error> {
        let c: Vec<&PreparedRun> = batch.iter().map(|q| &q.item).collect();
        let text =
            |f: fn(&PreparedRun) -> String| -> Vec<String> { c.iter().map(|r| f(r)).collect() };
        let opt = |f: fn(&PreparedRun) -> Option<String>| -> Vec<Option<String>> {
            c.iter().map(|r| f(r)).collect()
        };
        sqlx::query_scalar(CREATE_STATEMENT)
            .bind(text(|r| r.id.clone()))
            .bind(text(|r| r.scenario_name.clone()))
            .bind(text(|r| r.scenario_path.clone()))
            .bind(text(|r| r.scenario_digest.clone()))
            .bind(text(|r| r.status.clone()))
            .bind(text(|r| r.input.clone()))
            .bind(text(|r| r.start_node.clone()))
            .bind(opt(|r| r.task_id.clone()))
            .bind(text(|r| r.checkpoint.next_nodes.clone()))
            .bind(
                c.iter()
                    .map(|r| r.checkpoint.is_snapshot)
                    .collect::<Vec<bool>>(),
            )
            .bind(opt(|r| r.checkpoint.state.clone()))
            .bind(text(|r| r.checkpoint.changes.clone()))
            .bind(text(|r| r.state_hash.clone()))
            .bind(text(|r| r.checkpoint.visits.clone()))
            .bind(
                c.iter()
                    .map(|r| r.checkpoint.bytes as i64)
                    .collect::<Vec<i64>>(),
            )
            .bind(now_ms())
            .bind(START_NODE)
            .bind(text(|r| r.checkpoint.digest.clone()))
            .bind(text(|r| r.run_digest.clone()))
            .bind(text(|r| r.provenance.clone()))
            .fetch_all(&self.exec)
            .await
    }

    /// Final statuses in one statement ([`FINISH_STATEMENT`]).
    async fn write_finishes(
        &self,
        batch: &[Queued<PreparedFinish>],
    ) -> Result<Vec<i64>, sqlx::Error> {
        let c: Vec<&PreparedFinish> = batch.iter().map(|q| &q.item).collect();
        let opt = |f: fn(&PreparedFinish) -> Option<String>| -> Vec<Option<String>> {
            c.iter().map(|p| f(p)).collect()
        };
        sqlx::query_scalar(FINISH_STATEMENT.as_str())
            .bind(c.iter().map(|p| p.run_id.clone()).collect::<Vec<String>>())
            .bind(c.iter().map(|p| p.status.clone()).collect::<Vec<String>>())
            .bind(opt(|p| p.result.clone()))
            .bind(opt(|p| p.error.clone()))
            .bind(opt(|p| p.fence.as_ref().map(|f| f.owner.clone())))
            .bind(
                c.iter()
                    .map(|p| p.fence_generation)
                    .collect::<Vec<Option<i64>>>(),
            )
            .bind(now_ms())
            .fetch_all(&self.exec)
            .await
    }
}

/// `insert_run` for many runs: a run whose id exists already is left out
/// (`ON CONFLICT DO NOTHING`) and then created alone, which reports it.
/// The task rows get the batch's last run for each task. Runs are inserted
/// in id order, so two batches creating some of the same ids (a duplicate
/// submission) wait for each other instead of deadlocking.
const CREATE_STATEMENT: &str = "\
    WITH u AS ( \
        SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
            $6::text[], $7::text[], $8::text[], $9::text[], $10::bool[], $11::text[], \
            $12::text[], $13::text[], $14::text[], $15::bigint[], $18::text[], \
            $19::text[], $20::text[]) WITH ORDINALITY \
        AS u(id, scenario_name, scenario_path, scenario_digest, status, input, start_node, \
            task_id, next_nodes, is_snapshot, state, changes, state_hash, visits, bytes, \
            digest, run_digest, provenance, ord)), \
    r AS ( \
        INSERT INTO runs (id, scenario_name, scenario_path, scenario_digest, status, input, \
            current_node, last_seq, created_at, updated_at, task_id, digest, provenance) \
        SELECT id, scenario_name, scenario_path, scenario_digest, status, input, \
            start_node, 0, $16, $16, task_id, run_digest, provenance FROM u ORDER BY id \
        ON CONFLICT (id) DO NOTHING \
        RETURNING id, task_id), \
    c AS ( \
        INSERT INTO checkpoints (run_id, seq, node_id, next_nodes, is_snapshot, state, \
            changes, state_hash, visits, bytes, created_at, digest) \
        SELECT u.id, 0, $17, u.next_nodes, u.is_snapshot, u.state, u.changes, \
            u.state_hash, u.visits, u.bytes, $16, u.digest \
        FROM r JOIN u ON u.id = r.id), \
    t AS ( \
        INSERT INTO task_checkpoints (task_id, run_id, seq, node_id, next_nodes, \
            state_hash, updated_at) \
        SELECT DISTINCT ON (r.task_id) r.task_id, r.id, 0, $17, u.next_nodes, \
            u.state_hash, $16 \
        FROM r JOIN u ON u.id = r.id WHERE r.task_id IS NOT NULL \
        ORDER BY r.task_id, u.ord DESC \
        ON CONFLICT (task_id) DO UPDATE SET run_id = excluded.run_id, \
            seq = excluded.seq, node_id = excluded.node_id, \
            next_nodes = excluded.next_nodes, state_hash = excluded.state_hash, \
            updated_at = excluded.updated_at) \
    SELECT u.ord FROM r JOIN u ON u.id = r.id";

/// `update_finished` for many runs: a run that is not active, or whose
/// fence does not hold, is left out and then finished alone, which says why.
static FINISH_STATEMENT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "UPDATE runs SET status = u.status, result = u.result, error = u.error, \
             lease_owner = NULL, lease_expires_at = NULL, heartbeat_at = NULL, updated_at = $7 \
         FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
             $6::bigint[]) WITH ORDINALITY AS u(id, status, result, error, owner, generation, ord) \
         WHERE runs.id = u.id AND runs.status IN {ACTIVE} \
             AND (u.owner IS NULL \
                 OR (runs.lease_owner = u.owner AND runs.lease_generation = u.generation)) \
         RETURNING u.ord"
    )
});

/// [`BATCH_STATEMENT`] with `$arrays` more arrays, named `$columns`, and
/// `$set` the run rows' status columns.
macro_rules! batch_statement {
    ($arrays:literal, $columns:literal, $set:literal) => {
        concat!(
            "\
    WITH u AS ( \
        SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::text[], $5::text[], \
            $6::bigint[], $7::text[], $8::text[], $9::bool[], $10::text[], $11::text[], \
            $12::text[], $13::text[], $14::bigint[], $15::text[], $16::bigint[], \
            $17::text[], $18::bigint[], $19::bigint[], $20::text[], $21::text[], \
            $22::text[], $23::bigint[], $24::bigint[], $25::text[], $26::text[]",
            $arrays,
            ") \
        WITH ORDINALITY \
        AS u(run_id, seq, current_node, owner, generation, node_id, next_nodes, \
            is_snapshot, state, changes, state_hash, visits, bytes, step_node, attempt, \
            status, started_at, duration_us, input_hash, output_hash, error, fuel, \
            memory, detail, digest",
            $columns,
            ", ord) \
        ORDER BY run_id), \
    r AS ( \
        UPDATE runs SET last_seq = u.seq, current_node = u.current_node, updated_at = $4, ",
            $set,
            " \
        FROM u \
        WHERE runs.id = u.run_id AND ",
            takes_checkpoint!("runs.", "u.seq", "u.owner", "u.generation"),
            " \
        RETURNING runs.id, runs.task_id, u.ord), \
    c AS ( \
        INSERT INTO checkpoints (run_id, seq, node_id, next_nodes, is_snapshot, state, \
            changes, state_hash, visits, bytes, created_at, digest) \
        SELECT u.run_id, u.seq, u.node_id, u.next_nodes, u.is_snapshot, u.state, \
            u.changes, u.state_hash, u.visits, u.bytes, $4, u.digest \
        FROM r JOIN u ON u.ord = r.ord), \
    s AS ( \
        INSERT INTO steps (run_id, seq, node_id, attempt, status, started_at, \
            duration_us, input_hash, output_hash, error, fuel_consumed, \
            memory_peak_bytes, detail) \
        SELECT u.run_id, u.seq, u.step_node, u.attempt, u.status, u.started_at, \
            u.duration_us, u.input_hash, u.output_hash, u.error, u.fuel, u.memory, \
            u.detail \
        FROM r JOIN u ON u.ord = r.ord), \
    t AS ( \
        INSERT INTO task_checkpoints (task_id, run_id, seq, node_id, next_nodes, \
            state_hash, updated_at) \
        SELECT DISTINCT ON (r.task_id) r.task_id, u.run_id, u.seq, u.node_id, \
            u.next_nodes, u.state_hash, $4 \
        FROM r JOIN u ON u.ord = r.ord WHERE r.task_id IS NOT NULL \
        ORDER BY r.task_id, u.ord DESC \
        ON CONFLICT (task_id) DO UPDATE SET run_id = excluded.run_id, \
            seq = excluded.seq, node_id = excluded.node_id, \
            next_nodes = excluded.next_nodes, state_hash = excluded.state_hash, \
            updated_at = excluded.updated_at) \
    SELECT ord FROM r"
        )
    };
}

/// `commit::CHECKPOINT_STATEMENT` for many runs (one
/// commit per run): every column is an array, `u` numbers the commits
/// (`ord`) and sorts them by run id. The UPDATE moves only the runs that
/// take their commit (fence, status, `last_seq + 1`, each re-checked on the
/// row as a lock holder left it); a commit left out writes nothing. The
/// runs' rows are locked as the join meets them, which with `u` sorted is
/// in id order, so two batches do not deadlock; should one ever (Postgres
/// detects it), the statement fails and its commits are retried. The task
/// rows (runs with a task id only) get the batch's last commit for each
/// task.
const BATCH_STATEMENT: &str = batch_statement!("", "", "status = 'running'");

/// [`BATCH_STATEMENT`] of runs' last steps, each of which ends its run in
/// the same statement: statuses ($27), results ($28) and errors ($29), the
/// leases released, as `PgStore::update_finished` sets them.
const FINISHING_BATCH_STATEMENT: &str = batch_statement!(
    ", $27::text[], $28::text[], $29::text[]",
    ", end_status, end_result, end_error",
    "status = u.end_status, result = u.end_result, error = u.end_error, \
     lease_owner = NULL, lease_expires_at = NULL, heartbeat_at = NULL"
);
