//! The run store: runs, their checkpoint history, node attempts, map items,
//! the host-call journal and artifacts, in a database that survives crashes.
//!
//! Owns: the schema and its migrations (`store/migrations/<backend>/`), the
//! checkpoint encoding (deltas, plus a snapshot once they reach the last
//! snapshot's size: [`checkpoint`]), the state hash and the row digests
//! that pin what a resume trusts, the nesting bound on what is written
//! ([`MAX_NESTING`]), and the exactly-once rule for commits: a node's checkpoint,
//! step row, journal and artifacts land in one transaction, and only if its
//! seq is exactly the last one + 1. Must not: know about scenarios, skills or
//! edges (the engine decides what a step is; the store makes it durable),
//! print anything, or write to a database that is not ours.
//!
//! Backends: SQLite (`sqlite/`) and Postgres (`postgres/`), variants of the
//! private `Backend` enum behind the same API, each with its own migrations
//! folder defining the same tables, and the same file per concern:
//! `mod.rs` (open), `commit.rs` (writes of a run's history), `queue.rs`
//! (leases, queue, retention), `migrate.rs`. Each keeps its own write path;
//! reads (`read.rs`), the row codec (`codec.rs`), every write before its SQL
//! (`prepared.rs`: converted, encoded and digested here, in this file, and
//! only executed by a backend) and the verdicts on what a write found
//! (`refusal.rs`, `wait.rs`) are written once for both. A refusal rolls its
//! transaction back before it is returned, on both backends (`refusal.rs`).
//! Backend-neutral rules live in [`checkpoint`], [`state`], [`migrate`] and
//! [`lease`].
//!
//! Interfaces: [`Store`] derefs to [`RunWriter`] (the writes of a run's
//! history, what the engine's run log uses), which derefs to [`History`]
//! (reads only, what readers take).

mod cache;
pub mod checkpoint;
mod codec;
pub mod error;
pub mod failpoint;
mod journal;
mod kv;
pub mod lease;
pub mod link;
pub mod live;
pub mod migrate;
mod postgres;
mod prepared;
mod queue;
mod read;
mod refusal;
pub mod rows;
pub mod run;
mod sqlite;
mod url;
pub mod wait;

/// The run state and its changes and hashes, from `skillhost-model`.
pub use skillhost_model::state;

pub use cache::{CachedOutput, NewCacheEntry};
pub use checkpoint::{
    CheckpointDelta, CheckpointRow, LoadedCheckpoint, RunHistory, SNAPSHOT_EVERY, START_NODE,
    StepCommit, is_snapshot_seq,
};
pub use error::StoreError;
pub use kv::{KvLimits, KvSpace, KvUsage, KvWrite};
pub use lease::{
    Admission, Claim, CurrentCheckpoint, DEFAULT_IDEMPOTENCY_TTL, IdempotencyKey, Lease,
    PruneReport, QueueStats, Retention, RunOptions, ScheduleTick, format_ms, new_owner_id,
    parse_duration,
};
pub use link::{Backoff, Link, LinkEvent};
pub use migrate::SCHEMA_VERSION;
pub use rows::{
    ArtifactRow, JournalEntry, JournalRow, MapItemRow, NewArtifact, StepRow, StepStatus,
    UnknownStepStatus, blob_digest,
};
pub use run::{
    ForkOrigin, NewRun, ParentLink, Provenance, RunCursor, RunFilter, RunRow, RunStatus,
    UnknownRunStatus, UnreadableRun, new_run_id,
};
pub use skillhost_model::{MAX_NESTING, TooDeep, check_change_nesting, check_nesting};
pub use state::{
    ApplyError, FIELD_HASH_PREFIX, FieldHashes, InitialState, RunState, StateChange, apply,
    canonical_json, hash_like, state_hash, state_hash_like, try_apply,
};
pub use url::redact as redact_url;
pub use wait::{Cancelled, NewWait, WaitRow};

/// What a run ends with, as the store keeps it: the JSON text of a value, or
/// of a live [`RunState`] (written from its shared fields, without copying
/// them into one value first).
pub trait RunResult: Sync {
    fn json_text(&self) -> String;
}

impl RunResult for Value {
    fn json_text(&self) -> String {
        self.to_string()
    }
}

impl RunResult for RunState {
    fn json_text(&self) -> String {
        serde_json::to_string(self).expect("a run state serialises")
    }
}

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use codec::Codec;
use postgres::PgStore;
use prepared::{
    CommitExtras, PreparedAnswer, PreparedArtifact, PreparedCancel, PreparedCommit, PreparedFinish,
    PreparedMapItem, PreparedRun, PreparedStep, PreparedWait,
};
use read::Reads;
use sqlite::SqliteStore;
use url::DatabaseUrl;

