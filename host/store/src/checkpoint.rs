//! Checkpoints: how a node's commit is encoded, when a full snapshot is
//! stored, what digest pins each row, and how a state is rebuilt.
//!
//! Every checkpoint stores the changes its node made (its delta); some also
//! store the full state (a snapshot). Seq 0 is always one; afterwards
//! [`SnapshotPlan`] stores one once the deltas written since the last
//! snapshot reach that snapshot's size. Total checkpoint bytes so stay
//! within about twice the deltas plus the final state whatever the run's
//! length (each snapshot but the last is paid for by at least as many delta
//! bytes after it), and rebuilding any seq replays less than one state's
//! worth of deltas onto the nearest snapshot at or before it.
//!
//! Integrity: the rebuilt state must hash to the hash recorded at that seq,
//! and each row carries a digest ([`CheckpointDigest`]) of everything else
//! a resume trusts: its next nodes, visit counts, changes, and its run, seq,
//! node and state hash. Anything that does not match is
//! [`StoreError::Corrupt`], naming the run, the seq and the part, never a
//! silently different state. Rows written before digests existed (schema
//! version 4 and older) have none; they are accepted only for runs the
//! migration marked as such (runs.digest = `legacy`), whose checkpoints are
//! verified from the next one on.
//!
//! This file is backend-neutral: backends move the encoded columns in and
//! out, the rules live here.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use sha2::{Digest, Sha256};

use super::error::StoreError;
use super::rows::{JournalEntry, StepRow};
use super::state::{InitialState, RunState, StateChange, apply, hash_like};

/// How often a snapshot was stored before snapshots followed the deltas
/// (seq % N == 0). Kept for callers that name it; the store no longer
/// snapshots on a fixed schedule (see [`SnapshotPlan`]).
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
    /// The full state after the changes; stored only on snapshots.
    /// Shared with the engine's live state, so building a commit copies
    /// nothing.
    pub full_state: Arc<RunState>,
    /// The successful attempt.
    pub step: StepRow,
    /// Node visit counts after this step (resume needs them for max_visits).
    pub visits: BTreeMap<String, u32>,
    pub journal: Vec<JournalEntry>,
    /// The node cache entry this step's output becomes, if its node caches.
    pub cache: Option<crate::cache::NewCacheEntry>,
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

/// One checkpoint of a run's history with what its node changed, verified
/// against its digest: a step of the history as a replay or an export
/// reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointDelta {
    pub seq: u64,
    pub node_id: String,
    pub next_nodes: Vec<String>,
    pub changes: Vec<StateChange>,
    /// The hash of the state after `changes`.
    pub state_hash: String,
    pub visits: BTreeMap<String, u32>,
}

/// A run's whole checkpoint history: the state it started from (checkpoint
/// 0, verified against its hash) and every checkpoint after it with its
/// changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunHistory {
    pub initial_state: Value,
    /// Every checkpoint, 0 included, by seq.
    pub checkpoints: Vec<CheckpointDelta>,
}

/// Whether checkpoint `seq` stored a full snapshot under the old fixed
/// schedule (every [`SNAPSHOT_EVERY`]th). Which rows are snapshots is now
/// recorded per row ([`CheckpointRow::is_snapshot`]); seq 0 always is.
pub fn is_snapshot_seq(seq: u64) -> bool {
    seq.is_multiple_of(SNAPSHOT_EVERY)
}

/// Where a run stands between snapshots: the size of its last snapshot and
/// the delta bytes written since. A checkpoint stores the full state when
/// the deltas since the last snapshot, its own included, reach that
/// snapshot's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SnapshotPlan {
    pub snapshot_bytes: u64,
    pub deltas_since: u64,
}

impl SnapshotPlan {
    /// After a snapshot of `bytes` bytes of state.
    pub fn after_snapshot(bytes: u64) -> SnapshotPlan {
        SnapshotPlan {
            snapshot_bytes: bytes,
            deltas_since: 0,
        }
    }

