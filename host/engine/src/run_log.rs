//! The run log: where a run's progress goes. A run is durable (every step,
//! map item and retried attempt written through a store's [`RunWriter`],
//! the default),
//! volatile (`--durability none`: nothing kept), or a replay of one
//! recorded step (its calls answered from the step's journal, its commit
//! kept for the replay to compare instead of written). This is the one
//! place that knows which: the core and the kinds ask the log what they
//! need and never see a store.
//!
//! Owns: which writes each mode makes, and the operations the kinds share
//! (the items of a map node already done, recording an item or a retried
//! attempt, the node cache, an approval's answer, a subgraph's child run and
//! its artifacts, the host calls a replay answers) and the core's (create
//! the run, commit a step, record a wait, finish the run). Must not: decide
//! what a node does, route, or build what it writes unless it keeps it.
//!
//! Every operation is one `match` on the mode: the per-node path pays a
//! branch where it paid an `Option` check before, and nothing else.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::replay::StepReplay;
use crate::{Engine, EngineError, EventSink};
use skillhost_runtime::KvOverride;
use skillhost_store::{
    Admission, ArtifactRow, CachedOutput, JournalEntry, MapItemRow, NewArtifact, NewRun, NewWait,
    ParentLink, RunOptions, RunResult, RunRow, RunStatus, RunWriter, StepCommit, StepRow, Store,
    StoreError, WaitRow, Written, state_hash,
};

/// Where one run's progress goes ([the module](self)).
pub(crate) struct RunLog<'a>(Mode<'a>);

// One per run (or replayed step), borrowed by every node and never moved:
// boxing a variant would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Mode<'a> {
    Durable {
        /// What the log writes and reads through: a run's history only.
        writer: &'a RunWriter,
        /// The store itself, for a subgraph's child engine alone.
        store: &'a Store,
        /// The run's wait at the checkpoint it resumed from, when it
        /// resumed at an approval node: the answer (or the timeout) that
        /// node goes on with.
        wait: Option<WaitRow>,
    },
    Volatile,
    Replay {
        step: Arc<StepReplay>,
        /// The commit the replayed node made.
        kept: Mutex<Option<StepCommit>>,
    },
}

/// What an approval node finds when it is reached ([`RunLog::decision`]).
pub(crate) enum Decision {
    /// Someone answered: `{answer, answered_by, answered_at}`.
    Answered(Value),
    /// Nobody answered before the deadline: `{timed_out_at}`.
    TimedOut(Value),
    /// No answer yet: the run waits.
    Unanswered,
    /// No answer, and this run keeps no checkpoint to wait at (volatile).
    CannotWait,
    /// A replayed step that recorded neither an answer nor a timeout.
    NotRecorded,
}

/// A map item that finished, for [`RunLog::record_item`]: the row is built
/// only by a log that keeps it.
pub(crate) struct ItemDone<'i> {
    pub run_id: &'i str,
    pub node_id: &'i str,
    pub visit: u32,
    pub index: usize,
    pub output: &'i Value,
    pub duration_us: u64,
    pub fuel_consumed: u64,
    pub journal: &'i [JournalEntry],
    pub attempt: u32,
}

impl<'a> RunLog<'a> {
    /// A durable log over `store`, or a volatile one without.
    pub(crate) fn over(store: Option<&'a Store>) -> Self {
        RunLog(match store {
            Some(store) => Mode::Durable {
                writer: store,
                store,
                wait: None,
            },
            None => Mode::Volatile,
        })
    }

    /// The log of one replayed step, whose calls `step` answers.
    pub(crate) fn replaying(step: Arc<StepReplay>) -> Self {
        RunLog(Mode::Replay {
            step,
            kept: Mutex::new(None),
        })
    }

    /// This log with the run's wait at the checkpoint it resumes from
    /// (ignored by a log that keeps no checkpoints).
    pub(crate) fn with_wait(mut self, wait: Option<WaitRow>) -> Self {
        if let Mode::Durable { wait: slot, .. } = &mut self.0 {
            *slot = wait;
        }
        self
    }

    /// Whether what a step's row keeps (input and output hashes, detail) is
    /// built: when a store will keep it, or a replay compares it.
    pub(crate) fn keeps_records(&self) -> bool {
        !matches!(self.0, Mode::Volatile)
    }

    /// Whether steps are written to a store.
    pub(crate) fn is_durable(&self) -> bool {
        matches!(self.0, Mode::Durable { .. })
    }

    /// Whether this is a replay of a recorded step.
    pub(crate) fn is_replay(&self) -> bool {
        matches!(self.0, Mode::Replay { .. })
    }

