//! The run store: runs, their checkpoint history, node attempts, map items,
//! the host-call journal and artifacts, in a database that survives crashes.
//!
//! Owns: the schema and its migrations (`host/migrations/<backend>/`), the
//! checkpoint encoding (deltas plus a snapshot every [`SNAPSHOT_EVERY`]), the
//! state hash, and the exactly-once rule for commits: a node's checkpoint,
//! step row, journal and artifacts land in one transaction, and only if its
//! seq is exactly the last one + 1. Must not: know about scenarios, skills or
//! edges (the engine decides what a step is; the store makes it durable),
//! print anything, or write to a database that is not ours.
//!
//! Backends: SQLite now (`sqlite.rs`); Postgres (issue 5) is another variant
//! of the private `Backend` enum behind the same API, with its own
//! migrations folder defining the same tables. Backend-neutral rules live in
//! [`checkpoint`], [`state`] and [`migrate`].

pub mod checkpoint;
pub mod error;
pub mod migrate;
pub mod rows;
pub mod run;
mod sqlite;
pub mod state;
mod url;

pub use checkpoint::{
    CheckpointRow, LoadedCheckpoint, SNAPSHOT_EVERY, START_NODE, StepCommit, is_snapshot_seq,
};
pub use error::StoreError;
pub use migrate::SCHEMA_VERSION;
pub use rows::{ArtifactRow, JournalEntry, MapItemRow, NewArtifact, StepRow, blob_digest};
pub use run::{NewRun, RunRow, RunStatus, UnknownRunStatus, new_run_id};
pub use state::{ApplyError, StateChange, apply, canonical_json, state_hash, try_apply};
pub use url::redact as redact_url;

use serde_json::Value;

use sqlite::SqliteStore;
use url::DatabaseUrl;

/// When a commit counts as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// A commit returns once it is on stable storage (SQLite `synchronous =
    /// FULL`: an fsync per commit). Survives power loss and OS crashes. An
    /// fsync costs milliseconds on many disks, so this bounds a single run
    /// to a few hundred nodes per second.
    #[default]
    Full,
    /// A commit returns once the OS has it (SQLite WAL with `synchronous =
    /// NORMAL`). Survives the host process being killed at any point; a power
    /// loss or OS crash may lose the last commits, never corrupt the
    /// database (a resume then redoes those nodes).
    Normal,
}

/// How to open a store. `Default` is what [`Store::open`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreOptions {
    pub sync: SyncMode,
}

/// A handle on an open store. Cheap to clone (a connection pool inside);
/// share it between runs.
#[derive(Debug, Clone)]
pub struct Store {
    backend: Backend,
    display: String,
}

#[derive(Debug, Clone)]
enum Backend {
    Sqlite(SqliteStore),
}

