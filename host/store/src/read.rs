//! The read half of the store, written once for both backends: runs,
//! waits, steps, map items, the journal, checkpoints and rebuilt states, artifacts,
//! where tasks stand, and retention settings.
//!
//! Every read is one statement that both backends accept as written: `$N`
//! parameters (sqlx binds SQLite's `$N` by number, as Postgres does: see
//! `sqlx-sqlite`'s `arguments.rs`), `CAST(… AS …)` rather than Postgres's
//! `::`, and `= TRUE` for a flag (SQLite keeps flags as 0 and 1, and reads
//! `TRUE` as 1). A backend implements [`Reads`] by running one statement
//! ([`Reads::fetch`]): SQLite on its read pool (its writes have their own
//! connection), Postgres on its pool under its retry rule, so that a read
//! outlives a server restart. Rows are decoded by the shared codec
//! ([`Codec`]).
//!
//! Why a trait with one required method, rather than code generic over
//! sqlx's `Database`: sqlx's executor bounds (higher-ranked, per connection
//! type) would have to be restated on every read. Here the only generic
//! parts are the row ([`StoredRow`]) and the parameters ([`Param`]), and
//! each backend runs statements in its own concrete types.
//!
//! Must not: write, or read what a write path must read inside its own
//! transaction (the fence and sequence checks stay with each backend's
//! writes).

use std::future::Future;

use sqlx::query::Query;
use sqlx::{Database, Encode, Type};

use crate::cache::CachedOutput;
use crate::checkpoint::{CheckpointRow, LoadedCheckpoint, RunHistory, SnapshotPlan, rebuild};
use crate::codec::{Codec, StoredRow, run_columns};
use crate::error::StoreError;
use crate::kv::{KvSpace, KvUsage, describe, kv_action};
use crate::lease::{CurrentCheckpoint, QueueStats, Retention};
use crate::rows::{ArtifactRow, JournalEntry, JournalRow, MapItemRow, StepRow};
use crate::run::{RunFilter, RunRow, RunStatus, UnreadableRun};
use crate::wait::WaitRow;

/// How a journal row is named in errors: its run, seq, node, item and entry.
pub(crate) fn journal_row_name(run_id: &str, entry: &JournalEntry) -> String {
    let item = entry
        .item
        .map(|i| format!(", item {i}"))
        .unwrap_or_default();
    format!(
        "journal entry {} of step {} (node `{}`{item}) of run `{run_id}`",
        entry.entry, entry.seq, entry.node_id
    )
}

/// A value bound to a read's `$N` parameter.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Param<'a> {
    Text(&'a str),
    MaybeText(Option<&'a str>),
    Int(i64),
    MaybeInt(Option<i64>),
}

impl<'q> Param<'q> {
    /// Binds `params` to `query`, the first as `$1`.
    pub fn bind_all<DB: Database>(
        params: &[Param<'q>],
        mut query: Query<'q, DB, DB::Arguments<'q>>,
    ) -> Query<'q, DB, DB::Arguments<'q>>
    where
        &'q str: Encode<'q, DB> + Type<DB>,
        Option<&'q str>: Encode<'q, DB> + Type<DB>,
        i64: Encode<'q, DB> + Type<DB>,
        Option<i64>: Encode<'q, DB> + Type<DB>,
    {
        for param in params {
            query = match *param {
                Param::Text(value) => query.bind(value),
                Param::MaybeText(value) => query.bind(value),
                Param::Int(value) => query.bind(value),
                Param::MaybeInt(value) => query.bind(value),
            };
        }
        query
    }
}

const RUN: &str = concat!("SELECT ", run_columns!(), " FROM runs WHERE id = $1");

const RUNS: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM runs WHERE (CAST($1 AS TEXT) IS NULL OR status = $1) \
     ORDER BY created_at DESC, id DESC LIMIT $2"
);

/// A page of runs: status $1 and scenario $2 if given, older than the
/// cursor ($3 created_at, $4 id) if given, newest first, at most $5. The
/// order is the `runs_by_created` index's, so a page costs its rows.
const RUNS_PAGE: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM runs WHERE (CAST($1 AS TEXT) IS NULL OR status = $1) \
     AND (CAST($2 AS TEXT) IS NULL OR scenario_name = $2) \
     AND (CAST($3 AS BIGINT) IS NULL OR created_at < $3 \
          OR (created_at = $3 AND id < CAST($4 AS TEXT))) \
     ORDER BY created_at DESC, id DESC LIMIT $5"
);