    /// What answers the calls of a replayed step from its journal; None in
    /// a run.
    pub(crate) fn replay(&self) -> Option<&Arc<StepReplay>> {
        match &self.0 {
            Mode::Replay { step, .. } => Some(step),
            _ => None,
        }
    }

    // ---- the run ----------------------------------------------------------

    /// Creates the run (a volatile log has nothing to create, and holds no
    /// idempotency key: the run just starts).
    pub(crate) async fn create_run(
        &self,
        run: &NewRun,
        options: &RunOptions,
    ) -> Result<Admission, StoreError> {
        match &self.0 {
            Mode::Durable { writer: store, .. } => store.create_run_with(run, options).await,
            Mode::Volatile | Mode::Replay { .. } => Ok(Admission::Created),
        }
    }

    /// Commits a step (its changes, row, journal, cache entry and
    /// checkpoint, and `artifacts`, in one transaction), or keeps it in a
    /// replay. Whether it was written to a store.
    pub(crate) async fn commit_step(
        &self,
        commit: StepCommit,
        artifacts: &[NewArtifact],
    ) -> Result<bool, StoreError> {
        match &self.0 {
            Mode::Durable { writer: store, .. } => {
                let journal_bytes = crate::metered::journal_bytes(&commit.journal);
                store.commit_step_with_artifacts(&commit, artifacts).await?;
                crate::metered::journal_committed(journal_bytes);
                Ok(true)
            }
            Mode::Replay { kept, .. } => {
                *kept.lock().unwrap_or_else(|e| e.into_inner()) = Some(commit);
                Ok(false)
            }
            Mode::Volatile => Ok(false),
        }
    }

    /// [`commit_step`](Self::commit_step), returning once the commit is
    /// written to a store, with what says when it is durable (the run goes
    /// on meanwhile: `ahead.rs`); None where nothing was written to a store.
    pub(crate) async fn commit_step_ahead(
        &self,
        commit: StepCommit,
        artifacts: &[NewArtifact],
    ) -> Result<Option<Written>, StoreError> {
        match &self.0 {
            Mode::Durable { writer: store, .. } => {
                let journal_bytes = crate::metered::journal_bytes(&commit.journal);
                let written = store.commit_step_ahead(&commit, artifacts).await?;
                crate::metered::journal_committed(journal_bytes);
                Ok(Some(written))
            }
            Mode::Replay { .. } | Mode::Volatile => {
                self.commit_step(commit, artifacts).await.map(|_| None)
            }
        }
    }

    /// [`commit_step`](Self::commit_step) of a run's last step, whose next
    /// node is an end node: a store writes the run's end (completed, with
    /// the commit's state as its result) in the same transaction, one sync
    /// for both. Whether it was written to a store (then the run is
    /// finished, and [`finish_run`](Self::finish_run) is not called).
    pub(crate) async fn commit_last_step(
        &self,
        commit: StepCommit,
        artifacts: &[NewArtifact],
    ) -> Result<bool, StoreError> {
        match &self.0 {
            Mode::Durable { writer: store, .. } => {
                let journal_bytes = crate::metered::journal_bytes(&commit.journal);
                let state = &*commit.full_state;
                store
                    .commit_last_step(&commit, artifacts, RunStatus::Completed, Some(state), None)
                    .await?;
                crate::metered::journal_committed(journal_bytes);
                Ok(true)
            }
            Mode::Replay { .. } | Mode::Volatile => self.commit_step(commit, artifacts).await,
        }
    }

    /// The commit a replayed node made, if it made one.
    pub(crate) fn take_commit(&self) -> Option<StepCommit> {
        match &self.0 {
            Mode::Replay { kept, .. } => kept.lock().unwrap_or_else(|e| e.into_inner()).take(),
            _ => None,
        }
    }

    /// Records that the run waits at its last checkpoint; the wait's
    /// deadline, if it has one. Only a durable run can wait.
    pub(crate) async fn record_wait(&self, wait: &NewWait) -> Result<Option<i64>, EngineError> {
        match &self.0 {
            Mode::Durable { writer: store, .. } => Ok(store.wait_run(wait).await?),
            Mode::Volatile | Mode::Replay { .. } => Err(EngineError::Internal {
                run: wait.run_id.clone(),
                message: format!("node `{}` waits, but the run has no database", wait.node_id),
            }),
        }
    }