    /// Whether a checkpoint with `delta` bytes of delta stores the state.
    pub fn wants_snapshot(&self, delta: u64) -> bool {
        self.deltas_since + delta >= self.snapshot_bytes
    }

    /// After a checkpoint: its delta, and the state it stored if any.
    pub fn advanced(self, delta: u64, snapshot: Option<u64>) -> SnapshotPlan {
        match snapshot {
            Some(bytes) => SnapshotPlan::after_snapshot(bytes),
            None => SnapshotPlan {
                deltas_since: self.deltas_since + delta,
                ..self
            },
        }
    }
}

/// The [`SnapshotPlan`] of every run this store handle (and its clones)
/// committed to, loaded or created. A run it knows nothing of (resumed by
/// another process without loading its state here) gets a snapshot at its
/// next checkpoint, which is always correct and at most one state's worth
/// of bytes.
#[derive(Debug, Default)]
pub(crate) struct SnapshotPlans {
    runs: Mutex<HashMap<String, SnapshotPlan>>,
}

impl SnapshotPlans {
    pub fn get(&self, run_id: &str) -> Option<SnapshotPlan> {
        self.lock().get(run_id).copied()
    }

    pub fn set(&self, run_id: &str, plan: SnapshotPlan) {
        let mut runs = self.lock();
        match runs.get_mut(run_id) {
            Some(known) => *known = plan,
            None => {
                runs.insert(run_id.to_owned(), plan);
            }
        }
    }

