//! The executor: walks a checked scenario node by node, checks every boundary,
//! and commits each node's state change, step row and checkpoint in one
//! transaction before it follows an edge.
//!
//! The core is small ([`run`]): ask the node's kind what happened, apply its
//! state changes, evaluate the rules, pick the next node, commit. Each kind
//! of node is one module under [`kinds`] (skill, map fan-out, gate, end,
//! fail) that returns what happened and never commits or routes itself;
//! retries are the calling kinds' business ([`call`]), failure routing the
//! core's. No model and no clock decide where a run goes: only the
//! scenario's CEL guards over the state.
//!
//! Exactly-once: a node's writes reach the store in the same transaction as the
//! checkpoint that moves the run past it, and a checkpoint is accepted only as
//! the successor of the last one. A crash before the commit re-runs the node on
//! resume; a crash after it continues from the next node.

// A node failure carries its report and the step row to store with it. It is
// built at most once per failed node, never on the hot path, so boxing it would
// cost every success a branch for nothing.
#![allow(clippy::result_large_err)]

pub mod bench;
mod call;
pub mod events;
mod kinds;
pub mod lease;
mod node;
mod run;
pub mod state;
pub mod worker;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};

pub use events::{CollectEvents, Event, EventSink, NdjsonEvents, NoEvents};
use run::drive;
use skillhost_runtime::TokenUsage;
use skillhost_scenario::{Configs, LoadedScenario, Scenario};
use skillhost_store::{
    FieldHashes, NewArtifact, NewRun, RunState, RunStatus, StepRow, Store, StoreError,
};

/// Why a run could not be started or continued (as opposed to a run that
/// failed, which is a [`RunOutcome`] with status `failed`).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("scenario `{scenario}`: the run input does not fit [input]: {message}")]
    InvalidInput { scenario: String, message: String },
    #[error("run `{0}` does not exist in this database; list runs with `host runs list`")]
    UnknownRun(String),
    #[error(
        "run `{id}` is {status}; only unfinished runs can be resumed. Start a new run with `host run <scenario>`, or see this run's steps with `host runs show {id}`"
    )]
    RunFinished { id: String, status: String },
    #[error(
        "run `{id}` was started from scenario `{scenario}` with digest {expected}, but the file now has digest {found}; resume it with the scenario it started with"
    )]
    ScenarioChanged {
        id: String,
        scenario: String,
        expected: String,
        found: String,
    },
    #[error("run `{id}` has no checkpoint to resume from")]
    NoCheckpoint { id: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("run `{run}`: {message}")]
    Internal { run: String, message: String },
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub run_id: String,
    pub status: RunStatus,
    pub state: RunState,
    /// The failure report of a failed run: node, errors, partial results, suggestions.
    pub failure: Option<Value>,
    pub warnings: Vec<Value>,
    /// Nodes executed by this process (not counting those before a resume).
    pub nodes_run: usize,
    pub last_seq: u64,
    /// Artifacts produced by the nodes this process ran (all of them are in
    /// the store too, when there is one).
    pub artifacts: Vec<NewArtifact>,
    /// The scenario's `[summary]` over the final state (completed runs).
    pub summary: Map<String, Value>,
    /// What the run's `llm` completions used, the nodes before a resume
    /// included (from their step rows).
    pub tokens_used: TokenUsage,
}

pub struct Engine {
    store: Option<Store>,
    events: Arc<dyn EventSink>,
}

impl RunContext<'_> {
    /// Sends the event `event` builds, when anyone listens.
    pub(crate) fn emit(&self, event: impl FnOnce() -> Event) {
        if self.events.listening() {
            self.events.emit(&event());
        }
    }
}

/// Everything one run loop needs, borrowed for its duration.
pub(crate) struct RunContext<'a> {
    pub loaded: &'a LoadedScenario,
    pub scenario: &'a Scenario,
    pub run_id: String,
    /// Shared with every expression's variables, never copied.
    pub input: Arc<Value>,
    /// The scenario's `[config]` and each node's.
    pub configs: &'a Configs,
    pub store: Option<&'a Store>,
    pub events: Arc<dyn EventSink>,
}

impl Engine {
    /// An engine that checkpoints to `store`, or runs without durability when
    /// `store` is `None` (`--durability none`).
    pub fn new(store: Option<Store>, events: Arc<dyn EventSink>) -> Self {
        Engine { store, events }
    }

    pub fn store(&self) -> Option<&Store> {
        self.store.as_ref()
    }

    fn emit(&self, event: impl FnOnce() -> Event) {
        if self.events.listening() {
            self.events.emit(&event());
        }
    }