    /// Sets the run's final status, result and error.
    pub(crate) async fn finish_run(
        &self,
        run_id: &str,
        status: RunStatus,
        result: Option<&dyn RunResult>,
        error: Option<&Value>,
    ) -> Result<(), StoreError> {
        match &self.0 {
            Mode::Durable { writer: store, .. } => {
                store.finish_run(run_id, status, result, error).await
            }
            Mode::Volatile | Mode::Replay { .. } => Ok(()),
        }
    }

    // ---- what kinds ask ---------------------------------------------------

    /// The items of visit `visit` of map node `node_id` that finished
    /// before (a crash inside the node): none unless the run is durable.
    pub(crate) async fn items_done(
        &self,
        run_id: &str,
        node_id: &str,
        visit: u32,
    ) -> Result<Vec<MapItemRow>, StoreError> {
        match &self.0 {
            Mode::Durable { writer: store, .. } => store.map_items(run_id, node_id, visit).await,
            Mode::Volatile | Mode::Replay { .. } => Ok(Vec::new()),
        }
    }

    /// Makes a finished map item durable on its own, before its node
    /// commits.
    pub(crate) async fn record_item(&self, item: ItemDone<'_>) -> Result<(), StoreError> {
        let Mode::Durable { writer: store, .. } = &self.0 else {
            return Ok(());
        };
        let row = MapItemRow {
            run_id: item.run_id.to_string(),
            node_id: item.node_id.to_string(),
            visit: item.visit,
            item_index: item.index as u32,
            output_hash: state_hash(item.output),
            output: item.output.clone(),
            duration_us: item.duration_us,
            fuel_consumed: item.fuel_consumed,
            // No allocation for an item that journaled nothing.
            journal: item.journal.to_vec(),
            attempt: item.attempt,
        };
        skillhost_store::failpoint::hit(|| {
            format!("before-map-item:{}:{}", item.node_id, item.index)
        });
        let recorded = store.record_map_item(&row).await;
        skillhost_store::failpoint::hit(|| format!("map-item:{}:{}", item.node_id, item.index));
        recorded
    }

    /// Records the step rows of a call's attempts that were retried. A row
    /// the database could not be reached for (a failover) is a diagnostic
    /// lost, not the run's failure: the store does not retry it (a second
    /// copy would be a lie in the history), and the run goes on.
    pub(crate) async fn record_attempts(&self, failed: &[StepRow]) -> Result<(), StoreError> {
        if let Mode::Durable { writer: store, .. } = &self.0 {
            for step in failed {
                match store.record_failed_step(step).await {
                    Err(e) if e.is_unreachable() => tracing::warn!(
                        "the failed attempt {} of node `{}` of run `{}` is not recorded: {e}",
                        step.attempt,
                        step.node_id,
                        step.run_id
                    ),
                    other => other?,
                }
            }
        }
        Ok(())
    }

    /// Whether the node cache is asked: by a durable run only (a replay
    /// re-executes the step).
    pub(crate) fn serves_cache(&self) -> bool {
        self.is_durable()
    }

    /// The node cache's entry under `key`.
    pub(crate) async fn cached_output(
        &self,
        key: &str,
    ) -> Result<Option<CachedOutput>, StoreError> {
        match &self.0 {
            Mode::Durable { writer: store, .. } => store.cached_output(key).await,
            Mode::Volatile | Mode::Replay { .. } => Ok(None),
        }
    }

    /// What approval node `node_id`, reached from checkpoint `at_seq`,
    /// goes on with: the answer or timeout of the run's wait there, or in
    /// a replay the one its step recorded.
    /// The wait this run was resumed with, if any.
    pub(crate) fn wait(&self) -> Option<&WaitRow> {
        match &self.0 {
            Mode::Durable { wait, .. } => wait.as_ref(),
            _ => None,
        }
    }

    pub(crate) fn decision(&self, node_id: &str, at_seq: u64, now_ms: i64) -> Decision {
        match &self.0 {
            Mode::Replay { step, .. } => match &step.approval {
                Some(detail) if detail.get("answer").is_some() => {
                    Decision::Answered(detail.clone())
                }
                Some(detail) if detail.get("timed_out_at").is_some() => {
                    Decision::TimedOut(detail.clone())
                }
                _ => Decision::NotRecorded,
            },
            Mode::Volatile => Decision::CannotWait,
            Mode::Durable { wait, .. } => {
                let Some(wait) = wait
                    .as_ref()
                    .filter(|wait| wait.seq == at_seq && wait.node_id == node_id)
                else {
                    return Decision::Unanswered;
                };
                match (&wait.answer, wait.deadline_ms) {
                    (Some(answer), _) => Decision::Answered(json!({
                        "answer": answer,
                        "answered_by": wait.answered_by,
                        "answered_at": wait.answered_at_ms,
                    })),
                    (None, Some(deadline)) if wait.is_due(now_ms) => {
                        Decision::TimedOut(json!({ "timed_out_at": deadline }))
                    }
                    (None, _) => Decision::Unanswered,
                }
            }
        }
    }

