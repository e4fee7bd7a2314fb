//! The row codec both backends share: how the store's values are kept in
//! columns, and how rows are read back into [`RunRow`], [`StepRow`],
//! [`CheckpointRow`] and the rest, with the checks every value read back
//! must pass and the errors, naming the database, when one does not.
//!
//! Written once over [`StoredRow`], a row of either backend: sqlx decodes
//! the same Rust types from a SQLite and a Postgres row, and [`Column`] is
//! exactly the types both can decode. The conversions are provided methods
//! of [`Codec`], which a backend implements by naming its database, so that
//! its write paths convert values (`int`, `step_binds`) with the same checks
//! and words as the shared reads (`read.rs`).
//!
//! Must not: run statements (`read.rs` and the backends do), or depend on
//! which backend a row came from.

use std::fmt::Display;

use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{Decode, Postgres, Row, Sqlite, Type};

use crate::cache::{CachedOutput, cache_digest};
use crate::checkpoint::{CheckpointRow, RunDigest, StoredCheckpoint};
use crate::error::{DatabaseFailure, StoreError};
use crate::journal::{JournalDigest, map_item_digest};
use crate::lease::{CurrentCheckpoint, Retention};
use crate::rows::{ArtifactRow, JournalEntry, JournalRow, MapItemRow, StepRow, blob_digest};
use crate::run::{Provenance, RunRow};

/// Statuses a run takes checkpoints in (the complement of
/// [`RunStatus::is_finished`](crate::RunStatus::is_finished)), as SQL.
pub(crate) const ACTIVE: &str = "('queued', 'running', 'waiting')";
/// Statuses a finished run has ([`RunStatus::is_finished`](crate::RunStatus::is_finished)), as SQL.
pub(crate) const FINISHED: &str = "('completed', 'failed', 'cancelled')";

/// The columns of a run that [`Codec::run_row`] reads; a macro, so that
/// statements can be built with `concat!`.
macro_rules! run_columns {
    () => {
        "id, scenario_name, scenario_path, scenario_digest, status, input, result, error, \
         current_node, last_seq, lease_owner, lease_expires_at, lease_generation, created_at, \
         updated_at, digest, provenance, wait_deadline, cancel_requested_at, cancel_requested_by"
    };
}
pub(crate) use run_columns;

/// [`run_columns!`] as a constant.
pub(crate) const RUN_COLUMNS: &str = run_columns!();

/// Now, as the store keeps times: Unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A Rust type that both backends decode from a column: `String`, `i64`,
/// `bool`, `Vec<u8>` and their `Option`s.
pub(crate) trait Column:
    for<'r> Decode<'r, Sqlite> + Type<Sqlite> + for<'r> Decode<'r, Postgres> + Type<Postgres>
{
}

impl<T> Column for T where
    T: for<'r> Decode<'r, Sqlite> + Type<Sqlite> + for<'r> Decode<'r, Postgres> + Type<Postgres>
{
}

/// A row of either backend, read by column name.
pub(crate) trait StoredRow {
    fn column<T: Column>(&self, name: &str) -> Result<T, sqlx::Error>;
}

impl StoredRow for SqliteRow {
    fn column<T: Column>(&self, name: &str) -> Result<T, sqlx::Error> {
        self.try_get(name)
    }
}

impl StoredRow for PgRow {
    fn column<T: Column>(&self, name: &str) -> Result<T, sqlx::Error> {
        self.try_get(name)
    }
}

/// A step's columns, converted (and range-checked) before its statement.
#[derive(Debug)]
pub(crate) struct StepBinds {
    pub run_id: String,
    pub seq: Option<i64>,
    pub node_id: String,
    pub attempt: i64,
    pub status: String,
    pub started_at: i64,
    pub duration_us: i64,
    pub input_hash: Option<String>,
    pub output_hash: Option<String>,
    pub error: Option<String>,
    pub fuel_consumed: Option<i64>,
    pub memory_peak_bytes: Option<i64>,
    pub detail: Option<String>,
}

