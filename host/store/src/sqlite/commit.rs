//! SQLite: everything that writes a run's history, each write one
//! transaction on the handle's writer connection (`writer.rs`): new runs,
//! checkpoint commits with their step row, journal entries and artifacts,
//! failed steps, map items, finishes and artifacts on their own. The
//! exactly-once guard is the `checkpoints_in_sequence` trigger (migration
//! 0001); a fenced write checks the lease first, under the write lock.
//!
//! Must not: hold a transaction across an `.await` (the writer runs `work`
//! synchronously), or read outside a write's own checks (`read.rs` does).

use rusqlite::{OptionalExtension, Transaction, params};

use super::SqliteStore;
use super::writer::Unsynced;
use crate::checkpoint::{EncodedCheckpoint, START_NODE};
use crate::codec::{ACTIVE, StepBinds, now_ms};
use crate::error::StoreError;
use crate::lease::{Admission, Lease, RunOptions, holds, lease_lost, ttl_ms};
use crate::prepared::{
    CommitExtras, PreparedArtifact, PreparedCommit, PreparedFinish, PreparedMapItem, PreparedRun,
    PreparedStep,
};
use crate::refusal::{self, Decision};
use crate::run::NewRun;
use crate::wait::RunPosition;

impl SqliteStore {
    /// Like [`sq`](Self::sq), but a foreign-key violation means the run is
    /// missing.
    fn sq_write(&self, source: rusqlite::Error, run_id: &str, action: &str) -> StoreError {
        if extended_code(&source) == Some(rusqlite::ffi::SQLITE_CONSTRAINT_FOREIGNKEY) {
            return refusal::run_not_found(&self.db, run_id);
        }
        self.sq(source, action)
    }