/// When a commit counts as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// A commit returns once it is on stable storage (SQLite: an
    /// `fdatasync` of the WAL that covers the commit, one for all the
    /// commits waiting at the time; Postgres: `synchronous_commit = on`).
    /// Survives power loss and OS crashes. A sync costs from a tenth of a
    /// millisecond to milliseconds depending on the disk, which bounds a
    /// single run's nodes per second; concurrent runs share syncs.
    #[default]
    Full,
    /// A commit returns once the OS has it (SQLite WAL with `synchronous =
    /// NORMAL`). Survives the host process being killed at any point; a power
    /// loss or OS crash may lose the last commits, never corrupt the
    /// database (a resume then redoes those nodes).
    Normal,
}

/// A step's commit that [`Store::commit_step_ahead`] wrote: visible to the
/// store's readers, kept if the process dies, and on stable storage once
/// [`durable`](Self::durable) returns.
#[derive(Debug, Clone)]
#[must_use = "a written commit may be acknowledged only once it is durable"]
pub struct Written(Option<sqlite::Unsynced>);

impl Written {
    /// Whether the commit is on stable storage already (without waiting).
    pub fn is_durable(&self) -> bool {
        self.0.as_ref().is_none_or(sqlite::Unsynced::is_durable)
    }

    /// Returns once the commit is on stable storage. Err if the sync that
    /// was to make it so failed: the commit, and every later one of the
    /// store handle, may be lost to a power cut; writes fail until the
    /// store is opened again.
    pub async fn durable(&self) -> Result<(), StoreError> {
        match &self.0 {
            Some(unsynced) => unsynced.durable().await,
            None => Ok(()),
        }
    }
}

/// What the WAL syncs of a SQLite store handle with [`SyncMode::Full`]
/// have done ([`Store::wal_syncs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WalSyncs {
    /// `fdatasync`s of the WAL.
    pub syncs: u64,
    /// The time spent in them.
    pub sync_time: Duration,
    /// Commits written through the handle.
    pub commits: u64,
    /// How many of them (the first ones) are durable.
    pub durable: u64,
}

/// How to open a store. `Default` is what [`Store::open`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreOptions {
    pub sync: SyncMode,
}

/// A handle on an open store. Cheap to clone (a connection pool inside);
/// share it between runs.
///
/// Three interfaces, each narrower than the last, by deref: a `Store`
/// opens, submits runs, answers and cancels them, holds leases, claims,
/// prunes and keeps kv; it derefs to a [`RunWriter`], the writes of a run's
/// history (what the engine's run log uses), which derefs to a
/// [`History`], reads only (what readers use: `host serve`, `host mcp`,
/// replay, `host runs`).
#[derive(Debug, Clone)]
pub struct Store {
    writer: RunWriter,
}

/// The writes of a run's history over a store ([`Store`] derefs to it):
/// see its `impl`.
#[derive(Debug, Clone)]
pub struct RunWriter {
    history: History,
    /// Set on handles made by [`Store::fenced`]: commits and finishes of the
    /// lease's run are refused once the lease changed hands.
    fence: Option<Arc<Lease>>,
    /// When each run's next snapshot is due; shared by clones.
    plans: Arc<checkpoint::SnapshotPlans>,
}

/// Reads of a store's runs and their history ([`Store`] and [`RunWriter`]
/// deref to it): see its `impl`.
#[derive(Debug, Clone)]
pub struct History {
    backend: Backend,
    display: String,
}

impl std::ops::Deref for Store {
    type Target = RunWriter;
    fn deref(&self) -> &RunWriter {
        &self.writer
    }
}

impl std::ops::Deref for RunWriter {
    type Target = History;
    fn deref(&self) -> &History {
        &self.history
    }
}

#[derive(Debug, Clone)]
enum Backend {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

/// Preparation (`prepared.rs`) names the database in its errors.
impl Codec for History {
    fn db(&self) -> &str {
        &self.display
    }
}

/// Calls the same method on whichever backend this is.
macro_rules! dispatch {
    ($self:expr, $store:ident => $call:expr) => {
        match &$self.backend {
            Backend::Sqlite($store) => $call,
            Backend::Postgres($store) => $call,
        }
    };
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
        Store::open_mode(url, options, true).await
    }

    /// Like [`open_with`](Self::open_with), for a database that must already
    /// exist (reading history, resuming): a `sqlite://PATH` whose file does
    /// not exist is refused with [`StoreError::Missing`], and neither the
    /// file nor its directories are created. A Postgres database is never
    /// created by the host, so this is [`open_with`](Self::open_with) there.
    pub async fn open_existing(url: &str, options: StoreOptions) -> Result<Store, StoreError> {
        Store::open_mode(url, options, false).await
    }

    async fn open_mode(
        url: &str,
        options: StoreOptions,
        create: bool,
    ) -> Result<Store, StoreError> {
        let display = url::redact(url);
        let backend = match DatabaseUrl::parse(url)? {
            DatabaseUrl::Sqlite { path } => {
                Backend::Sqlite(SqliteStore::open(&path, &display, options, create).await?)
            }
            DatabaseUrl::Postgres { url } => {
                Backend::Postgres(PgStore::open(&url, &display, options).await?)
            }
        };
        Ok(Store {
            writer: RunWriter {
                history: History { backend, display },
                fence: None,
                plans: Arc::default(),
            },
        })
    }

