//! One module per kind of node, each saying what running its node did
//! ([`Outcome`]); the core ([`crate::run`]) applies it. This is the only
//! place that matches on a node's body.
//!
//! A kind never commits, routes or runs the rules: it maps its input, calls
//! what it calls, checks what it checks, and returns the state changes it
//! wants (or why it failed, or how the run ends). It never sees a store
//! either: what it reads back or keeps before its node commits (a map's
//! finished items, retried attempts, the node cache, an approval's answer,
//! a child run), and a replay's answers to its calls, it asks of the run's
//! log (`cx.log`, [`crate::run_log::RunLog`]), the same whether the run is
//! durable, volatile or a replay.

pub(crate) mod approval;
mod end;
mod fail;
mod gate;
pub(crate) mod map;
pub(crate) mod skill;
mod subgraph;

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::Value;

use crate::RunContext;
use crate::failure::FailureCode;
use skillhost_runtime::TokenUsage;
use skillhost_scenario::{Node, NodeBody};
use skillhost_store::{JournalEntry, NewArtifact, NewCacheEntry, RunState, StateChange, StepRow};

/// What running a node did.
pub(crate) enum Outcome {
    /// The node succeeded: apply its changes, run the rules, route, commit.
    Advance(NodeSuccess),
    /// The node failed for good (retries are the kind's business): record
    /// it, with its step row when it got that far, and route to the failure
    /// handler.
    Fail(NodeFailure, Option<StepRow>),
    /// The run ends here.
    Finish(Finish),
    /// The run waits here for a person's answer (an approval node): it is
    /// recorded at the run's last checkpoint, and the run loop ends.
    Wait(Wait),
}

/// What a run waiting for an answer shows and expects.
#[derive(Debug, Clone)]
pub(crate) struct Wait {
    pub prompt: String,
    /// The JSON Schema an answer must fit.
    pub answer_schema: Value,
    /// How long it waits before its `on_timeout` route; None: for ever.
    pub timeout_ms: Option<u64>,
}

/// How a run ends.
pub(crate) enum Finish {
    Completed,
    /// Failed, with this report (a fail node's).
    Failed(Value),
}

/// What a successful node produced.
pub(crate) struct NodeSuccess {
    pub changes: Vec<StateChange>,
    pub step: StepRow,
    pub fuel_consumed: u64,
    pub artifacts: Vec<NewArtifact>,
    /// The host calls the node's skill made, recorded for replay; committed
    /// with the node's checkpoint.
    pub journal: Vec<JournalEntry>,
    /// Log lines the node's skill calls wrote past their log budget: counted,
    /// not kept, and said in the run's progress and its step.
    pub logs_dropped: u64,
    /// The tokens the node's `llm` completions used, every attempt's.
    pub usage: TokenUsage,
    /// The node cache entry the node's output becomes, committed with its
    /// checkpoint (a cached node's call that made no journaled host call).
    pub cache: Option<NewCacheEntry>,
    /// The answer an approval was given: its edges see it as `answer`.
    pub answer: Option<Arc<Value>>,
    /// Where the run goes instead of along the node's edges (an approval
    /// whose wait timed out goes to its `on_timeout`).
    pub route: Option<String>,
}

impl NodeSuccess {
    /// A success with `changes` and `step` and nothing else: no call, no
    /// artifacts, no journal, no usage, no cache entry, its node's edges.
    pub(crate) fn new(changes: Vec<StateChange>, step: StepRow) -> Self {
        NodeSuccess {
            changes,
            step,
            fuel_consumed: 0,
            artifacts: Vec::new(),
            journal: Vec::new(),
            logs_dropped: 0,
            usage: TokenUsage::default(),
            cache: None,
            answer: None,
            route: None,
        }
    }
}

/// A failure of one node, before routing decides what it means for the run.
#[derive(Debug, Clone)]
pub(crate) struct NodeFailure {
    /// An engine's [`FailureCode`], or the code the failure came with (a
    /// skill call's, a fatal rule's).
    pub code: Cow<'static, str>,
    pub message: String,
    pub attempt: u32,
    pub suggestions: Vec<String>,
    pub detail: Value,
    /// The host calls made before the node failed, recorded like a
    /// success's.
    pub journal: Vec<JournalEntry>,
    /// The tokens the node's `llm` completions used before it failed.
    pub usage: TokenUsage,
}

impl NodeFailure {
    /// A failure the engine detected.
    pub(crate) fn new(code: FailureCode, message: impl Into<String>) -> Self {
        NodeFailure::coded(code.as_str(), message)
    }

    /// A failure that came with its own code: a skill call's
    /// ([`skillhost_runtime::CallError::code`]) or a fatal rule's.
    pub(crate) fn coded(code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        NodeFailure {
            code: code.into(),
            message: message.into(),
            attempt: 1,
            suggestions: Vec::new(),
            detail: Value::Null,
            journal: Vec::new(),
            usage: TokenUsage::default(),
        }
    }
}

/// Runs `node` over `state`: its `visit`-th visit, reached from `came_from`,
/// with `tokens_left` of the run's token budget (`None`: no budget), from
/// checkpoint `at_seq`.
pub(crate) async fn run(
    cx: &RunContext<'_>,
    node: &Node,
    state: &Arc<RunState>,
    visit: u32,
    came_from: &str,
    tokens_left: Option<u64>,
    at_seq: u64,
) -> Outcome {
    match &node.body {
        NodeBody::Skill(call) => skill::run(cx, node, call, state, tokens_left).await,
        NodeBody::Map(map) => map::run(cx, node, map, state, visit, tokens_left).await,
        NodeBody::Gate(gate) => gate::run(cx, node, gate, state),
        NodeBody::Approval(approval) => approval::run(cx, node, approval, state, at_seq),
        NodeBody::Fail(fail) => fail::run(cx, node, fail, state, came_from),
        NodeBody::End => end::run(),
        NodeBody::Subgraph(subgraph) => subgraph::run(cx, node, subgraph, state, visit).await,
    }
}

/// A kind's result, success or failure, as an [`Outcome`].
impl From<Result<NodeSuccess, (NodeFailure, Option<StepRow>)>> for Outcome {
    fn from(result: Result<NodeSuccess, (NodeFailure, Option<StepRow>)>) -> Self {
        match result {
            Ok(success) => Outcome::Advance(success),
            Err((failure, step)) => Outcome::Fail(failure, step),
        }
    }
}
