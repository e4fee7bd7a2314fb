//! A subgraph: another scenario run as one step, as a child run of its
//! own (its own id, checkpoints and history, linked to this run's node
//! and visit in the store). Its `input` mapping is the child's run input
//! (checked against the child's `[input]` when it starts); its `writes`
//! see `output`:
//! `{run_id, status, state, summary}` of the child's end.
//!
//! With `keep_artifacts`, the child's artifacts (all of them, read back
//! from the store, so those a crashed child made before its resume too)
//! are committed with this node as the parent's, under the same names.
//!
//! A child that fails fails the node, with the child's error and run id;
//! the core routes that like any node failure. A child started by an
//! earlier process (which died before this node's checkpoint) is not
//! started again: an unfinished one is resumed, a finished one's end is
//! read back, so a crash inside the child resumes the child, then the
//! parent, and no node of either runs twice.
//!
//! This module never commits the parent's step: the child's engine
//! commits the child's own steps, and the core this node's.
//!
//! A child run's loop is a task of its own ([`own_task`]), so nesting
//! costs no stack; a child deeper than
//! [`MAX_SUBGRAPH_DEPTH`] levels below its top-level run fails the node
//! (`subgraph-too-deep`), whatever loaded it (the checker refuses such
//! files first).

use std::pin::Pin;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{NodeFailure, NodeSuccess, Outcome};
use crate::events::UnderParent;
use crate::failure::FailureCode;
use crate::node::{base_vars, check_pre, map_input, writes};
use crate::run::{empty_step, summarize};
use crate::{Engine, EngineError, RunContext, RunOutcome};
use skillhost_scenario::{LoadedScenario, MAX_SUBGRAPH_DEPTH, Node, SubgraphNode};
use skillhost_store::{NewArtifact, ParentLink, RunRow, RunState, RunStatus};

pub(crate) async fn run(
    cx: &RunContext<'_>,
    node: &Node,
    subgraph: &SubgraphNode,
    state: &Arc<RunState>,
    visit: u32,
) -> Outcome {
    run_child(cx, node, subgraph, state, visit)
        .await
        .map_err(|f| (f, None))
        .into()
}

async fn run_child(
    cx: &RunContext<'_>,
    node: &Node,
    subgraph: &SubgraphNode,
    state: &Arc<RunState>,
    visit: u32,
) -> Result<NodeSuccess, NodeFailure> {
    if cx.log.is_replay() {
        return Err(NodeFailure::new(
            FailureCode::SubgraphNotReplayable,
            format!(
                "node `{}` runs scenario `{}` as a child run, which a replay does not \
                 re-execute; replay the child run itself (run `{}` lists it among its child \
                 runs)",
                node.id, subgraph.written, cx.run_id
            ),
        ));
    }
    let child = cx.loaded.subgraphs.get(&node.id).ok_or_else(|| {
        NodeFailure::new(
            FailureCode::SubgraphNotLoaded,
            format!(
                "node `{}`: scenario `{}` was not loaded with its parent",
                node.id, subgraph.written
            ),
        )
    })?;
    let vars = base_vars(cx, node, state);
    check_pre(node, &subgraph.pre, &vars)?;
    let level = cx.level + 1;
    if level > MAX_SUBGRAPH_DEPTH {
        return Err(NodeFailure::new(
            FailureCode::SubgraphTooDeep,
            format!(
                "node `{}`: scenario `{}` would run as a child run {level} levels below its \
                 top-level run; subgraphs nest at most {MAX_SUBGRAPH_DEPTH} levels (the \
                 checker refuses such a chain of files; this run's tree is deeper than the \
                 files it loaded say). Run the deeper part as a run of its own",
                node.id, subgraph.written
            ),
        ));
    }
    let input = map_input(node, &subgraph.input, &vars)?;

    // The child's tokens say they are under this run, so that whoever
    // follows this run (or one above it) hears them.
    let events = Arc::new(UnderParent {
        parent: cx.run_id.clone(),
        events: cx.events.clone(),
    });
    let engine = cx
        .log
        .child_engine(events, cx.kv.clone(), level)
        .with_run_ahead(cx.run_ahead);
    let link = ParentLink {
        run_id: cx.run_id.clone(),
        node: node.id.clone(),
        visit,
    };
    let earlier = cx
        .log
        .earlier_child(&link)
        .await
        .map_err(|e| child_error(node, subgraph, None, EngineError::Store(e)))?;
    let parent = cx.run_id.as_str();
    let mut end = match earlier {
        Some(row) if row.status.is_finished() => recorded_end(&engine, child, row),
        Some(row) => {
            let id = row.id.clone();
            let (child, allow_changed) = (child.clone(), cx.allow_changed);
            own_task(parent, resume_loop(engine, child, row.id, allow_changed))
                .await
                .map(ChildEnd::from)
                .map_err(|e| child_error(node, subgraph, Some(&id), e))?
        }
        None => {
            let child = child.clone();
            let under = cx.trace.as_ref().map(|trace| trace.node_traceparent());
            own_task(parent, start_loop(engine, child, input, link, under))
                .await
                .map(ChildEnd::from)
                .map_err(|e| child_error(node, subgraph, None, e))?
        }
    };

    skillhost_store::failpoint::hit(|| format!("child-ended:{}", node.id));
    if end.status != RunStatus::Completed {
        return Err(child_failed(node, subgraph, &child.scenario.name, end));
    }
    let artifacts = if subgraph.keep_artifacts {
        child_artifacts(cx, node, subgraph, &mut end).await?
    } else {
        Vec::new()
    };
    let output = json!({
        "run_id": end.run_id,
        "status": end.status.as_str(),
        "state": end.state,
        "summary": end.summary,
    });
    let mut vars = vars;
    vars.set_owned("output", output);
    let changes = writes(cx, node, &subgraph.writes, &vars, state)?;
    let mut step = empty_step(cx, node, 1);
    if cx.keeps_records() {
        step.detail = Some(json!({ "child_run_id": end.run_id }));
    }
    Ok(NodeSuccess {
        artifacts,
        ..NodeSuccess::new(changes, step)
    })
}