/// A journal entry's columns, converted and digested before its statement.
#[derive(Debug)]
pub(crate) struct JournalBinds<'a> {
    pub seq: i64,
    pub node_id: &'a str,
    pub item: Option<i64>,
    pub entry: i64,
    pub kind: &'a str,
    pub request: String,
    pub response: String,
    pub request_digest: String,
    pub digest: String,
}

impl<'a> JournalBinds<'a> {
    pub fn new(
        codec: &impl Codec,
        run_id: &str,
        entry: &'a JournalEntry,
    ) -> Result<JournalBinds<'a>, StoreError> {
        let request = entry.request.to_string();
        let response = entry.response.to_string();
        Ok(JournalBinds {
            seq: codec.int(entry.seq, "journal seq")?,
            node_id: &entry.node_id,
            item: entry.item.map(i64::from),
            entry: i64::from(entry.entry),
            kind: &entry.kind,
            request_digest: entry.request_digest(),
            digest: JournalDigest::of(run_id, entry, &request, &response),
            request,
            response,
        })
    }
}

/// A map item's attempt, journal (None when it made no journaled call)
/// and the digest over both, as stored.
pub(crate) struct MapItemBinds;

impl MapItemBinds {
    pub fn of(item: &MapItemRow) -> (i64, Option<String>, String) {
        let attempt = i64::from(item.attempt);
        let journal = (!item.journal.is_empty())
            .then(|| serde_json::to_string(&item.journal).expect("journal entries serialise"));
        let digest = map_item_digest(attempt, journal.as_deref());
        (attempt, journal, digest)
    }
}

/// Conversions between the store's values and columns, for one database
/// (named in every error).
pub(crate) trait Codec {
    /// The database's display URL (no password), for messages.
    fn db(&self) -> &str;

    /// A statement (or reading its result) failed.
    fn error(&self, source: sqlx::Error, action: impl Display) -> StoreError {
        StoreError::Database {
            db: self.db().to_owned(),
            action: action.to_string(),
            source: DatabaseFailure::from_sqlx(source),
        }
    }

    /// A stored value fails its check.
    fn corrupt(&self, what: impl Display, detail: impl Display) -> StoreError {
        StoreError::Corrupt {
            db: self.db().to_owned(),
            what: what.to_string(),
            detail: detail.to_string(),
        }
    }

    /// A count to store: columns are signed 64-bit.
    fn int(&self, value: u64, what: &str) -> Result<i64, StoreError> {
        i64::try_from(value).map_err(|_| StoreError::Invalid {
            db: self.db().to_owned(),
            message: format!("{what} {value} is larger than {}", i64::MAX),
        })
    }

    /// A stored count, which must fit `T` (never negative).
    fn uint<T: TryFrom<i64>>(&self, value: i64, what: impl Display) -> Result<T, StoreError> {
        T::try_from(value).map_err(|_| self.corrupt(what, format!("{value} is out of range")))
    }

    fn get<T: Column>(&self, row: &impl StoredRow, column: &str) -> Result<T, StoreError> {
        row.column(column)
            .map_err(|e| self.error(e, format_args!("reading column `{column}`")))
    }

    /// A stored JSON value.
    fn json(&self, text: &str, what: impl Display) -> Result<Value, StoreError> {
        serde_json::from_str(text).map_err(|e| self.corrupt(what, format!("not valid JSON: {e}")))
    }

    fn opt_json(
        &self,
        text: Option<String>,
        what: impl Display,
    ) -> Result<Option<Value>, StoreError> {
        text.map(|text| self.json(&text, what)).transpose()
    }

    /// A stored list of node ids (a checkpoint's next nodes).
    fn next_nodes(&self, text: &str, what: impl Display) -> Result<Vec<String>, StoreError> {
        serde_json::from_str(text)
            .map_err(|e| self.corrupt(what, format!("next nodes are not valid: {e}")))
    }