    /// The `fdatasync`s of the WAL this process made for a SQLite store's
    /// `--durability full` commits (each covering every commit written
    /// before it), the time spent in them (what the engine's benchmark
    /// compares with one `fdatasync` of a plain file), and how many of the
    /// handle's commits are durable. None on Postgres, or when SQLite syncs
    /// (or not) itself.
    pub fn wal_syncs(&self) -> Option<WalSyncs> {
        match &self.backend {
            Backend::Sqlite(store) => store.wal_syncs(),
            Backend::Postgres(_) => None,
        }
    }

    /// Whether a run answered (or otherwise made ready) on this store is,
    /// by default, left queued for a worker rather than continued by the
    /// process that readied it: true on Postgres, the shared database
    /// workers claim from; false on SQLite, a file one machine's commands
    /// continue their runs in.
    pub fn queues_for_workers(&self) -> bool {
        match &self.backend {
            Backend::Sqlite(_) => false,
            Backend::Postgres(_) => true,
        }
    }

    /// A handle on the same database whose checkpoint commits and
    /// `finish_run` of `lease.run_id` carry the lease: the database refuses
    /// them ([`StoreError::LeaseLost`]) once another runner took the run over.
    /// Its failed-step rows, map items and artifacts are fenced the same
    /// way.
    pub fn fenced(&self, lease: Lease) -> Store {
        Store {
            writer: RunWriter {
                fence: Some(Arc::new(lease)),
                ..self.writer.clone()
            },
        }
    }

    /// Waits for in-flight statements and closes every connection. Dropping
    /// the store also closes them, but without waiting.
    pub async fn close(&self) {
        dispatch!(self, s => s.close().await)
    }

    /// Like [`create_run`](Self::create_run), but the run waits in the queue
    /// (status `queued`) for a worker.
    pub async fn enqueue_run(&self, run: &NewRun) -> Result<(), StoreError> {
        self.create(run, RunStatus::Queued, &RunOptions::default())
            .await
            .map(drop)
    }

    /// [`enqueue_run`](Self::enqueue_run) for a task: the run's checkpoints
    /// keep `task_id`'s row in the current-checkpoint table up to date
    /// ([`current_checkpoint`](Self::current_checkpoint)). Without a task id a
    /// run is its own task.
    pub async fn enqueue_run_for_task(
        &self,
        run: &NewRun,
        task_id: Option<&str>,
    ) -> Result<(), StoreError> {
        let options = RunOptions {
            task_id: task_id.map(str::to_owned),
            ..RunOptions::default()
        };
        self.create(run, RunStatus::Queued, &options)
            .await
            .map(drop)
    }

    /// [`enqueue_run`](Self::enqueue_run) with options: its task, its
    /// priority, concurrency limit and key (which [`claim_run`](Self::claim_run)
    /// obeys), and an idempotency key or a schedule's tick that makes it
    /// happen once: when the key is live, or the tick has its run already
    /// (another worker queued it), nothing is written and that run is
    /// returned ([`Admission::Existing`]). Of any number of callers racing
    /// with the same key or tick, on any number of hosts, one creates the run.
    pub async fn enqueue_run_with(
        &self,
        run: &NewRun,
        options: &RunOptions,
    ) -> Result<Admission, StoreError> {
        self.create(run, RunStatus::Queued, options).await
    }

    /// Records `answer` (checked against the wait's schema by the caller)
    /// by `by` for the wait of a run waiting at checkpoint `seq`, and queues
    /// the run again, in one transaction. Refused ([`StoreError::Conflict`],
    /// nothing written) unless the run is waiting there, its wait is not
    /// answered and its deadline has not passed.
    pub async fn answer_wait(
        &self,
        run_id: &str,
        seq: u64,
        answer: &Value,
        by: &str,
    ) -> Result<(), StoreError> {
        let prepared = PreparedAnswer::new(&self.writer.history, run_id, seq, answer, by)?;
        dispatch!(self, s => s.answer_wait(&prepared).await)
    }

    /// Cancels a run on behalf of `by`: a queued or waiting run ends as
    /// `cancelled` with `error` now ([`Cancelled::Now`]); a running one gets
    /// a cancel request, which refuses its next checkpoint
    /// ([`StoreError::CancelRequested`]) so that its runner ends it there
    /// ([`Cancelled::Requested`]). A finished run is refused
    /// ([`StoreError::Conflict`]), with nothing changed.
    pub async fn cancel_run(
        &self,
        run_id: &str,
        by: &str,
        error: &Value,
    ) -> Result<Cancelled, StoreError> {
        let prepared = PreparedCancel::new(run_id, by, error);
        dispatch!(self, s => s.cancel_run(&prepared).await)
    }

