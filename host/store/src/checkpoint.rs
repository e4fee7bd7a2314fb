//! Checkpoints: how a node's commit is encoded, and how a state is rebuilt.
//!
//! Every checkpoint stores the changes its node made; every
//! [`SNAPSHOT_EVERY`]th (and seq 0) also stores the full state. Storage so
//! grows with what changed rather than with steps × state size, and loading
//! any seq applies at most `SNAPSHOT_EVERY - 1` deltas to the nearest
//! snapshot at or before it. The rebuilt state must hash to the hash recorded
//! at that seq; anything else is [`StoreError::Corrupt`], never a silently
//! different state. This file is backend-neutral: backends move the encoded
//! columns in and out, the rules live here.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::StoreError;
use super::rows::{JournalEntry, StepRow};
use super::state::{InitialState, RunState, StateChange, apply, hash_like};

/// A full snapshot is stored every this many checkpoints (seq % N == 0).
pub const SNAPSHOT_EVERY: u64 = 16;

/// The node id of checkpoint 0, the initial state written by `create_run`.
pub const START_NODE: &str = "(start)";

/// Everything one successful node writes, in one transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct StepCommit {
    pub run_id: String,
    /// Checkpoint sequence: exactly the previous one + 1.
    pub seq: u64,
    pub node_id: String,
    /// Where the run goes next (empty when finished).
    pub next_nodes: Vec<String>,
    /// What this node changed.
    pub changes: Vec<StateChange>,
    /// The hash of the full state after the changes: version 2
    /// ([`FieldHashes`](super::state::FieldHashes)) from the engine, or
    /// version 1 ([`state_hash`](super::state::state_hash)).
    pub state_hash: String,
    /// The full state after the changes; stored only on snapshot seqs.
    /// Shared with the engine's live state, so building a commit copies
    /// nothing.
    pub full_state: Arc<RunState>,
    /// The successful attempt.
    pub step: StepRow,
    /// Node visit counts after this step (resume needs them for max_visits).
    pub visits: BTreeMap<String, u32>,
    pub journal: Vec<JournalEntry>,
}

/// One checkpoint of a run's history, without its state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRow {
    pub seq: u64,
    pub node_id: String,
    pub next_nodes: Vec<String>,
    pub state_hash: String,
    pub is_snapshot: bool,
    /// Bytes of payload stored for this checkpoint (state if a snapshot,
    /// changes, visits, next nodes).
    pub bytes: u64,
    pub created_at_ms: i64,
}

/// A checkpoint with its state rebuilt and verified.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadedCheckpoint {
    pub seq: u64,
    pub node_id: String,
    pub next_nodes: Vec<String>,
    pub state: Value,
    pub state_hash: String,
    pub visits: BTreeMap<String, u32>,
}

/// Whether checkpoint `seq` stores a full snapshot.
pub fn is_snapshot_seq(seq: u64) -> bool {
    seq.is_multiple_of(SNAPSHOT_EVERY)
}

/// The columns of one checkpoint, as every backend stores them (JSON as text).
#[derive(Debug, Clone)]
pub(crate) struct EncodedCheckpoint {
    pub next_nodes: String,
    pub is_snapshot: bool,
    pub state: Option<String>,
    pub changes: String,
    pub visits: String,
    pub bytes: u64,
}

impl EncodedCheckpoint {
    pub fn new(
        seq: u64,
        next_nodes: &[String],
        changes: &[StateChange],
        full_state: &RunState,
        visits: &BTreeMap<String, u32>,
    ) -> EncodedCheckpoint {
        let is_snapshot = is_snapshot_seq(seq);
        EncodedCheckpoint::from_parts(
            to_json(next_nodes),
            is_snapshot.then(|| to_json(full_state)),
            to_json(changes),
            to_json(visits),
        )
    }

    /// Checkpoint 0 of a run starting at `start_node` from `initial`, whose
    /// JSON is already written out: what [`new`](Self::new) writes for seq 0
    /// with no changes and no visits.
    pub fn initial(start_node: &str, initial: &InitialState) -> EncodedCheckpoint {
        debug_assert!(is_snapshot_seq(0));
        EncodedCheckpoint::from_parts(
            to_json(&[start_node]),
            Some(initial.json().to_owned()),
            "[]".to_owned(),
            "{}".to_owned(),
        )
    }