    /// A step's columns, converted and range-checked.
    fn step_binds(&self, step: &StepRow) -> Result<StepBinds, StoreError> {
        self.step_binds_as(step, &step.run_id, step.seq)
    }

    /// [`step_binds`](Self::step_binds) of `step` as a row of run `run_id`
    /// at `seq` (a commit's step row takes the commit's), without copying
    /// the row first.
    fn step_binds_as(
        &self,
        step: &StepRow,
        run_id: &str,
        seq: Option<u64>,
    ) -> Result<StepBinds, StoreError> {
        let opt = |v: Option<u64>, what| v.map(|v| self.int(v, what)).transpose();
        Ok(StepBinds {
            run_id: run_id.to_owned(),
            seq: opt(seq, "step seq")?,
            node_id: step.node_id.clone(),
            attempt: i64::from(step.attempt),
            status: step.status.as_str().to_owned(),
            started_at: step.started_at_ms,
            duration_us: self.int(step.duration_us, "step duration")?,
            input_hash: step.input_hash.clone(),
            output_hash: step.output_hash.clone(),
            error: step.error.as_ref().map(Value::to_string),
            fuel_consumed: opt(step.fuel_consumed, "fuel consumed")?,
            memory_peak_bytes: opt(step.memory_peak_bytes, "peak memory")?,
            detail: step.detail.as_ref().map(Value::to_string),
        })
    }

    /// A row of the waits table.
    fn wait_row(&self, row: &impl StoredRow) -> Result<crate::wait::WaitRow, StoreError> {
        let run_id: String = self.get(row, "run_id")?;
        let seq: i64 = self.get(row, "seq")?;
        let what = |column: &str| format!("{column} of the wait of run `{run_id}` at {seq}");
        let schema: String = self.get(row, "answer_schema")?;
        Ok(crate::wait::WaitRow {
            seq: self.uint(seq, what("seq"))?,
            node_id: self.get(row, "node_id")?,
            prompt: self.get(row, "prompt")?,
            answer_schema: self.json(&schema, what("answer_schema"))?,
            created_at_ms: self.get(row, "created_at")?,
            deadline_ms: self.get(row, "deadline")?,
            answer: self.opt_json(self.get(row, "answer")?, what("answer"))?,
            answered_by: self.get(row, "answered_by")?,
            answered_at_ms: self.get(row, "answered_at")?,
            run_id,
        })
    }

    /// A row of [`RUN_COLUMNS`], checked against the run's digest.
    fn run_row(&self, row: &impl StoredRow) -> Result<RunRow, StoreError> {
        let id: String = self.get(row, "id")?;
        let what = |column: &str| format!("{column} of run `{id}`");
        let status: String = self.get(row, "status")?;
        let status = status
            .parse()
            .map_err(|e| self.corrupt(what("status"), e))?;
        let scenario_name: String = self.get(row, "scenario_name")?;
        let scenario_path: String = self.get(row, "scenario_path")?;
        let scenario_digest: String = self.get(row, "scenario_digest")?;
        let input: String = self.get(row, "input")?;
        let digest: Option<String> = self.get(row, "digest")?;
        let provenance: Option<String> = self.get(row, "provenance")?;
        if let Some(detail) = RunDigest::mismatch(
            &id,
            &scenario_name,
            &scenario_path,
            &scenario_digest,
            &input,
            provenance.as_deref(),
            digest.as_deref(),
        ) {
            return Err(self.corrupt(format_args!("run `{id}`"), detail));
        }
        let provenance = provenance
            .map(|text| {
                serde_json::from_str::<Provenance>(&text)
                    .map_err(|e| self.corrupt(what("provenance"), format!("not a provenance: {e}")))
            })
            .transpose()?;
        Ok(RunRow {
            scenario_name,
            scenario_path,
            scenario_digest,
            status,
            input: self.json(&input, what("input"))?,
            result: self.opt_json(self.get(row, "result")?, what("result"))?,
            error: self.opt_json(self.get(row, "error")?, what("error"))?,
            current_node: self.get(row, "current_node")?,
            last_seq: self.uint(self.get(row, "last_seq")?, what("last_seq"))?,
            created_at_ms: self.get(row, "created_at")?,
            updated_at_ms: self.get(row, "updated_at")?,
            lease_owner: self.get(row, "lease_owner")?,
            lease_expires_at_ms: self.get(row, "lease_expires_at")?,
            lease_generation: self
                .uint(self.get(row, "lease_generation")?, what("lease_generation"))?,
            provenance,
            wait_deadline_ms: self.get(row, "wait_deadline")?,
            cancel_requested_at_ms: self.get(row, "cancel_requested_at")?,
            cancel_requested_by: self.get(row, "cancel_requested_by")?,
            id,
        })
    }