    /// Validates `input`, creates the run and runs it to its end.
    pub async fn start(
        &self,
        loaded: &LoadedScenario,
        mut input: Value,
        run_id: Option<String>,
    ) -> Result<RunOutcome, EngineError> {
        let scenario = &*loaded.scenario;
        scenario.apply_input_defaults(&mut input);
        scenario
            .validate_input(&input)
            .map_err(|message| EngineError::InvalidInput {
                scenario: scenario.name.clone(),
                message,
            })?;
        let run_id = run_id.unwrap_or_else(skillhost_store::new_run_id);
        let initial = &loaded.initial_state;
        if let Some(store) = &self.store {
            store
                .create_run(&NewRun {
                    id: run_id.clone(),
                    scenario_name: scenario.name.clone(),
                    scenario_path: scenario.path.display().to_string(),
                    scenario_digest: scenario.digest.clone(),
                    input: input.clone(),
                    initial_state: initial.clone(),
                    start_node: scenario.start.clone(),
                })
                .await?;
        }
        self.emit(|| Event::RunStarted {
            run_id: run_id.clone(),
            scenario: scenario.name.clone(),
            resumed: false,
        });
        let cx = self.context(loaded, run_id, input);
        let from = Position {
            seq: 0,
            node_id: String::new(),
            next_nodes: vec![scenario.start.clone()],
            visits: BTreeMap::new(),
        };
        // Shares every field with the scenario's initial state: nothing is
        // copied until a node writes it.
        drive(
            &cx,
            from,
            initial.state().clone(),
            initial.field_hashes(),
            TokenUsage::default(),
        )
        .await
    }

    /// Continues an unfinished run from its last checkpoint.
    pub async fn resume(
        &self,
        loaded: &LoadedScenario,
        run_id: &str,
    ) -> Result<RunOutcome, EngineError> {
        let scenario = &*loaded.scenario;
        let Some(store) = &self.store else {
            return Err(EngineError::Internal {
                run: run_id.to_string(),
                message: "resuming needs a database; --durability none keeps no checkpoints".into(),
            });
        };
        let run = store
            .run(run_id)
            .await?
            .ok_or_else(|| EngineError::UnknownRun(run_id.to_string()))?;
        if matches!(
            run.status,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled
        ) {
            return Err(EngineError::RunFinished {
                id: run_id.to_string(),
                status: run.status.as_str().to_string(),
            });
        }
        if run.scenario_digest != scenario.digest {
            return Err(EngineError::ScenarioChanged {
                id: run_id.to_string(),
                scenario: run.scenario_name.clone(),
                expected: run.scenario_digest.clone(),
                found: scenario.digest.clone(),
            });
        }
        let checkpoint =
            store
                .latest_state(run_id)
                .await?
                .ok_or_else(|| EngineError::NoCheckpoint {
                    id: run_id.to_string(),
                })?;
        self.emit(|| Event::RunStarted {
            run_id: run_id.to_string(),
            scenario: scenario.name.clone(),
            resumed: true,
        });
        let cx = self.context(loaded, run_id.to_string(), run.input.clone());
        let from = Position {
            seq: checkpoint.seq,
            node_id: checkpoint.node_id,
            next_nodes: checkpoint.next_nodes,
            visits: checkpoint.visits,
        };
        let state = RunState::from_value(checkpoint.state);
        // What the run used before: its budget counts it, and its outcome
        // reports the whole run's. A scenario that grants no model used
        // none, and a worker's resume of it reads no steps for it.
        let grants_llm = scenario
            .nodes
            .iter()
            .any(|node| node.call().is_some_and(|call| call.grants.llm.is_some()));
        let tokens_used = match grants_llm {
            true => tokens_used(&store.steps(run_id).await?),
            false => TokenUsage::default(),
        };
        drive(&cx, from, state, FieldHashes::default(), tokens_used).await
    }

    fn context<'a>(
        &'a self,
        loaded: &'a LoadedScenario,
        run_id: String,
        input: Value,
    ) -> RunContext<'a> {
        RunContext {
            loaded,
            scenario: &loaded.scenario,
            run_id,
            input: Arc::new(input),
            configs: &loaded.configs,
            store: self.store.as_ref(),
            events: self.events.clone(),
        }
    }
}

/// What the `llm` completions of a run's `steps` used, failed attempts
/// included: each row's `detail.usage`.
pub fn tokens_used(steps: &[StepRow]) -> TokenUsage {
    let mut used = TokenUsage::default();
    for usage in steps
        .iter()
        .filter_map(|step| step.detail.as_ref()?.get("usage"))
        .filter_map(TokenUsage::from_json)
    {
        used.add(usage);
    }
    used
}

/// Where a run loop starts: a checkpoint without its state.
pub(crate) struct Position {
    pub seq: u64,
    pub node_id: String,
    pub next_nodes: Vec<String>,
    pub visits: BTreeMap<String, u32>,
}