const WAITS: &str = "SELECT run_id, seq, node_id, prompt, answer_schema, created_at, deadline, \
     answer, answered_by, answered_at FROM waits WHERE run_id = $1 ORDER BY seq";

const WAIT: &str = "SELECT run_id, seq, node_id, prompt, answer_schema, created_at, deadline, \
     answer, answered_by, answered_at FROM waits WHERE run_id = $1 AND seq = $2";

const CHILDREN: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM runs WHERE parent_run_id = $1 ORDER BY created_at, id"
);

const CHILD: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM runs WHERE parent_run_id = $1 AND parent_node = $2 AND parent_visit = $3 \
     ORDER BY created_at, id"
);

const STEPS: &str = "SELECT id, seq, node_id, attempt, status, started_at, duration_us, \
     input_hash, output_hash, error, fuel_consumed, memory_peak_bytes, detail \
     FROM steps WHERE run_id = $1 ORDER BY id";

const MAP_ITEMS: &str = "SELECT item_index, output, output_hash, duration_us, fuel_consumed, \
     attempt, journal, digest \
     FROM map_items WHERE run_id = $1 AND node_id = $2 AND visit = $3 ORDER BY item_index";

/// A run's journal in the order it was committed: by step, and within a
/// step by map item and entry, as the commit inserts them.
const JOURNAL: &str = "SELECT seq, node_id, item_index, entry_index, kind, request, response, \
     request_digest, digest FROM journal WHERE run_id = $1 ORDER BY seq, id";

const CHECKPOINTS: &str = "SELECT seq, node_id, next_nodes, state_hash, is_snapshot, bytes, \
     created_at FROM checkpoints WHERE run_id = $1 ORDER BY seq";

/// What rebuilding the state at checkpoint $2 of run $1 (its last if $2
/// is NULL) needs, in one statement (one consistent read): the nearest
/// snapshot at or before it and every checkpoint after that up to it.
const HISTORY: &str = "\
    WITH target AS (SELECT COALESCE(CAST($2 AS BIGINT), \
        (SELECT MAX(seq) FROM checkpoints WHERE run_id = $1)) AS seq) \
    SELECT c.seq, c.node_id, c.next_nodes, c.is_snapshot, c.state, c.changes, \
        c.state_hash, c.visits, c.digest, \
        (SELECT r.digest FROM runs AS r WHERE r.id = $1) AS run_digest \
    FROM checkpoints AS c, target \
    WHERE c.run_id = $1 AND c.seq <= target.seq AND c.seq >= COALESCE( \
        (SELECT MAX(s.seq) FROM checkpoints AS s \
         WHERE s.run_id = $1 AND s.is_snapshot = TRUE AND s.seq <= target.seq), 0) \
    ORDER BY c.seq";

/// Every checkpoint of run $1 with its changes, by seq, and the state of
/// checkpoint 0 (the only one a whole history needs).
const WHOLE_HISTORY: &str = "\
    SELECT c.seq, c.node_id, c.next_nodes, c.is_snapshot, \
        CASE WHEN c.seq = 0 THEN c.state END AS state, c.changes, \
        c.state_hash, c.visits, c.digest, \
        (SELECT r.digest FROM runs AS r WHERE r.id = $1) AS run_digest \
    FROM checkpoints AS c WHERE c.run_id = $1 ORDER BY c.seq";

/// The node cache's entry under key $1 that has not expired at $2.
const NODE_CACHE: &str = "SELECT key, output, output_hash, run_id, seq, node_id, created_at, \
     expires_at, digest FROM node_cache WHERE key = $1 AND expires_at > $2";

const ARTIFACTS: &str = "SELECT name, digest, media_type, size, created_at FROM artifacts \
     WHERE run_id = $1 ORDER BY name";

const BLOB: &str = "SELECT bytes FROM blobs WHERE digest = $1";