    /// A row of `steps` (with its `id`) of run `run_id`.
    fn step_row(&self, run_id: &str, row: &impl StoredRow) -> Result<StepRow, StoreError> {
        let id: i64 = self.get(row, "id")?;
        let what = |column: &str| format!("{column} of step {id} of run `{run_id}`");
        let opt =
            |v: Option<i64>, column: &str| v.map(|v| self.uint::<u64>(v, what(column))).transpose();
        Ok(StepRow {
            run_id: run_id.to_owned(),
            seq: opt(self.get(row, "seq")?, "seq")?,
            node_id: self.get(row, "node_id")?,
            attempt: self.uint(self.get(row, "attempt")?, what("attempt"))?,
            status: self
                .get::<String>(row, "status")?
                .parse()
                .map_err(|e| self.corrupt(what("status"), e))?,
            started_at_ms: self.get(row, "started_at")?,
            duration_us: self.uint(self.get(row, "duration_us")?, what("duration_us"))?,
            input_hash: self.get(row, "input_hash")?,
            output_hash: self.get(row, "output_hash")?,
            error: self.opt_json(self.get(row, "error")?, what("error"))?,
            fuel_consumed: opt(self.get(row, "fuel_consumed")?, "fuel_consumed")?,
            memory_peak_bytes: opt(self.get(row, "memory_peak_bytes")?, "memory_peak_bytes")?,
            detail: self.opt_json(self.get(row, "detail")?, what("detail"))?,
        })
    }

    /// A row of `map_items` of one visit of a map node.
    fn map_item_row(
        &self,
        run_id: &str,
        node_id: &str,
        visit: u32,
        row: &impl StoredRow,
    ) -> Result<MapItemRow, StoreError> {
        let index: i64 = self.get(row, "item_index")?;
        let what = format!("item {index} of map node `{node_id}` of run `{run_id}`");
        let output = self.json(&self.get::<String>(row, "output")?, &what)?;
        let output_hash: String = self.get(row, "output_hash")?;
        // A resumed map node reuses this output instead of calling again:
        // it must be the output that was recorded.
        let actual = skillhost_model::hash_like(&output, &output_hash);
        if actual != output_hash {
            return Err(self.corrupt(
                &what,
                format_args!("its output hashes to {actual}, but {output_hash} was recorded"),
            ));
        }
        let item_index: u32 = self.uint(index, &what)?;
        // The attempt and the journal are reused with the output: the row's
        // digest pins them. A row written before they were recorded has
        // neither.
        let attempt: Option<i64> = self.get(row, "attempt")?;
        let journal: Option<String> = self.get(row, "journal")?;
        let digest: Option<String> = self.get(row, "digest")?;
        let (attempt, journal) = match (attempt, digest) {
            (None, None) if journal.is_none() => (1, Vec::new()),
            (Some(attempt), Some(digest))
                if digest == map_item_digest(attempt, journal.as_deref()) =>
            {
                let entries = match journal {
                    None => Vec::new(),
                    Some(text) => {
                        serde_json::from_str::<Vec<JournalEntry>>(&text).map_err(|e| {
                            self.corrupt(&what, format!("its journal is not valid: {e}"))
                        })?
                    }
                };
                (self.uint(attempt, &what)?, entries)
            }
            _ => {
                return Err(self.corrupt(
                    &what,
                    "its attempt or journal no longer matches the digest recorded with it",
                ));
            }
        };
        Ok(MapItemRow {
            run_id: run_id.to_owned(),
            node_id: node_id.to_owned(),
            visit,
            item_index,
            output,
            output_hash,
            duration_us: self.uint(self.get(row, "duration_us")?, &what)?,
            fuel_consumed: self.uint(self.get(row, "fuel_consumed")?, &what)?,
            journal,
            attempt,
        })
    }

