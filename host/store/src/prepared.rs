//! Every write of the store as a prepared value: what a backend binds,
//! converted, range-checked, encoded and digested once, here, from the
//! caller's rows, before either backend sees it. A backend only executes a
//! prepared value: it owns the SQL, the transaction and its write path
//! (SQLite's writer connection, Postgres's group commit), and asks
//! `refusal.rs` and `wait.rs` what the rows it read under its locks mean.
//!
//! A new store concept is therefore written here once (its conversion),
//! once in its rules (`refusal.rs` or its own module), and once per backend
//! only as SQL.
//!
//! Must not: read or write the database, or clone the run state (a commit's
//! state is encoded once, in [`EncodedCheckpoint`], and moved here).

use serde_json::Value;

use crate::cache::CacheBinds;
use crate::checkpoint::{EncodedCheckpoint, RunDigest, StepCommit};
use crate::codec::{Codec, JournalBinds, MapItemBinds, StepBinds, now_ms};
use crate::error::StoreError;
use crate::lease::Lease;
use crate::refusal;
use crate::rows::{MapItemRow, NewArtifact, StepRow, blob_digest};
use crate::run::{NewRun, RunStatus};
use crate::wait::NewWait;

/// A new run, converted and encoded (its checkpoint 0 and digests), ready to
/// bind.
#[derive(Debug)]
pub(crate) struct PreparedRun {
    pub id: String,
    pub scenario_name: String,
    pub scenario_path: String,
    pub scenario_digest: String,
    pub status: String,
    pub input: String,
    pub start_node: String,
    pub task_id: Option<String>,
    /// Checkpoint 0.
    pub checkpoint: EncodedCheckpoint,
    pub state_hash: String,
    /// The run's digest.
    pub run_digest: String,
    /// The run's provenance, as stored.
    pub provenance: String,
}

impl PreparedRun {
    pub fn new(run: &NewRun, status: RunStatus, task_id: Option<&str>) -> PreparedRun {
        let checkpoint = EncodedCheckpoint::initial(
            &run.id,
            &run.start_node,
            &run.initial_state,
            &run.start_visits,
        );
        let input = run.input.to_string();
        let provenance = run.provenance.to_json_text();
        let run_digest = RunDigest::of(
            &run.id,
            &run.scenario_name,
            &run.scenario_path,
            &run.scenario_digest,
            &input,
            &provenance,
        );
        PreparedRun {
            id: run.id.clone(),
            scenario_name: run.scenario_name.clone(),
            scenario_path: run.scenario_path.clone(),
            scenario_digest: run.scenario_digest.clone(),
            status: status.as_str().to_owned(),
            input,
            start_node: run.start_node.clone(),
            task_id: task_id.map(str::to_owned),
            checkpoint,
            state_hash: run.initial_state.hash().to_owned(),
            run_digest,
            provenance,
        }
    }
}

/// A checkpoint commit's own rows (the checkpoint, the step row, the run's
/// new position), converted and range-checked, ready to bind. Owned, so a
/// backend may queue it (Postgres's group commit); what it writes besides
/// is in [`CommitExtras`].
#[derive(Debug)]
pub(crate) struct PreparedCommit {
    pub run_id: String,
    pub seq: i64,
    pub node_id: String,
    /// The run's current node after the commit: the first next node.
    pub current_node: Option<String>,
    pub checkpoint: EncodedCheckpoint,
    pub state_hash: String,
    pub step: StepBinds,
    /// The lease the write must still hold (None: not fenced).
    pub fence: Option<Lease>,
    /// The fence's generation as bound.
    pub fence_generation: Option<i64>,
    /// When it was prepared: the rows' `created_at`.
    pub now: i64,
    /// The run's end, when this is its last step (`Store::commit_last_step`):
    /// written by the same statement or transaction. (Boxed: most commits
    /// have none, and queue by value.)
    pub finish: Option<Box<PreparedFinish>>,
}