    /// The value of `key` in kv namespace `space`, if it is set. No key
    /// holds NUL ([`Store::kv_set`] refuses one), so a key with NUL is
    /// answered as unset on both backends without a query (Postgres text
    /// cannot hold NUL, and SQLite's text functions stop at it).
    pub async fn kv_get(
        &self,
        space: KvSpace<'_>,
        key: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        if key.contains('\0') {
            return Ok(None);
        }
        dispatch!(self, s => s.kv_get(space, key).await)
    }

    /// Sets `key` of kv namespace `space`, replacing its value, in a
    /// transaction of its own (durable when it returns), unless that would
    /// take the namespace past `limits` ([`KvWrite::OverQuota`], nothing
    /// written).
    pub async fn kv_set(
        &self,
        space: KvSpace<'_>,
        key: &str,
        value: &[u8],
        limits: KvLimits,
    ) -> Result<KvWrite, StoreError> {
        if key.contains('\0') {
            return Err(StoreError::Invalid {
                db: self.display.clone(),
                message: format!(
                    "kv key {key:?} of namespace {} holds NUL (U+0000), which no kv backend \
                     stores; nothing was written",
                    kv::describe(space)
                ),
            });
        }
        dispatch!(self, s => s.kv_set(space, key, value, limits).await)
    }

    /// Removes `key` of kv namespace `space`; removing a key that is not
    /// set is not an error.
    pub async fn kv_delete(&self, space: KvSpace<'_>, key: &str) -> Result<(), StoreError> {
        if key.contains('\0') {
            return Ok(());
        }
        dispatch!(self, s => s.kv_delete(space, key).await)
    }

    /// The first `limit` keys of kv namespace `space` that start with
    /// `prefix`, in byte order. A prefix with NUL matches no key (none
    /// holds NUL), on both backends alike.
    pub async fn kv_keys(
        &self,
        space: KvSpace<'_>,
        prefix: &str,
        limit: u64,
    ) -> Result<Vec<String>, StoreError> {
        if prefix.contains('\0') || limit == 0 {
            return Ok(Vec::new());
        }
        dispatch!(self, s => s.kv_keys(space, prefix, limit).await)
    }

    /// What kv namespace `space` holds, as its quota counts it.
    pub async fn kv_usage(&self, space: KvSpace<'_>) -> Result<KvUsage, StoreError> {
        dispatch!(self, s => s.kv_usage(space).await)
    }

    /// Gives namespace `space` the rows its name had before namespaces were
    /// scoped (schema version 12), if it holds none of its own and nobody
    /// took them first; how many rows it took. See `kv.rs`.
    pub async fn kv_adopt(&self, space: KvSpace<'_>) -> Result<u64, StoreError> {
        dispatch!(self, s => s.kv_adopt(space).await)
    }

    /// Takes the lease on an unfinished run for `owner` until now + `ttl`.
    /// Refused with [`StoreError::Leased`] (naming the holder and expiry) while
    /// another owner holds a live lease; taking over an expired lease (or
    /// none) bumps the generation. The same owner re-acquiring just renews.
    /// A queued run becomes running.
    pub async fn acquire_lease(
        &self,
        run_id: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Lease, StoreError> {
        dispatch!(self, s => s.acquire_lease(run_id, owner, ttl).await)
    }

    /// Extends a held lease to now + `ttl` (the heartbeat). Fails with
    /// [`StoreError::LeaseLost`] if it changed hands, or a conflict if the
    /// run finished.
    pub async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        dispatch!(self, s => s.renew_lease(lease, ttl).await)
    }

    /// Gives a held lease back: an unfinished run goes back to the queue for
    /// any worker. Returns false (and changes nothing) if the lease was no
    /// longer held (lost, or the run finished, which releases it).
    pub async fn release_lease(&self, lease: &Lease) -> Result<bool, StoreError> {
        dispatch!(self, s => s.release_lease(lease).await)
    }

