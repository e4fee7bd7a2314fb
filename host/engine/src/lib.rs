//! The executor: walks a checked scenario node by node, checks every boundary,
//! and commits each node's state change, step row and checkpoint in one
//! transaction before it follows an edge.
//!
//! The core is small ([`run`]): ask the node's kind what happened, apply its
//! state changes, evaluate the rules, pick the next node, commit. Each kind
//! of node is one module under [`kinds`] (skill, map fan-out, gate, end,
//! fail, subgraph: another scenario as a child run) that returns what happened and never commits or routes itself;
//! retries are the calling kinds' business ([`call`]), failure routing the
//! core's. Whether a run is durable, volatile (`--durability none`) or a
//! replay is known to one type only, its run log (`run_log.rs`), which the
//! core and the kinds write and read through. No model and no clock decide where a run goes: only the
//! scenario's CEL guards over the state.
//!
//! Exactly-once: a node's writes reach the store in the same transaction as the
//! checkpoint that moves the run past it, and a checkpoint is accepted only as
//! the successor of the last one. A crash before the commit re-runs the node on
//! resume (its host calls too: at least once for the outside world); a crash
//! after it continues from the next node.
//!
//! What a run recorded can be used again: [`replay`] re-executes a finished
//! run step by step from its record and compares every hash,
//! [`Engine::fork`] starts a new run from any checkpoint of one, and a skill
//! node with `cache` reuses an output an earlier call recorded (`cache.rs`).
//!
//! People act on runs from outside ([`control`]): an approval node makes a
//! run wait for an answer, which [`Engine::answer`] records (the run then
//! continues from that boundary when it is resumed), and [`Engine::cancel`]
//! ends a queued or waiting run at once and a running one at its next node
//! boundary (its next checkpoint is refused). Every face (the command line,
//! the MCP server, the HTTP API) acts on runs through the run service
//! ([`service`]: start, answer, continue under the run's lease, cancel),
//! and says the typed remedies its errors carry ([`remedy`]) in its own
//! words.

// A node failure carries its report and the step row to store with it. It is
// built at most once per failed node, never on the hot path, so boxing it would
// cost every success a branch for nothing.
#![allow(clippy::result_large_err)]

mod ahead;
#[cfg(feature = "bench")]
pub mod bench;
mod cache;
mod call;
pub mod control;
pub mod events;
mod failure;
mod kept;
mod kinds;
pub mod kv;
pub mod lease;
mod metered;
mod node;
pub mod queue;
pub mod relay;
pub mod remedy;
pub mod replay;
mod run;
mod run_log;
pub mod schedule;
pub mod service;
pub mod state;
mod traced;
pub mod worker;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value};

pub use control::{Answered, describe_fields};
pub use events::{
    CollectEvents, Event, EventSink, NdjsonEvents, NoEvents, is_token_json_of, token_runs,
};
pub use failure::FailureCode;
pub use kept::{keep_text, restore_scenario_file};
pub use remedy::{Plain, Remedies, Remedy};
use run::drive;
pub use run::summary_of;
use run_log::RunLog;
pub use service::{Continued, Queued, RunService};
use skillhost_runtime::TokenUsage;
use skillhost_scenario::{Configs, LoadedScenario, Scenario};
use skillhost_store::{
    Admission, FieldHashes, ForkOrigin, History, InitialState, NewArtifact, NewRun, ParentLink,
    Provenance, RunState, RunStatus, START_NODE, StepRow, Store, StoreError,
};