    /// A row of `journal`, checked against its digests: a row that no
    /// longer matches is returned with its fault (the caller decides
    /// whether that is an error); one that does not decode is an error.
    /// `position` is its place among its seq's rows, the entry index of a
    /// row older than entry indexes.
    fn journal_row(
        &self,
        run_id: &str,
        position: u32,
        row: &impl StoredRow,
    ) -> Result<JournalRow, StoreError> {
        let seq: i64 = self.get(row, "seq")?;
        let what = format!("journal entry {position} of step {seq} of run `{run_id}`");
        let item: Option<i64> = self.get(row, "item_index")?;
        let entry: Option<i64> = self.get(row, "entry_index")?;
        let request: String = self.get(row, "request")?;
        let response: String = self.get(row, "response")?;
        let request_digest: Option<String> = self.get(row, "request_digest")?;
        let digest: Option<String> = self.get(row, "digest")?;
        let entry = JournalEntry {
            seq: self.uint(seq, &what)?,
            node_id: self.get(row, "node_id")?,
            item: item.map(|i| self.uint(i, &what)).transpose()?,
            entry: match entry {
                Some(entry) => self.uint(entry, &what)?,
                None => position,
            },
            kind: self.get(row, "kind")?,
            request: self.json(&request, &what)?,
            response: self.json(&response, &what)?,
        };
        let fault = JournalDigest::mismatch(
            run_id,
            &entry,
            &request,
            &response,
            request_digest.as_deref(),
            digest.as_deref(),
        );
        Ok(JournalRow {
            entry,
            request_digest,
            digest: digest.unwrap_or_default(),
            fault,
        })
    }

    /// A row of `node_cache`, checked against its digest and its output
    /// against its hash.
    fn cache_row(&self, row: &impl StoredRow) -> Result<CachedOutput, StoreError> {
        let key: String = self.get(row, "key")?;
        let what = format!("node cache entry {key}");
        let output: String = self.get(row, "output")?;
        let output_hash: String = self.get(row, "output_hash")?;
        let run_id: String = self.get(row, "run_id")?;
        let seq: i64 = self.get(row, "seq")?;
        let node_id: String = self.get(row, "node_id")?;
        let created_at: i64 = self.get(row, "created_at")?;
        let expires_at: i64 = self.get(row, "expires_at")?;
        let digest: String = self.get(row, "digest")?;
        let expected = cache_digest(
            &key,
            &output,
            &output_hash,
            &run_id,
            seq,
            &node_id,
            created_at,
            expires_at,
        );
        if digest != expected {
            return Err(self.corrupt(
                &what,
                format_args!(
                    "what it stores no longer matches the digest recorded when run `{run_id}` \
                     wrote it at checkpoint {seq}"
                ),
            ));
        }
        let output = self.json(&output, &what)?;
        let actual = skillhost_model::hash_like(&output, &output_hash);
        if actual != output_hash {
            return Err(self.corrupt(
                &what,
                format_args!("its output hashes to {actual}, but {output_hash} was recorded"),
            ));
        }
        Ok(CachedOutput {
            seq: self.uint(seq, &what)?,
            key,
            output,
            output_hash,
            run_id,
            node_id,
            created_at_ms: created_at,
            expires_at_ms: expires_at,
        })
    }

