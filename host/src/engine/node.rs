//! One skill node or gate: input mapping, preconditions, the call with
//! retries, postconditions (citation checks included) and writes.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::{NodeFailure, NodeSuccess, RunContext, empty_step, now_ms, state};
use crate::checks::citations::{CitationInputs, check_citations};
use crate::runtime::{CallError, CallOptions, CallReport, Limits, Skill};
use crate::scenario::{Node, PostCheck, Vars};
use crate::store::{NewArtifact, RunState, StepRow, state_hash};

pub(crate) type NodeResult = Result<NodeSuccess, (NodeFailure, Option<StepRow>)>;

/// The variables every expression of a node sees.
pub(crate) fn base_vars(cx: &RunContext<'_>, node: &Node, state: &Arc<RunState>) -> Vars {
    let mut vars = Vars::new();
    vars.set_shared("input", cx.input.clone())
        .set_state("state", state.clone())
        .set_shared("config", super::node_config(cx, node));
    vars
}

/// Checks `value` against the node's extra `input_schema` / `output_schema`.
pub(crate) fn check_constraints(
    node: &Node,
    side: &str,
    constraints: Option<&crate::checks::schema::CompiledSchema>,
    value: &Value,
) -> Result<(), NodeFailure> {
    let Some(schema) = constraints else {
        return Ok(());
    };
    schema.validate(value).map_err(|violations| {
        NodeFailure::new(
            &format!("{side}-constraint-failed"),
            format!(
                "node `{}`: the skill's {side} does not satisfy `{side}_schema`: {violations}",
                node.id
            ),
        )
    })
}

/// Evaluates the node's input mapping into the skill's input object.
pub(crate) fn map_input(node: &Node, vars: &Vars) -> Result<Value, NodeFailure> {
    let mut input = Map::new();
    for (field, expr) in &node.input {
        let value = expr.eval(vars).map_err(|e| {
            NodeFailure::new(
                "input-mapping-failed",
                format!("node `{}`: input field `{field}`: {e}", node.id),
            )
        })?;
        input.insert(field.clone(), value);
    }
    Ok(Value::Object(input))
}

pub(crate) fn check_pre(node: &Node, vars: &Vars) -> Result<(), NodeFailure> {
    for condition in &node.pre {
        match condition.expr.eval_bool(vars) {
            Ok(true) => {}
            Ok(false) => {
                return Err(NodeFailure::new(
                    "precondition-failed",
                    format!(
                        "node `{}`: precondition `{}` failed: {}",
                        node.id, condition.name, condition.message
                    ),
                ));
            }
            Err(e) => {
                return Err(NodeFailure::new(
                    "precondition-error",
                    format!("node `{}`: precondition `{}`: {e}", node.id, condition.name),
                ));
            }
        }
    }
    Ok(())
}

/// Runs the postconditions with `output` bound; returns the verified citations.
pub(crate) fn check_post(node: &Node, vars: &Vars) -> Result<Vec<Value>, NodeFailure> {
    let mut verified = Vec::new();
    for check in &node.post {
        match check {
            PostCheck::Condition(condition) => match condition.expr.eval_bool(vars) {
                Ok(true) => {}
                Ok(false) => {
                    return Err(NodeFailure::new(
                        "postcondition-failed",
                        format!(
                            "node `{}`: postcondition `{}` failed: {}",
                            node.id, condition.name, condition.message
                        ),
                    ));
                }
                Err(e) => {
                    return Err(NodeFailure::new(
                        "postcondition-error",
                        format!(
                            "node `{}`: postcondition `{}`: {e}",
                            node.id, condition.name
                        ),
                    ));
                }
            },
            PostCheck::Citations(spec) => {
                let eval_list =
                    |expr: &crate::scenario::Expr, what: &str| -> Result<Vec<Value>, NodeFailure> {
                        match expr.eval(vars) {
                            Ok(Value::Array(items)) => Ok(items),
                            Ok(other) => Err(NodeFailure::new(
                                "citation-check-error",
                                format!(
                                    "node `{}`: citation check: `{}` ({what}) is {}, not a list",
                                    node.id,
                                    expr.source,
                                    state::kind(&other)
                                ),
                            )),
                            Err(e) => Err(NodeFailure::new(
                                "citation-check-error",
                                format!("node `{}`: citation check: {what}: {e}", node.id),
                            )),
                        }
                    };
                let inputs = CitationInputs {
                    claims: eval_list(&spec.claims, "claims")?,
                    sources: eval_list(&spec.sources, "sources")?,
                    cites: spec.cites.clone(),
                    source_id: spec.source_id.clone(),
                    quote: spec.quote.clone(),
                    source_text: spec.source_text.clone(),
                    min_per_claim: spec.min_per_claim,
                };
                let quotes = check_citations(&inputs).map_err(|e| {
                    let mut failure = NodeFailure::new(
                        "citation-check-failed",
                        format!("node `{}`: {e}", node.id),
                    );
                    failure.detail = json!({ "check": "citations" });
                    failure
                })?;
                verified.extend(quotes.into_iter().map(|q| json!(q)));
            }
        }
    }
    Ok(verified)
}