/// Where task $1 stands, as one statement: its task row if it has one
/// (runs with an explicit task id write them), else the run whose id is $1
/// and that has no task id (a run without one is its own task), with its
/// checkpoint at `last_seq`: the same columns the task row would have held
/// (`updated_at` is that checkpoint's `created_at`, which its commit
/// wrote as both). A task row wins over the fallback.
const CURRENT_CHECKPOINT: &str = "\
    SELECT run_id, seq, node_id, next_nodes, state_hash, updated_at FROM ( \
        SELECT 0 AS pick, run_id, seq, node_id, next_nodes, state_hash, updated_at \
        FROM task_checkpoints WHERE task_id = $1 \
        UNION ALL \
        SELECT 1, c.run_id, c.seq, c.node_id, c.next_nodes, c.state_hash, c.created_at \
        FROM runs AS r JOIN checkpoints AS c ON c.run_id = r.id AND c.seq = r.last_seq \
        WHERE r.id = $1 AND r.task_id IS NULL) AS found \
    ORDER BY pick LIMIT 1";

const LAST_SCHEDULE_TICK: &str = "SELECT tick_ms FROM schedule_ticks \
     WHERE scenario_name = $1 AND schedule = $2 ORDER BY tick_ms DESC LIMIT 1";

const RETENTION: &str = "SELECT scenario_name, keep_ms FROM retention ORDER BY scenario_name";

/// The queue and the open waits in one statement (one consistent read):
/// queued runs, when the one queued longest ago was queued (its
/// `updated_at`: a run queued again, answered or given back, counts from
/// then), and runs waiting for an answer. The `runs_by_status` index
/// answers each.
const QUEUE_STATS: &str = "SELECT \
    (SELECT COUNT(*) FROM runs WHERE status = 'queued') AS queued, \
    (SELECT MIN(updated_at) FROM runs WHERE status = 'queued') AS oldest_queued_at, \
    (SELECT COUNT(*) FROM runs WHERE status = 'waiting') AS waiting";

const KV_GET: &str = "SELECT value FROM kv WHERE scope = $1 AND namespace = $2 AND key = $3";

/// The first $4 keys of namespace ($1, $2) that start with $3, in byte
/// order (Postgres's column is `COLLATE "C"`). A prefix compared as a
/// prefix, not a `LIKE` pattern, so `%`, `_` and `\` in it mean
/// themselves; `length` and `substr` count characters alike on both
/// backends, and neither a key nor a prefix holds NUL (the capability
/// refuses it), where SQLite's text functions would stop.
const KV_KEYS: &str = "SELECT key FROM kv WHERE scope = $1 AND namespace = $2 \
     AND substr(key, 1, length($3)) = $3 ORDER BY key LIMIT $4";

const KV_USAGE_ROW: &str = "SELECT keys, bytes FROM kv_usage WHERE scope = $1 AND namespace = $2";

/// Reading a store, on either backend.
pub(crate) trait Reads: Codec + Sync {
    type Row: StoredRow + Send;