    /// Claims one run for `owner`: first a running run whose lease expired (a
    /// dead runner's), then a waiting run whose wait timed out (its approval
    /// node takes its `on_timeout` route), else the queued run of the
    /// highest priority, oldest first; either of the last two only if its
    /// flow control lets it run: fewer running runs of its scenario than its
    /// concurrency limit, and none with its concurrency key (waiting runs
    /// do not count). On Postgres concurrent claimers skip each other's rows (`FOR
    /// UPDATE SKIP LOCKED`), and the limits of a scenario are checked again
    /// under a lock of that scenario's claims, so any number of workers obey
    /// them. The run is returned as it is after the claim (status running,
    /// leased).
    pub async fn claim_run(
        &self,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<(RunRow, Lease)>, StoreError> {
        Ok(self
            .claim(owner, ttl)
            .await?
            .map(|claim| (claim.run, claim.lease)))
    }

    /// [`claim_run`](Self::claim_run), saying whether the run was taken
    /// over from a runner whose lease expired ([`Claim::took_over`]).
    pub async fn claim(&self, owner: &str, ttl: Duration) -> Result<Option<Claim>, StoreError> {
        dispatch!(self, s => s.claim_run(owner, ttl).await)
    }

    /// Sets (Some) or removes (None) how long finished runs of `scenario`
    /// are kept by [`prune_runs`](Self::prune_runs).
    pub async fn set_retention(
        &self,
        scenario: &str,
        keep: Option<Duration>,
    ) -> Result<(), StoreError> {
        dispatch!(self, s => s.set_retention(scenario, keep).await)
    }

    /// Deletes the whole history (checkpoints, steps, journal, map items,
    /// artifacts, task rows) of finished runs (completed, failed, cancelled)
    /// last updated longer ago than their scenario's retention setting, or
    /// `older_than` for scenarios without one (None: only scenarios with a
    /// setting are pruned), then blobs nothing refers to any more. Queued,
    /// running and waiting runs are never touched.
    pub async fn prune_runs(
        &self,
        older_than: Option<Duration>,
    ) -> Result<PruneReport, StoreError> {
        dispatch!(self, s => s.prune_runs(older_than).await)
    }
}

/// The writes of a run's history, as the engine's run log makes them:
/// creating a run, committing its steps with their journal, cache entry and
/// artifacts, its map items and retried attempts, its wait and its finish,
/// fenced by the lease of a handle made by [`Store::fenced`]; and the state a
/// resume continues from ([`latest_state`](Self::latest_state), which
/// plans the next snapshot). Reads are [`History`]'s, which it derefs to.
impl RunWriter {
    /// The lease this handle is fenced by, if any.
    pub fn lease(&self) -> Option<&Lease> {
        self.fence.as_deref()
    }

    fn fence_for(&self, run_id: &str) -> Option<&Lease> {
        self.fence.as_deref().filter(|lease| lease.run_id == run_id)
    }

    /// Creates a running run and its checkpoint 0: the full initial state,
    /// node [`START_NODE`], next node `run.start_node`.
    /// Refuses ([`StoreError::Invalid`]) an input or initial state nested
    /// deeper than [`MAX_NESTING`].
    pub async fn create_run(&self, run: &NewRun) -> Result<(), StoreError> {
        self.create(run, RunStatus::Running, &RunOptions::default())
            .await
            .map(drop)
    }

    /// [`create_run`](Self::create_run) with options: an idempotency key
    /// whose live run is returned instead of creating another
    /// ([`Admission::Existing`], nothing written), and what a queue claim
    /// would read (a run created running is counted by the concurrency
    /// limits of the runs its scenario queues).
    pub async fn create_run_with(
        &self,
        run: &NewRun,
        options: &RunOptions,
    ) -> Result<Admission, StoreError> {
        self.create(run, RunStatus::Running, options).await
    }

    async fn create(
        &self,
        run: &NewRun,
        status: RunStatus,
        options: &RunOptions,
    ) -> Result<Admission, StoreError> {
        self.check_new_run(run)?;
        let prepared = PreparedRun::new(run, status, options.task_id.as_deref());
        let admission = dispatch!(self, s => s.create_run(run, prepared, options).await)?;
        if admission == Admission::Created {
            self.plans.set(
                &run.id,
                checkpoint::EncodedCheckpoint::initial_plan(&run.initial_state),
            );
        }
        Ok(admission)
    }

    /// A run whose input or initial state could not be read back is not
    /// written.
    fn check_new_run(&self, run: &NewRun) -> Result<(), StoreError> {
        let invalid = |e: TooDeep| StoreError::Invalid {
            db: self.display.clone(),
            message: format!("run `{}` was not created: {e}", run.id),
        };
        skillhost_model::check_nesting(&run.input, || "the run's input".into()).map_err(invalid)?;
        for (field, value) in run.initial_state.state().iter() {
            skillhost_model::check_nesting(value, || format!("initial state field `{field}`"))
                .map_err(invalid)?;
        }
        Ok(())
    }

    /// Writes one node's outcome in ONE transaction: the checkpoint (changes,
    /// plus the full state when a snapshot is due), the step row, the journal
    /// entries, the node cache entry (replacing one under the same key), and
    /// the run's status (`running`), current node (the first of
    /// `next_nodes`) and `last_seq`. Fails with [`StoreError::Conflict`],
    /// writing nothing, unless `commit.seq` is exactly the last seq + 1 and
    /// the run is not finished: the exactly-once guard on resume. Refuses
    /// ([`StoreError::Invalid`], writing nothing) changes nested deeper than
    /// [`MAX_NESTING`].
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
        self.commit_with(commit, artifacts, None, false)
            .await
            .map(drop)
    }