/// Why a run could not be started or continued (as opposed to a run that
/// failed, which is a [`RunOutcome`] with status `failed`). Its `Display`
/// says what to do in plain words; [`EngineError::remedies`] are those
/// remedies typed, which [`EngineError::render`] puts in a face's words.
#[derive(Debug)]
pub enum EngineError {
    InvalidInput {
        scenario: String,
        message: String,
    },
    UnknownRun(String),
    RunFinished {
        id: String,
        status: String,
    },
    ScenarioChanged {
        id: String,
        scenario: String,
        expected: String,
        found: String,
    },
    ComponentsChanged {
        id: String,
        changes: String,
    },
    Waiting {
        id: String,
        node: String,
        prompt: String,
    },
    NotWaiting {
        id: String,
        status: String,
    },
    AlreadyAnswered {
        id: String,
        node: String,
        by: String,
        at: String,
        status: String,
    },
    WaitTimedOut {
        id: String,
        node: String,
        deadline: String,
    },
    InvalidAnswer {
        id: String,
        node: String,
        message: String,
        fields: String,
    },
    NothingToCancel {
        id: String,
        status: String,
    },
    NoCheckpoint {
        id: String,
    },
    NoSuchCheckpoint {
        id: String,
        seq: u64,
        last: u64,
    },
    ForkGoesNowhere {
        id: String,
        seq: u64,
    },
    InvalidFork {
        field: String,
        message: String,
    },
    NotQueueable {
        scenario: String,
        message: String,
    },
    Store(StoreError),
    Internal {
        run: String,
        message: String,
    },
}

impl EngineError {
    /// What can be done about it, typed, in the order its message says
    /// them.
    pub fn remedies(&self) -> Vec<Remedy> {
        use EngineError::*;
        let run = |id: &String| id.clone();
        match self {
            UnknownRun(_) => vec![Remedy::ListRuns { waiting: false }],
            RunFinished { id, .. } => vec![Remedy::StartRun, Remedy::ShowRun { run: run(id) }],
            ScenarioChanged { id, .. } => vec![Remedy::ResumeChanged { run: run(id) }],
            ComponentsChanged { id, .. } => vec![
                Remedy::ShowRun { run: run(id) },
                Remedy::ResumeChanged { run: run(id) },
            ],
            Waiting { id, .. } => vec![
                Remedy::AnswerRun { run: run(id) },
                Remedy::CancelRun { run: run(id) },
            ],
            NotWaiting { .. } => vec![Remedy::ListRuns { waiting: true }],
            AlreadyAnswered { id, .. } => vec![Remedy::ShowRun { run: run(id) }],
            WaitTimedOut { id, .. } => vec![Remedy::ResumeRun { run: run(id) }],
            NoSuchCheckpoint { id, .. } | ForkGoesNowhere { id, .. } => {
                vec![Remedy::ListCheckpoints { run: run(id) }]
            }
            _ => Vec::new(),
        }
    }

