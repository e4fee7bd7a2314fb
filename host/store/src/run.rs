//! Runs: one row per execution of a scenario, with its status, input, outcome
//! and (for scale-out) its lease.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::state::InitialState;

/// Where a run stands. Stored lowercase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Queued,
    Running,
    Waiting,
    Completed,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub const ALL: [RunStatus; 6] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Waiting,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Waiting => "waiting",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    /// Completed, failed and cancelled runs take no more checkpoints.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled
        )
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is not one of [`RunStatus::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown run status `{0}` (expected one of queued, running, waiting, completed, failed, cancelled)"
)]
pub struct UnknownRunStatus(pub String);

impl FromStr for RunStatus {
    type Err = UnknownRunStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownRunStatus(s.to_owned()))
    }
}

/// A new, time-ordered run id (UUID v7): ids sort by creation time, which
/// keeps the runs index append-mostly and `runs list` stable within a
/// millisecond.
pub fn new_run_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// What [`Store::create_run`](super::Store::create_run) needs.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    pub id: String,
    pub scenario_name: String,
    pub scenario_path: String,
    pub scenario_digest: String,
    pub input: Value,
    /// Shared by the runs of a scenario, with its JSON and hash.
    pub initial_state: Arc<InitialState>,
    pub start_node: String,
    /// The visit counts checkpoint 0 starts with: empty for a new run, the
    /// counts at the checkpoint a fork starts from.
    pub start_visits: BTreeMap<String, u32>,
    /// Which code the run uses and where it came from; pinned by the run's
    /// digest.
    pub provenance: Provenance,
}

/// Which code a run uses and where it came from, recorded when it is
/// created, so that a replay or an audit can say exactly what ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// The SHA-256 (lowercase hex) of each component the run uses, by the
    /// scenario's skill alias.
    pub components: BTreeMap<String, String>,
    /// The run and checkpoint this run was forked from (`host runs fork`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkOrigin>,
    /// The run whose subgraph node started this one (a child run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentLink>,
    /// The trace the run's spans belong to: the W3C `traceparent` of its
    /// root span, chosen when the run is created, so that every process
    /// that works on the run adds to one trace (`skillhost-telemetry`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// The span the run's root span belongs under (16 hex digits): a child
    /// run's, the span of its parent's subgraph node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_parent_span: Option<String>,
    /// The scenario's text, for a scenario that is not an operator's file
    /// (one composed over MCP): where its file is missing (a worker on
    /// another machine, a directory cleaned up) it is written back from
    /// here, checked against the run's digest, before the run is loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario_text: Option<String>,
}

/// Where a child run comes from: the visit of a subgraph node of its
/// parent. A parent's node finds the child it started by this link (so a
/// resumed parent continues its child instead of starting another).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    pub run_id: String,
    /// The parent's subgraph node.
    pub node: String,
    /// Which visit of that node (1 for the first).
    pub visit: u32,
}

impl Provenance {
    /// As the store keeps it: canonical JSON (keys sorted), so that its
    /// digest does not depend on how it was built.
    pub fn to_json_text(&self) -> String {
        let value = serde_json::to_value(self).expect("a provenance serialises");
        skillhost_model::canonical_json(&value)
    }
}

/// Where a forked run started: a checkpoint of another run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkOrigin {
    pub run_id: String,
    pub seq: u64,
}

/// A run as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    pub id: String,
    pub scenario_name: String,
    pub scenario_path: String,
    pub scenario_digest: String,
    pub status: RunStatus,
    pub input: Value,
    pub result: Option<Value>,
    pub error: Option<Value>,
    /// The node the run executes next (the first of the last checkpoint's
    /// next nodes); after a failure, the node that failed. None once a run
    /// has nowhere left to go.
    pub current_node: Option<String>,
    /// Sequence number of the last checkpoint (0 = the initial state).
    pub last_seq: u64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub lease_owner: Option<String>,
    pub lease_expires_at_ms: Option<i64>,
    /// Bumped every time the lease changes hands; fences a runner that lost
    /// its lease: its writes are refused once this moved on.
    pub lease_generation: u64,
    /// The components the run uses and where it was forked from; None for
    /// runs created before the store recorded them (schema version 6).
    pub provenance: Option<Provenance>,
    /// When a waiting run's wait times out (its approval node then takes
    /// its `on_timeout` route); None when it waits for ever or is not
    /// waiting.
    #[serde(default)]
    pub wait_deadline_ms: Option<i64>,
    /// When a cancel was asked for while the run was running, and by whom:
    /// its next checkpoint is refused and it ends as cancelled.
    #[serde(default)]
    pub cancel_requested_at_ms: Option<i64>,
    #[serde(default)]
    pub cancel_requested_by: Option<String>,
}

impl RunRow {
    /// The parent of a child run (one a subgraph node started).
    pub fn parent(&self) -> Option<&ParentLink> {
        self.provenance.as_ref()?.parent.as_ref()
    }
}

/// Which runs a page of the runs list holds
/// ([`Store::list_runs_page`](crate::Store::list_runs_page)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFilter {
    pub status: Option<RunStatus>,
    /// Only runs of the scenario with this name.
    pub scenario: Option<String>,
    /// Only runs listed after this one (older, or as old with a smaller id).
    pub before: Option<RunCursor>,
    pub limit: u32,
}

/// A place in the runs list (newest first): a run's creation time and id.
/// As text, `MILLISECONDS.ID`, opaque to whoever pages with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCursor {
    pub created_at_ms: i64,
    pub id: String,
}

impl RunCursor {
    /// The cursor of the page that follows `run`.
    pub fn after(run: &RunRow) -> RunCursor {
        RunCursor {
            created_at_ms: run.created_at_ms,
            id: run.id.clone(),
        }
    }

    /// Reads a cursor written by [`Display`](std::fmt::Display); None for
    /// anything else.
    pub fn parse(text: &str) -> Option<RunCursor> {
        let (ms, id) = text.split_once('.')?;
        let created_at_ms = ms.parse().ok()?;
        (!id.is_empty()).then(|| RunCursor {
            created_at_ms,
            id: id.to_string(),
        })
    }
}

impl std::fmt::Display for RunCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.created_at_ms, self.id)
    }
}

/// A run row that could not be read back: it does not decode, or no
/// longer matches its digest. Listed on its own so that the other runs
/// still are.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct UnreadableRun {
    /// The run's id, when even that could not be read: None.
    pub id: Option<String>,
    #[source]
    pub error: Box<super::StoreError>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_round_trip() {
        for status in RunStatus::ALL {
            assert_eq!(status.as_str().parse::<RunStatus>().unwrap(), status);
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::Value::String(status.as_str().into())
            );
        }
        assert!("done".parse::<RunStatus>().is_err());
    }

    /// The SQL lists of active and finished statuses are
    /// [`RunStatus::is_finished`] and its complement.
    #[test]
    fn sql_status_lists_follow_is_finished() {
        let sql = |finished: bool| {
            let names: Vec<String> = RunStatus::ALL
                .into_iter()
                .filter(|s| s.is_finished() == finished)
                .map(|s| format!("'{s}'"))
                .collect();
            format!("({})", names.join(", "))
        };
        assert_eq!(crate::codec::ACTIVE, sql(false));
        assert_eq!(crate::codec::FINISHED, sql(true));
    }

    #[test]
    fn cursors_round_trip() {
        let cursor = RunCursor {
            created_at_ms: 1_700_000_000_123,
            id: new_run_id(),
        };
        assert_eq!(RunCursor::parse(&cursor.to_string()), Some(cursor));
        for bad in ["", "12", "x.abc", "12.", ".abc"] {
            assert_eq!(RunCursor::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn run_ids_sort_by_creation() {
        let a = new_run_id();
        let b = new_run_id();
        assert!(a < b, "{a} < {b}");
    }
}