    /// [`commit_step_with_artifacts`](Self::commit_step_with_artifacts),
    /// returning once the commit is written, before it is durable: the
    /// caller may go on with work nothing outside its process sees, and
    /// awaits [`Written::durable`] before anything does (its events, a
    /// host call with effects, the run's end). On SQLite with
    /// [`SyncMode::Full`], the commit's sync runs meanwhile on a thread of
    /// the store's, which syncs the commits written while it syncs right
    /// after (one sync for several); elsewhere the commit is as durable as
    /// the store makes commits when this returns. A process killed at any
    /// point keeps what was written (the OS has it); a power loss may take
    /// the commits not yet durable, always a suffix of them, which a resume
    /// then runs again.
    pub async fn commit_step_ahead(
        &self,
        commit: &StepCommit,
        artifacts: &[NewArtifact],
    ) -> Result<Written, StoreError> {
        self.commit_with(commit, artifacts, None, true).await
    }

    /// [`commit_step_with_artifacts`](Self::commit_step_with_artifacts) of
    /// the run's last step, with the run's end
    /// ([`finish_run`](Self::finish_run)'s status, result and error) in the
    /// same transaction: one commit, one sync, and no moment at which the
    /// last checkpoint is durable and the run not finished. Refused like
    /// either (nothing is written then).
    pub async fn commit_last_step(
        &self,
        commit: &StepCommit,
        artifacts: &[NewArtifact],
        status: RunStatus,
        result: Option<&dyn RunResult>,
        error: Option<&Value>,
    ) -> Result<(), StoreError> {
        let fence = self.fence_for(&commit.run_id);
        let result = result.map(RunResult::json_text);
        let finish =
            PreparedFinish::new(&self.history, &commit.run_id, status, result, error, fence)?;
        self.commit_with(commit, artifacts, Some(finish), false)
            .await
            .map(drop)
    }

    async fn commit_with(
        &self,
        commit: &StepCommit,
        artifacts: &[NewArtifact],
        finish: Option<PreparedFinish>,
        ahead: bool,
    ) -> Result<Written, StoreError> {
        let fence = self.fence_for(&commit.run_id);
        let plan = self.plans.get(&commit.run_id);
        // First: it refuses changes too deep to hash or serialise safely.
        let (encoded, after) = checkpoint::EncodedCheckpoint::new(&self.display, commit, plan)?;
        // The engine hashes incrementally (`FieldHashes`); in debug builds,
        // every commit is checked against a hash from scratch.
        debug_assert_eq!(
            commit.state_hash,
            state::state_hash_like(&commit.full_state, &commit.state_hash),
            "StepCommit.state_hash must be the hash of full_state"
        );
        let mut prepared = PreparedCommit::new(&self.history, commit, encoded, fence)?;
        prepared.finish = finish.map(Box::new);
        let finished = prepared.finish.is_some();
        let extras = CommitExtras::new(&self.history, commit, &prepared, artifacts)?;
        let written = match &self.backend {
            Backend::Sqlite(s) => Written(s.commit_step(prepared, &extras, ahead).await?),
            Backend::Postgres(s) => s
                .commit_step(prepared, &extras)
                .await
                .map(|()| Written(None))?,
        };
        if finished {
            self.plans.forget(&commit.run_id);
        } else {
            self.plans.set(&commit.run_id, after);
        }
        Ok(written)
    }

    /// Records a finished item of a map node, durable before the node's own
    /// commit. Idempotent on (run, node, visit, item index): the first output
    /// recorded wins.
    /// Refuses an output nested deeper than [`MAX_NESTING`].
    pub async fn record_map_item(&self, item: &MapItemRow) -> Result<(), StoreError> {
        skillhost_model::check_nesting(&item.output, || {
            format!(
                "the output of item {} of map node `{}`",
                item.item_index, item.node_id
            )
        })
        .map_err(|e| StoreError::Invalid {
            db: self.display.clone(),
            message: format!("run `{}`: {e}", item.run_id),
        })?;
        let prepared = PreparedMapItem::new(&self.history, item, self.fence_for(&item.run_id))?;
        dispatch!(self, s => s.record_map_item(&prepared).await)
    }

    /// Records a failed attempt (no checkpoint).
    pub async fn record_failed_step(&self, step: &StepRow) -> Result<(), StoreError> {
        let prepared = PreparedStep::new(&self.history, step, self.fence_for(&step.run_id))?;
        dispatch!(self, s => s.record_failed_step(&prepared).await)
    }

    /// Puts the run in `waiting` at its last checkpoint (`wait.seq`) for an
    /// answer, in one transaction: the wait (prompt, answer schema, deadline
    /// from now + `timeout_ms`; a wait already recorded at that checkpoint
    /// keeps its own) and the run's status, its lease released. Refused
    /// when the run moved on or finished ([`StoreError::Conflict`]), its
    /// cancel was asked for ([`StoreError::CancelRequested`]), or this
    /// handle's lease on it was lost. Returns the wait's deadline.
    pub async fn wait_run(&self, wait: &NewWait) -> Result<Option<i64>, StoreError> {
        let prepared = PreparedWait::new(&self.history, wait, self.fence_for(&wait.run_id))?;
        dispatch!(self, s => s.wait_run(&prepared).await)
    }