/// Evaluates the node's artifacts (with `output` bound) into files.
pub(crate) fn artifacts(node: &Node, vars: &Vars) -> Result<Vec<NewArtifact>, NodeFailure> {
    node.artifacts
        .iter()
        .map(|spec| match spec.from.eval(vars) {
            Ok(Value::String(text)) => Ok(NewArtifact {
                name: spec.name.clone(),
                media_type: spec.media_type.clone(),
                bytes: text.into_bytes(),
            }),
            Ok(other) => Err(NodeFailure::new(
                "artifact-failed",
                format!(
                    "node `{}`: artifact `{}` ({}) gave {}, not a string",
                    node.id,
                    spec.name,
                    spec.from.source,
                    state::kind(&other)
                ),
            )),
            Err(e) => Err(NodeFailure::new(
                "artifact-failed",
                format!("node `{}`: artifact `{}`: {e}", node.id, spec.name),
            )),
        })
        .collect()
}

/// Turns the node's writes into state changes.
pub(crate) fn writes(
    cx: &RunContext<'_>,
    node: &Node,
    vars: &Vars,
    state: &RunState,
) -> Result<Vec<crate::store::StateChange>, NodeFailure> {
    let mut changes = Vec::with_capacity(node.writes.len());
    for write in &node.writes {
        let value = write.from.eval(vars).map_err(|e| {
            NodeFailure::new(
                "write-failed",
                format!("node `{}`: write to `{}`: {e}", node.id, write.field),
            )
        })?;
        let change = state::change_for(cx.scenario, state, &write.field, &write.reducer, value)
            .map_err(|e| NodeFailure::new("write-failed", format!("node `{}`: {e}", node.id)))?;
        changes.push(change);
    }
    Ok(changes)
}

pub(crate) fn call_options(node: &Node) -> CallOptions {
    let mut limits = Limits::default();
    if let Some(ms) = node.timeout_ms {
        limits.timeout = Duration::from_millis(ms);
    }
    if let Some(mb) = node.memory_mb {
        limits.memory_bytes = mb << 20;
    }
    limits.fuel = node.fuel;
    CallOptions {
        limits,
        grants: node.grants.clone(),
    }
}

/// Total attempts and first backoff: the node's `retry`, else the skill's manifest.
pub(crate) fn retry_policy(node: &Node, skill: &Skill) -> (u32, u64) {
    match &node.retry {
        Some(retry) => (retry.max_attempts.max(1), retry.backoff_ms),
        None => (
            skill.manifest.retry.max_attempts.max(1),
            u64::from(skill.manifest.retry.initial_backoff_ms),
        ),
    }
}

/// The outcome of a call and its retries.
pub(crate) struct Attempts {
    pub report: CallReport,
    /// The attempt `report` came from, 1-based.
    pub attempt: u32,
    /// One step row per failed attempt that was retried.
    pub failed: Vec<StepRow>,
}

/// Calls the skill, retrying retryable errors with exponential backoff. Blocks
/// (the call and the backoff sleep); run it on a blocking thread whenever a
/// retry may sleep.
pub(crate) fn call_with_retries(
    run_id: &str,
    node: &Node,
    skill: &Skill,
    input: &Value,
    options: &CallOptions,
    events: &dyn super::EventSink,
) -> Attempts {
    let (max_attempts, backoff_ms) = retry_policy(node, skill);
    let mut failed = Vec::new();
    let mut attempt = 1;
    loop {
        let started_at_ms = now_ms();
        let report = skill.call(input, options);
        let error = match &report.result {
            Err(e) if e.retryable() && attempt < max_attempts => e.to_json(),
            _ => {
                return Attempts {
                    report,
                    attempt,
                    failed,
                };
            }
        };
        events.emit(&super::Event::NodeFailed {
            run_id: run_id.to_string(),
            node: node.id.clone(),
            attempt,
            error: error.clone(),
            will_retry: true,
        });
        failed.push(StepRow {
            run_id: run_id.to_string(),
            seq: None,
            node_id: node.id.clone(),
            attempt,
            status: "failed".into(),
            started_at_ms,
            duration_us: report.duration.as_micros() as u64,
            input_hash: None,
            output_hash: None,
            error: Some(error),
            fuel_consumed: Some(report.fuel_consumed),
            memory_peak_bytes: Some(report.memory_peak_bytes),
            detail: None,
        });
        let wait = backoff_ms.saturating_mul(1 << (attempt - 1).min(16));
        if wait > 0 {
            std::thread::sleep(Duration::from_millis(wait));
        }
        attempt += 1;
    }
}