impl PreparedCommit {
    /// Refuses seq 0 (`create_run`'s) and values out of the database's
    /// range; `checkpoint` is `commit` encoded, moved in, not copied.
    pub fn new(
        codec: &impl Codec,
        commit: &StepCommit,
        checkpoint: EncodedCheckpoint,
        fence: Option<&Lease>,
    ) -> Result<PreparedCommit, StoreError> {
        if commit.seq == 0 {
            return Err(refusal::seq_zero(codec.db(), &commit.run_id));
        }
        Ok(PreparedCommit {
            run_id: commit.run_id.clone(),
            seq: codec.int(commit.seq, "checkpoint seq")?,
            node_id: commit.node_id.clone(),
            current_node: commit.next_nodes.first().cloned(),
            checkpoint,
            state_hash: commit.state_hash.clone(),
            step: codec.step_binds_as(&commit.step, &commit.run_id, Some(commit.seq))?,
            fence_generation: fence_generation(codec, fence)?,
            fence: fence.cloned(),
            now: now_ms(),
            finish: None,
        })
    }

    /// What the write was doing, for its error.
    pub fn action(&self) -> String {
        format!(
            "committing checkpoint {} of run `{}`",
            self.seq, self.run_id
        )
    }
}

/// What a checkpoint commit writes besides its own rows, converted and
/// digested: journal entries, the node cache entry, artifacts. Borrowed from
/// the commit; empty for most nodes (and then nothing was allocated).
#[derive(Debug, Default)]
pub(crate) struct CommitExtras<'a> {
    pub journal: Vec<JournalBinds<'a>>,
    pub cache: Option<CacheBinds>,
    pub artifacts: Vec<PreparedArtifact<'a>>,
}

impl<'a> CommitExtras<'a> {
    pub fn new(
        codec: &impl Codec,
        commit: &'a StepCommit,
        prepared: &PreparedCommit,
        artifacts: &'a [NewArtifact],
    ) -> Result<CommitExtras<'a>, StoreError> {
        Ok(CommitExtras {
            journal: commit
                .journal
                .iter()
                .map(|entry| JournalBinds::new(codec, &commit.run_id, entry))
                .collect::<Result<_, _>>()?,
            cache: commit.cache.as_ref().map(|entry| {
                CacheBinds::new(
                    entry,
                    &commit.run_id,
                    prepared.seq,
                    &commit.node_id,
                    prepared.now,
                )
            }),
            artifacts: artifacts.iter().map(PreparedArtifact::of).collect(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.journal.is_empty() && self.cache.is_none() && self.artifacts.is_empty()
    }
}

/// An artifact's bytes with their content address.
#[derive(Debug)]
pub(crate) struct PreparedArtifact<'a> {
    pub name: &'a str,
    pub media_type: &'a str,
    pub bytes: &'a [u8],
    pub digest: String,
    pub size: i64,
}

impl<'a> PreparedArtifact<'a> {
    pub fn new(name: &'a str, media_type: &'a str, bytes: &'a [u8]) -> PreparedArtifact<'a> {
        PreparedArtifact {
            name,
            media_type,
            bytes,
            digest: blob_digest(bytes),
            size: bytes.len() as i64,
        }
    }

    fn of(artifact: &'a NewArtifact) -> PreparedArtifact<'a> {
        PreparedArtifact::new(&artifact.name, &artifact.media_type, &artifact.bytes)
    }
}

/// A run's final status, ready to bind.
#[derive(Debug)]
pub(crate) struct PreparedFinish {
    pub run_id: String,
    pub status: String,
    pub result: Option<String>,
    pub error: Option<String>,
    pub fence_generation: Option<i64>,
    pub fence: Option<Lease>,
}

impl PreparedFinish {
    pub fn new(
        codec: &impl Codec,
        run_id: &str,
        status: RunStatus,
        result: Option<String>,
        error: Option<&Value>,
        fence: Option<&Lease>,
    ) -> Result<PreparedFinish, StoreError> {
        Ok(PreparedFinish {
            run_id: run_id.to_owned(),
            status: status.as_str().to_owned(),
            result,
            error: error.map(Value::to_string),
            fence_generation: fence_generation(codec, fence)?,
            fence: fence.cloned(),
        })
    }

    pub fn action(&self) -> String {
        format!("finishing run `{}` as {}", self.run_id, self.status)
    }
}

/// A failed attempt's step row (no checkpoint), ready to bind.
#[derive(Debug)]
pub(crate) struct PreparedStep<'a> {
    pub step: StepBinds,
    pub fence: Option<&'a Lease>,
    pub fence_generation: Option<i64>,
    pub now: i64,
}

impl<'a> PreparedStep<'a> {
    pub fn new(
        codec: &impl Codec,
        step: &StepRow,
        fence: Option<&'a Lease>,
    ) -> Result<PreparedStep<'a>, StoreError> {
        Ok(PreparedStep {
            step: codec.step_binds(step)?,
            fence,
            fence_generation: fence_generation(codec, fence)?,
            now: now_ms(),
        })
    }