    /// The message, its remedies in `face`'s words (`Display` is
    /// [`Plain`]'s: no face's).
    pub fn render(&self, face: &dyn Remedies) -> String {
        use EngineError::*;
        let w = remedy::Words(face);
        let run = |id: &String| id.clone();
        match self {
            InvalidInput { scenario, message } => {
                format!("scenario `{scenario}`: the run input does not fit [input]: {message}")
            }
            UnknownRun(id) => format!(
                "run `{id}` does not exist in this database; list runs{}",
                w.with(Remedy::ListRuns { waiting: false })
            ),
            RunFinished { id, status } => format!(
                "run `{id}` is {status}; only unfinished runs can be resumed. Start a new run{}, \
                 or see this run's steps{}",
                w.with(Remedy::StartRun),
                w.with(Remedy::ShowRun { run: run(id) })
            ),
            ScenarioChanged {
                id,
                scenario,
                expected,
                found,
            } => format!(
                "run `{id}` was started from scenario `{scenario}` with digest {expected}, but \
                 the file now has digest {found}; resume it with the scenario it started with, \
                 or continue it with the changed scenario{}",
                w.with(Remedy::ResumeChanged { run: run(id) })
            ),
            ComponentsChanged { id, changes } => format!(
                "run `{id}` started with other code than it would continue with: {changes}; a \
                 run in flight never switches code silently: resume it with the components it \
                 started with{}, or continue it with the new ones{}",
                w.aside(Remedy::ShowRun { run: run(id) }, " lists them"),
                w.with(Remedy::ResumeChanged { run: run(id) })
            ),
            Waiting { id, node, prompt } => format!(
                "run `{id}` is waiting for an answer at node `{node}` ({prompt}); answer it{}, \
                 or cancel it{}",
                w.with(Remedy::AnswerRun { run: run(id) }),
                w.with(Remedy::CancelRun { run: run(id) })
            ),
            NotWaiting { id, status } => format!(
                "run `{id}` is {status}, not waiting for an answer; only a run waiting at an \
                 approval node can be answered{}",
                w.aside(Remedy::ListRuns { waiting: true }, "")
            ),
            AlreadyAnswered {
                id,
                node,
                by,
                at,
                status,
            } => format!(
                "run `{id}` was already answered at node `{node}` by `{by}` at {at} and is \
                 {status} now; an answer is given once{}",
                w.aside_after("see it with ", Remedy::ShowRun { run: run(id) })
            ),
            WaitTimedOut { id, node, deadline } => format!(
                "run `{id}` stopped waiting at node `{node}`: its wait timed out at {deadline}, \
                 so it takes the node's `on_timeout` route; continue it{} (a worker does that by \
                 itself)",
                w.with(Remedy::ResumeRun { run: run(id) })
            ),
            InvalidAnswer {
                id,
                node,
                message,
                fields,
            } => format!(
                "the answer does not fit node `{node}`'s answer shape: {message}; run `{id}` is \
                 still waiting and nothing was written. The answer is a JSON object with {fields}"
            ),
            NothingToCancel { id, status } => format!(
                "run `{id}` is already {status}; there is nothing to cancel (only queued, \
                 waiting and running runs can be cancelled)"
            ),
            NoCheckpoint { id } => format!("run `{id}` has no checkpoint to resume from"),
            NoSuchCheckpoint { id, seq, last } => format!(
                "run `{id}` has no checkpoint {seq} (its checkpoints are 0 to {last}){}",
                match face.way(&Remedy::ListCheckpoints { run: run(id) }) {
                    Some(way) => format!("; see them with {way}"),
                    None => String::new(),
                }
            ),
            ForkGoesNowhere { id, seq } => format!(
                "checkpoint {seq} of run `{id}` leads to no node (the run failed there with no \
                 failure handler); fork at an earlier checkpoint{}",
                w.aside(Remedy::ListCheckpoints { run: run(id) }, "")
            ),
            InvalidFork { field, message } => format!("--set {field}: {message}"),
            NotQueueable { scenario, message } => {
                format!("scenario `{scenario}` cannot be queued: {message}")
            }
            Store(e) => e.to_string(),
            Internal { run, message } => format!("run `{run}`: {message}"),
        }
    }
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // The store's error as it is, as `#[error(transparent)]` had it.
            EngineError::Store(e) => std::fmt::Display::fmt(e, f),
            _ => f.write_str(&self.render(&Plain)),
        }
    }
}

impl std::error::Error for EngineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EngineError::Store(e) => e.source(),
            _ => None,
        }
    }
}

impl From<StoreError> for EngineError {
    fn from(e: StoreError) -> Self {
        EngineError::Store(e)
    }
}

/// What [`Engine::start_with`] did.
#[derive(Debug, Clone)]
// One per start, matched at once: boxing the outcome would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Started {
    /// It created the run and ran it to its end.
    Ran(RunOutcome),
    /// A live run holds the request's idempotency key: nothing was started.
    Existing { run_id: String },
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
    /// A run that stopped to wait for an answer (status `waiting`): where,
    /// and what it asks.
    pub waiting: Option<Waiting>,
}

/// Where a run waits for an answer, and what it asks.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    /// The approval node.
    pub node_id: String,
    /// The checkpoint it waits at.
    pub seq: u64,
    pub prompt: String,
    /// The JSON Schema an answer must fit.
    pub answer_schema: Value,
    /// When the wait times out (Unix ms), if it does.
    pub deadline_ms: Option<i64>,
}