    /// Sets the run's final status, result and error, and releases its lease.
    /// Refused ([`StoreError::Conflict`]) if the run is already finished.
    pub async fn finish_run(
        &self,
        run_id: &str,
        status: RunStatus,
        result: Option<&dyn RunResult>,
        error: Option<&Value>,
    ) -> Result<(), StoreError> {
        let fence = self.fence_for(run_id);
        let result = result.map(RunResult::json_text);
        let prepared = PreparedFinish::new(&self.history, run_id, status, result, error, fence)?;
        dispatch!(self, s => s.finish_run(prepared).await)?;
        self.plans.forget(run_id);
        Ok(())
    }

    /// The state at the run's last checkpoint, rebuilt and verified against
    /// its hash and every replayed row against its digest
    /// ([`StoreError::Corrupt`], naming the run, the seq and what does not
    /// match). None for an unknown run.
    pub async fn latest_state(&self, run_id: &str) -> Result<Option<LoadedCheckpoint>, StoreError> {
        let loaded = dispatch!(self, s => s.latest_state(run_id).await)?;
        Ok(loaded.map(|(checkpoint, plan)| {
            // A resume continues from here: its next snapshot is due when
            // this run's would have been.
            self.plans.set(run_id, plan);
            checkpoint
        }))
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
        let fence = self.fence_for(run_id);
        let artifact = PreparedArtifact::new(name, media_type, bytes);
        dispatch!(self, s => s.put_artifact(run_id, &artifact, fence).await)?;
        Ok(artifact.digest)
    }
}

/// Reads of runs and their history, and nothing else: what `host serve`,
/// `host mcp`, a replay and `host runs` read. A [`Store`] and a
/// [`RunWriter`] deref to it, so a function that only reads takes
/// `&History` and is given `&store`.
impl History {
    /// Whether the database answers, as this store's retries see it
    /// ([`Link`]): Postgres only (None on SQLite). Shared by its clones.
    pub fn link(&self) -> Option<&Link> {
        match &self.backend {
            Backend::Sqlite(_) => None,
            Backend::Postgres(store) => Some(store.link()),
        }
    }

    /// Which backend: `"sqlite"` or `"postgres"`, for display only (what a
    /// backend implies is asked of the store, e.g.
    /// [`Store::queues_for_workers`]).
    pub fn backend_name(&self) -> &'static str {
        match &self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// The URL for messages: passwords replaced by `***`.
    pub fn url_for_display(&self) -> String {
        self.display.clone()
    }

    pub async fn run(&self, run_id: &str) -> Result<Option<RunRow>, StoreError> {
        dispatch!(self, s => s.run(run_id).await)
    }

    /// Runs, newest first, optionally only those with `status`; at most
    /// `limit`. Fails on the first row that does not decode or match its
    /// digest; [`list_runs_each`](Self::list_runs_each) lists the others.
    pub async fn list_runs(
        &self,
        status: Option<RunStatus>,
        limit: u32,
    ) -> Result<Vec<RunRow>, StoreError> {
        dispatch!(self, s => s.list_runs(status, limit).await)
    }

    /// [`list_runs`](Self::list_runs) with each row decoded and checked on
    /// its own: a row that does not decode, or no longer matches its digest,
    /// is an [`UnreadableRun`] (its id and a [`StoreError::Corrupt`] naming
    /// it), and the others are listed.
    pub async fn list_runs_each(
        &self,
        status: Option<RunStatus>,
        limit: u32,
    ) -> Result<Vec<Result<RunRow, UnreadableRun>>, StoreError> {
        dispatch!(self, s => s.list_runs_each(status, limit).await)
    }

    /// One page of the runs list, newest first: [`RunFilter`]'s status,
    /// scenario and cursor ([`RunCursor::after`] the last run of the
    /// previous page), each row decoded and checked on its own as in
    /// [`list_runs_each`](Self::list_runs_each).
    pub async fn list_runs_page(
        &self,
        filter: &RunFilter,
    ) -> Result<Vec<Result<RunRow, UnreadableRun>>, StoreError> {
        dispatch!(self, s => s.list_runs_page(filter).await)
    }

    /// The child runs of `run_id` (those its subgraph nodes started),
    /// oldest first.
    pub async fn children(&self, run_id: &str) -> Result<Vec<RunRow>, StoreError> {
        dispatch!(self, s => s.children(run_id).await)
    }

    /// The child run that visit `visit` of subgraph node `node` of run
    /// `run_id` started, if it started one.
    pub async fn child(
        &self,
        run_id: &str,
        node: &str,
        visit: u32,
    ) -> Result<Option<RunRow>, StoreError> {
        dispatch!(self, s => s.child(run_id, node, visit).await)
    }

    /// Every attempt of the run, in the order they were recorded.
    pub async fn steps(&self, run_id: &str) -> Result<Vec<StepRow>, StoreError> {
        dispatch!(self, s => s.steps(run_id).await)
    }

