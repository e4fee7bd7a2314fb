//! The node cache as the store keeps it: an output recorded under a key
//! (which the engine computes from a component's digest, a node's grants and
//! its canonical input), written in the same transaction as the checkpoint of
//! the step that produced it, read back by any run on any worker until it
//! expires, and pinned by a digest checked on every read.
//!
//! Must not: compute keys or decide what may be cached (the engine does), or
//! serve a row that no longer matches its digest or output hash.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// An entry a step's commit writes ([`StepCommit::cache`](crate::StepCommit)):
/// the run, seq and node are the commit's.
#[derive(Debug, Clone, PartialEq)]
pub struct NewCacheEntry {
    pub key: String,
    pub output: Value,
    /// When it stops being served, in Unix milliseconds.
    pub expires_at_ms: i64,
}

/// An entry as read: its output, verified against its hash and the row's
/// digest, and the step that recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedOutput {
    pub key: String,
    pub output: Value,
    pub output_hash: String,
    /// The run, checkpoint and node whose step produced the output.
    pub run_id: String,
    pub seq: u64,
    pub node_id: String,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
}

const CACHE_DIGEST_V1: &str = "k1:";

/// Deletes the node cache entries that expired by $1, or whose run is gone
/// (pruned just before, in the same transaction). The same statement on
/// both backends (SQLite binds `$1` by its position).
pub(crate) const PRUNE_CACHE: &str = "DELETE FROM node_cache WHERE expires_at <= $1 \
     OR NOT EXISTS (SELECT 1 FROM runs WHERE runs.id = node_cache.run_id)";

/// The digest a cache row carries: `k1:` and the SHA-256 (hex) of its
/// columns, length-prefixed, the output as stored. Not a signature.
#[allow(clippy::too_many_arguments)]
pub(crate) fn cache_digest(
    key: &str,
    output: &str,
    output_hash: &str,
    run_id: &str,
    seq: i64,
    node_id: &str,
    created_at: i64,
    expires_at: i64,
) -> String {
    let (seq, created_at, expires_at) = (
        seq.to_string(),
        created_at.to_string(),
        expires_at.to_string(),
    );
    let mut hasher = Sha256::new();
    for field in [
        key,
        output,
        output_hash,
        run_id,
        &seq,
        node_id,
        &created_at,
        &expires_at,
    ] {
        hasher.update((field.len() as u64).to_le_bytes());
        hasher.update(field.as_bytes());
    }
    format!("{CACHE_DIGEST_V1}{}", hex::encode(hasher.finalize()))
}

/// A cache entry's columns, encoded and digested before its statement.
#[derive(Debug)]
pub(crate) struct CacheBinds {
    pub key: String,
    pub output: String,
    pub output_hash: String,
    pub expires_at: i64,
    pub digest: String,
}

impl CacheBinds {
    /// The row `entry` becomes when step `seq` of node `node_id` of run
    /// `run_id` commits it at `now`.
    pub fn new(
        entry: &NewCacheEntry,
        run_id: &str,
        seq: i64,
        node_id: &str,
        now: i64,
    ) -> CacheBinds {
        let output = entry.output.to_string();
        let output_hash = skillhost_model::state_hash(&entry.output);
        let digest = cache_digest(
            &entry.key,
            &output,
            &output_hash,
            run_id,
            seq,
            node_id,
            now,
            entry.expires_at_ms,
        );
        CacheBinds {
            key: entry.key.clone(),
            output,
            output_hash,
            expires_at: entry.expires_at_ms,
            digest,
        }
    }
}