    /// A snapshot is one that carries the state.
    fn from_parts(
        next_nodes: String,
        state: Option<String>,
        changes: String,
        visits: String,
    ) -> EncodedCheckpoint {
        let bytes = (next_nodes.len()
            + state.as_ref().map_or(0, String::len)
            + changes.len()
            + visits.len()) as u64;
        EncodedCheckpoint {
            next_nodes,
            is_snapshot: state.is_some(),
            state,
            changes,
            visits,
            bytes,
        }
    }
}

fn to_json<T: Serialize + ?Sized>(value: &T) -> String {
    // Only maps with string keys, vectors, strings and JSON values get here.
    serde_json::to_string(value).expect("store values serialise to JSON")
}

/// One stored checkpoint with its payload, as a backend reads it.
#[derive(Debug, Clone)]
pub(crate) struct StoredCheckpoint {
    pub seq: u64,
    pub node_id: String,
    pub next_nodes: String,
    pub is_snapshot: bool,
    pub state: Option<String>,
    pub changes: String,
    pub state_hash: String,
    pub visits: String,
}

/// Rebuilds the state at the last of `rows`, which must be: a snapshot, then
/// every later seq in order. Verifies the result against the recorded hash.
pub(crate) fn rebuild(
    db: &str,
    run_id: &str,
    rows: Vec<StoredCheckpoint>,
) -> Result<LoadedCheckpoint, StoreError> {
    let target_seq = rows.last().map_or(0, |row| row.seq);
    let corrupt = |seq: u64, detail: String| StoreError::Corrupt {
        db: db.to_owned(),
        what: format!("checkpoint {seq} of run `{run_id}`"),
        detail,
    };
    let mut rows = rows.into_iter();
    let Some(base) = rows.next() else {
        return Err(corrupt(target_seq, "no checkpoints to rebuild from".into()));
    };
    let (true, Some(snapshot)) = (base.is_snapshot, base.state.as_deref()) else {
        return Err(corrupt(base.seq, "no full snapshot at or before it".into()));
    };
    let mut state: Value = serde_json::from_str(snapshot)
        .map_err(|e| corrupt(base.seq, format!("snapshot is not valid JSON: {e}")))?;
    let mut last = base;
    for row in rows {
        if row.seq != last.seq + 1 {
            return Err(corrupt(
                last.seq + 1,
                format!(
                    "missing (the history jumps from {} to {})",
                    last.seq, row.seq
                ),
            ));
        }
        let changes: Vec<StateChange> = serde_json::from_str(&row.changes)
            .map_err(|e| corrupt(row.seq, format!("changes are not valid: {e}")))?;
        apply(&mut state, &changes);
        last = row;
    }
    let actual = hash_like(&state, &last.state_hash);
    if actual != last.state_hash {
        return Err(corrupt(
            last.seq,
            format!(
                "the rebuilt state hashes to {actual}, but {} was recorded",
                last.state_hash
            ),
        ));
    }
    let next_nodes = serde_json::from_str(&last.next_nodes)
        .map_err(|e| corrupt(last.seq, format!("next nodes are not valid: {e}")))?;
    let visits = serde_json::from_str(&last.visits)
        .map_err(|e| corrupt(last.seq, format!("visit counts are not valid: {e}")))?;
    Ok(LoadedCheckpoint {
        seq: last.seq,
        node_id: last.node_id,
        next_nodes,
        state,
        state_hash: last.state_hash,
        visits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use skillhost_model::state::{FieldHashes, state_hash};

    #[test]
    fn an_initial_state_writes_checkpoint_0_as_any_state_would() {
        let value = json!({"records": [{"id": "a", "tags": ["x"]}], "last": "", "errors": []});
        let initial = InitialState::new(value.clone());
        let shared = EncodedCheckpoint::initial("start", &initial);
        let fresh = EncodedCheckpoint::new(
            0,
            &["start".to_string()],
            &[],
            &RunState::from_value(value.clone()),
            &BTreeMap::new(),
        );
        assert_eq!(
            (&shared.next_nodes, shared.is_snapshot, &shared.state),
            (&fresh.next_nodes, fresh.is_snapshot, &fresh.state)
        );
        assert_eq!(
            (&shared.changes, &shared.visits, shared.bytes),
            (&fresh.changes, &fresh.visits, fresh.bytes)
        );
        assert_eq!(initial.hash(), state_hash(&value));
        // A run's later hashes start from the shared digests.
        let mut later = value.clone();
        let change = StateChange::Set {
            field: "last".into(),
            value: json!("x"),
        };
        apply(&mut later, std::slice::from_ref(&change));
        assert_eq!(
            initial.field_hashes().hash(&later, &[change]),
            FieldHashes::default().hash(&later, &[])
        );
    }

    fn stored(
        seq: u64,
        state: Option<&Value>,
        changes: &[StateChange],
        hash: &str,
    ) -> StoredCheckpoint {
        StoredCheckpoint {
            seq,
            node_id: format!("n{seq}"),
            next_nodes: "[]".into(),
            is_snapshot: state.is_some(),
            state: state.map(|s| s.to_string()),
            changes: serde_json::to_string(changes).unwrap(),
            state_hash: hash.into(),
            visits: "{}".into(),
        }
    }

    #[test]
    fn rebuild_applies_deltas_to_the_snapshot_and_checks_the_hash() {
        let s0 = json!({"n": 0});
        let set = |n: i64| {
            vec![StateChange::Set {
                field: "n".into(),
                value: json!(n),
            }]
        };
        let rows = vec![
            stored(0, Some(&s0), &[], &state_hash(&s0)),
            stored(1, None, &set(1), &state_hash(&json!({"n": 1}))),
            stored(2, None, &set(2), &state_hash(&json!({"n": 2}))),
        ];
        let loaded = rebuild("db", "r", rows.clone()).unwrap();
        assert_eq!((loaded.seq, loaded.state), (2, json!({"n": 2})));

        let mut gap = rows.clone();
        gap.remove(1);
        let error = rebuild("db", "r", gap).unwrap_err().to_string();
        assert!(error.contains("checkpoint 1 of run `r`"), "{error}");

        let mut wrong = rows;
        wrong[2].changes = serde_json::to_string(&set(3)).unwrap();
        let error = rebuild("db", "r", wrong).unwrap_err();
        assert!(error.is_corrupt());
        assert!(
            error.to_string().contains("checkpoint 2 of run `r`"),
            "{error}"
        );
    }

    #[test]
    fn a_history_may_mix_version_1_and_version_2_hashes() {
        let s0 = json!({"n": 0, "big": "b".repeat(100)});
        let set = |n: i64| {
            vec![StateChange::Set {
                field: "n".into(),
                value: json!(n),
            }]
        };
        let mut hashes = FieldHashes::default();
        let mut s1 = s0.clone();
        apply(&mut s1, &set(1));
        let v2 = hashes.hash(&s1, &[]);
        let rows = vec![
            stored(0, Some(&s0), &[], &state_hash(&s0)),
            stored(1, None, &set(1), &v2),
        ];
        let loaded = rebuild("db", "r", rows.clone()).unwrap();
        assert_eq!(loaded.state, s1);
        assert_eq!(loaded.state_hash, v2);

        let mut wrong = rows;
        wrong[1].changes = serde_json::to_string(&set(3)).unwrap();
        let error = rebuild("db", "r", wrong).unwrap_err();
        assert!(error.is_corrupt(), "{error}");
        assert!(error.to_string().contains("f2:"), "{error}");
    }

    #[test]
    fn snapshots_every_sixteen() {
        assert!(is_snapshot_seq(0) && is_snapshot_seq(16) && is_snapshot_seq(32));
        assert!(!is_snapshot_seq(1) && !is_snapshot_seq(15) && !is_snapshot_seq(17));
    }
}