    /// The run's recorded host calls, by seq (and within a step by map item
    /// and entry), each checked against its digests: a row edited or
    /// damaged since it was committed is [`StoreError::Corrupt`], naming
    /// the run, the seq and the entry.
    pub async fn journal(&self, run_id: &str) -> Result<Vec<JournalEntry>, StoreError> {
        dispatch!(self, s => s.journal(run_id).await)
    }

    /// [`journal`](Self::journal) with each row's digests and, for a row that
    /// no longer matches them, why ([`JournalRow::fault`]), instead of an
    /// error: a replay reports such a row as its step's divergence, and an
    /// export carries the digests.
    pub async fn journal_rows(&self, run_id: &str) -> Result<Vec<JournalRow>, StoreError> {
        dispatch!(self, s => s.journal_rows(run_id).await)
    }

    /// The run's checkpoint history (without rebuilding states), by seq.
    pub async fn checkpoints(&self, run_id: &str) -> Result<Vec<CheckpointRow>, StoreError> {
        dispatch!(self, s => s.checkpoints(run_id).await)
    }

    /// The run's whole checkpoint history: the state it started from and
    /// every checkpoint with its changes, each row verified against its
    /// digest ([`StoreError::Corrupt`]). None for an unknown run.
    pub async fn history(&self, run_id: &str) -> Result<Option<RunHistory>, StoreError> {
        dispatch!(self, s => s.history(run_id).await)
    }

    /// The state at checkpoint `seq`, rebuilt and verified. None if the run
    /// or that checkpoint does not exist.
    pub async fn state_at(
        &self,
        run_id: &str,
        seq: u64,
    ) -> Result<Option<LoadedCheckpoint>, StoreError> {
        dispatch!(self, s => s.state_at(run_id, seq).await)
    }

    /// The recorded items of one visit of a map node, by item index, each
    /// checked against its recorded output hash ([`StoreError::Corrupt`]).
    pub async fn map_items(
        &self,
        run_id: &str,
        node_id: &str,
        visit: u32,
    ) -> Result<Vec<MapItemRow>, StoreError> {
        dispatch!(self, s => s.map_items(run_id, node_id, visit).await)
    }

    /// The run's waits, by seq (answered ones with their answers).
    pub async fn waits(&self, run_id: &str) -> Result<Vec<WaitRow>, StoreError> {
        dispatch!(self, s => s.waits(run_id).await)
    }

    /// The run's wait at checkpoint `seq`, if it waited there.
    pub async fn wait_at(&self, run_id: &str, seq: u64) -> Result<Option<WaitRow>, StoreError> {
        dispatch!(self, s => s.wait_at(run_id, seq).await)
    }

    /// The node cache's entry under `key`, if one is there and has not
    /// expired: its output, verified against its hash and the row's digest
    /// ([`StoreError::Corrupt`] when it does not match), with the run, seq
    /// and node whose step recorded it. Entries are written by the commit of
    /// that step ([`StepCommit::cache`]).
    pub async fn cached_output(&self, key: &str) -> Result<Option<CachedOutput>, StoreError> {
        dispatch!(self, s => s.cached_output(key).await)
    }

    /// The run's artifacts, by name.
    pub async fn artifacts(&self, run_id: &str) -> Result<Vec<ArtifactRow>, StoreError> {
        dispatch!(self, s => s.artifacts(run_id).await)
    }

    /// The bytes with this digest, verified against it.
    pub async fn artifact_bytes(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        dispatch!(self, s => s.artifact_bytes(digest).await)
    }

    /// Where a task stands: its current-checkpoint row, one indexed lookup.
    /// A run without a task id is the task with the run's own id; it has no
    /// row, and its checkpoint at `last_seq` answers (in the same statement).
    pub async fn current_checkpoint(
        &self,
        task_id: &str,
    ) -> Result<Option<CurrentCheckpoint>, StoreError> {
        dispatch!(self, s => s.current_checkpoint(task_id).await)
    }

    /// How many runs are queued, since when the oldest of them, and how
    /// many wait for an answer: across every process on the store, in one
    /// read (what `/metrics` reports at each scrape).
    pub async fn queue_stats(&self) -> Result<QueueStats, StoreError> {
        dispatch!(self, s => s.queue_stats().await)
    }

    /// The per-scenario retention settings, by scenario name.
    pub async fn retention(&self) -> Result<Vec<Retention>, StoreError> {
        dispatch!(self, s => s.retention().await)
    }

    /// The newest tick of `schedule` of `scenario` that has a run, if any
    /// (Unix ms): where a worker's catch-up starts.
    pub async fn last_schedule_tick(
        &self,
        scenario: &str,
        schedule: &str,
    ) -> Result<Option<i64>, StoreError> {
        dispatch!(self, s => s.last_schedule_tick(scenario, schedule).await)
    }
}
