//! The history a run leaves besides its checkpoints: node attempts (steps),
//! finished items of map nodes, the journal of host calls, and artifacts.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One attempt at one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRow {
    pub run_id: String,
    /// The checkpoint the attempt produced (None for a failed attempt).
    pub seq: Option<u64>,
    pub node_id: String,
    pub attempt: u32,
    pub status: StepStatus,
    pub started_at_ms: i64,
    pub duration_us: u64,
    pub input_hash: Option<String>,
    pub output_hash: Option<String>,
    pub error: Option<Value>,
    pub fuel_consumed: Option<u64>,
    pub memory_peak_bytes: Option<u64>,
    /// Anything else worth keeping (verified citations, logs).
    pub detail: Option<Value>,
}

/// How an attempt at a node ended. Stored lowercase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    /// The node succeeded; its checkpoint is the step's `seq`.
    Ok,
    /// The attempt failed (the step's `error` says why).
    Failed,
}

impl StepStatus {
    pub const ALL: [StepStatus; 2] = [StepStatus::Ok, StepStatus::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Ok => "ok",
            StepStatus::Failed => "failed",
        }
    }
}

impl std::fmt::Display for StepStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A step status name that is not one of [`StepStatus::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown step status `{0}` (expected ok or failed)")]
pub struct UnknownStepStatus(pub String);

impl std::str::FromStr for StepStatus {
    type Err = UnknownStepStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StepStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownStepStatus(s.to_owned()))
    }
}

/// A finished item of a map node, durable before the node's own commit so a
/// crash inside the map does not redo it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MapItemRow {
    pub run_id: String,
    pub node_id: String,
    /// Which visit of the node (a map node in a loop runs once per visit).
    pub visit: u32,
    pub item_index: u32,
    pub output: Value,
    pub output_hash: String,
    pub duration_us: u64,
    pub fuel_consumed: u64,
    /// The host calls the item's call made (their `seq` is 0: the node's
    /// commit sets it). A resumed map node that reuses the item commits
    /// them with the node, so its journal stays whole.
    pub journal: Vec<JournalEntry>,
    /// The attempt the output came from, 1-based.
    pub attempt: u32,
}

/// One recorded host call whose answer came from outside the run (`kv`,
/// `http`, `llm`), committed with the step whose call made it: what a
/// replay answers that call with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    pub seq: u64,
    pub node_id: String,
    /// The index of the map item whose call made it; None for the call of
    /// a skill node.
    pub item: Option<u32>,
    /// Its place in its call's journal, from 0 (each map item's call has a
    /// journal of its own).
    pub entry: u32,
    /// The capability: `kv`, `http`, `llm`.
    pub kind: String,
    pub request: Value,
    pub response: Value,
}

impl JournalEntry {
    /// The SHA-256 (lowercase hex) of the canonical JSON of its request:
    /// what a replay's request must hash to.
    pub fn request_digest(&self) -> String {
        skillhost_model::state_hash(&self.request)
    }

    /// The digest its row carries in run `run_id`
    /// ([`journal::JournalDigest`](crate::journal)): of its request and
    /// response as stored, and of its run, seq, node, item, entry index and
    /// kind. Not a signature: it catches a row edited or damaged without
    /// the digest being recomputed.
    pub fn digest(&self, run_id: &str) -> String {
        crate::journal::JournalDigest::of(
            run_id,
            self,
            &self.request.to_string(),
            &self.response.to_string(),
        )
    }
}

/// A journal entry as it was read, with the digests that pin it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalRow {
    pub entry: JournalEntry,
    /// The request digest recorded with it (None in rows older than schema
    /// version 6).
    pub request_digest: Option<String>,
    /// The row's digest as recorded ([`JournalEntry::digest`]), or
    /// `legacy` for rows older than schema version 6, which have none.
    pub digest: String,
    /// Why the row no longer matches its digest (it was edited or damaged
    /// after it was committed); None when it does.
    pub fault: Option<String>,
}

/// An artifact as stored: a name in a run pointing at a content-addressed blob.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArtifactRow {
    pub run_id: String,
    pub name: String,
    /// SHA-256 (lowercase hex) of the bytes.
    pub digest: String,
    pub media_type: String,
    pub size: u64,
    pub created_at_ms: i64,
}

/// An artifact to write together with a step
/// ([`Store::commit_step_with_artifacts`](super::Store::commit_step_with_artifacts)).
#[derive(Debug, Clone, PartialEq)]
pub struct NewArtifact {
    pub name: String,
    pub media_type: String,
    pub bytes: Vec<u8>,
}

/// The content address of some bytes: SHA-256, lowercase hex.
pub fn blob_digest(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}