pub struct Engine {
    store: Option<Store>,
    events: Arc<dyn EventSink>,
    /// Where calls' `kv` goes instead of the runtime's backend: set by
    /// [`Engine::with_kv`] or [`Engine::with_runtime_kv`], else the
    /// store's ([`kv::StoreKv`]), made when the first run needs it.
    kv: OnceLock<Option<skillhost_runtime::KvOverride>>,
    /// The subgraph level of the runs it starts: 0 for a top-level run, 1
    /// for a child run, … (`kinds/subgraph.rs` refuses a child past
    /// [`skillhost_scenario::MAX_SUBGRAPH_DEPTH`]).
    level: usize,
    /// Whether a node with no effects outside the run may run while the
    /// commit before it syncs ([`ahead`]).
    run_ahead: bool,
    /// The relay among `events`, when the store relays tokens: a run's end
    /// waits for its tokens to be sent ([`relay::TokenRelay::flushed`]).
    relay: Option<Arc<relay::TokenRelay>>,
}

impl RunContext<'_> {
    /// Sends the event `event` builds, when anyone listens.
    pub(crate) fn emit(&self, event: impl FnOnce() -> Event) {
        if self.events.listening() {
            self.gate.emit(event());
        }
    }

    /// Where a node's calls put their spans, when traces are exported.
    pub(crate) fn call_trace(&self) -> Option<traced::CallTrace> {
        self.trace
            .as_ref()
            .map(|trace| traced::CallTrace { node: trace.node() })
    }

    /// Sends a skill's log lines, when the sink wants them.
    pub(crate) fn emit_logs(
        &self,
        node: &str,
        item: Option<usize>,
        skill: &str,
        logs: &[skillhost_runtime::LogLine],
    ) {
        if logs.is_empty() || !self.events.wants_logs() {
            return;
        }
        for line in logs {
            self.gate.emit(Event::SkillLog {
                run_id: self.run_id.clone(),
                node: node.to_string(),
                item,
                skill: skill.to_string(),
                level: line.level,
                message: line.message.clone(),
            });
        }
    }

    /// Whether what a step's row keeps (input and output hashes, detail) is
    /// built: when a store will keep it, or a replay compares it.
    pub(crate) fn keeps_records(&self) -> bool {
        self.log.keeps_records()
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
    /// Where the run's progress goes: a store, nowhere, or a replay's
    /// comparison ([`RunLog`]).
    pub log: RunLog<'a>,
    pub events: Arc<dyn EventSink>,
    /// The run's own events go to `events` through it: held while a commit
    /// written before them is not durable yet ([`ahead`]).
    pub gate: Arc<ahead::Gate>,
    /// Whether nodes may run ahead of durability ([`ahead`]).
    pub run_ahead: bool,
    /// Where the calls' `kv` goes, when not the runtime's backend.
    pub kv: Option<skillhost_runtime::KvOverride>,
    /// The run was resumed with `--allow-changed`: a child run a subgraph
    /// node continues may have changed too.
    pub allow_changed: bool,
    /// How many runs are above this one: 0 for a top-level run, its
    /// parent's level + 1 for a child run.
    pub level: usize,
    /// The run's trace, when traces are exported.
    pub trace: Option<traced::RunTrace>,
    /// Where the run's tokens go to other processes, when they do: the run
    /// ends once they are sent.
    pub relay: Option<Arc<relay::TokenRelay>>,
}

impl Engine {
    /// An engine that checkpoints to `store`, or runs without durability when
    /// `store` is `None` (`--durability none`). With a store, the `kv`
    /// capability's backend is the store ([`kv::StoreKv`]): what skills set
    /// outlives the process and is shared by every process and worker on
    /// the store; without one (or outside a tokio runtime), the runtime's.
    pub fn new(store: Option<Store>, events: Arc<dyn EventSink>) -> Self {
        // A store shared by several processes (Postgres) also carries a
        // streaming node's tokens to the others (`relay.rs`).
        let Some(relay) = store
            .as_ref()
            .and_then(relay::TokenRelay::over)
            .map(Arc::new)
        else {
            return Engine::with_events(store, events);
        };
        let events = Arc::new(relay::Tee(vec![events, relay.clone()]));
        Engine {
            relay: Some(relay),
            ..Engine::with_events(store, events)
        }
    }