    /// A finished run takes no more checkpoints.
    pub fn forget(&self, run_id: &str) {
        self.lock().remove(run_id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, SnapshotPlan>> {
        // The map holds plain numbers: a panic elsewhere cannot leave it
        // half-written.
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }
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
    /// [`CheckpointDigest`] of the row.
    pub digest: String,
}

impl EncodedCheckpoint {
    /// Checkpoint `commit.seq`, with the full state when `plan` (None: not
    /// known) says so; returns it with the plan after it. Refuses changes
    /// nested deeper than the store keeps, before anything is serialised.
    pub fn new(
        db: &str,
        commit: &StepCommit,
        plan: Option<SnapshotPlan>,
    ) -> Result<(EncodedCheckpoint, SnapshotPlan), StoreError> {
        check_changes(db, &commit.run_id, commit.seq, &commit.changes)?;
        let next_nodes = to_json(&commit.next_nodes);
        let changes = to_json(&commit.changes);
        let visits = to_json(&commit.visits);
        let delta = (next_nodes.len() + changes.len() + visits.len()) as u64;
        let state = plan
            .is_none_or(|plan| plan.wants_snapshot(delta))
            .then(|| to_json(&*commit.full_state));
        let after = plan
            .unwrap_or_default()
            .advanced(delta, state.as_ref().map(|s| s.len() as u64));
        let digest = CheckpointDigest::of(
            &commit.run_id,
            commit.seq,
            &commit.node_id,
            &next_nodes,
            &visits,
            &changes,
            &commit.state_hash,
        );
        Ok((
            EncodedCheckpoint::from_parts(next_nodes, state, changes, visits, digest),
            after,
        ))
    }

    /// Checkpoint 0 of run `run_id` starting at `start_node` from
    /// `initial`, whose JSON is already written out: a snapshot with no
    /// changes, and the visit counts `visits` (none for a new run; a
    /// fork's start from its origin's checkpoint).
    pub fn initial(
        run_id: &str,
        start_node: &str,
        initial: &InitialState,
        visits: &BTreeMap<String, u32>,
    ) -> EncodedCheckpoint {
        let next_nodes = to_json(&[start_node]);
        let visits = if visits.is_empty() {
            "{}".to_owned()
        } else {
            to_json(visits)
        };
        let digest = CheckpointDigest::of(
            run_id,
            0,
            START_NODE,
            &next_nodes,
            &visits,
            "[]",
            initial.hash(),
        );
        EncodedCheckpoint::from_parts(
            next_nodes,
            Some(initial.json().to_owned()),
            "[]".to_owned(),
            visits,
            digest,
        )
    }

    /// The plan after checkpoint 0.
    pub fn initial_plan(initial: &InitialState) -> SnapshotPlan {
        SnapshotPlan::after_snapshot(initial.json().len() as u64)
    }

    /// A snapshot is one that carries the state.
    fn from_parts(
        next_nodes: String,
        state: Option<String>,
        changes: String,
        visits: String,
        digest: String,
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
            digest,
        }
    }
}

/// Refuses a commit whose changes nest deeper than
/// [`MAX_NESTING`](skillhost_model::MAX_NESTING): stored, they could not be
/// read back, and serialising them could overflow the stack.
fn check_changes(
    db: &str,
    run_id: &str,
    seq: u64,
    changes: &[StateChange],
) -> Result<(), StoreError> {
    for change in changes {
        let checked = skillhost_model::check_change_nesting(change);
        checked.map_err(|e| StoreError::Invalid {
            db: db.to_owned(),
            message: format!("checkpoint {seq} of run `{run_id}` was not written: {e}"),
        })?;
    }
    Ok(())
}

/// The digest a checkpoint row carries: `c1:` and four 12-hex-digit parts
/// (SHA-256 prefixes), of its next nodes, its visit counts, its changes,
/// and its run id, seq, node id and state hash, so that a mismatch says
/// which part was changed. Not a signature: it catches a row edited or
/// damaged without the digest being recomputed.
pub(crate) struct CheckpointDigest;

const DIGEST_PART: usize = 12;
const CHECKPOINT_DIGEST_V1: &str = "c1:";

/// What a digest part covers, in the order of the parts.
const CHECKPOINT_PARTS: [&str; 4] = [
    "next nodes",
    "visit counts",
    "changes",
    "run, seq, node or state hash",
];

impl CheckpointDigest {
    pub fn of(
        run_id: &str,
        seq: u64,
        node_id: &str,
        next_nodes: &str,
        visits: &str,
        changes: &str,
        state_hash: &str,
    ) -> String {
        let mut digest = String::with_capacity(CHECKPOINT_DIGEST_V1.len() + 4 * DIGEST_PART);
        digest.push_str(CHECKPOINT_DIGEST_V1);
        for part in Self::parts(
            run_id, seq, node_id, next_nodes, visits, changes, state_hash,
        ) {
            digest.push_str(&part);
        }
        digest
    }

    fn parts(
        run_id: &str,
        seq: u64,
        node_id: &str,
        next_nodes: &str,
        visits: &str,
        changes: &str,
        state_hash: &str,
    ) -> [String; 4] {
        let seq = seq.to_string();
        [
            part(&[next_nodes]),
            part(&[visits]),
            part(&[changes]),
            part(&[run_id, &seq, node_id, state_hash]),
        ]
    }

