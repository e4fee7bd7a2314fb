//! Group commit for Postgres: checkpoint commits of concurrent runs are
//! batched into shared transactions.
//!
//! Commits queue on a channel; an executor takes whatever is queued (up to
//! [`MAX_BATCH`], one commit per run) and writes it as one statement in one
//! implicit transaction ([`BATCH_STATEMENT`]): one round trip and one WAL
//! flush for the whole batch. The statement locks the runs' rows, leaves
//! out a commit whose lease fence does not hold (it writes nothing), and the
//! sequence trigger refuses the statement if any commit is out of sequence;
//! then every commit that was left out, or all of them after a refusal, is
//! committed alone and hears its own verdict. Refusals are rare (a lost
//! lease, a second runner), so they pay and the common case does not. Each
//! caller waits for the COMMIT that carries its checkpoint, so a node still
//! proceeds only once its own checkpoint is durable. There is no timer: the
//! wait is bounded by one batch in flight (up to [`EXECUTORS`] run at
//! once), so a lone run pays nothing but a channel hop (a batch of one takes
//! the ordinary path), and under load batches fill while the previous ones
//! commit. Reads, leases and every other write go straight to the pool.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};

use super::{PgStore, Prepared, now_ms};
use crate::store::error::{StoreError, is_transient};

/// Most commits in one transaction.
pub(super) const MAX_BATCH: usize = 64;
/// Batches in flight at once (one can be in its fsync while the next builds).
pub(super) const EXECUTORS: usize = 2;

pub(super) struct Pending {
    pub prepared: Prepared,
    pub reply: oneshot::Sender<Result<(), StoreError>>,
}

/// The queue in front of the executors.
#[derive(Debug)]
pub(super) struct Group {
    tx: mpsc::UnboundedSender<Pending>,
}

impl Group {
    /// Starts the executors for `store` (a handle without a group of its own).
    pub fn start(store: PgStore) -> Arc<Group> {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(collect(store, rx));
        Arc::new(Group { tx })
    }

    /// Queues `prepared` and waits for its transaction's outcome.
    pub async fn commit(&self, prepared: Prepared, db: &str) -> Result<(), StoreError> {
        let (reply, answer) = oneshot::channel();
        let closed = || StoreError::Database {
            db: db.to_owned(),
            action: "committing a checkpoint".into(),
            source: sqlx::Error::PoolClosed,
        };
        self.tx
            .send(Pending { prepared, reply })
            .map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }
}

async fn collect(store: PgStore, mut rx: mpsc::UnboundedReceiver<Pending>) {
    let slots = Arc::new(Semaphore::new(EXECUTORS));
    while let Some(first) = rx.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        // Everything that queued while the executors were busy.
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(pending) => batch.push(pending),
                Err(_) => break,
            }
        }
        let store = store.clone();
        tokio::spawn(async move {
            store.commit_batch(batch).await;
            drop(slot);
        });
    }
}

impl PgStore {
    async fn commit_batch(&self, batch: Vec<Pending>) {
        if batch.len() == 1 {
            let pending = batch.into_iter().next().expect("one");
            let result = self.commit_prepared(&pending.prepared).await;
            let _ = pending.reply.send(result);
            return;
        }
        // Two commits of one run never share a statement (only two runners
        // of the same run produce them, and one of them is fenced out): the
        // later ones go alone once the batch is done, and meet its result.
        let mut seen = HashSet::new();
        let (batch, again): (Vec<Pending>, Vec<Pending>) = batch
            .into_iter()
            .partition(|p| seen.insert(p.prepared.run_id.clone()));
        match self.write_batch(&batch).await {
            Ok(written) => {
                for (i, pending) in batch.into_iter().enumerate() {
                    if written.contains(&(i as i64 + 1)) {
                        let _ = pending.reply.send(Ok(()));
                    } else {
                        // Fenced out, or its run is gone: alone, it hears why.
                        self.commit_alone(pending).await;
                    }
                }
            }
            Err(e) if is_transient(&e) => {
                // Every commit of the failed transaction hears why, with the
                // same transient verdict, so each retries on its own.
                for pending in batch {
                    let error = self.error(
                        sqlx::Error::Io(std::io::Error::other(e.to_string())),
                        format_args!(
                            "committing checkpoint {} of run `{}` (in a group of commits)",
                            pending.prepared.seq, pending.prepared.run_id
                        ),
                    );
                    let _ = pending.reply.send(Err(error));
                }
            }
            // The database refused the batch (a commit out of sequence, a
            // finished run): each commit alone gets its own verdict.
            Err(_) => {
                for pending in batch {
                    self.commit_alone(pending).await;
                }
            }
        }
        for pending in again {
            self.commit_alone(pending).await;
        }
    }

    async fn commit_alone(&self, pending: Pending) {
        let result = self.commit_prepared(&pending.prepared).await;
        let _ = pending.reply.send(result);
    }