    /// An engine whose events go to `events` alone: a subgraph's child run,
    /// whose parent's events already relay its tokens (once).
    pub(crate) fn with_events(store: Option<Store>, events: Arc<dyn EventSink>) -> Self {
        Engine {
            store,
            events,
            kv: OnceLock::new(),
            level: 0,
            run_ahead: true,
            relay: None,
        }
    }

    /// This engine with running ahead of durability on (the default) or
    /// off: off, every node waits for the sync of the commit before it, as
    /// a node with effects always does (`ahead.rs`). The engine benchmark
    /// measures both.
    pub fn with_run_ahead(self, run_ahead: bool) -> Self {
        Engine { run_ahead, ..self }
    }

    /// This engine with `kv` as its calls' `kv` backend instead of its
    /// store's (a worker's unfenced store; a subgraph's child runs with
    /// their parent's). None: the runtime's backend.
    pub fn with_kv(self, kv: Option<skillhost_runtime::KvOverride>) -> Self {
        Engine {
            kv: OnceLock::from(kv),
            ..self
        }
    }

    /// This engine with the runtime's `kv` backend (its
    /// `Backends::kv`) even though it has a store.
    pub fn with_runtime_kv(self) -> Self {
        self.with_kv(None)
    }

    /// The calls' `kv` backend: the one chosen, else the store's, made
    /// once (it keeps which namespaces this process let adopt their older
    /// rows), else the runtime's.
    fn kv(&self) -> Option<skillhost_runtime::KvOverride> {
        if let Some(kv) = self.kv.get() {
            return kv.clone();
        }
        let (Some(store), Ok(handle)) = (&self.store, tokio::runtime::Handle::try_current()) else {
            return None;
        };
        self.kv
            .get_or_init(|| Some(kv::StoreKv::over(store.clone(), handle)))
            .clone()
    }

    /// This engine for child runs at subgraph `level` (a parent's level
    /// + 1).
    pub(crate) fn at_level(mut self, level: usize) -> Self {
        self.level = level;
        self
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
        input: Value,
        run_id: Option<String>,
    ) -> Result<RunOutcome, EngineError> {
        self.start_run(loaded, input, run_id, None).await
    }

    /// [`Engine::start`], for a child run when `parent` says whose.
    pub(crate) async fn start_run(
        &self,
        loaded: &LoadedScenario,
        input: Value,
        run_id: Option<String>,
        parent: Option<(ParentLink, Option<String>)>,
    ) -> Result<RunOutcome, EngineError> {
        let (parent, trace_parent) = parent.unzip();
        let request = queue::RunRequest {
            run_id,
            parent,
            trace_parent: trace_parent.flatten(),
            ..queue::RunRequest::default()
        };
        match self.start_with(loaded, input, request).await? {
            Started::Ran(outcome) => Ok(outcome),
            // Only a request with a key meets an existing run.
            Started::Existing { run_id } => Err(EngineError::Internal {
                run: run_id,
                message: "a start without an idempotency key met an existing run".into(),
            }),
        }
    }

    /// [`start`](Self::start) with a request: an idempotency key whose live
    /// run is returned ([`Started::Existing`], nothing run) instead of
    /// starting another, a task, a priority. The run carries its scenario's
    /// flow control, so queued runs count it. Without a store there is
    /// nothing to hold a key, and the run just starts.
    pub async fn start_with(
        &self,
        loaded: &LoadedScenario,
        input: Value,
        request: queue::RunRequest,
    ) -> Result<Started, EngineError> {
        let scenario = &*loaded.scenario;
        let (run, options) = queue::new_run(loaded, input, request)?;
        let initial = &loaded.initial_state;
        if let Admission::Existing { run_id } = RunLog::over(self.store.as_ref())
            .create_run(&run, &options)
            .await?
        {
            return Ok(Started::Existing { run_id });
        }
        let created_at_ms = run::now_ms();
        let NewRun {
            id: run_id,
            input,
            provenance,
            ..
        } = run;
        self.emit(|| Event::RunStarted {
            run_id: run_id.clone(),
            scenario: scenario.name.clone(),
            resumed: false,
        });
        let cx = self.new_run_context(loaded, run_id, input, &provenance, created_at_ms);
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
        .map(Started::Ran)
    }