impl Store {
    /// Opens (creating if missing) the database at `url` and brings its
    /// schema up to date. `sqlite://PATH` creates the file and its parent
    /// directories. Refuses, without writing anything, a database that is
    /// not a Skillhost store ([`StoreError::NotOurs`]) or whose schema is
    /// newer than this build ([`StoreError::TooNew`]).
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        Store::open_with(url, StoreOptions::default()).await
    }

    /// [`open`](Self::open) with options (e.g. [`SyncMode::Normal`]).
    pub async fn open_with(url: &str, options: StoreOptions) -> Result<Store, StoreError> {
        let display = url::redact(url);
        let backend = match DatabaseUrl::parse(url)? {
            DatabaseUrl::Sqlite { path } => {
                Backend::Sqlite(SqliteStore::open(&path, &display, options).await?)
            }
        };
        Ok(Store { backend, display })
    }

    /// The URL for messages: passwords replaced by `***`.
    pub fn url_for_display(&self) -> String {
        self.display.clone()
    }

    /// Waits for in-flight statements and closes every connection. Dropping
    /// the store also closes them, but without waiting.
    pub async fn close(&self) {
        match &self.backend {
            Backend::Sqlite(s) => s.close().await,
        }
    }

    /// Creates a running run and its checkpoint 0: the full initial state,
    /// node [`START_NODE`], next node `run.start_node`.
    pub async fn create_run(&self, run: &NewRun) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sqlite(s) => s.create_run(run, RunStatus::Running).await,
        }
    }

    /// Like [`create_run`](Self::create_run), but the run waits in the queue
    /// (status `queued`) for a worker.
    pub async fn enqueue_run(&self, run: &NewRun) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sqlite(s) => s.create_run(run, RunStatus::Queued).await,
        }
    }

    /// Writes one node's outcome in ONE transaction: the checkpoint (changes,
    /// plus the full state on snapshot seqs), the step row, the journal
    /// entries, and the run's status (`running`), current node (the first of
    /// `next_nodes`) and `last_seq`. Fails with [`StoreError::Conflict`],
    /// writing nothing, unless `commit.seq` is exactly the last seq + 1 and
    /// the run is not finished: the exactly-once guard on resume.
    pub async fn commit_step(&self, commit: &StepCommit) -> Result<(), StoreError> {
        self.commit_step_with_artifacts(commit, &[]).await
    }

    /// [`commit_step`](Self::commit_step), with artifacts the node produced
    /// written in the same transaction.
    pub async fn commit_step_with_artifacts(
        &self,
        commit: &StepCommit,
        artifacts: &[NewArtifact],
    ) -> Result<(), StoreError> {
        debug_assert_eq!(
            commit.state_hash,
            state_hash(&commit.full_state),
            "StepCommit.state_hash must be state_hash(&full_state)"
        );
        match &self.backend {
            Backend::Sqlite(s) => s.commit_step(commit, artifacts).await,
        }
    }

    /// Records a finished item of a map node, durable before the node's own
    /// commit. Idempotent on (run, node, visit, item index): the first output
    /// recorded wins.
    pub async fn record_map_item(&self, item: &MapItemRow) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sqlite(s) => s.record_map_item(item).await,
        }
    }

    /// The recorded items of one visit of a map node, by item index.
    pub async fn map_items(
        &self,
        run_id: &str,
        node_id: &str,
        visit: u32,
    ) -> Result<Vec<MapItemRow>, StoreError> {
        match &self.backend {
            Backend::Sqlite(s) => s.map_items(run_id, node_id, visit).await,
        }
    }

    /// Records a failed attempt (no checkpoint).
    pub async fn record_failed_step(&self, step: &StepRow) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sqlite(s) => s.record_failed_step(step).await,
        }
    }

    /// Sets the run's final status, result and error, and releases its lease.
    /// Refused ([`StoreError::Conflict`]) if the run is already finished.
    pub async fn finish_run(
        &self,
        run_id: &str,
        status: RunStatus,
        result: Option<&Value>,
        error: Option<&Value>,
    ) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sqlite(s) => s.finish_run(run_id, status, result, error).await,
        }
    }

    pub async fn run(&self, run_id: &str) -> Result<Option<RunRow>, StoreError> {
        match &self.backend {
            Backend::Sqlite(s) => s.run(run_id).await,
        }
    }

    /// Runs, newest first, optionally only those with `status`; at most `limit`.
    pub async fn list_runs(
        &self,
        status: Option<RunStatus>,
        limit: u32,
    ) -> Result<Vec<RunRow>, StoreError> {
        match &self.backend {
            Backend::Sqlite(s) => s.list_runs(status, limit).await,
        }
    }

    /// Every attempt of the run, in the order they were recorded.
    pub async fn steps(&self, run_id: &str) -> Result<Vec<StepRow>, StoreError> {
        match &self.backend {
            Backend::Sqlite(s) => s.steps(run_id).await,
        }
    }

    /// The run's recorded host calls, by seq, for replay.
    pub async fn journal(&self, run_id: &str) -> Result<Vec<JournalEntry>, StoreError> {
        match &self.backend {
            Backend::Sqlite(s) => s.journal(run_id).await,
        }
    }

    /// The run's checkpoint history (without rebuilding states), by seq.
    pub async fn checkpoints(&self, run_id: &str) -> Result<Vec<CheckpointRow>, StoreError> {
        match &self.backend {
            Backend::Sqlite(s) => s.checkpoints(run_id).await,
        }
    }

    /// The state at the run's last checkpoint, rebuilt and verified against
    /// its hash ([`StoreError::Corrupt`] on mismatch). None for an unknown run.
    pub async fn latest_state(&self, run_id: &str) -> Result<Option<LoadedCheckpoint>, StoreError> {
        match &self.backend {
            Backend::Sqlite(s) => s.latest_state(run_id).await,
        }
    }

    /// The state at checkpoint `seq`, rebuilt and verified. None if the run
    /// or that checkpoint does not exist.
    pub async fn state_at(
        &self,
        run_id: &str,
        seq: u64,
    ) -> Result<Option<LoadedCheckpoint>, StoreError> {
        match &self.backend {
            Backend::Sqlite(s) => s.state_at(run_id, seq).await,
        }
    }

    /// Stores bytes under `name` in the run (replacing an artifact of that
    /// name) and returns their SHA-256 (lowercase hex). Identical bytes are
    /// stored once, whichever runs refer to them.
    pub async fn put_artifact(
        &self,
        run_id: &str,
        name: &str,
        media_type: &str,
        bytes: &[u8],
    ) -> Result<String, StoreError> {
        match &self.backend {
            Backend::Sqlite(s) => s.put_artifact(run_id, name, media_type, bytes).await,
        }
    }

    /// The run's artifacts, by name.
    pub async fn artifacts(&self, run_id: &str) -> Result<Vec<ArtifactRow>, StoreError> {
        match &self.backend {
            Backend::Sqlite(s) => s.artifacts(run_id).await,
        }
    }

    /// The bytes with this digest, verified against it.
    pub async fn artifact_bytes(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        match &self.backend {
            Backend::Sqlite(s) => s.artifact_bytes(digest).await,
        }
    }
}
