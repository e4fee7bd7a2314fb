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
    /// "ok" or "failed".
    pub status: String,
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
}

/// A recorded host call (llm, http, clock, random) for replay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    pub seq: u64,
    pub node_id: String,
    pub kind: String,
    pub request: Value,
    pub response: Value,
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