    /// Runs one read statement with `params` and returns its rows; a
    /// failure is a [`StoreError::Database`] while `action`.
    fn fetch(
        &self,
        sql: &'static str,
        params: &[Param<'_>],
        action: &str,
    ) -> impl Future<Output = Result<Vec<Self::Row>, StoreError>> + Send;

    async fn run(&self, run_id: &str) -> Result<Option<RunRow>, StoreError> {
        let action = format!("reading run `{run_id}`");
        let rows = self.fetch(RUN, &[Param::Text(run_id)], &action).await?;
        rows.first().map(|row| self.run_row(row)).transpose()
    }

    async fn list_runs(
        &self,
        status: Option<RunStatus>,
        limit: u32,
    ) -> Result<Vec<RunRow>, StoreError> {
        let params = [
            Param::MaybeText(status.map(RunStatus::as_str)),
            Param::Int(i64::from(limit)),
        ];
        let rows = self.fetch(RUNS, &params, "listing runs").await?;
        rows.iter().map(|row| self.run_row(row)).collect()
    }

    /// [`list_runs`](Self::list_runs), each row decoded and checked on its
    /// own: a bad row is its error, and the others are still listed.
    async fn list_runs_each(
        &self,
        status: Option<RunStatus>,
        limit: u32,
    ) -> Result<Vec<Result<RunRow, UnreadableRun>>, StoreError> {
        let params = [
            Param::MaybeText(status.map(RunStatus::as_str)),
            Param::Int(i64::from(limit)),
        ];
        let rows = self.fetch(RUNS, &params, "listing runs").await?;
        Ok(rows.iter().map(|row| self.listed_run(row)).collect())
    }

    /// One page of the runs list: newest first, by `filter`'s status and
    /// scenario, after its cursor; each row decoded and checked on its own.
    async fn list_runs_page(
        &self,
        filter: &RunFilter,
    ) -> Result<Vec<Result<RunRow, UnreadableRun>>, StoreError> {
        let (before_ms, before_id) = match &filter.before {
            Some(cursor) => (Some(cursor.created_at_ms), Some(cursor.id.as_str())),
            None => (None, None),
        };
        let params = [
            Param::MaybeText(filter.status.map(RunStatus::as_str)),
            Param::MaybeText(filter.scenario.as_deref()),
            Param::MaybeInt(before_ms),
            Param::MaybeText(before_id),
            Param::Int(i64::from(filter.limit)),
        ];
        let rows = self.fetch(RUNS_PAGE, &params, "listing runs").await?;
        Ok(rows.iter().map(|row| self.listed_run(row)).collect())
    }

    /// A row of a runs list: the run, or why it cannot be read.
    fn listed_run(&self, row: &Self::Row) -> Result<RunRow, UnreadableRun> {
        self.run_row(row).map_err(|error| UnreadableRun {
            id: row.column("id").ok(),
            error: Box::new(error),
        })
    }

    async fn waits(&self, run_id: &str) -> Result<Vec<WaitRow>, StoreError> {
        let action = format!("reading the waits of run `{run_id}`");
        let rows = self.fetch(WAITS, &[Param::Text(run_id)], &action).await?;
        rows.iter().map(|row| self.wait_row(row)).collect()
    }

    async fn wait_at(&self, run_id: &str, seq: u64) -> Result<Option<WaitRow>, StoreError> {
        let action = format!("reading the wait of run `{run_id}` at checkpoint {seq}");
        let params = [
            Param::Text(run_id),
            Param::Int(self.int(seq, "checkpoint seq")?),
        ];
        let rows = self.fetch(WAIT, &params, &action).await?;
        rows.first().map(|row| self.wait_row(row)).transpose()
    }

    async fn children(&self, run_id: &str) -> Result<Vec<RunRow>, StoreError> {
        let action = format!("reading the child runs of run `{run_id}`");
        let rows = self
            .fetch(CHILDREN, &[Param::Text(run_id)], &action)
            .await?;
        rows.iter().map(|row| self.run_row(row)).collect()
    }

    async fn child(
        &self,
        run_id: &str,
        node: &str,
        visit: u32,
    ) -> Result<Option<RunRow>, StoreError> {
        let action = format!("reading the child run of node `{node}` of run `{run_id}`");
        let params = [
            Param::Text(run_id),
            Param::Text(node),
            Param::Int(i64::from(visit)),
        ];
        let rows = self.fetch(CHILD, &params, &action).await?;
        // The link is checked against the row's digest-pinned provenance,
        // not only the computed columns.
        for row in &rows {
            let run = self.run_row(row)?;
            if run
                .parent()
                .is_some_and(|p| p.run_id == run_id && p.node == node && p.visit == visit)
            {
                return Ok(Some(run));
            }
        }
        Ok(None)
    }

    async fn steps(&self, run_id: &str) -> Result<Vec<StepRow>, StoreError> {
        let action = format!("reading steps of run `{run_id}`");
        let rows = self.fetch(STEPS, &[Param::Text(run_id)], &action).await?;
        rows.iter().map(|row| self.step_row(run_id, row)).collect()
    }

    async fn map_items(
        &self,
        run_id: &str,
        node_id: &str,
        visit: u32,
    ) -> Result<Vec<MapItemRow>, StoreError> {
        let action = format!("reading items of map node `{node_id}` of run `{run_id}`");
        let params = [
            Param::Text(run_id),
            Param::Text(node_id),
            Param::Int(i64::from(visit)),
        ];
        let rows = self.fetch(MAP_ITEMS, &params, &action).await?;
        rows.iter()
            .map(|row| self.map_item_row(run_id, node_id, visit, row))
            .collect()
    }

    /// Every journal row of the run, each with its fault if it no longer
    /// matches its digest.
    async fn journal_rows(&self, run_id: &str) -> Result<Vec<JournalRow>, StoreError> {
        let action = format!("reading the journal of run `{run_id}`");
        let rows = self.fetch(JOURNAL, &[Param::Text(run_id)], &action).await?;
        let mut out: Vec<JournalRow> = Vec::with_capacity(rows.len());
        // A row's place among its step's rows: the entry index of a row
        // written before entry indexes were.
        let (mut seq, mut position) = (None, 0u32);
        for row in &rows {
            let this: i64 = self.get(row, "seq")?;
            if seq != Some(this) {
                (seq, position) = (Some(this), 0);
            }
            out.push(self.journal_row(run_id, position, row)?);
            position += 1;
        }
        Ok(out)
    }

    /// The run's journal, every row checked against its digests: the first
    /// that does not match is [`StoreError::Corrupt`] naming the run, the
    /// seq and the entry.
    async fn journal(&self, run_id: &str) -> Result<Vec<JournalEntry>, StoreError> {
        self.journal_rows(run_id)
            .await?
            .into_iter()
            .map(|row| match row.fault {
                None => Ok(row.entry),
                Some(detail) => Err(self.corrupt(journal_row_name(run_id, &row.entry), detail)),
            })
            .collect()
    }

    async fn checkpoints(&self, run_id: &str) -> Result<Vec<CheckpointRow>, StoreError> {
        let action = format!("reading checkpoints of run `{run_id}`");
        let rows = self
            .fetch(CHECKPOINTS, &[Param::Text(run_id)], &action)
            .await?;
        rows.iter()
            .map(|row| self.checkpoint_row(run_id, row))
            .collect()
    }

    async fn latest_state(
        &self,
        run_id: &str,
    ) -> Result<Option<(LoadedCheckpoint, SnapshotPlan)>, StoreError> {
        self.load(run_id, None).await
    }

    async fn state_at(
        &self,
        run_id: &str,
        seq: u64,
    ) -> Result<Option<LoadedCheckpoint>, StoreError> {
        let Ok(target) = i64::try_from(seq) else {
            return Ok(None);
        };
        let loaded = self.load(run_id, Some(target)).await?;
        Ok(loaded.map(|(checkpoint, _)| checkpoint))
    }

    /// Rebuilds the state at `seq` (the last checkpoint if None), verified
    /// against its digests and hash, with the run's snapshot plan there.
    async fn load(
        &self,
        run_id: &str,
        seq: Option<i64>,
    ) -> Result<Option<(LoadedCheckpoint, SnapshotPlan)>, StoreError> {
        let what = match seq {
            Some(seq) => format!("checkpoint {seq}"),
            None => "the last checkpoint".to_owned(),
        };
        let action = format!("reading {what} of run `{run_id}`");
        let params = [Param::Text(run_id), Param::MaybeInt(seq)];
        let rows = self.fetch(HISTORY, &params, &action).await?;
        let rows = rows
            .iter()
            .map(|row| self.stored_checkpoint(run_id, row))
            .collect::<Result<Vec<_>, StoreError>>()?;
        match (rows.last(), seq) {
            // No such run, or no checkpoint that far.
            (None, _) => Ok(None),
            (Some(last), Some(seq)) if last.seq as i64 != seq => Ok(None),
            _ => rebuild(self.db(), run_id, rows).map(Some),
        }
    }

    async fn history(&self, run_id: &str) -> Result<Option<RunHistory>, StoreError> {
        let action = format!("reading the checkpoint history of run `{run_id}`");
        let rows = self
            .fetch(WHOLE_HISTORY, &[Param::Text(run_id)], &action)
            .await?;
        if rows.is_empty() {
            return Ok(None);
        }
        let rows = rows
            .iter()
            .map(|row| self.stored_checkpoint(run_id, row))
            .collect::<Result<Vec<_>, StoreError>>()?;
        crate::checkpoint::history(self.db(), run_id, rows).map(Some)
    }

    async fn cached_output(&self, key: &str) -> Result<Option<CachedOutput>, StoreError> {
        let action = format!("reading node cache entry {key}");
        let params = [Param::Text(key), Param::Int(crate::codec::now_ms())];
        let rows = self.fetch(NODE_CACHE, &params, &action).await?;
        rows.first().map(|row| self.cache_row(row)).transpose()
    }

    async fn artifacts(&self, run_id: &str) -> Result<Vec<ArtifactRow>, StoreError> {
        let action = format!("reading artifacts of run `{run_id}`");
        let rows = self
            .fetch(ARTIFACTS, &[Param::Text(run_id)], &action)
            .await?;
        rows.iter()
            .map(|row| self.artifact_row(run_id, row))
            .collect()
    }

    /// The bytes with this digest, verified against it.
    async fn artifact_bytes(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let action = format!("reading blob {digest}");
        let rows = self.fetch(BLOB, &[Param::Text(digest)], &action).await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let bytes = row.column("bytes").map_err(|e| self.error(e, &action))?;
        self.blob(digest, bytes).map(Some)
    }

    async fn current_checkpoint(
        &self,
        task_id: &str,
    ) -> Result<Option<CurrentCheckpoint>, StoreError> {
        let action = format!("reading task `{task_id}`");
        let rows = self
            .fetch(CURRENT_CHECKPOINT, &[Param::Text(task_id)], &action)
            .await?;
        rows.first()
            .map(|row| self.current_checkpoint_row(task_id, row))
            .transpose()
    }

    async fn last_schedule_tick(
        &self,
        scenario: &str,
        schedule: &str,
    ) -> Result<Option<i64>, StoreError> {
        let action = format!("reading the last tick of schedule `{schedule}` of `{scenario}`");
        let rows = self
            .fetch(
                LAST_SCHEDULE_TICK,
                &[Param::Text(scenario), Param::Text(schedule)],
                &action,
            )
            .await?;
        rows.first()
            .map(|row| row.column::<i64>("tick_ms"))
            .transpose()
            .map_err(|e| self.error(e, &action))
    }

    async fn kv_get(&self, space: KvSpace<'_>, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let action = kv_action("reading", space, key);
        let rows = self
            .fetch(
                KV_GET,
                &[
                    Param::Text(space.scope),
                    Param::Text(space.namespace),
                    Param::Text(key),
                ],
                &action,
            )
            .await?;
        rows.first()
            .map(|row| row.column::<Vec<u8>>("value"))
            .transpose()
            .map_err(|e| self.error(e, &action))
    }

    async fn kv_keys(
        &self,
        space: KvSpace<'_>,
        prefix: &str,
        limit: u64,
    ) -> Result<Vec<String>, StoreError> {
        let action = format!("listing keys of kv namespace {}", describe(space));
        let rows = self
            .fetch(
                KV_KEYS,
                &[
                    Param::Text(space.scope),
                    Param::Text(space.namespace),
                    Param::Text(prefix),
                    Param::Int(i64::try_from(limit).unwrap_or(i64::MAX)),
                ],
                &action,
            )
            .await?;
        rows.iter()
            .map(|row| row.column::<String>("key"))
            .collect::<Result<_, _>>()
            .map_err(|e| self.error(e, &action))
    }

    async fn kv_usage(&self, space: KvSpace<'_>) -> Result<KvUsage, StoreError> {
        let action = format!("reading the usage of kv namespace {}", describe(space));
        let rows = self
            .fetch(
                KV_USAGE_ROW,
                &[Param::Text(space.scope), Param::Text(space.namespace)],
                &action,
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(KvUsage::default());
        };
        let read = || -> Result<KvUsage, sqlx::Error> {
            Ok(KvUsage {
                keys: row.column::<i64>("keys")? as u64,
                bytes: row.column::<i64>("bytes")? as u64,
            })
        };
        read().map_err(|e| self.error(e, &action))
    }

    async fn retention(&self) -> Result<Vec<Retention>, StoreError> {
        let rows = self
            .fetch(RETENTION, &[], "reading retention settings")
            .await?;
        rows.iter().map(|row| self.retention_row(row)).collect()
    }

    async fn queue_stats(&self) -> Result<QueueStats, StoreError> {
        let action = "reading the queue's depth and the open waits";
        let rows = self.fetch(QUEUE_STATS, &[], action).await?;
        let Some(row) = rows.first() else {
            return Ok(QueueStats::default());
        };
        let count = |column: &str| -> Result<u64, StoreError> {
            let n: i64 = self.get(row, column)?;
            Ok(u64::try_from(n).unwrap_or(0))
        };
        Ok(QueueStats {
            queued: count("queued")?,
            oldest_queued_at_ms: self.get(row, "oldest_queued_at")?,
            waiting: count("waiting")?,
        })
    }
}