    /// The engine a subgraph node runs its child run with: on this run's
    /// store (none for a volatile run), with its events and kv, at subgraph
    /// `level`.
    pub(crate) fn child_engine(
        &self,
        events: Arc<dyn EventSink>,
        kv: Option<KvOverride>,
        level: usize,
    ) -> Engine {
        let store = match &self.0 {
            Mode::Durable { store, .. } => Some((*store).clone()),
            Mode::Volatile | Mode::Replay { .. } => None,
        };
        // The parent's events: its relay carries the child's tokens too.
        Engine::with_events(store, events)
            .with_kv(kv)
            .at_level(level)
    }

    /// The child run that visit `link.visit` of subgraph node `link.node`
    /// started in an earlier process, if one did.
    pub(crate) async fn earlier_child(
        &self,
        link: &ParentLink,
    ) -> Result<Option<RunRow>, StoreError> {
        match &self.0 {
            Mode::Durable { writer: store, .. } => {
                store.child(&link.run_id, &link.node, link.visit).await
            }
            Mode::Volatile | Mode::Replay { .. } => Ok(None),
        }
    }

    /// Every artifact run `run_id` stored, each with its bytes, up to the
    /// first whose bytes are missing from the store (None there); None when
    /// this log keeps no artifacts.
    pub(crate) async fn stored_artifacts(
        &self,
        run_id: &str,
    ) -> Option<Result<Vec<(ArtifactRow, Option<Vec<u8>>)>, StoreError>> {
        let Mode::Durable { writer: store, .. } = &self.0 else {
            return None;
        };
        let read = async {
            let rows = store.artifacts(run_id).await?;
            let mut artifacts = Vec::with_capacity(rows.len());
            for row in rows {
                let bytes = store.artifact_bytes(&row.digest).await?;
                let missing = bytes.is_none();
                artifacts.push((row, bytes));
                if missing {
                    break;
                }
            }
            Ok(artifacts)
        };
        Some(read.await)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use skillhost_store::{NewWait, RunStatus, Store};

    use super::{Decision, ItemDone, RunLog};

    /// A volatile run keeps nothing, reads nothing back, and cannot wait;
    /// a durable one on a store that holds nothing for it reads nothing
    /// back either, and its approval is unanswered.
    #[tokio::test]
    async fn a_volatile_log_keeps_nothing_and_a_durable_one_reads_its_store() {
        let volatile = RunLog::over(None);
        assert!(!volatile.keeps_records() && !volatile.is_durable() && !volatile.is_replay());
        assert!(volatile.replay().is_none() && !volatile.serves_cache());
        assert!(matches!(
            volatile.decision("ask", 3, 0),
            Decision::CannotWait
        ));
        assert!(
            volatile
                .items_done("run", "map", 1)
                .await
                .unwrap()
                .is_empty()
        );
        let output = json!({"text": "hi"});
        volatile
            .record_item(ItemDone {
                run_id: "run",
                node_id: "map",
                visit: 1,
                index: 0,
                output: &output,
                duration_us: 1,
                fuel_consumed: 1,
                journal: &[],
                attempt: 1,
            })
            .await
            .unwrap();
        assert!(volatile.stored_artifacts("run").await.is_none());
        volatile
            .finish_run("run", RunStatus::Completed, None, None)
            .await
            .unwrap();
        let wait = NewWait {
            run_id: "run".into(),
            seq: 3,
            node_id: "ask".into(),
            prompt: "ok?".into(),
            answer_schema: json!({}),
            timeout_ms: None,
        };
        let refused = volatile.record_wait(&wait).await.unwrap_err();
        assert!(
            refused.to_string().contains("node `ask` waits"),
            "{refused}"
        );

        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("runs.db").display());
        let store = Store::open(&url).await.unwrap();
        let durable = RunLog::over(Some(&store));
        assert!(durable.keeps_records() && durable.is_durable() && durable.serves_cache());
        assert!(matches!(
            durable.decision("ask", 3, 0),
            Decision::Unanswered
        ));
        assert!(
            durable
                .items_done("run", "map", 1)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(durable.cached_output("key").await.unwrap().is_none());
        assert!(
            durable
                .stored_artifacts("run")
                .await
                .unwrap()
                .unwrap()
                .is_empty()
        );
    }
}