    /// Continues an unfinished run from its last checkpoint.
    ///
    /// A run never switches code silently: one whose scenario file or any of
    /// whose components (by the SHA-256 it recorded when it started) differ
    /// from `loaded`'s is refused ([`EngineError::ScenarioChanged`],
    /// [`EngineError::ComponentsChanged`]). See [`Engine::resume_changed`].
    pub async fn resume(
        &self,
        loaded: &LoadedScenario,
        run_id: &str,
    ) -> Result<RunOutcome, EngineError> {
        self.resume_with(loaded, run_id, false).await
    }

    /// [`Engine::resume`] that continues a run whose scenario or components
    /// changed since it started (`host resume --allow-changed`): the
    /// deliberate upgrade of a run in flight. The run keeps the components
    /// it recorded when it started, so `host runs show` and a replay say
    /// which code it began with; a replay of it reports the changed ones.
    pub async fn resume_changed(
        &self,
        loaded: &LoadedScenario,
        run_id: &str,
    ) -> Result<RunOutcome, EngineError> {
        self.resume_with(loaded, run_id, true).await
    }

    pub(crate) async fn resume_with(
        &self,
        loaded: &LoadedScenario,
        run_id: &str,
        allow_changed: bool,
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
        if run.status.is_finished() {
            return Err(EngineError::RunFinished {
                id: run_id.to_string(),
                status: run.status.as_str().to_string(),
            });
        }
        if run.scenario_digest != scenario.digest && !allow_changed {
            return Err(EngineError::ScenarioChanged {
                id: run_id.to_string(),
                scenario: run.scenario_name.clone(),
                expected: run.scenario_digest.clone(),
                found: scenario.digest.clone(),
            });
        }
        // A run created before components were recorded has nothing to
        // compare with.
        if let Some(provenance) = &run.provenance
            && !allow_changed
        {
            let changes = component_changes(&provenance.components, &loaded.component_digests());
            if !changes.is_empty() {
                return Err(EngineError::ComponentsChanged {
                    id: run_id.to_string(),
                    changes: changes.join("; "),
                });
            }
        }
        let checkpoint =
            store
                .latest_state(run_id)
                .await?
                .ok_or_else(|| EngineError::NoCheckpoint {
                    id: run_id.to_string(),
                })?;
        // A run at an approval node goes on with its wait's answer (or
        // timeout); one still waiting for an answer is not resumed.
        let at_approval = checkpoint
            .next_nodes
            .first()
            .and_then(|next| scenario.node(next))
            .is_some_and(|node| node.kind() == skillhost_scenario::NodeKind::Approval);
        let wait = match at_approval || run.status == RunStatus::Waiting {
            true => store.wait_at(run_id, checkpoint.seq).await?,
            false => None,
        };
        if run.status == RunStatus::Waiting
            && run.cancel_requested_at_ms.is_none()
            && let Some(wait) = &wait
            && wait.answer.is_none()
            && !wait.is_due(run::now_ms())
        {
            return Err(EngineError::Waiting {
                id: run_id.to_string(),
                node: wait.node_id.clone(),
                prompt: wait.prompt.clone(),
            });
        }
        self.emit(|| Event::RunStarted {
            run_id: run_id.to_string(),
            scenario: scenario.name.clone(),
            resumed: true,
        });
        let mut cx = self.context(loaded, run_id.to_string(), run.input.clone());
        cx.trace = traced::RunTrace::of(
            run_id,
            run.provenance.as_ref(),
            run.created_at_ms,
            scenario,
            checkpoint.seq,
        );
        cx.log = cx.log.with_wait(wait);
        cx.allow_changed = allow_changed;
        // A child run continued on its own (`host resume CHILD`) is still
        // as deep as its parents put it.
        if let (0, Some(parent)) = (self.level, run.parent()) {
            cx.level = run_level(store, parent).await?;
        }
        let from = Position {
            seq: checkpoint.seq,
            node_id: checkpoint.node_id,
            next_nodes: checkpoint.next_nodes,
            visits: checkpoint.visits,
        };
        let state = RunState::from_value(checkpoint.state);
        // A cancel asked for while no process ran it: it ends here.
        if let Some(at_ms) = run.cancel_requested_at_ms {
            let by = run.cancel_requested_by.as_deref().unwrap_or("someone");
            return run::cancel(&cx, &from, state, by, at_ms).await;
        }
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

    /// Starts a new run from checkpoint `seq` of run `from` (LangGraph's
    /// time travel): its state with each of `set`'s top-level fields
    /// replaced (checked against `[state]`), its next node and its visit
    /// counts; records where it was forked from, and runs it to its end.
    /// The scenario must be the one `from` ran (its digest); its
    /// components may have changed since, and the new run records the ones
    /// it uses. Nothing is written unless every field fits.
    pub async fn fork(
        &self,
        loaded: &LoadedScenario,
        from: &str,
        seq: u64,
        set: &[(String, Value)],
    ) -> Result<RunOutcome, EngineError> {
        let scenario = &*loaded.scenario;
        let Some(store) = &self.store else {
            return Err(EngineError::Internal {
                run: from.to_string(),
                message: "forking needs the database that holds the run".into(),
            });
        };
        let source = store
            .run(from)
            .await?
            .ok_or_else(|| EngineError::UnknownRun(from.to_string()))?;
        if source.scenario_digest != scenario.digest {
            return Err(EngineError::ScenarioChanged {
                id: from.to_string(),
                scenario: source.scenario_name.clone(),
                expected: source.scenario_digest.clone(),
                found: scenario.digest.clone(),
            });
        }
        let checkpoint =
            store
                .state_at(from, seq)
                .await?
                .ok_or_else(|| EngineError::NoSuchCheckpoint {
                    id: from.to_string(),
                    seq,
                    last: source.last_seq,
                })?;
        let Some(next) = checkpoint.next_nodes.first().cloned() else {
            return Err(EngineError::ForkGoesNowhere {
                id: from.to_string(),
                seq,
            });
        };
        let mut state = RunState::from_value(checkpoint.state);
        for (field, value) in set {
            let change = state::change_for(
                scenario,
                &state,
                field,
                &skillhost_scenario::Reducer::Replace,
                value.clone(),
            )
            .map_err(|mut message| {
                if scenario.state_field(field).is_none() && field != "errors" {
                    let declared: Vec<String> = scenario
                        .state
                        .iter()
                        .map(|f| format!("`{}`", f.name))
                        .collect();
                    message.push_str(&format!(
                        "; the declared fields are {}",
                        declared.join(", ")
                    ));
                }
                EngineError::InvalidFork {
                    field: field.clone(),
                    message,
                }
            })?;
            skillhost_store::check_change_nesting(&change).map_err(|e| {
                EngineError::InvalidFork {
                    field: field.clone(),
                    message: e.to_string(),
                }
            })?;
            state.apply(std::slice::from_ref(&change));
        }
        let initial = Arc::new(InitialState::new(state.into_value()));
        let run_id = skillhost_store::new_run_id();
        // A fork is a run of its own, with a trace of its own.
        let (trace, _) = traced::new_run_trace(None);
        let provenance = Provenance {
            components: loaded.component_digests(),
            forked_from: Some(ForkOrigin {
                run_id: from.to_string(),
                seq,
            }),
            parent: None,
            trace: Some(trace),
            trace_parent_span: None,
            // A fork of a composed run runs the same kept text.
            scenario_text: source
                .provenance
                .as_ref()
                .and_then(|p| p.scenario_text.clone()),
        };
        let created_at_ms = run::now_ms();
        store
            .create_run(&NewRun {
                id: run_id.clone(),
                scenario_name: scenario.name.clone(),
                scenario_path: scenario.path.display().to_string(),
                scenario_digest: scenario.digest.clone(),
                input: source.input.clone(),
                initial_state: initial.clone(),
                start_node: next.clone(),
                start_visits: checkpoint.visits.clone(),
                provenance: provenance.clone(),
            })
            .await?;
        self.emit(|| Event::RunStarted {
            run_id: run_id.clone(),
            scenario: scenario.name.clone(),
            resumed: false,
        });
        let cx = self.new_run_context(loaded, run_id, source.input, &provenance, created_at_ms);
        let position = Position {
            seq: 0,
            node_id: if checkpoint.seq == 0 {
                START_NODE.to_string()
            } else {
                checkpoint.node_id
            },
            next_nodes: vec![next],
            visits: checkpoint.visits,
        };
        // A fork is a run of its own: its token budget counts its own
        // completions, not those of the run it was forked from.
        drive(
            &cx,
            position,
            initial.state().clone(),
            initial.field_hashes(),
            TokenUsage::default(),
        )
        .await
    }

    /// [`Engine::context`] for a run just created with `provenance` at
    /// `created_at_ms`: its trace starts here.
    fn new_run_context<'a>(
        &'a self,
        loaded: &'a LoadedScenario,
        run_id: String,
        input: Value,
        provenance: &Provenance,
        created_at_ms: i64,
    ) -> RunContext<'a> {
        let mut cx = self.context(loaded, run_id, input);
        cx.trace = traced::RunTrace::of(
            &cx.run_id,
            Some(provenance),
            created_at_ms,
            &loaded.scenario,
            0,
        );
        cx
    }

    pub(crate) fn context<'a>(
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
            log: RunLog::over(self.store.as_ref()),
            events: self.events.clone(),
            gate: Arc::new(ahead::Gate::new(self.events.clone())),
            run_ahead: self.run_ahead,
            kv: self.kv(),
            allow_changed: false,
            level: self.level,
            trace: None,
            relay: self.relay.clone(),
        }
    }
}

