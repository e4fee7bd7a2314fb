//! The executor: walks a checked scenario node by node, checks every boundary,
//! and commits each node's state change, step row and checkpoint in one
//! transaction before it follows an edge.
//!
//! The core is small: evaluate the node, turn its writes into state changes,
//! evaluate the rules, pick the next node, commit. Map fan-out, retries and
//! failure routing are expressed on top of that loop. No model and no clock
//! decide where a run goes: only the scenario's CEL guards over the state.
//!
//! Exactly-once: a node's writes reach the store in the same transaction as the
//! checkpoint that moves the run past it, and a checkpoint is accepted only as
//! the successor of the last one. A crash before the commit re-runs the node on
//! resume; a crash after it continues from the next node.

// A node failure carries its report and the step row to store with it. It is
// built at most once per failed node, never on the hot path, so boxing it would
// cost every success a branch for nothing.
#![allow(clippy::result_large_err)]

pub mod events;
mod map;
mod node;
pub mod state;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value, json};

use crate::scenario::{Configs, LoadedScenario, NodeKind, Route, Scenario, Severity, Vars};
use crate::store::{
    FieldHashes, NewArtifact, NewRun, RunState, RunStatus, StateChange, StepCommit, StepRow, Store,
    StoreError,
};
pub use events::{CollectEvents, Event, EventSink, NdjsonEvents, NoEvents};

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
}

/// A failure of one node, before routing decides what it means for the run.
#[derive(Debug, Clone)]
pub(crate) struct NodeFailure {
    pub code: String,
    pub message: String,
    pub attempt: u32,
    pub suggestions: Vec<String>,
    pub detail: Value,
}

impl NodeFailure {
    pub(crate) fn new(code: &str, message: impl Into<String>) -> Self {
        NodeFailure {
            code: code.to_string(),
            message: message.into(),
            attempt: 1,
            suggestions: Vec::new(),
            detail: Value::Null,
        }
    }
}

