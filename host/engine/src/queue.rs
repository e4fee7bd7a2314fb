//! What a new run carries into the store: its [`NewRun`] built from a
//! loaded scenario and an input, and the [`RunOptions`] the queue reads,
//! from the scenario's `[scenario] priority`, `concurrency` and
//! `concurrency_key` and what the caller asks (`host submit --priority`,
//! `--idempotency-key`, a schedule's tick). `host submit`, `host run` and
//! the scheduler all build their runs here, so a run is held by the same
//! limits whichever way it started.
//!
//! Must not: write (the caller creates the run), or read a clock.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::EngineError;
use skillhost_scenario::LoadedScenario;
use skillhost_store::{
    IdempotencyKey, NewRun, ParentLink, Provenance, RunOptions, ScheduleTick, new_run_id,
};

/// What the caller asks of a new run beyond its scenario's settings.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    /// Its id (default: a new one).
    pub run_id: Option<String>,
    /// The task it works on.
    pub task_id: Option<String>,
    /// Overrides `[scenario] priority`.
    pub priority: Option<i64>,
    /// Start it only if no live run holds this key.
    pub idempotency: Option<IdempotencyKey>,
    /// The schedule tick it is the run of.
    pub schedule_tick: Option<ScheduleTick>,
    /// The parent run and subgraph node of a child run.
    pub parent: Option<ParentLink>,
    /// The span (W3C `traceparent`) the run's trace goes under: a child
    /// run's parent node, or a caller's own trace. None: a trace of its own.
    pub trace_parent: Option<String>,
    /// The scenario's text, kept with the run (`Provenance::scenario_text`):
    /// for a scenario that is no operator's file (a composed one).
    pub scenario_text: Option<String>,
}

/// The run `loaded` starts with `input` (defaults applied and checked
/// against `[input]` here), and its options: the scenario's flow control
/// (its concurrency key evaluated over the input) and the request's.
pub fn new_run(
    loaded: &LoadedScenario,
    mut input: Value,
    request: RunRequest,
) -> Result<(NewRun, RunOptions), EngineError> {
    let scenario = &*loaded.scenario;
    scenario.apply_input_defaults(&mut input);
    let invalid = |message| EngineError::InvalidInput {
        scenario: scenario.name.clone(),
        message,
    };
    scenario.validate_input(&input).map_err(invalid)?;
    let concurrency_key = scenario.queue.key_for(&input).map_err(invalid)?;
    let options = RunOptions {
        task_id: request.task_id,
        priority: request.priority.unwrap_or(scenario.queue.priority),
        concurrency_limit: scenario.queue.concurrency,
        concurrency_key,
        idempotency: request.idempotency,
        schedule_tick: request.schedule_tick,
    };
    let (trace, trace_parent_span) = crate::traced::new_run_trace(request.trace_parent.as_deref());
    let run = NewRun {
        id: request.run_id.unwrap_or_else(new_run_id),
        scenario_name: scenario.name.clone(),
        scenario_path: scenario.path.display().to_string(),
        scenario_digest: scenario.digest.clone(),
        input,
        initial_state: loaded.initial_state.clone(),
        start_node: scenario.start.clone(),
        start_visits: BTreeMap::new(),
        provenance: Provenance {
            components: loaded.component_digests(),
            forked_from: None,
            parent: request.parent,
            trace: Some(trace),
            trace_parent_span,
            scenario_text: request.scenario_text,
        },
    };
    Ok((run, options))
}

/// [`new_run`] for a run that waits in the queue: its scenario path made
/// absolute (a worker may run in another directory).
pub fn new_queued_run(
    loaded: &LoadedScenario,
    input: Value,
    request: RunRequest,
) -> Result<(NewRun, RunOptions), EngineError> {
    let scenario = &*loaded.scenario;
    let (mut run, options) = new_run(loaded, input, request)?;
    if let Ok(path) = std::fs::canonicalize(&scenario.path) {
        run.scenario_path = path.display().to_string();
    }
    Ok((run, options))
}
