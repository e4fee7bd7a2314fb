//! Group commit for Postgres: checkpoint commits of concurrent runs are
//! batched into shared transactions.
//!
//! Commits queue on a channel; an executor takes whatever is queued (up to
//! [`MAX_BATCH`]) and writes it in one transaction: lock the runs' rows,
//! check each commit's sequence, status and lease under the locks (a refused
//! commit gets its own error and is left out; the others go on), then one
//! multi-row statement per table. Each caller waits for the COMMIT of the
//! transaction that carries its checkpoint, so a node still proceeds only
//! once its own checkpoint is durable. There is no timer: the wait is
//! bounded by one batch in flight (up to [`EXECUTORS`] run at once), so a
//! lone run pays nothing but a channel hop (a batch of one takes the
//! ordinary path), and under load batches fill while the previous ones
//! commit. Unlike a store that serialises every call behind one lock, reads,
//! leases and every other write go straight to the pool.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};

use super::{PgStore, Prepared, now_ms};
use crate::store::error::{StoreError, is_transient};
use crate::store::lease::{holds, lease_lost};
use crate::store::run::RunStatus;

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

/// The lock-and-check row of one run.
struct Locked {
    status: String,
    last_seq: i64,
    owner: Option<String>,
    generation: i64,
    expires: Option<i64>,
    task_id: String,
}

impl PgStore {
    async fn commit_batch(&self, batch: Vec<Pending>) {
        if batch.len() == 1 {
            let pending = batch.into_iter().next().expect("one");
            let result = self.commit_prepared(&pending.prepared).await;
            let _ = pending.reply.send(result);
            return;
        }
        let mut accepted = Vec::with_capacity(batch.len());
        match self.write_batch(batch, &mut accepted).await {
            Ok(()) => {
                for pending in accepted {
                    let _ = pending.reply.send(Ok(()));
                }
            }
            Err(e) => {
                // Every commit of the failed transaction hears why, with the
                // same transient-or-not verdict, so each retries on its own.
                for pending in accepted {
                    let copy = if is_transient(&e) {
                        sqlx::Error::Io(std::io::Error::other(e.to_string()))
                    } else {
                        sqlx::Error::Decode(e.to_string().into())
                    };
                    let error = self.error(
                        copy,
                        format_args!(
                            "committing checkpoint {} of run `{}` (in a group of commits)",
                            pending.prepared.seq, pending.prepared.run_id
                        ),
                    );
                    let _ = pending.reply.send(Err(error));
                }
            }
        }
    }