/// What a successful node produced.
pub(crate) struct NodeSuccess {
    pub changes: Vec<StateChange>,
    pub step: StepRow,
    pub fuel_consumed: u64,
    pub artifacts: Vec<NewArtifact>,
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
        let run_id = run_id.unwrap_or_else(crate::store::new_run_id);
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
        drive(&cx, from, initial.state().clone(), initial.field_hashes()).await
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
        drive(&cx, from, state, FieldHashes::default()).await
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

/// Where a run loop starts: a checkpoint without its state.
struct Position {
    seq: u64,
    node_id: String,
    next_nodes: Vec<String>,
    visits: BTreeMap<String, u32>,
}

/// The run loop, from `checkpoint` with `state` until an end or fail node.
/// `hashes` has the digests of the state's fields that are known already;
/// it hashes each new state, re-hashing only the fields a step changed.
async fn drive(
    cx: &RunContext<'_>,
    checkpoint: Position,
    state: RunState,
    mut hashes: FieldHashes,
) -> Result<RunOutcome, EngineError> {
    let started = Instant::now();
    let scenario = cx.scenario;
    let mut state = Arc::new(state);
    let mut seq = checkpoint.seq;
    let mut visits = checkpoint.visits;
    let mut warnings = Vec::new();
    let mut artifacts: Vec<NewArtifact> = Vec::new();
    let mut nodes_run = 0;
    let mut came_from = checkpoint.node_id;
    // A checkpoint with nowhere to go records a failure with no handler: the
    // process died before it could mark the run failed.
    let Some(mut current) = checkpoint.next_nodes.first().cloned() else {
        return failed_run(
            cx, &state, None, seq, warnings, nodes_run, artifacts, started,
        )
        .await;
    };

    loop {
        let node = scenario
            .node(&current)
            .ok_or_else(|| EngineError::Internal {
                run: cx.run_id.clone(),
                message: format!("node `{current}` is not in the scenario"),
            })?;
        let visit = {
            let count = visits.entry(node.id.clone()).or_insert(0);
            *count += 1;
            *count
        };

        // The node failed for good: say so, record it in `state.errors` and
        // continue with the failure handler, or end the run as failed
        // without one.
        macro_rules! route_or_fail {
            ($failure:expr, $step:expr) => {{
                let failure: NodeFailure = $failure;
                cx.emit(|| Event::NodeFailed {
                    run_id: cx.run_id.clone(),
                    node: node.id.clone(),
                    attempt: failure.attempt,
                    error: json!({ "code": failure.code, "message": failure.message }),
                    will_retry: false,
                });
                match route_failure(
                    cx,
                    node,
                    (&mut state, &mut hashes),
                    &mut seq,
                    &visits,
                    failure,
                    $step,
                )
                .await?
                {
                    Some(next) => {
                        came_from = node.id.clone();
                        current = next;
                        continue;
                    }
                    None => {
                        return failed_run(
                            cx, &state, None, seq, warnings, nodes_run, artifacts, started,
                        )
                        .await;
                    }
                }
            }};
        }

        match node.kind {
            NodeKind::End => {
                let summary = summarize(cx, &state);
                if let Some(store) = cx.store {
                    store
                        .finish_run(&cx.run_id, RunStatus::Completed, Some(&*state), None)
                        .await?;
                }
                finished(cx, "completed", started);
                return Ok(RunOutcome {
                    run_id: cx.run_id.clone(),
                    status: RunStatus::Completed,
                    // Nothing else holds the state now: move it out.
                    state: Arc::unwrap_or_clone(state),
                    failure: None,
                    warnings,
                    nodes_run,
                    last_seq: seq,
                    artifacts,
                    summary,
                });
            }
            NodeKind::Fail => {
                let report = failure_report(cx, node, &state, &came_from);
                return failed_run(
                    cx,
                    &state,
                    Some(report),
                    seq,
                    warnings,
                    nodes_run,
                    artifacts,
                    started,
                )
                .await;
            }
            _ => {}
        }

        if let Some(max) = node.max_visits
            && visit > max
        {
            let failure = NodeFailure::new(
                "max-visits-exceeded",
                format!(
                    "node `{}` was reached {visit} times, more than its max_visits of {max}",
                    node.id
                ),
            );
            route_or_fail!(failure, None)
        }

        cx.emit(|| Event::NodeStarted {
            run_id: cx.run_id.clone(),
            node: node.id.clone(),
            kind: kind_name(&node.kind),
            visit,
            attempt: 1,
        });
        let node_started = Instant::now();
        let result = match node.kind {
            NodeKind::Skill => node::run_skill_node(cx, node, &state).await,
            NodeKind::Map => map::run_map_node(cx, node, &state, visit).await,
            NodeKind::Gate => node::run_gate(cx, node, &state),
            NodeKind::End | NodeKind::Fail => unreachable!("handled above"),
        };
        nodes_run += 1;

        // A step row records the node's time so far, whether it commits or
        // fails (the commit measures again, to include its rules and routing).
        let elapsed_us = node_started.elapsed().as_micros() as u64;
        let mut success = match result {
            Ok(success) => success,
            Err((failure, mut step)) => {
                if let Some(step) = &mut step {
                    step.duration_us = elapsed_us;
                }
                route_or_fail!(failure, step)
            }
        };
        success.step.duration_us = elapsed_us;

        // The node's own variables are gone, so the state is not shared and
        // the changes apply in place; `undo` restores it if they are refused.
        let undo = state::apply_with_undo(Arc::make_mut(&mut state), &success.changes);

        // Validation rules see the state as this node leaves it.
        let mut fatal = None;
        let mut step_warnings = Vec::new();
        for rule in scenario
            .rules
            .iter()
            .filter(|r| r.after.as_deref().is_none_or(|after| after == node.id))
        {
            let mut vars = Vars::new();
            vars.set_shared("input", cx.input.clone())
                .set_state("state", state.clone())
                .set_shared("config", cx.configs.scenario.clone());
            match rule.when.eval_bool(&vars) {
                Ok(false) => {}
                Ok(true) => match rule.severity {
                    Severity::Fatal => {
                        let mut failure = NodeFailure::new(&rule.code, rule.message.clone());
                        failure.suggestions = rule.suggestions.clone();
                        fatal = Some(failure);
                        break;
                    }
                    Severity::Warning => {
                        cx.emit(|| Event::RuleWarning {
                            run_id: cx.run_id.clone(),
                            node: node.id.clone(),
                            code: rule.code.clone(),
                            message: rule.message.clone(),
                        });
                        let mut warning =
                            json!({ "node": node.id, "code": rule.code, "message": rule.message });
                        if !rule.suggestions.is_empty() {
                            warning["suggestions"] = json!(rule.suggestions);
                        }
                        step_warnings.push(warning.clone());
                        warnings.push(warning);
                    }
                },
                Err(e) => {
                    fatal = Some(NodeFailure::new(
                        "rule-error",
                        format!("rule `{}`: {e}", rule.code),
                    ));
                    break;
                }
            }
        }
        if let Some(failure) = fatal {
            undo.revert(Arc::make_mut(&mut state));
            route_or_fail!(failure, Some(success.step))
        }
        if !step_warnings.is_empty() {
            let detail = success.step.detail.get_or_insert_with(|| json!({}));
            if let Some(obj) = detail.as_object_mut() {
                obj.insert("warnings".into(), Value::Array(step_warnings));
            }
        }

        let next = match next_node(cx, node, &state) {
            Ok(next) => next,
            Err(failure) => {
                undo.revert(Arc::make_mut(&mut state));
                route_or_fail!(failure, Some(success.step))
            }
        };

        seq += 1;
        success.step.seq = Some(seq);
        success.step.duration_us = node_started.elapsed().as_micros() as u64;
        crate::failpoint::hit(|| format!("before-commit:{}", node.id));
        if let Some(store) = cx.store {
            store
                .commit_step_with_artifacts(
                    &StepCommit {
                        run_id: cx.run_id.clone(),
                        seq,
                        node_id: node.id.clone(),
                        next_nodes: vec![next.clone()],
                        // Before `changes` moves: fields are evaluated in order.
                        state_hash: hashes.hash_state(&state, &success.changes),
                        changes: success.changes,
                        full_state: state.clone(),
                        step: success.step,
                        visits: visits.clone(),
                        journal: Vec::new(),
                    },
                    &success.artifacts,
                )
                .await?;
            crate::failpoint::hit(|| format!("after-commit:{}", node.id));
            cx.emit(|| Event::CheckpointWritten {
                run_id: cx.run_id.clone(),
                seq,
                node: node.id.clone(),
                next: vec![next.clone()],
            });
        }
        cx.emit(|| Event::NodeFinished {
            run_id: cx.run_id.clone(),
            node: node.id.clone(),
            duration_us: node_started.elapsed().as_micros() as u64,
            fuel_consumed: success.fuel_consumed,
        });
        artifacts.append(&mut success.artifacts);
        came_from = node.id.clone();
        current = next;
    }
}

fn finished(cx: &RunContext<'_>, status: &str, started: Instant) {
    cx.emit(|| Event::RunFinished {
        run_id: cx.run_id.clone(),
        status: status.to_string(),
        duration_ms: started.elapsed().as_millis() as u64,
    });
}

/// The node a successful node leads to.
fn next_node(
    cx: &RunContext<'_>,
    node: &crate::scenario::Node,
    state: &Arc<RunState>,
) -> Result<String, NodeFailure> {
    match &node.route {
        Route::Next(to) => Ok(to.clone()),
        Route::Branches {
            branches,
            otherwise,
        } => {
            let mut vars = Vars::new();
            vars.set_shared("input", cx.input.clone())
                .set_state("state", state.clone())
                .set_shared("config", node_config(cx, node));
            for (guard, to) in branches {
                match guard.eval_bool(&vars) {
                    Ok(true) => return Ok(to.clone()),
                    Ok(false) => {}
                    Err(e) => {
                        return Err(NodeFailure::new(
                            "branch-error",
                            format!("node `{}`: branch guard failed: {e}", node.id),
                        ));
                    }
                }
            }
            Ok(otherwise.clone())
        }
        Route::End => Err(NodeFailure::new(
            "no-route",
            format!("node `{}` has no outgoing edge", node.id),
        )),
    }
}

/// Records a node's final failure in `state.errors` and commits it. Returns the
/// failure handler to continue with, or `None` when the run fails here.
async fn route_failure(
    cx: &RunContext<'_>,
    node: &crate::scenario::Node,
    // The state, and the hashes of its fields to hash it with.
    (state, hashes): (&mut Arc<RunState>, &mut FieldHashes),
    seq: &mut u64,
    visits: &BTreeMap<String, u32>,
    failure: NodeFailure,
    step: Option<StepRow>,
) -> Result<Option<String>, EngineError> {
    let mut entry = json!({
        "code": failure.code,
        "message": failure.message,
        "node": node.id,
        "attempt": failure.attempt,
    });
    if !failure.suggestions.is_empty() {
        entry["suggestions"] = json!(failure.suggestions);
    }
    if !failure.detail.is_null() {
        entry["detail"] = failure.detail.clone();
    }
    let changes = vec![StateChange::Append {
        field: "errors".into(),
        items: vec![entry.clone()],
    }];
    Arc::make_mut(state).apply(&changes);
    let handler = cx
        .scenario
        .on_failure
        .clone()
        .filter(|handler| *handler != node.id);
    *seq += 1;
    if let Some(store) = cx.store {
        let mut step = step.unwrap_or_else(|| empty_step(cx, node, failure.attempt));
        step.seq = Some(*seq);
        step.status = "failed".into();
        step.error = Some(entry);
        store
            .commit_step(&StepCommit {
                run_id: cx.run_id.clone(),
                seq: *seq,
                node_id: node.id.clone(),
                next_nodes: handler.iter().cloned().collect(),
                state_hash: hashes.hash_state(state, &changes),
                changes,
                full_state: state.clone(),
                step,
                visits: visits.clone(),
                journal: Vec::new(),
            })
            .await?;
        cx.emit(|| Event::CheckpointWritten {
            run_id: cx.run_id.clone(),
            seq: *seq,
            node: node.id.clone(),
            next: handler.iter().cloned().collect(),
        });
    }
    Ok(handler)
}

/// Ends a run that failed with no failure handler to take it.
/// Ends a run as failed with `report`, or, without one (no failure handler
/// took the run), with a report built from the last error.
#[allow(clippy::too_many_arguments)]
async fn failed_run(
    cx: &RunContext<'_>,
    state: &Arc<RunState>,
    report: Option<Value>,
    seq: u64,
    warnings: Vec<Value>,
    nodes_run: usize,
    artifacts: Vec<NewArtifact>,
    started: Instant,
) -> Result<RunOutcome, EngineError> {
    let report = report.unwrap_or_else(|| {
        let last = state
            .get("errors")
            .and_then(Value::as_array)
            .and_then(|errors| errors.last())
            .cloned()
            .unwrap_or(Value::Null);
        json!({
            "node": last.get("node").cloned().unwrap_or(Value::Null),
            "code": last.get("code").cloned().unwrap_or(Value::Null),
            "message": last.get("message").cloned().unwrap_or(Value::Null),
            "errors": state.get("errors").cloned().unwrap_or(json!([])),
            "partial_results": partial_results(state),
            "suggestions": last.get("suggestions").cloned().unwrap_or(json!([])),
        })
    });
    if let Some(store) = cx.store {
        store
            .finish_run(&cx.run_id, RunStatus::Failed, Some(&**state), Some(&report))
            .await?;
    }
    finished(cx, "failed", started);
    Ok(RunOutcome {
        run_id: cx.run_id.clone(),
        status: RunStatus::Failed,
        state: RunState::clone(state),
        failure: Some(report),
        warnings,
        nodes_run,
        last_seq: seq,
        artifacts,
        summary: Map::new(),
    })
}

/// The report a `fail` node ends a run with.
fn failure_report(
    cx: &RunContext<'_>,
    node: &crate::scenario::Node,
    state: &Arc<RunState>,
    came_from: &str,
) -> Value {
    let errors = state.get("errors").cloned().unwrap_or(json!([]));
    let last = errors.as_array().and_then(|e| e.last()).cloned();
    let mut vars = Vars::new();
    vars.set_shared("input", cx.input.clone())
        .set_state("state", state.clone())
        .set_shared("config", node_config(cx, node));
    let message = match &node.message {
        Some(expr) => match expr.eval(&vars) {
            Ok(Value::String(s)) => s,
            Ok(other) => other.to_string(),
            Err(e) => format!("(the failure message could not be evaluated: {e})"),
        },
        None => last
            .as_ref()
            .and_then(|l| l.get("message"))
            .and_then(Value::as_str)
            .unwrap_or("the run failed")
            .to_string(),
    };
    let mut suggestions: Vec<Value> = node.suggestions.iter().map(|s| json!(s)).collect();
    if let Some(extra) = last
        .as_ref()
        .and_then(|l| l.get("suggestions"))
        .and_then(Value::as_array)
    {
        for s in extra {
            if !suggestions.contains(s) {
                suggestions.push(s.clone());
            }
        }
    }
    let failed_node = last
        .as_ref()
        .and_then(|l| l.get("node"))
        .and_then(Value::as_str)
        .unwrap_or(came_from);
    json!({
        "node": failed_node,
        "handler": node.id,
        "code": last.as_ref().and_then(|l| l.get("code")).cloned().unwrap_or(json!("routed-to-failure")),
        "message": message,
        "errors": errors,
        "partial_results": partial_results(state),
        "suggestions": suggestions,
    })
}

/// The `config` a node's expressions see.
pub(crate) fn node_config(cx: &RunContext<'_>, node: &crate::scenario::Node) -> Arc<Value> {
    cx.configs
        .nodes
        .get(&node.id)
        .cloned()
        .unwrap_or_else(|| Arc::new(Value::Object(node.config.clone())))
}

/// The scenario's `[summary]`; an expression that fails shows its error.
fn summarize(cx: &RunContext<'_>, state: &Arc<RunState>) -> Map<String, Value> {
    if cx.scenario.summary.is_empty() {
        return Map::new();
    }
    let mut vars = Vars::new();
    vars.set_shared("input", cx.input.clone())
        .set_state("state", state.clone())
        .set_shared("config", cx.configs.scenario.clone());
    cx.scenario
        .summary
        .iter()
        .map(|(label, expr)| {
            let value = expr
                .eval(&vars)
                .unwrap_or_else(|e| json!(format!("(error: {e})")));
            (label.clone(), value)
        })
        .collect()
}

/// The state fields that hold something, without `errors`.
fn partial_results(state: &RunState) -> Value {
    let mut out = Map::new();
    for (name, value) in state.iter() {
        let empty = match value {
            Value::Null => true,
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.is_empty(),
            Value::String(s) => s.is_empty(),
            _ => false,
        };
        if name != "errors" && !empty {
            out.insert(name.clone(), value.clone());
        }
    }
    Value::Object(out)
}

pub(crate) fn empty_step(
    cx: &RunContext<'_>,
    node: &crate::scenario::Node,
    attempt: u32,
) -> StepRow {
    StepRow {
        run_id: cx.run_id.clone(),
        seq: None,
        node_id: node.id.clone(),
        attempt,
        status: "ok".into(),
        started_at_ms: now_ms(),
        duration_us: 0,
        input_hash: None,
        output_hash: None,
        error: None,
        fuel_consumed: None,
        memory_peak_bytes: None,
        detail: None,
    }
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

pub(crate) fn kind_name(kind: &NodeKind) -> &'static str {
    match kind {
        NodeKind::Skill => "skill",
        NodeKind::Map => "map",
        NodeKind::Gate => "gate",
        NodeKind::Fail => "fail",
        NodeKind::End => "end",
    }
}
