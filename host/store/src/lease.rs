//! Leases, the run queue and where tasks stand: the types both backends
//! share for "one active runner per run".
//!
//! A lease is (owner, expiry, generation) on a run row. Acquiring a live lease
//! held by another owner is refused ([`StoreError::Leased`]); taking over an
//! expired one bumps the generation. A store handle made with
//! [`Store::fenced`](super::Store::fenced) carries its lease into every
//! checkpoint commit and `finish_run`, which the database refuses
//! ([`StoreError::LeaseLost`]) once the generation moved on: a runner that
//! was paused past its expiry cannot write after another took over.
//!
//! [`StoreError::Leased`]: super::StoreError::Leased
//! [`StoreError::LeaseLost`]: super::StoreError::LeaseLost

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A lease held on one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub run_id: String,
    pub owner: String,
    /// Bumped whenever the run changes hands; what commits are fenced by.
    pub generation: u64,
    /// Unix milliseconds (the database's clock on Postgres).
    pub expires_at_ms: i64,
}

/// A run a claim took ([`Store::claim`](super::Store::claim)), leased to
/// the claimer.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// The run as it is after the claim (status running, leased).
    pub run: super::RunRow,
    pub lease: Lease,
    /// The run's lease was another runner's, which let it expire (it died,
    /// or stalled past its time to live): a takeover.
    pub took_over: bool,
}

/// Where a task stands: its row in `task_checkpoints`, upserted with every
/// checkpoint of the runs working on it (for a run without a task id: the
/// run's checkpoint at `last_seq`, which says the same).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CurrentCheckpoint {
    pub task_id: String,
    pub run_id: String,
    pub seq: u64,
    pub node_id: String,
    pub next_nodes: Vec<String>,
    pub state_hash: String,
    pub updated_at_ms: i64,
}

/// How a new run enters the store beyond its [`NewRun`](super::NewRun):
/// its task, how the queue treats it, and a key that makes its creation
/// happen once. `Default` is a plain run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// The task the run works on ([`Store::current_checkpoint`]); none: the
    /// run is its own task.
    ///
    /// [`Store::current_checkpoint`]: super::Store::current_checkpoint
    pub task_id: Option<String>,
    /// Queued runs of a higher priority are claimed first.
    pub priority: i64,
    /// The most runs of the run's scenario (by name) running at once; a
    /// claim skips the run while that many are.
    pub concurrency_limit: Option<u32>,
    /// A claim skips the run while a run of its scenario with the same key
    /// is running.
    pub concurrency_key: Option<String>,
    /// The run is created only if no live run holds this key.
    pub idempotency: Option<IdempotencyKey>,
    /// The run is created only if its schedule's tick has no run yet.
    pub schedule_tick: Option<ScheduleTick>,
}

impl RunOptions {
    /// Nothing but (maybe) a task: a run the fast path creates.
    pub(crate) fn is_plain(&self) -> bool {
        self.priority == 0
            && self.concurrency_limit.is_none()
            && self.concurrency_key.is_none()
            && self.idempotency.is_none()
            && self.schedule_tick.is_none()
    }
}

/// An idempotency key and how long it holds the run it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey {
    pub key: String,
    pub ttl: Duration,
}

/// How long an idempotency key holds its run unless told otherwise.
pub const DEFAULT_IDEMPOTENCY_TTL: Duration = Duration::from_secs(24 * 3600);

/// One tick of one `[[schedule]]` of the run's scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleTick {
    /// The schedule's name within its scenario.
    pub schedule: String,
    /// The tick, Unix milliseconds.
    pub tick_ms: i64,
}

/// What creating a run with [`RunOptions`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// The run was created.
    Created,
    /// Nothing was written: a live idempotency key, or the schedule's
    /// tick, already has this run.
    Existing { run_id: String },
}

/// The queue and the open waits as the store has them now, across every
/// process on it ([`History::queue_stats`](super::History::queue_stats)):
/// what a metrics scrape reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
    /// Runs waiting in the queue for a worker.
    pub queued: u64,
    /// When the run queued longest ago was queued (Unix ms; None when
    /// nothing is queued): its creation, or when it was queued again
    /// (answered, or given back by a worker).
    pub oldest_queued_at_ms: Option<i64>,
    /// Runs waiting for an answer at an approval node.
    pub waiting: u64,
}

/// A per-scenario retention setting for `host runs prune`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    pub scenario_name: String,
    pub keep_ms: i64,
}

/// What one prune deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneReport {
    /// Ids of the finished runs whose history was deleted.
    pub runs: Vec<String>,
    /// Artifact blobs no run refers to any more, deleted with them.
    pub blobs: u64,
    /// Node cache entries deleted: those the pruned runs wrote, and every
    /// expired one.
    pub cache_entries: u64,
}

/// A lease owner id for this process: host name, pid and a random suffix,
/// unique enough that two processes never share one.
pub fn new_owner_id(prefix: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    let random = uuid::Uuid::now_v7().simple().to_string();
    format!(
        "{prefix}@{host}:{}:{}",
        std::process::id(),
        &random[random.len() - 6..]
    )
}

pub(crate) fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 4)
}

/// Unix milliseconds as UTC ISO 8601 (`2026-05-01T12:00:00.123Z`), for messages.
pub fn format_ms(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// How the store's commands name a duration (`7d`, `12h`, `30m`): the
/// model's parser, shared with the scenario format (a node cache's `ttl`).
pub use skillhost_model::parse_duration;

/// The refusal of a fenced write: `fence` no longer matches the run's
/// lease (`holder`, `generation`, `expires_at_ms` as read in the refused
/// transaction).
pub(crate) fn lease_lost(
    db: &str,
    fence: &Lease,
    holder: Option<&str>,
    generation: i64,
    expires_at_ms: Option<i64>,
) -> super::StoreError {
    let now = match (holder, expires_at_ms) {
        (Some(holder), Some(expires)) => format!(
            "`{holder}` holds generation {generation} until {}",
            format_ms(expires)
        ),
        (Some(holder), None) => format!("`{holder}` holds generation {generation}"),
        (None, _) => format!("nobody holds it now (generation {generation})"),
    };
    super::StoreError::LeaseLost {
        db: db.to_owned(),
        run_id: fence.run_id.clone(),
        owner: fence.owner.clone(),
        generation: fence.generation,
        now,
    }
}

/// Whether the run row's lease is still `fence`.
pub(crate) fn holds(fence: &Lease, holder: Option<&str>, generation: i64) -> bool {
    holder == Some(fence.owner.as_str()) && u64::try_from(generation) == Ok(fence.generation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_times_in_utc() {
        assert_eq!(format_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(format_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn owner_ids_differ() {
        assert_ne!(new_owner_id("w"), new_owner_id("w"));
        assert!(new_owner_id("worker").starts_with("worker@"));
    }
}