/// The subgraph level of a child run whose parent link is `parent`, read
/// up the store's links one run at a time; past
/// [`skillhost_scenario::MAX_SUBGRAPH_DEPTH`] it stops counting (the run's
/// subgraph nodes are refused either way).
async fn run_level(store: &History, parent: &ParentLink) -> Result<usize, EngineError> {
    let mut level = 1;
    let mut above = parent.run_id.clone();
    while level <= skillhost_scenario::MAX_SUBGRAPH_DEPTH {
        match store
            .run(&above)
            .await?
            .and_then(|run| run.parent().cloned())
        {
            Some(link) => {
                level += 1;
                above = link.run_id;
            }
            None => break,
        }
    }
    Ok(level)
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

/// What differs between the components a run `started` with and those it
/// would `continue` with, by skill alias, one phrase each.
fn component_changes(
    started: &BTreeMap<String, String>,
    now: &BTreeMap<String, String>,
) -> Vec<String> {
    let short = |digest: &str| digest.get(..12).unwrap_or(digest).to_string();
    let mut changes = Vec::new();
    for (alias, digest) in started {
        match now.get(alias) {
            Some(current) if current == digest => {}
            Some(current) => changes.push(format!(
                "skill `{alias}` was sha256:{}…, now sha256:{}…",
                short(digest),
                short(current)
            )),
            None => changes.push(format!(
                "skill `{alias}` (sha256:{}…) is no longer in the scenario",
                short(digest)
            )),
        }
    }
    for (alias, digest) in now {
        if !started.contains_key(alias) {
            changes.push(format!(
                "skill `{alias}` (sha256:{}…) was not in the run's scenario",
                short(digest)
            ));
        }
    }
    changes
}

/// Where a run loop starts: a checkpoint without its state.
pub(crate) struct Position {
    pub seq: u64,
    pub node_id: String,
    pub next_nodes: Vec<String>,
    pub visits: BTreeMap<String, u32>,
}