    /// Checks `row` against its digest: None if it matches, else what
    /// does not.
    fn mismatch(run_id: &str, row: &StoredCheckpoint, digest: &str) -> Option<String> {
        let Some(recorded) = digest.strip_prefix(CHECKPOINT_DIGEST_V1) else {
            return Some(format!("its digest `{digest}` is not one this host writes"));
        };
        let actual = Self::parts(
            run_id,
            row.seq,
            &row.node_id,
            &row.next_nodes,
            &row.visits,
            &row.changes,
            &row.state_hash,
        );
        let wrong: Vec<&str> = actual
            .iter()
            .enumerate()
            .filter(|(i, part)| recorded.get(i * DIGEST_PART..(i + 1) * DIGEST_PART) != Some(part))
            .map(|(i, _)| CHECKPOINT_PARTS[i])
            .collect();
        (!wrong.is_empty()).then(|| {
            format!(
                "what it stores no longer matches the digest recorded when it was committed: \
                 its {}",
                wrong.join(", ")
            )
        })
    }
}

/// The digest a run row carries: `r2:` and three 16-hex-digit parts, of its
/// input (as stored), of its id and scenario (name, path, digest), and of
/// its provenance (the components it uses, where it was forked from).
/// Runs created before provenance was recorded (schema version 5) carry
/// `r1:` and the first two parts.
pub(crate) struct RunDigest;

const RUN_DIGEST_V1: &str = "r1:";
const RUN_DIGEST_V2: &str = "r2:";
const RUN_PART: usize = 16;

/// What a run's digest is for runs created before digests existed.
pub(crate) const LEGACY_RUN: &str = "legacy";

impl RunDigest {
    pub fn of(
        id: &str,
        name: &str,
        path: &str,
        scenario_digest: &str,
        input: &str,
        provenance: &str,
    ) -> String {
        let [input, identity] = Self::parts(id, name, path, scenario_digest, input);
        let provenance = Self::long(&[provenance]);
        format!("{RUN_DIGEST_V2}{input}{identity}{provenance}")
    }

    fn long(fields: &[&str]) -> String {
        let mut hasher = Sha256::new();
        for field in fields {
            hasher.update((field.len() as u64).to_le_bytes());
            hasher.update(field.as_bytes());
        }
        hex::encode(&hasher.finalize()[..RUN_PART / 2])
    }

    fn parts(id: &str, name: &str, path: &str, scenario_digest: &str, input: &str) -> [String; 2] {
        [
            Self::long(&[input]),
            Self::long(&[id, name, path, scenario_digest]),
        ]
    }