    /// Writes the batch in one statement (one implicit transaction) and
    /// returns the ordinals (from 1) of the commits it wrote: the others
    /// were fenced out or their run is missing, and wrote nothing. A commit
    /// out of sequence fails the whole statement.
    async fn write_batch(&self, batch: &[Pending]) -> Result<Vec<i64>, sqlx::Error> {
        let c: Vec<&Prepared> = batch.iter().map(|p| &p.prepared).collect();
        let text = |f: fn(&Prepared) -> String| -> Vec<String> { c.iter().map(|p| f(p)).collect() };
        let opt = |f: fn(&Prepared) -> Option<String>| -> Vec<Option<String>> {
            c.iter().map(|p| f(p)).collect()
        };
        let int = |f: fn(&Prepared) -> i64| -> Vec<i64> { c.iter().map(|p| f(p)).collect() };
        let opt_int = |f: fn(&Prepared) -> Option<i64>| -> Vec<Option<i64>> {
            c.iter().map(|p| f(p)).collect()
        };
        for p in &c {
            crate::failpoint::hit(|| format!("in-commit:{}", p.node_id));
        }
        sqlx::query_scalar(BATCH_STATEMENT)
            .bind(text(|p| p.run_id.clone()))
            .bind(int(|p| p.seq))
            .bind(opt(|p| p.current_node.clone()))
            .bind(now_ms())
            .bind(opt(|p| p.fence.as_ref().map(|f| f.owner.clone())))
            .bind(opt_int(|p| {
                p.fence
                    .as_ref()
                    .map(|f| i64::try_from(f.generation).unwrap_or(i64::MAX))
            }))
            .bind(text(|p| p.node_id.clone()))
            .bind(text(|p| p.next_nodes.clone()))
            .bind(c.iter().map(|p| p.is_snapshot).collect::<Vec<bool>>())
            .bind(opt(|p| p.state.clone()))
            .bind(text(|p| p.changes.clone()))
            .bind(text(|p| p.state_hash.clone()))
            .bind(text(|p| p.visits.clone()))
            .bind(int(|p| p.bytes))
            .bind(text(|p| p.step.node_id.clone()))
            .bind(int(|p| p.step.attempt))
            .bind(text(|p| p.step.status.clone()))
            .bind(int(|p| p.step.started_at))
            .bind(int(|p| p.step.duration_us))
            .bind(opt(|p| p.step.input_hash.clone()))
            .bind(opt(|p| p.step.output_hash.clone()))
            .bind(opt(|p| p.step.error.clone()))
            .bind(opt_int(|p| p.step.fuel_consumed))
            .bind(opt_int(|p| p.step.memory_peak_bytes))
            .bind(opt(|p| p.step.detail.clone()))
            .fetch_all(&self.pool)
            .await
    }
}

/// [`CHECKPOINT_STATEMENT`](super::CHECKPOINT_STATEMENT) for many runs (one
/// commit per run): every column is an array, `u` numbers the commits. The
/// runs' rows are locked in id order (`FOR UPDATE OF runs`, so two batches
/// cannot deadlock) and a commit whose fence does not hold is left out
/// without writing anything; the sequence trigger refuses the whole
/// statement if any commit is out of sequence. The task rows get the
/// batch's last commit for each task.
const BATCH_STATEMENT: &str = "\
    WITH u AS ( \
        SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::text[], $5::text[], \
            $6::bigint[], $7::text[], $8::text[], $9::bool[], $10::text[], $11::text[], \
            $12::text[], $13::text[], $14::bigint[], $15::text[], $16::bigint[], \
            $17::text[], $18::bigint[], $19::bigint[], $20::text[], $21::text[], \
            $22::text[], $23::bigint[], $24::bigint[], $25::text[]) WITH ORDINALITY \
        AS u(run_id, seq, current_node, owner, generation, node_id, next_nodes, \
            is_snapshot, state, changes, state_hash, visits, bytes, step_node, attempt, \
            status, started_at, duration_us, input_hash, output_hash, error, fuel, \
            memory, detail, ord)), \
    c AS ( \
        INSERT INTO checkpoints (run_id, seq, node_id, next_nodes, is_snapshot, state, \
            changes, state_hash, visits, bytes, created_at) \
        SELECT u.run_id, u.seq, u.node_id, u.next_nodes, u.is_snapshot, u.state, \
            u.changes, u.state_hash, u.visits, u.bytes, $4 \
        FROM runs JOIN u ON runs.id = u.run_id \
        WHERE u.owner IS NULL \
            OR (runs.lease_owner = u.owner AND runs.lease_generation = u.generation) \
        ORDER BY runs.id FOR UPDATE OF runs \
        RETURNING run_id), \
    r AS ( \
        UPDATE runs SET last_seq = u.seq, current_node = u.current_node, updated_at = $4, \
            status = 'running' \
        FROM c JOIN u ON u.run_id = c.run_id WHERE runs.id = c.run_id \
        RETURNING runs.id, COALESCE(runs.task_id, runs.id) AS task_id, u.ord), \
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
        FROM r JOIN u ON u.ord = r.ord ORDER BY r.task_id, u.ord DESC \
        ON CONFLICT (task_id) DO UPDATE SET run_id = excluded.run_id, \
            seq = excluded.seq, node_id = excluded.node_id, \
            next_nodes = excluded.next_nodes, state_hash = excluded.state_hash, \
            updated_at = excluded.updated_at) \
    SELECT ord FROM r";