    pub fn action(&self) -> String {
        format!("recording a failed step of run `{}`", self.step.run_id)
    }
}

/// A map item's row, ready to bind.
#[derive(Debug)]
pub(crate) struct PreparedMapItem<'a> {
    pub item: &'a MapItemRow,
    pub visit: i64,
    pub item_index: i64,
    pub output: String,
    pub duration_us: i64,
    pub fuel_consumed: i64,
    pub attempt: i64,
    /// Its journal (None when it made no journaled call).
    pub journal: Option<String>,
    pub digest: String,
    pub fence: Option<&'a Lease>,
    pub fence_generation: Option<i64>,
}

impl<'a> PreparedMapItem<'a> {
    pub fn new(
        codec: &impl Codec,
        item: &'a MapItemRow,
        fence: Option<&'a Lease>,
    ) -> Result<PreparedMapItem<'a>, StoreError> {
        let (attempt, journal, digest) = MapItemBinds::of(item);
        Ok(PreparedMapItem {
            item,
            visit: i64::from(item.visit),
            item_index: i64::from(item.item_index),
            output: item.output.to_string(),
            duration_us: codec.int(item.duration_us, "item duration")?,
            fuel_consumed: codec.int(item.fuel_consumed, "item fuel")?,
            attempt,
            journal,
            digest,
            fence,
            fence_generation: fence_generation(codec, fence)?,
        })
    }

    pub fn action(&self) -> String {
        let item = self.item;
        format!(
            "recording item {} of map node `{}` (visit {}) of run `{}`",
            item.item_index, item.node_id, item.visit, item.run_id
        )
    }
}

/// A run starting to wait, ready to bind.
#[derive(Debug)]
pub(crate) struct PreparedWait<'a> {
    pub wait: &'a NewWait,
    pub seq: i64,
    pub answer_schema: String,
    pub timeout_ms: Option<i64>,
    pub fence: Option<&'a Lease>,
}

impl<'a> PreparedWait<'a> {
    pub fn new(
        codec: &impl Codec,
        wait: &'a NewWait,
        fence: Option<&'a Lease>,
    ) -> Result<PreparedWait<'a>, StoreError> {
        Ok(PreparedWait {
            wait,
            seq: codec.int(wait.seq, "checkpoint seq")?,
            answer_schema: wait.answer_schema.to_string(),
            timeout_ms: wait
                .timeout_ms
                .map(|ms| codec.int(ms, "wait timeout"))
                .transpose()?,
            fence,
        })
    }

    pub fn action(&self) -> String {
        format!(
            "putting run `{}` in waiting at node `{}`",
            self.wait.run_id, self.wait.node_id
        )
    }
}

/// An answer to a run's wait, ready to bind.
#[derive(Debug)]
pub(crate) struct PreparedAnswer<'a> {
    pub run_id: &'a str,
    pub seq: i64,
    pub answer: String,
    pub by: &'a str,
    pub now: i64,
}

impl<'a> PreparedAnswer<'a> {
    pub fn new(
        codec: &impl Codec,
        run_id: &'a str,
        seq: u64,
        answer: &Value,
        by: &'a str,
    ) -> Result<PreparedAnswer<'a>, StoreError> {
        Ok(PreparedAnswer {
            run_id,
            seq: codec.int(seq, "checkpoint seq")?,
            answer: answer.to_string(),
            by,
            now: now_ms(),
        })
    }

    pub fn action(&self) -> String {
        format!("answering run `{}`", self.run_id)
    }
}

/// A cancel, ready to bind.
#[derive(Debug)]
pub(crate) struct PreparedCancel<'a> {
    pub run_id: &'a str,
    pub by: &'a str,
    pub error: String,
}

impl<'a> PreparedCancel<'a> {
    pub fn new(run_id: &'a str, by: &'a str, error: &Value) -> PreparedCancel<'a> {
        PreparedCancel {
            run_id,
            by,
            error: error.to_string(),
        }
    }

    pub fn action(&self) -> String {
        format!("cancelling run `{}`", self.run_id)
    }
}

/// A fence's generation as bound (None: no fence).
fn fence_generation(codec: &impl Codec, fence: Option<&Lease>) -> Result<Option<i64>, StoreError> {
    fence
        .map(|lease| codec.int(lease.generation, "lease generation"))
        .transpose()
}