    /// Checks a run's stored columns against its digest: None if they
    /// match (or the run is older than digests), else what does not.
    pub fn mismatch(
        id: &str,
        name: &str,
        path: &str,
        scenario_digest: &str,
        input: &str,
        provenance: Option<&str>,
        digest: Option<&str>,
    ) -> Option<String> {
        let digest = match digest {
            Some(LEGACY_RUN) if provenance.is_none() => return None,
            None => {
                return Some(
                    "it has no digest, though it was written by a host that records one".into(),
                );
            }
            Some(digest) => digest,
        };
        let (recorded, provenance) = if let Some(recorded) = digest.strip_prefix(RUN_DIGEST_V2) {
            (recorded, provenance)
        } else if let Some(recorded) = digest.strip_prefix(RUN_DIGEST_V1) {
            // A run older than provenance has none; one that shows one now
            // was given it afterwards.
            if provenance.is_some() {
                return Some(
                    "it records components or a fork origin, though it was created by a host \
                     that did not record them"
                        .into(),
                );
            }
            (recorded, None)
        } else if digest == LEGACY_RUN {
            return Some(
                "it records components or a fork origin, though it was created before digests \
                 existed"
                    .into(),
            );
        } else {
            return Some(format!("its digest `{digest}` is not one this host writes"));
        };
        let [input, identity] = Self::parts(id, name, path, scenario_digest, input);
        let mut wrong = Vec::new();
        if recorded.get(..RUN_PART) != Some(input.as_str()) {
            wrong.push("input");
        }
        if recorded.get(RUN_PART..2 * RUN_PART) != Some(identity.as_str()) {
            wrong.push("id or scenario (name, path, digest)");
        }
        let provenance_matches = match provenance {
            Some(provenance) => {
                recorded.get(2 * RUN_PART..) == Some(Self::long(&[provenance]).as_str())
            }
            None => recorded.len() == 2 * RUN_PART,
        };
        if !provenance_matches {
            wrong.push("components or fork origin");
        }
        (!wrong.is_empty()).then(|| {
            format!(
                "what it stores no longer matches the digest recorded when it was created: \
                 its {}",
                wrong.join(", ")
            )
        })
    }
}

/// One part of a digest: a SHA-256 prefix over length-prefixed fields.
fn part(fields: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for field in fields {
        hasher.update((field.len() as u64).to_le_bytes());
        hasher.update(field.as_bytes());
    }
    hex::encode(&hasher.finalize()[..DIGEST_PART / 2])
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
    /// [`CheckpointDigest`]; None in rows written before digests existed.
    pub digest: Option<String>,
    /// The digest of the row's run ([`LEGACY_RUN`] for runs older than
    /// digests, whose rows may lack one).
    pub run_digest: Option<String>,
}

impl StoredCheckpoint {
    /// Checks the row against its digest.
    fn verify(&self, run_id: &str) -> Result<(), String> {
        match (&self.digest, self.run_digest.as_deref()) {
            (Some(digest), _) => match CheckpointDigest::mismatch(run_id, self, digest) {
                None => Ok(()),
                Some(detail) => Err(detail),
            },
            // Written before digests existed: its state hash still pins it.
            (None, Some(LEGACY_RUN)) => Ok(()),
            (None, _) => Err(
                "it has no digest, though its run was created by a host that records one".into(),
            ),
        }
    }
}

/// Rebuilds the state at the last of `rows`, which must be: a snapshot, then
/// every later seq in order. Verifies every row against its digest and the
/// result against the recorded hash; returns it with the run's
/// [`SnapshotPlan`] at that seq.
pub(crate) fn rebuild(
    db: &str,
    run_id: &str,
    rows: Vec<StoredCheckpoint>,
) -> Result<(LoadedCheckpoint, SnapshotPlan), StoreError> {
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
    base.verify(run_id).map_err(|e| corrupt(base.seq, e))?;
    let mut state: Value = serde_json::from_str(snapshot)
        .map_err(|e| corrupt(base.seq, format!("snapshot is not valid JSON: {e}")))?;
    let mut plan = SnapshotPlan::after_snapshot(snapshot.len() as u64);
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
        row.verify(run_id).map_err(|e| corrupt(row.seq, e))?;
        let changes: Vec<StateChange> = serde_json::from_str(&row.changes)
            .map_err(|e| corrupt(row.seq, format!("changes are not valid: {e}")))?;
        apply(&mut state, &changes);
        let delta = row.next_nodes.len() + row.changes.len() + row.visits.len();
        plan = plan.advanced(delta as u64, None);
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
    let loaded = LoadedCheckpoint {
        seq: last.seq,
        node_id: last.node_id,
        next_nodes,
        state,
        state_hash: last.state_hash,
        visits,
    };
    Ok((loaded, plan))
}

/// A run's history from every one of its checkpoint rows (by seq, the
/// first holding the state of seq 0): each row checked against its digest,
/// checkpoint 0's state against its hash, and no seq missing.
pub(crate) fn history(
    db: &str,
    run_id: &str,
    rows: Vec<StoredCheckpoint>,
) -> Result<RunHistory, StoreError> {
    let corrupt = |seq: u64, detail: String| StoreError::Corrupt {
        db: db.to_owned(),
        what: format!("checkpoint {seq} of run `{run_id}`"),
        detail,
    };
    let mut initial_state = None;
    let mut checkpoints = Vec::with_capacity(rows.len());
    for (expected, row) in rows.into_iter().enumerate() {
        let expected = expected as u64;
        if row.seq != expected {
            return Err(corrupt(
                expected,
                format!("missing (the history jumps to {})", row.seq),
            ));
        }
        row.verify(run_id).map_err(|e| corrupt(row.seq, e))?;
        if row.seq == 0 {
            let Some(text) = row.state.as_deref() else {
                return Err(corrupt(0, "it holds no state".into()));
            };
            let state: Value = serde_json::from_str(text)
                .map_err(|e| corrupt(0, format!("snapshot is not valid JSON: {e}")))?;
            let actual = hash_like(&state, &row.state_hash);
            if actual != row.state_hash {
                return Err(corrupt(
                    0,
                    format!(
                        "its state hashes to {actual}, but {} was recorded",
                        row.state_hash
                    ),
                ));
            }
            initial_state = Some(state);
        }
        checkpoints.push(CheckpointDelta {
            seq: row.seq,
            next_nodes: serde_json::from_str(&row.next_nodes)
                .map_err(|e| corrupt(row.seq, format!("next nodes are not valid: {e}")))?,
            changes: serde_json::from_str(&row.changes)
                .map_err(|e| corrupt(row.seq, format!("changes are not valid: {e}")))?,
            visits: serde_json::from_str(&row.visits)
                .map_err(|e| corrupt(row.seq, format!("visit counts are not valid: {e}")))?,
            node_id: row.node_id,
            state_hash: row.state_hash,
        });
    }
    let initial_state =
        initial_state.ok_or_else(|| corrupt(0, "the run has no checkpoint 0".into()))?;
    Ok(RunHistory {
        initial_state,
        checkpoints,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use skillhost_model::state::{FieldHashes, state_hash};

    fn commit(seq: u64, state: &Value, changes: Vec<StateChange>) -> StepCommit {
        StepCommit {
            run_id: "r".into(),
            seq,
            node_id: format!("n{seq}"),
            next_nodes: vec!["next".into()],
            changes,
            state_hash: state_hash(state),
            full_state: Arc::new(RunState::from_value(state.clone())),
            step: crate::rows::StepRow {
                run_id: "r".into(),
                seq: Some(seq),
                node_id: format!("n{seq}"),
                attempt: 1,
                status: crate::rows::StepStatus::Ok,
                started_at_ms: 0,
                duration_us: 0,
                input_hash: None,
                output_hash: None,
                error: None,
                fuel_consumed: None,
                memory_peak_bytes: None,
                detail: None,
            },
            visits: BTreeMap::from([(format!("n{seq}"), 1)]),
            journal: vec![],
            cache: None,
        }
    }

    #[test]
    fn an_initial_state_writes_checkpoint_0_as_a_snapshot_with_its_digest() {
        let value = json!({"records": [{"id": "a", "tags": ["x"]}], "last": "", "errors": []});
        let initial = InitialState::new(value.clone());
        let shared = EncodedCheckpoint::initial("r", "start", &initial, &BTreeMap::new());
        assert!(shared.is_snapshot);
        assert_eq!(shared.state.as_deref(), Some(initial.json()));
        assert_eq!(
            shared.digest,
            CheckpointDigest::of(
                "r",
                0,
                START_NODE,
                r#"["start"]"#,
                "{}",
                "[]",
                initial.hash()
            )
        );
        assert_eq!(
            EncodedCheckpoint::initial_plan(&initial),
            SnapshotPlan::after_snapshot(initial.json().len() as u64)
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

    #[test]
    fn a_snapshot_is_stored_once_the_deltas_reach_the_last_snapshot() {
        let state = json!({"n": "x".repeat(200)});
        let set = vec![StateChange::Set {
            field: "n".into(),
            value: json!("x".repeat(200)),
        }];
        let state_bytes = state.to_string().len() as u64;
        let mut plan = SnapshotPlan::after_snapshot(1000);
        let mut since = 0;
        for seq in 1..=20 {
            let (encoded, after) =
                EncodedCheckpoint::new("db", &commit(seq, &state, set.clone()), Some(plan))
                    .unwrap();
            let delta = encoded.bytes - encoded.state.as_ref().map_or(0, |s| s.len() as u64);
            since += delta;
            // A snapshot exactly when the deltas since the last one (this
            // one's included) reach the last snapshot's size.
            assert_eq!(
                encoded.is_snapshot,
                since >= plan.snapshot_bytes,
                "seq {seq}"
            );
            if encoded.is_snapshot {
                assert_eq!(after, SnapshotPlan::after_snapshot(state_bytes));
                since = 0;
            }
            plan = after;
        }
        // Unknown plan: a snapshot, always correct.
        let (encoded, _) =
            EncodedCheckpoint::new("db", &commit(1, &state, set.clone()), None).unwrap();
        assert!(encoded.is_snapshot);
    }

    #[test]
    fn changes_nested_too_deep_are_refused_before_they_are_serialised() {
        let deep = skillhost_model::nesting::deep_array(20_000);
        let changes = vec![StateChange::Append {
            field: "notes".into(),
            items: vec![deep],
        }];
        let mut deep_commit = commit(3, &json!({}), changes);
        let error = EncodedCheckpoint::new("db", &deep_commit, None).unwrap_err();
        let message = error.to_string();
        assert!(message.contains("checkpoint 3 of run `r`"), "{message}");
        assert!(message.contains("state field `notes`"), "{message}");
        // serde_json's own drop would recurse 20,000 times.
        for change in std::mem::take(&mut deep_commit.changes) {
            if let StateChange::Append { items, .. } = change {
                items
                    .into_iter()
                    .for_each(skillhost_model::nesting::drop_deep);
            }
        }
    }

    fn stored(
        seq: u64,
        state: Option<&Value>,
        changes: &[StateChange],
        hash: &str,
    ) -> StoredCheckpoint {
        let mut row = StoredCheckpoint {
            seq,
            node_id: format!("n{seq}"),
            next_nodes: "[]".into(),
            is_snapshot: state.is_some(),
            state: state.map(|s| s.to_string()),
            changes: serde_json::to_string(changes).unwrap(),
            state_hash: hash.into(),
            visits: "{}".into(),
            digest: None,
            run_digest: Some("r1:…".into()),
        };
        redigest(&mut row);
        row
    }

    /// What a forger who knows the digest would write.
    fn redigest(row: &mut StoredCheckpoint) {
        row.digest = Some(CheckpointDigest::of(
            "r",
            row.seq,
            &row.node_id,
            &row.next_nodes,
            &row.visits,
            &row.changes,
            &row.state_hash,
        ));
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
        let (loaded, plan) = rebuild("db", "r", rows.clone()).unwrap();
        assert_eq!((loaded.seq, loaded.state), (2, json!({"n": 2})));
        let delta = |row: &StoredCheckpoint| {
            (row.next_nodes.len() + row.changes.len() + row.visits.len()) as u64
        };
        assert_eq!(
            plan,
            SnapshotPlan {
                snapshot_bytes: s0.to_string().len() as u64,
                deltas_since: delta(&rows[1]) + delta(&rows[2]),
            }
        );

        let mut gap = rows.clone();
        gap.remove(1);
        let error = rebuild("db", "r", gap).unwrap_err().to_string();
        assert!(error.contains("checkpoint 1 of run `r`"), "{error}");

        let mut wrong = rows;
        wrong[2].changes = serde_json::to_string(&set(3)).unwrap();
        redigest(&mut wrong[2]);
        let error = rebuild("db", "r", wrong).unwrap_err();
        assert!(error.is_corrupt());
        assert!(
            error.to_string().contains("checkpoint 2 of run `r`"),
            "{error}"
        );
        assert!(error.to_string().contains("hashes to"), "{error}");
    }

    #[test]
    fn rebuild_names_the_part_of_a_row_that_no_longer_matches_its_digest() {
        let s0 = json!({"n": 0});
        let rows = vec![
            stored(0, Some(&s0), &[], &state_hash(&s0)),
            stored(1, None, &[], &state_hash(&s0)),
        ];
        type Edit = fn(&mut StoredCheckpoint);
        let edits: [(&str, Edit); 4] = [
            ("next nodes", |row| row.next_nodes = r#"["end"]"#.into()),
            ("visit counts", |row| row.visits = r#"{"n1":0}"#.into()),
            ("changes", |row| row.changes = r#"[ ]"#.into()),
            ("run, seq, node or state hash", |row| {
                row.node_id = "elsewhere".into()
            }),
        ];
        for (part, edit) in edits {
            let mut edited = rows.clone();
            edit(&mut edited[1]);
            let error = rebuild("db", "r", edited).unwrap_err();
            assert!(error.is_corrupt(), "{error}");
            let message = error.to_string();
            assert!(message.contains("checkpoint 1 of run `r`"), "{message}");
            assert!(
                message.contains(&format!("committed: its {part}")),
                "{message}"
            );
        }
        // A row without a digest is accepted only in a run older than digests.
        let mut bare = rows.clone();
        bare[1].digest = None;
        let error = rebuild("db", "r", bare.clone()).unwrap_err().to_string();
        assert!(error.contains("has no digest"), "{error}");
        for row in &mut bare {
            row.run_digest = Some(LEGACY_RUN.into());
        }
        assert!(rebuild("db", "r", bare).is_ok());
    }

    #[test]
    fn a_run_digest_names_what_changed() {
        let provenance = r#"{"components":{"a":"00"}}"#;
        let digest = RunDigest::of("id", "s", "s.toml", "sha", r#"{"q":1}"#, provenance);
        let check = |input: &str, scenario: &str, provenance: Option<&str>| {
            RunDigest::mismatch(
                "id",
                "s",
                "s.toml",
                scenario,
                input,
                provenance,
                Some(&digest),
            )
        };
        assert_eq!(check(r#"{"q":1}"#, "sha", Some(provenance)), None);
        let input = check(r#"{"q":2}"#, "sha", Some(provenance));
        assert!(input.unwrap().ends_with("created: its input"));
        let scenario = check(r#"{"q":1}"#, "other", Some(provenance));
        assert!(
            scenario
                .unwrap()
                .ends_with("its id or scenario (name, path, digest)")
        );
        let components = check(r#"{"q":1}"#, "sha", Some(r#"{"components":{"a":"01"}}"#));
        assert!(
            components
                .unwrap()
                .ends_with("its components or fork origin")
        );
        let dropped = check(r#"{"q":1}"#, "sha", None);
        assert!(dropped.unwrap().ends_with("its components or fork origin"));
        assert_eq!(
            RunDigest::mismatch("id", "s", "p", "x", "{}", None, Some(LEGACY_RUN)),
            None
        );
        assert!(RunDigest::mismatch("id", "s", "p", "x", "{}", None, None).is_some());
    }

    #[test]
    fn a_run_created_before_provenance_keeps_its_version_1_digest() {
        let [input, identity] = RunDigest::parts("id", "s", "p", "x", "{}");
        let v1 = format!("{RUN_DIGEST_V1}{input}{identity}");
        assert_eq!(
            RunDigest::mismatch("id", "s", "p", "x", "{}", None, Some(&v1)),
            None
        );
        let added = RunDigest::mismatch("id", "s", "p", "x", "{}", Some("{}"), Some(&v1));
        assert!(added.unwrap().contains("did not record them"));
        let legacy = RunDigest::mismatch("id", "s", "p", "x", "{}", Some("{}"), Some(LEGACY_RUN));
        assert!(legacy.is_some());
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
        let (loaded, _) = rebuild("db", "r", rows.clone()).unwrap();
        assert_eq!(loaded.state, s1);
        assert_eq!(loaded.state_hash, v2);

        let mut wrong = rows;
        wrong[1].changes = serde_json::to_string(&set(3)).unwrap();
        redigest(&mut wrong[1]);
        let error = rebuild("db", "r", wrong).unwrap_err();
        assert!(error.is_corrupt(), "{error}");
        assert!(error.to_string().contains("f2:"), "{error}");
    }

    #[test]
    fn the_old_schedule_snapshotted_every_sixteen() {
        assert!(is_snapshot_seq(0) && is_snapshot_seq(16) && is_snapshot_seq(32));
        assert!(!is_snapshot_seq(1) && !is_snapshot_seq(15) && !is_snapshot_seq(17));
    }
}