    /// A write transaction (see `writer`) whose `work` decides: a refusal is
    /// its `Err`, rolled back before this returns (the writer's
    /// `Transaction` rolls back when dropped); a [`Decision::Leave`] wrote
    /// nothing, and commits nothing.
    pub(super) async fn transaction<T>(
        &self,
        action: &str,
        mut work: impl FnMut(&Transaction<'_>) -> Result<Decision<T>, StoreError>,
    ) -> Result<T, StoreError> {
        self.writer
            .write(action, |tx| work(tx).map(Decision::into_inner))
            .await
    }

    /// A write transaction (see `writer`) that, with a `fence`, first checks
    /// the lease under the write lock: `work` writes only while it holds.
    pub(super) async fn write_fenced<T>(
        &self,
        fence: Option<&Lease>,
        action: &str,
        work: impl FnMut(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.writer
            .write(action, self.fenced(fence, action, work))
            .await
    }

    /// `work`, after a check of the lease `fence` when there is one.
    fn fenced<'f, T>(
        &'f self,
        fence: Option<&'f Lease>,
        action: &'f str,
        mut work: impl FnMut(&Transaction<'_>) -> Result<T, StoreError> + 'f,
    ) -> impl FnMut(&Transaction<'_>) -> Result<T, StoreError> + 'f {
        move |tx| {
            if let Some(fence) = fence {
                // Under the write lock, so the lease cannot change before COMMIT.
                self.check_fence(tx, fence, action)?;
            }
            work(tx)
        }
    }

    // ---- runs ------------------------------------------------------------------

    pub async fn create_run(
        &self,
        run: &NewRun,
        prepared: PreparedRun,
        options: &RunOptions,
    ) -> Result<Admission, StoreError> {
        let action = format_args!("creating run `{}`", run.id).to_string();
        let now = now_ms();
        let p = &prepared;
        let (encoded, hash) = (&p.checkpoint, p.state_hash.as_str());
        let task_id = p.task_id.as_deref();
        self.transaction(&action, |tx| {
            // One writer at a time: a key looked up here is still free
            // when this transaction writes it.
            if let Some(holder) = self
                .key_holder(tx, run, options, now)
                .map_err(|e| self.sq(e, &action))?
            {
                return Ok(Decision::Leave(Admission::Existing { run_id: holder }));
            }
            // The run's row goes first, so a duplicate id fails before
            // anything else is written.
            let inserted = execute(
                tx,
                INSERT_RUN_SQL,
                params![
                    p.id,
                    p.scenario_name,
                    p.scenario_path,
                    p.scenario_digest,
                    p.status,
                    p.input,
                    p.start_node,
                    now,
                    task_id,
                    p.run_digest,
                    p.provenance,
                    options.priority,
                    options.concurrency_limit,
                    options.concurrency_key,
                ],
            );
            if let Err(e) = inserted {
                return Err(
                    if matches!(
                        extended_code(&e),
                        Some(
                            rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
                                | rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                        )
                    ) {
                        refusal::run_exists(&self.db, &run.id)
                    } else {
                        self.sq(e, &action)
                    },
                );
            }
            insert_checkpoint(tx, &run.id, 0, START_NODE, encoded, hash, now)
                .and_then(|written| match task_id {
                    // A run without a task id is its own task: its row in
                    // `runs` already says where it stands.
                    None => Ok(written),
                    Some(task_id) => execute(
                        tx,
                        INSERT_FIRST_TASK_ROW_SQL,
                        params![task_id, run.id, START_NODE, encoded.next_nodes, hash, now],
                    ),
                })
                .and_then(|_| self.take_keys(tx, run, options, now))
                .map_err(|e| self.sq(e, &action))?;
            Ok(Decision::Commit(Admission::Created))
        })
        .await
    }

    /// The run that already holds the idempotency key or the schedule tick
    /// of `options`, if one does (an expired key holds nothing).
    fn key_holder(
        &self,
        tx: &Transaction<'_>,
        run: &NewRun,
        options: &RunOptions,
        now: i64,
    ) -> rusqlite::Result<Option<String>> {
        if let Some(idempotency) = &options.idempotency {
            let holder = tx
                .prepare_cached(
                    "SELECT run_id FROM idempotency_keys WHERE key = ?1 AND expires_at > ?2",
                )?
                .query_row(params![idempotency.key, now], |row| row.get(0))
                .optional()?;
            if holder.is_some() {
                return Ok(holder);
            }
        }
        if let Some(tick) = &options.schedule_tick {
            return tx
                .prepare_cached(
                    "SELECT run_id FROM schedule_ticks \
                     WHERE scenario_name = ?1 AND schedule = ?2 AND tick_ms = ?3",
                )?
                .query_row(
                    params![run.scenario_name, tick.schedule, tick.tick_ms],
                    |row| row.get(0),
                )
                .optional();
        }
        Ok(None)
    }

    /// Records that `run` holds the keys of `options` (an expired
    /// idempotency key is taken over).
    fn take_keys(
        &self,
        tx: &Transaction<'_>,
        run: &NewRun,
        options: &RunOptions,
        now: i64,
    ) -> rusqlite::Result<usize> {
        let mut written = 0;
        if let Some(idempotency) = &options.idempotency {
            written += execute(
                tx,
                "INSERT INTO idempotency_keys (key, run_id, created_at, expires_at) \
                 VALUES (?1, ?2, ?3, ?3 + ?4) \
                 ON CONFLICT (key) DO UPDATE SET run_id = excluded.run_id, \
                   created_at = excluded.created_at, expires_at = excluded.expires_at",
                params![idempotency.key, run.id, now, ttl_ms(idempotency.ttl)],
            )?;
        }
        if let Some(tick) = &options.schedule_tick {
            written += execute(
                tx,
                "INSERT INTO schedule_ticks (scenario_name, schedule, tick_ms, run_id, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![run.scenario_name, tick.schedule, tick.tick_ms, run.id, now],
            )?;
        }
        Ok(written)
    }

    /// Writes a step's commit; `ahead`: returns once it is written, with
    /// what says when it is durable (`Writer::write_ahead`).
    pub async fn commit_step(
        &self,
        prepared: PreparedCommit,
        extras: &CommitExtras<'_>,
        ahead: bool,
    ) -> Result<Option<Unsynced>, StoreError> {
        let p = &prepared;
        let run_id = p.run_id.as_str();
        let action = p.action();
        let (seq, now) = (p.seq, p.now);
        let work = self.fenced(p.fence.as_ref(), &action, |tx| {
            // The checkpoint goes first: the `checkpoints_in_sequence`
            // trigger aborts it unless seq is exactly last_seq + 1 of an
            // active run, which is the exactly-once guard; nothing after
            // it runs then.
            let inserted = insert_checkpoint(
                tx,
                run_id,
                seq,
                &p.node_id,
                &p.checkpoint,
                &p.state_hash,
                now,
            );
            if let Err(e) = inserted {
                if is_sequence_guard(&e) {
                    // Returning the error rolls the transaction back.
                    return Err(self.why_not_next(tx, run_id, seq));
                }
                return Err(self.sq(e, &action));
            }
            // The status update is separate so that an unchanged status
            // leaves its index alone.
            execute(
                tx,
                ADVANCE_RUN_SQL,
                params![run_id, seq, p.current_node, now],
            )
            .and_then(|_| execute(tx, MARK_RUNNING_SQL, params![run_id]))
            .and_then(|_| insert_step(tx, &p.step))
            .and_then(|_| {
                execute(
                    tx,
                    UPSERT_TASK_ROW_SQL,
                    params![
                        run_id,
                        seq,
                        p.node_id,
                        p.checkpoint.next_nodes,
                        p.state_hash,
                        now,
                    ],
                )
            })
            .map_err(|e| self.sq(e, &action))?;
            for entry in &extras.journal {
                execute(
                    tx,
                    "INSERT INTO journal (run_id, seq, node_id, kind, request, response, \
                         created_at, item_index, entry_index, request_digest, digest) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                    params![
                        run_id,
                        entry.seq,
                        entry.node_id,
                        entry.kind,
                        entry.request,
                        entry.response,
                        now,
                        entry.item,
                        entry.entry,
                        entry.request_digest,
                        entry.digest,
                    ],
                )
                .map_err(|e| self.sq(e, &action))?;
            }
            if let Some(entry) = &extras.cache {
                execute(
                    tx,
                    UPSERT_CACHE_SQL,
                    params![
                        entry.key,
                        entry.output,
                        entry.output_hash,
                        run_id,
                        seq,
                        p.node_id,
                        now,
                        entry.expires_at,
                        entry.digest,
                    ],
                )
                .map_err(|e| self.sq(e, &action))?;
            }
            for artifact in &extras.artifacts {
                insert_artifact(tx, run_id, artifact, now).map_err(|e| self.sq(e, &action))?;
            }
            // The run's last step: its end in the same transaction.
            if let Some(finish) = &p.finish {
                self.write_finish(tx, finish, now, &action)?;
            }
            crate::failpoint::hit(|| format!("in-commit:{}", p.node_id));
            Ok(())
        });
        if ahead {
            Ok(self.writer.write_ahead(&action, work).await?.1)
        } else {
            self.writer.write(&action, work).await.map(|()| None)
        }
    }

    /// Refuses (LeaseLost) unless the run's lease is still `fence`; call
    /// inside a write transaction. A missing run passes: the write that
    /// follows reports it.
    fn check_fence(
        &self,
        tx: &Transaction<'_>,
        fence: &Lease,
        action: &str,
    ) -> Result<(), StoreError> {
        let row = tx
            .prepare_cached(
                "SELECT lease_owner, lease_generation, lease_expires_at FROM runs WHERE id = ?1",
            )
            .and_then(|mut statement| {
                statement
                    .query_row(params![fence.run_id], |row| {
                        Ok((
                            row.get::<_, Option<String>>(0)?,
                            row.get::<_, i64>(1)?,
                            row.get::<_, Option<i64>>(2)?,
                        ))
                    })
                    .optional()
            })
            .map_err(|e| self.sq(e, action))?;
        match row {
            Some((holder, generation, expires)) if !holds(fence, holder.as_deref(), generation) => {
                Err(lease_lost(
                    &self.db,
                    fence,
                    holder.as_deref(),
                    generation,
                    expires,
                ))
            }
            _ => Ok(()),
        }
    }

    /// Why the sequence guard refused a checkpoint: a cancel was asked
    /// for, or the run is finished, or the checkpoint is not the next.
    /// (The fence was checked before, under the same write lock.)
    fn why_not_next(&self, tx: &Transaction<'_>, run_id: &str, seq: i64) -> StoreError {
        match self.position(tx, run_id, &format!("checking run `{run_id}`")) {
            Ok(run) => RunPosition::checkpoint_refused(Some(&run), &self.db, run_id, seq, None),
            Err(StoreError::RunNotFound { .. }) => {
                RunPosition::checkpoint_refused(None, &self.db, run_id, seq, None)
            }
            Err(e) => e,
        }
    }

    /// With a `fence`, writes nothing unless the lease still holds.
    pub async fn record_failed_step(&self, p: &PreparedStep<'_>) -> Result<(), StoreError> {
        let action = p.action();
        let run_id = p.step.run_id.as_str();
        self.write_fenced(p.fence, &action, |tx| {
            insert_step(tx, &p.step).map_err(|e| self.sq_write(e, run_id, &action))?;
            execute(
                tx,
                "UPDATE runs SET updated_at = ?2 WHERE id = ?1",
                params![run_id, p.now],
            )
            .map_err(|e| self.sq(e, &action))?;
            Ok(())
        })
        .await
    }

    pub async fn finish_run(&self, prepared: PreparedFinish) -> Result<(), StoreError> {
        let p = &prepared;
        let action = p.action();
        let now = now_ms();
        self.write_fenced(p.fence.as_ref(), &action, |tx| {
            self.write_finish(tx, p, now, &action)
        })
        .await
    }

    /// Sets an active run's final status, result and error and releases its
    /// lease, in `tx` (the fence checked already); refused when the run is
    /// finished.
    fn write_finish(
        &self,
        tx: &Transaction<'_>,
        p: &PreparedFinish,
        now: i64,
        action: &str,
    ) -> Result<(), StoreError> {
        let run_id = p.run_id.as_str();
        let updated = execute(
            tx,
            &format!(
                "UPDATE runs SET status = ?2, result = ?3, error = ?4, \
                     lease_owner = NULL, lease_expires_at = NULL, updated_at = ?5 \
                     WHERE id = ?1 AND status IN {ACTIVE}"
            ),
            params![run_id, p.status, p.result, p.error, now],
        )
        .map_err(|e| self.sq(e, action))?;
        if updated == 1 {
            return Ok(());
        }
        let current = tx
            .query_row(
                "SELECT status FROM runs WHERE id = ?1",
                params![run_id],
                |row| row.get::<_, String>(0),
            )
            .optional()
            .map_err(|e| self.sq(e, action))?;
        Err(refusal::already_finished(
            &self.db,
            run_id,
            current.as_deref(),
        ))
    }

    pub async fn record_map_item(&self, p: &PreparedMapItem<'_>) -> Result<(), StoreError> {
        let action = p.action();
        let item = p.item;
        let now = now_ms();
        self.write_fenced(p.fence, &action, |tx| {
            // Idempotent: a resumed map re-records items it already had;
            // the first durable output wins.
            execute(
                tx,
                "INSERT INTO map_items (run_id, node_id, visit, item_index, output, \
                     output_hash, duration_us, fuel_consumed, created_at, attempt, journal, \
                     digest) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) \
                     ON CONFLICT (run_id, node_id, visit, item_index) DO NOTHING",
                params![
                    item.run_id,
                    item.node_id,
                    p.visit,
                    p.item_index,
                    p.output,
                    item.output_hash,
                    p.duration_us,
                    p.fuel_consumed,
                    now,
                    p.attempt,
                    p.journal,
                    p.digest,
                ],
            )
            .map_err(|e| self.sq_write(e, &item.run_id, &action))?;
            Ok(())
        })
        .await
    }
    // ---- artifacts -------------------------------------------------------------

    pub async fn put_artifact(
        &self,
        run_id: &str,
        artifact: &PreparedArtifact<'_>,
        fence: Option<&Lease>,
    ) -> Result<(), StoreError> {
        let action = format!("storing artifact `{}` of run `{run_id}`", artifact.name);
        let now = now_ms();
        self.write_fenced(fence, &action, |tx| {
            insert_artifact(tx, run_id, artifact, now)
                .map_err(|e| self.sq_write(e, run_id, &action))
        })
        .await
    }
}

// The write statements, each prepared once on the writer connection. They use
// SQLite's `?N` parameters (the reads, through sqlx, use `$N`).

/// A new run ($1..$11: id, scenario name, path, digest, status, input,
/// current node, now, task id, the run's digest, its provenance).
const INSERT_RUN_SQL: &str = "\
INSERT INTO runs (id, scenario_name, scenario_path, scenario_digest, status, input, \
    current_node, last_seq, created_at, updated_at, task_id, digest, provenance, priority, \
    concurrency_limit, concurrency_key) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";

/// A checkpoint ($1 run id, $2 seq, $3 node, $4 next nodes, $5 is_snapshot,
/// $6 state, $7 changes, $8 state hash, $9 visits, $10 bytes, $11 now,
/// $12 the row's digest). The
/// `checkpoints_in_sequence` trigger (migration 0001) aborts it unless seq is
/// 0 or exactly last_seq + 1 of an active run.
const INSERT_CHECKPOINT_SQL: &str = "\
INSERT INTO checkpoints (run_id, seq, node_id, next_nodes, is_snapshot, state, changes, \
    state_hash, visits, bytes, created_at, digest) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";

/// A run's position after a checkpoint ($1 run id, $2 seq, $3 current node, $4 now).
const ADVANCE_RUN_SQL: &str =
    "UPDATE runs SET last_seq = ?2, current_node = ?3, updated_at = ?4 WHERE id = ?1";

/// Only when the status changes, so that its index is otherwise left alone.
const MARK_RUNNING_SQL: &str =
    "UPDATE runs SET status = 'running' WHERE id = ?1 AND status <> 'running'";

/// A new run's task row, at checkpoint 0 ($1 task id, $2 run id, $3 node,
/// $4 next nodes, $5 state hash, $6 now).
const INSERT_FIRST_TASK_ROW_SQL: &str = "\
INSERT INTO task_checkpoints (task_id, run_id, seq, node_id, next_nodes, state_hash, updated_at) \
    VALUES (?1, ?2, 0, ?3, ?4, ?5, ?6) \
    ON CONFLICT (task_id) DO UPDATE SET run_id = excluded.run_id, seq = excluded.seq, \
    node_id = excluded.node_id, next_nodes = excluded.next_nodes, \
    state_hash = excluded.state_hash, updated_at = excluded.updated_at";

/// The run's task row after a checkpoint, if the run has a task id ($1 run
/// id, $2 seq, $3 node, $4 next nodes, $5 state hash, $6 now).
const UPSERT_TASK_ROW_SQL: &str = "\
INSERT INTO task_checkpoints (task_id, run_id, seq, node_id, next_nodes, state_hash, updated_at) \
    SELECT task_id, id, ?2, ?3, ?4, ?5, ?6 FROM runs WHERE id = ?1 AND task_id IS NOT NULL \
    ON CONFLICT (task_id) DO UPDATE SET run_id = excluded.run_id, seq = excluded.seq, \
    node_id = excluded.node_id, next_nodes = excluded.next_nodes, \
    state_hash = excluded.state_hash, updated_at = excluded.updated_at";

/// A node cache entry ($1 key, $2 output, $3 output hash, $4 run id, $5 seq,
/// $6 node, $7 now, $8 expiry, $9 the row's digest), replacing one under
/// the same key (expired, or written by a run that raced this one).
const UPSERT_CACHE_SQL: &str = "\
INSERT INTO node_cache (key, output, output_hash, run_id, seq, node_id, created_at, \
    expires_at, digest) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
    ON CONFLICT (key) DO UPDATE SET output = excluded.output, \
    output_hash = excluded.output_hash, run_id = excluded.run_id, seq = excluded.seq, \
    node_id = excluded.node_id, created_at = excluded.created_at, \
    expires_at = excluded.expires_at, digest = excluded.digest";

/// The message of the `checkpoints_in_sequence` trigger (migration 0001).
const SEQUENCE_GUARD: &str = "skillhost: checkpoint out of sequence";

fn is_sequence_guard(error: &rusqlite::Error) -> bool {
    error.to_string().contains(SEQUENCE_GUARD)
}

/// SQLite's extended result code of a failed statement.
fn extended_code(error: &rusqlite::Error) -> Option<i32> {
    match error {
        rusqlite::Error::SqliteFailure(failure, _) => Some(failure.extended_code),
        _ => None,
    }
}

/// Runs one write statement, prepared once per writer connection.
fn execute(
    tx: &Transaction<'_>,
    sql: &str,
    params: impl rusqlite::Params,
) -> rusqlite::Result<usize> {
    tx.prepare_cached(sql)?.execute(params)
}
fn insert_step(tx: &Transaction<'_>, step: &StepBinds) -> rusqlite::Result<usize> {
    execute(
        tx,
        // A step's id is its run's largest plus one: the run's steps are
        // one range of the table's key (migration 13), read in id order.
        "INSERT INTO steps (run_id, id, seq, node_id, attempt, status, started_at, duration_us, \
         input_hash, output_hash, error, fuel_consumed, memory_peak_bytes, detail) \
         VALUES (?1, (SELECT COALESCE(MAX(id), 0) + 1 FROM steps WHERE run_id = ?1), \
         ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        params![
            step.run_id,
            step.seq,
            step.node_id,
            step.attempt,
            step.status,
            step.started_at,
            step.duration_us,
            step.input_hash,
            step.output_hash,
            step.error,
            step.fuel_consumed,
            step.memory_peak_bytes,
            step.detail,
        ],
    )
}

/// A checkpoint row (see [`INSERT_CHECKPOINT_SQL`]).
fn insert_checkpoint(
    tx: &Transaction<'_>,
    run_id: &str,
    seq: i64,
    node_id: &str,
    encoded: &EncodedCheckpoint,
    hash: &str,
    now: i64,
) -> rusqlite::Result<usize> {
    execute(
        tx,
        INSERT_CHECKPOINT_SQL,
        params![
            run_id,
            seq,
            node_id,
            encoded.next_nodes,
            encoded.is_snapshot,
            encoded.state,
            encoded.changes,
            hash,
            encoded.visits,
            encoded.bytes as i64,
            now,
            encoded.digest,
        ],
    )
}

fn insert_artifact(
    tx: &Transaction<'_>,
    run_id: &str,
    artifact: &PreparedArtifact<'_>,
    now: i64,
) -> rusqlite::Result<()> {
    let PreparedArtifact {
        name,
        media_type,
        bytes,
        digest,
        size,
    } = artifact;
    // Content-addressed: the bytes are stored once whatever refers to them.
    execute(
        tx,
        "INSERT INTO blobs (digest, size, bytes, created_at) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (digest) DO NOTHING",
        params![digest, size, bytes, now],
    )?;
    // A name is one artifact per run; writing it again points it at the new bytes.
    execute(
        tx,
        "INSERT INTO artifacts (run_id, name, digest, media_type, size, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
         ON CONFLICT (run_id, name) DO UPDATE SET digest = excluded.digest, \
         media_type = excluded.media_type, size = excluded.size, created_at = excluded.created_at",
        params![run_id, name, digest, media_type, size, now],
    )?;
    Ok(())
}