/// Runs a child run's loop as a task of its own and waits for it. Awaited
/// in place, a child's loop would be polled inside its parent's, one more
/// set of frames on the thread's stack for every level of subgraphs, all
/// the way down; as a task it is polled by the runtime from the bottom of
/// a thread's stack whatever its level. Dropping the wait (the parent's
/// loop was dropped: a lost lease, a shutdown) aborts the child, as a
/// child polled in place would have been dropped with it; a panic in the
/// child is the parent's, as it was in place.
///
/// The child's loop comes boxed as a `Send` future: a run's loop holds its
/// subgraph nodes' waits, so its type refers to itself, and the box is
/// where that type is named without looking inside.
async fn own_task(parent: &str, child: ChildLoop) -> Result<RunOutcome, EngineError> {
    struct AbortOnDrop(tokio::task::JoinHandle<Result<RunOutcome, EngineError>>);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let mut task = AbortOnDrop(tokio::spawn(child));
    match (&mut task.0).await {
        Ok(ended) => ended,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(EngineError::Internal {
            run: parent.to_string(),
            message: format!("the child run's task ended before the child did: {e}"),
        }),
    }
}

/// A child run's loop, from its start or its last checkpoint to its end.
type ChildLoop = Pin<Box<dyn Future<Output = Result<RunOutcome, EngineError>> + Send>>;

/// A new child run's loop. (Boxed outside `run_child`, whose own future
/// the compiler cannot yet call `Send` while it checks its body.)
fn start_loop(
    engine: Engine,
    child: Arc<LoadedScenario>,
    input: Value,
    link: ParentLink,
    trace_under: Option<String>,
) -> ChildLoop {
    Box::pin(async move {
        engine
            .start_run(&child, input, None, Some((link, trace_under)))
            .await
    })
}

/// The loop of a child run an earlier process left unfinished.
fn resume_loop(
    engine: Engine,
    child: Arc<LoadedScenario>,
    run_id: String,
    allow_changed: bool,
) -> ChildLoop {
    Box::pin(async move { engine.resume_with(&child, &run_id, allow_changed).await })
}

/// How a child run ended, whether this process ran it or read it back.
struct ChildEnd {
    run_id: String,
    status: RunStatus,
    state: Value,
    summary: Map<String, Value>,
    /// A failed child's report.
    failure: Option<Value>,
    /// The artifacts this process saw the child make (all of them only
    /// when it ran the child from its start).
    artifacts: Vec<NewArtifact>,
}