/// [`call_with_retries`] off the async runtime when a retry could sleep, inline
/// otherwise (a single short call costs less than a thread hand-off).
pub(crate) async fn call_node_skill(
    cx: &RunContext<'_>,
    node: &Node,
    skill: &Arc<Skill>,
    input: &Value,
    options: &CallOptions,
) -> Attempts {
    if retry_policy(node, skill).0 <= 1 {
        return call_with_retries(&cx.run_id, node, skill, input, options, &*cx.events);
    }
    let (run_id, node_owned, skill, input, options, events) = (
        cx.run_id.clone(),
        node.clone(),
        skill.clone(),
        input.clone(),
        options.clone(),
        cx.events.clone(),
    );
    let task = tokio::task::spawn_blocking(move || {
        call_with_retries(&run_id, &node_owned, &skill, &input, &options, &*events)
    });
    match task.await {
        Ok(attempts) => attempts,
        Err(e) => Attempts {
            report: CallReport {
                result: Err(CallError::Host {
                    skill: node.skill.clone().unwrap_or_default(),
                    message: format!("the call's thread failed: {e}"),
                    retryable: false,
                }),
                logs: Vec::new(),
                logs_dropped: 0,
                fuel_consumed: 0,
                memory_peak_bytes: 0,
                denied: Vec::new(),
                duration: Duration::ZERO,
            },
            attempt: 1,
            failed: Vec::new(),
        },
    }
}

/// A skill node: map input, check pre, call, check post, write.
pub(crate) async fn run_skill_node(
    cx: &RunContext<'_>,
    node: &Node,
    state: &Arc<RunState>,
) -> NodeResult {
    let skill = skill_of(cx, node).map_err(|f| (f, None))?;
    let mut vars = base_vars(cx, node, state);
    let input = map_input(node, &vars).map_err(|f| (f, None))?;
    check_constraints(node, "input", node.input_constraints.as_deref(), &input)
        .map_err(|f| (f, None))?;
    check_pre(node, &vars).map_err(|f| (f, None))?;

    let options = call_options(node);
    let durable = cx.store.is_some();
    let started_at_ms = now_ms();
    let Attempts {
        report,
        attempt,
        failed,
    } = call_node_skill(cx, node, &skill, &input, &options).await;
    if let Some(store) = cx.store {
        for step in &failed {
            store
                .record_failed_step(step)
                .await
                .map_err(|e| (NodeFailure::new("store-error", e.to_string()), None))?;
        }
    }
    let mut step = empty_step(cx, node, attempt);
    step.started_at_ms = started_at_ms;
    step.fuel_consumed = Some(report.fuel_consumed);
    step.memory_peak_bytes = Some(report.memory_peak_bytes);
    if durable {
        step.input_hash = Some(state_hash(&input));
    }
    let output = match report.result {
        Ok(output) => output,
        Err(e) => {
            let mut failure = NodeFailure::new(e.code(), e.to_string());
            failure.attempt = attempt;
            failure.detail =
                json!({ "kind": e.kind(), "skill": e.skill(), "retryable": e.retryable() });
            return Err((failure, Some(step)));
        }
    };
    if durable {
        step.output_hash = Some(state_hash(&output));
    }
    check_constraints(node, "output", node.output_constraints.as_deref(), &output).map_err(
        |mut f| {
            f.attempt = attempt;
            (f, Some(step.clone()))
        },
    )?;
    vars.set_owned("output", output);
    let verified = check_post(node, &vars).map_err(|mut f| {
        f.attempt = attempt;
        (f, Some(step.clone()))
    })?;
    // The step row's detail is only ever stored.
    let verified_quotes = (durable && !verified.is_empty()).then(|| Value::Array(verified.clone()));
    vars.set_owned("verified", Value::Array(verified));
    let changes = writes(cx, node, &vars, state).map_err(|f| (f, Some(step.clone())))?;
    let files = artifacts(node, &vars).map_err(|f| (f, Some(step.clone())))?;
    if durable {
        let mut detail = Map::new();
        if let Some(verified) = verified_quotes {
            detail.insert("verified_quotes".into(), verified);
        }
        if !report.logs.is_empty() {
            detail.insert("logs".into(), json!(report.logs));
        }
        if !detail.is_empty() {
            step.detail = Some(Value::Object(detail));
        }
    }
    Ok(NodeSuccess {
        changes,
        step,
        fuel_consumed: report.fuel_consumed,
        artifacts: files,
    })
}

/// A gate: conditions only. Its `pre` must hold; routing is by its edges.
pub(crate) fn run_gate(cx: &RunContext<'_>, node: &Node, state: &Arc<RunState>) -> NodeResult {
    let vars = base_vars(cx, node, state);
    check_pre(node, &vars).map_err(|f| (f, None))?;
    let changes = writes(cx, node, &vars, state).map_err(|f| (f, None))?;
    Ok(NodeSuccess {
        changes,
        step: empty_step(cx, node, 1),
        fuel_consumed: 0,
        artifacts: Vec::new(),
    })
}

pub(crate) fn skill_of(cx: &RunContext<'_>, node: &Node) -> Result<Arc<Skill>, NodeFailure> {
    node.skill
        .as_ref()
        .and_then(|alias| cx.loaded.skills.get(alias))
        .cloned()
        .ok_or_else(|| {
            NodeFailure::new(
                "unknown-skill",
                format!("node `{}` has no loaded skill", node.id),
            )
        })
}
