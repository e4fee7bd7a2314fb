//! The node cache, from the engine's side: a skill node with `cache = { ttl
//! = "1h" }` reuses an output recorded by any run (on any worker sharing
//! the store) that called the same component, with the same grants, on the
//! same canonical input, until the entry expires.
//!
//! Owns: the key (SHA-256 of the component's digest, the node's grants and
//! the input's canonical JSON hash), what a hit looks like to the skill kind
//! (the call it stands for), and which calls may be recorded: only a call
//! that succeeded and made no journaled host call (an answer from outside
//! the run would have to be part of the key, and it is known only after the
//! call). Must not: write (the entry is committed with the step's
//! checkpoint by the core), or be consulted in a replay, which re-executes
//! the step.

use std::time::Duration;

use serde_json::{Value, json};

use crate::RunContext;
use crate::call::Attempts;
use skillhost_runtime::{CallReport, Skill, TokenUsage};
use skillhost_scenario::SkillCall;
use skillhost_store::{CachedOutput, NewCacheEntry};

/// What the cache has for one call of a cached node.
pub(crate) enum Lookup {
    /// The node does not cache, or this run cannot use a cache (no store,
    /// or a replay).
    Off,
    /// Nothing usable under `key`; `refused` says why an entry there was
    /// not served (it no longer matched its digest), for the step's detail.
    Miss {
        key: String,
        refused: Option<String>,
    },
    Hit(CachedOutput),
}

/// Looks up the output of `skill` on `input` with `call`'s grants.
pub(crate) async fn lookup(
    cx: &RunContext<'_>,
    call: &SkillCall,
    skill: &Skill,
    input: &Value,
) -> Lookup {
    if call.cache.is_none() || !cx.log.serves_cache() {
        return Lookup::Off;
    }
    let key = key(skill, call, input);
    match cx.log.cached_output(&key).await {
        Ok(Some(hit)) => Lookup::Hit(hit),
        Ok(None) => Lookup::Miss { key, refused: None },
        // A damaged entry is not served; the step records why, and its own
        // output, once committed, replaces it.
        Err(e) => Lookup::Miss {
            key,
            refused: Some(e.to_string()),
        },
    }
}

/// The cache key of a call: the SHA-256 (hex) of the component's digest,
/// the node's grants (as written, `fs` paths absolute) and the SHA-256 of
/// the input's canonical JSON, each length-prefixed.
pub(crate) fn key(skill: &Skill, call: &SkillCall, input: &Value) -> String {
    let grants = skillhost_store::canonical_json(&json!(call.capabilities));
    let input = skillhost_store::state_hash(input);
    let mut bytes = Vec::with_capacity(256);
    for part in ["skillhost-node-cache/1", &skill.digest, &grants, &input] {
        bytes.extend_from_slice(&(part.len() as u64).to_le_bytes());
        bytes.extend_from_slice(part.as_bytes());
    }
    skillhost_store::blob_digest(&bytes)
}

/// What a hit stands for: the call that returned the recorded output,
/// having cost nothing and made no host call.
pub(crate) fn attempts_of(hit: &CachedOutput) -> Attempts {
    Attempts {
        report: CallReport {
            result: Ok(hit.output.clone()),
            logs: Vec::new(),
            logs_dropped: 0,
            fuel_consumed: 0,
            memory_peak_bytes: 0,
            denied: Vec::new(),
            journal: Vec::new(),
            duration: Duration::ZERO,
            usage: TokenUsage::default(),
            host_calls: Vec::new(),
        },
        attempt: 1,
        failed: Vec::new(),
        failed_usage: TokenUsage::default(),
    }
}

/// The step detail of a hit: where the output came from.
pub(crate) fn hit_detail(hit: &CachedOutput) -> Value {
    json!({
        "run_id": hit.run_id,
        "seq": hit.seq,
        "node": hit.node_id,
        "key": hit.key,
    })
}

/// The entry a successful call's output becomes, expiring `ttl_ms` from now.
pub(crate) fn entry(key: String, output: &Value, ttl_ms: u64) -> NewCacheEntry {
    let now = crate::run::now_ms();
    NewCacheEntry {
        key,
        output: output.clone(),
        expires_at_ms: now.saturating_add(i64::try_from(ttl_ms).unwrap_or(i64::MAX)),
    }
}