    /// Checks every commit under row locks, answers the refused ones, and
    /// writes the rest (moved to `accepted`) in one transaction.
    async fn write_batch(
        &self,
        batch: Vec<Pending>,
        accepted: &mut Vec<Pending>,
    ) -> Result<(), sqlx::Error> {
        let mut ids: Vec<String> = batch.iter().map(|p| p.prepared.run_id.clone()).collect();
        ids.sort();
        ids.dedup();
        let mut tx = self.pool.begin().await?;
        let rows = sqlx::query_as::<
            _,
            (
                String,
                String,
                i64,
                Option<String>,
                i64,
                Option<i64>,
                String,
            ),
        >(
            "SELECT id, status, last_seq, lease_owner, lease_generation, lease_expires_at, \
                 COALESCE(task_id, id) \
             FROM runs WHERE id = ANY($1) ORDER BY id FOR UPDATE",
        )
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await?;
        let mut locked: HashMap<String, Locked> = rows
            .into_iter()
            .map(
                |(id, status, last_seq, owner, generation, expires, task_id)| {
                    (
                        id,
                        Locked {
                            status,
                            last_seq,
                            owner,
                            generation,
                            expires,
                            task_id,
                        },
                    )
                },
            )
            .collect();
        for pending in batch {
            match self.check(&pending.prepared, &mut locked) {
                Ok(()) => accepted.push(pending),
                Err(e) => {
                    let _ = pending.reply.send(Err(e));
                }
            }
        }
        if accepted.is_empty() {
            return Ok(());
        }

        let c: Vec<&Prepared> = accepted.iter().map(|p| &p.prepared).collect();
        let col = |f: fn(&Prepared) -> String| -> Vec<String> { c.iter().map(|p| f(p)).collect() };
        let run_ids = col(|p| p.run_id.clone());
        let seqs: Vec<i64> = c.iter().map(|p| p.seq).collect();
        let node_ids = col(|p| p.node_id.clone());
        let next_nodes = col(|p| p.next_nodes.clone());
        let hashes = col(|p| p.state_hash.clone());
        let now = now_ms();
        sqlx::query(
            "INSERT INTO checkpoints (run_id, seq, node_id, next_nodes, is_snapshot, state, \
                 changes, state_hash, visits, bytes, created_at) \
             SELECT r, s, n, x, i, st, ch, h, v, b, $11 FROM UNNEST($1::text[], $2::bigint[], \
                 $3::text[], $4::text[], $5::bool[], $6::text[], $7::text[], $8::text[], \
                 $9::text[], $10::bigint[]) AS u(r, s, n, x, i, st, ch, h, v, b)",
        )
        .bind(&run_ids)
        .bind(&seqs)
        .bind(&node_ids)
        .bind(&next_nodes)
        .bind(c.iter().map(|p| p.is_snapshot).collect::<Vec<bool>>())
        .bind(
            c.iter()
                .map(|p| p.state.clone())
                .collect::<Vec<Option<String>>>(),
        )
        .bind(col(|p| p.changes.clone()))
        .bind(&hashes)
        .bind(col(|p| p.visits.clone()))
        .bind(c.iter().map(|p| p.bytes).collect::<Vec<i64>>())
        .bind(now)
        .execute(&mut *tx)
        .await?;

        // The task rows: one per task, the batch's last commit for it.
        let mut tasks: HashMap<&str, usize> = HashMap::new();
        for (i, p) in c.iter().enumerate() {
            let task = locked
                .get(&p.run_id)
                .map_or(p.run_id.as_str(), |l| l.task_id.as_str());
            tasks.insert(task, i);
        }
        let mut task_rows: Vec<(&str, usize)> = tasks.into_iter().collect();
        task_rows.sort();
        let pick = |f: &dyn Fn(&Prepared) -> String| -> Vec<String> {
            task_rows.iter().map(|(_, i)| f(c[*i])).collect()
        };

        let s = |f: fn(&Prepared) -> Option<String>| -> Vec<Option<String>> {
            c.iter().map(|p| f(p)).collect()
        };
        let n = |f: fn(&Prepared) -> Option<i64>| -> Vec<Option<i64>> {
            c.iter().map(|p| f(p)).collect()
        };
        let moved: i64 = sqlx::query_scalar(
            "WITH r AS ( \
                 UPDATE runs SET last_seq = u.seq, current_node = u.node, updated_at = $4, \
                     status = 'running' \
                 FROM UNNEST($1::text[], $2::bigint[], $3::text[]) AS u(id, seq, node) \
                 WHERE runs.id = u.id RETURNING runs.id), \
             s AS ( \
                 INSERT INTO steps (run_id, seq, node_id, attempt, status, started_at, \
                     duration_us, input_hash, output_hash, error, fuel_consumed, \
                     memory_peak_bytes, detail) \
                 SELECT * FROM UNNEST($1::text[], $2::bigint[], $5::text[], $6::bigint[], \
                     $7::text[], $8::bigint[], $9::bigint[], $10::text[], $11::text[], \
                     $12::text[], $13::bigint[], $14::bigint[], $15::text[])), \
             t AS ( \
                 INSERT INTO task_checkpoints (task_id, run_id, seq, node_id, next_nodes, \
                     state_hash, updated_at) \
                 SELECT *, $4 FROM UNNEST($16::text[], $17::text[], $18::bigint[], \
                     $19::text[], $20::text[], $21::text[]) \
                 ON CONFLICT (task_id) DO UPDATE SET run_id = excluded.run_id, \
                     seq = excluded.seq, node_id = excluded.node_id, \
                     next_nodes = excluded.next_nodes, state_hash = excluded.state_hash, \
                     updated_at = excluded.updated_at) \
             SELECT COUNT(*) FROM r",
        )
        .bind(&run_ids)
        .bind(&seqs)
        .bind(s(|p| p.current_node.clone()))
        .bind(now)
        .bind(col(|p| p.step.node_id.clone()))
        .bind(c.iter().map(|p| p.step.attempt).collect::<Vec<i64>>())
        .bind(col(|p| p.step.status.clone()))
        .bind(c.iter().map(|p| p.step.started_at).collect::<Vec<i64>>())
        .bind(c.iter().map(|p| p.step.duration_us).collect::<Vec<i64>>())
        .bind(s(|p| p.step.input_hash.clone()))
        .bind(s(|p| p.step.output_hash.clone()))
        .bind(s(|p| p.step.error.clone()))
        .bind(n(|p| p.step.fuel_consumed))
        .bind(n(|p| p.step.memory_peak_bytes))
        .bind(s(|p| p.step.detail.clone()))
        .bind(
            task_rows
                .iter()
                .map(|(t, _)| t.to_string())
                .collect::<Vec<String>>(),
        )
        .bind(pick(&|p| p.run_id.clone()))
        .bind(
            task_rows
                .iter()
                .map(|(_, i)| c[*i].seq)
                .collect::<Vec<i64>>(),
        )
        .bind(pick(&|p| p.node_id.clone()))
        .bind(pick(&|p| p.next_nodes.clone()))
        .bind(pick(&|p| p.state_hash.clone()))
        .fetch_one(&mut *tx)
        .await?;
        debug_assert_eq!(moved as usize, c.len());
        for p in &c {
            crate::failpoint::hit(|| format!("in-commit:{}", p.node_id));
        }
        tx.commit().await
    }

    /// One commit's verdict under the lock, in the order the single path
    /// reports: missing run, lost lease, finished run, out of sequence.
    fn check(&self, p: &Prepared, locked: &mut HashMap<String, Locked>) -> Result<(), StoreError> {
        let Some(row) = locked.get_mut(&p.run_id) else {
            return Err(StoreError::RunNotFound {
                db: self.db.clone(),
                run_id: p.run_id.clone(),
            });
        };
        if let Some(fence) = &p.fence
            && !holds(fence, row.owner.as_deref(), row.generation)
        {
            return Err(lease_lost(
                &self.db,
                fence,
                row.owner.as_deref(),
                row.generation,
                row.expires,
            ));
        }
        let conflict = |message: String| StoreError::Conflict {
            db: self.db.clone(),
            run_id: p.run_id.clone(),
            message,
        };
        if row.status.parse().is_ok_and(RunStatus::is_finished) {
            return Err(conflict(format!(
                "the run is {}; it takes no more checkpoints",
                row.status
            )));
        }
        if row.last_seq != p.seq - 1 {
            return Err(conflict(format!(
                "checkpoint {} does not follow the last one ({}); another runner may have \
                 taken this run, or this step was already committed",
                p.seq, row.last_seq
            )));
        }
        // A second commit of the same run in this batch must follow this one.
        row.last_seq = p.seq;
        Ok(())
    }
}