    /// A row of `checkpoints`, without its state.
    fn checkpoint_row(
        &self,
        run_id: &str,
        row: &impl StoredRow,
    ) -> Result<CheckpointRow, StoreError> {
        let seq: i64 = self.get(row, "seq")?;
        let what = format!("checkpoint {seq} of run `{run_id}`");
        Ok(CheckpointRow {
            seq: self.uint(seq, &what)?,
            node_id: self.get(row, "node_id")?,
            next_nodes: self.next_nodes(&self.get::<String>(row, "next_nodes")?, &what)?,
            state_hash: self.get(row, "state_hash")?,
            is_snapshot: self.get(row, "is_snapshot")?,
            bytes: self.uint(self.get(row, "bytes")?, &what)?,
            created_at_ms: self.get(row, "created_at")?,
        })
    }

    /// A row of `checkpoints` as stored, for rebuilding a state (its JSON
    /// is checked by `checkpoint::rebuild`).
    fn stored_checkpoint(
        &self,
        run_id: &str,
        row: &impl StoredRow,
    ) -> Result<StoredCheckpoint, StoreError> {
        let at: i64 = self.get(row, "seq")?;
        Ok(StoredCheckpoint {
            seq: self.uint(at, format_args!("checkpoint {at} of run `{run_id}`"))?,
            node_id: self.get(row, "node_id")?,
            next_nodes: self.get(row, "next_nodes")?,
            is_snapshot: self.get(row, "is_snapshot")?,
            state: self.get(row, "state")?,
            changes: self.get(row, "changes")?,
            state_hash: self.get(row, "state_hash")?,
            visits: self.get(row, "visits")?,
            digest: self.get(row, "digest")?,
            run_digest: self.get(row, "run_digest")?,
        })
    }

    /// A row of `artifacts`.
    fn artifact_row(&self, run_id: &str, row: &impl StoredRow) -> Result<ArtifactRow, StoreError> {
        let name: String = self.get(row, "name")?;
        let size = self.uint(
            self.get(row, "size")?,
            format_args!("size of artifact `{name}` of run `{run_id}`"),
        )?;
        Ok(ArtifactRow {
            run_id: run_id.to_owned(),
            digest: self.get(row, "digest")?,
            media_type: self.get(row, "media_type")?,
            size,
            created_at_ms: self.get(row, "created_at")?,
            name,
        })
    }

    /// Stored blob bytes, which must still hash to their digest.
    fn blob(&self, digest: &str, bytes: Vec<u8>) -> Result<Vec<u8>, StoreError> {
        if blob_digest(&bytes) != digest {
            return Err(self.corrupt(
                format_args!("blob {digest}"),
                "its bytes no longer hash to its digest",
            ));
        }
        Ok(bytes)
    }

    /// Where task `task_id` stands: a task row, or a run's checkpoint in
    /// its shape.
    fn current_checkpoint_row(
        &self,
        task_id: &str,
        row: &impl StoredRow,
    ) -> Result<CurrentCheckpoint, StoreError> {
        let what = format!("current checkpoint of task `{task_id}`");
        Ok(CurrentCheckpoint {
            task_id: task_id.to_owned(),
            run_id: self.get(row, "run_id")?,
            seq: self.uint(self.get(row, "seq")?, &what)?,
            node_id: self.get(row, "node_id")?,
            next_nodes: self.next_nodes(&self.get::<String>(row, "next_nodes")?, &what)?,
            state_hash: self.get(row, "state_hash")?,
            updated_at_ms: self.get(row, "updated_at")?,
        })
    }

    /// A row of `retention`.
    fn retention_row(&self, row: &impl StoredRow) -> Result<Retention, StoreError> {
        let error = |e| self.error(e, "reading retention settings");
        Ok(Retention {
            scenario_name: row.column("scenario_name").map_err(error)?,
            keep_ms: row.column("keep_ms").map_err(error)?,
        })
    }
}