impl From<RunOutcome> for ChildEnd {
    fn from(outcome: RunOutcome) -> Self {
        ChildEnd {
            run_id: outcome.run_id,
            status: outcome.status,
            state: outcome.state.into_value(),
            summary: outcome.summary,
            failure: outcome.failure,
            artifacts: outcome.artifacts,
        }
    }
}

/// The end of a child that finished before this process reached its node
/// (the parent died between the child's end and its own checkpoint): its
/// stored final state and report; the summary is the child's `[summary]`
/// over that state, as the child computed it.
fn recorded_end(engine: &Engine, child: &LoadedScenario, row: RunRow) -> ChildEnd {
    let state = row.result.clone().unwrap_or(Value::Null);
    let summary = match row.status {
        RunStatus::Completed => {
            let cx = engine.context(child, row.id.clone(), row.input.clone());
            summarize(&cx, &Arc::new(RunState::from_value(state.clone())))
        }
        _ => Map::new(),
    };
    ChildEnd {
        run_id: row.id,
        status: row.status,
        state,
        summary,
        failure: row.error,
        artifacts: Vec::new(),
    }
}

/// Every artifact of a completed child, for `keep_artifacts`: from the
/// store when there is one (a child resumed or read back made some of them
/// in an earlier process), else the ones this process saw it make.
async fn child_artifacts(
    cx: &RunContext<'_>,
    node: &Node,
    subgraph: &SubgraphNode,
    end: &mut ChildEnd,
) -> Result<Vec<NewArtifact>, NodeFailure> {
    let Some(stored) = cx.log.stored_artifacts(&end.run_id).await else {
        return Ok(std::mem::take(&mut end.artifacts));
    };
    let rows = stored
        .map_err(|e| child_error(node, subgraph, Some(&end.run_id), EngineError::Store(e)))?;
    let mut artifacts = Vec::with_capacity(rows.len());
    for (row, bytes) in rows {
        let bytes = bytes.ok_or_else(|| {
            let mut failure = NodeFailure::new(
                FailureCode::SubgraphError,
                format!(
                    "node `{}`: artifact `{}` of child run `{}` is listed but its bytes \
                         (sha256 {}) are not in the store",
                    node.id, row.name, end.run_id, row.digest
                ),
            );
            failure.detail = json!({ "child_run_id": end.run_id });
            failure
        })?;
        artifacts.push(NewArtifact {
            name: row.name,
            media_type: row.media_type,
            bytes,
        });
    }
    Ok(artifacts)
}

/// The node's failure for a child that ended other than completed.
fn child_failed(
    node: &Node,
    subgraph: &SubgraphNode,
    scenario: &str,
    end: ChildEnd,
) -> NodeFailure {
    let report = end.failure.unwrap_or(Value::Null);
    let said = |key: &str| {
        report
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string()
    };
    let mut failure = NodeFailure::new(
        FailureCode::SubgraphFailed,
        format!(
            "node `{}`: child run `{}` of scenario `{scenario}` ({}) ended {} at its node `{}`: \
             {}: {}; its own steps say more (child run `{}`)",
            node.id,
            end.run_id,
            subgraph.written,
            end.status.as_str(),
            said("node"),
            said("code"),
            said("message"),
            end.run_id
        ),
    );
    if let Some(suggestions) = report.get("suggestions").and_then(Value::as_array) {
        failure.suggestions = suggestions
            .iter()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect();
    }
    failure.detail = json!({
        "child_run_id": end.run_id,
        "child_status": end.status.as_str(),
        "child_error": report,
    });
    failure
}

/// The node's failure for a child that could not be started or continued
/// (its input does not fit its `[input]`, its scenario changed, the store
/// failed).
fn child_error(
    node: &Node,
    subgraph: &SubgraphNode,
    child_run: Option<&str>,
    error: EngineError,
) -> NodeFailure {
    let code = match &error {
        EngineError::InvalidInput { .. } => FailureCode::SubgraphInput,
        _ => FailureCode::SubgraphError,
    };
    let run = child_run.map_or(String::new(), |id| format!(" (child run `{id}`)"));
    let mut failure = NodeFailure::new(
        code,
        format!(
            "node `{}`: scenario `{}`{run}: {error}",
            node.id, subgraph.written
        ),
    );
    if let Some(id) = child_run {
        failure.detail = json!({ "child_run_id": id });
    }
    failure
}
