//! A skill node: map the input, check it and the preconditions, call the
//! skill (with retries), check the output and the postconditions, turn the
//! result into writes and artifacts.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{NodeFailure, NodeSuccess, Outcome};
use crate::RunContext;
use crate::call::{Attempts, CallPlan, call_node_skill};
use crate::node::{
    artifacts, base_vars, check_constraints, check_post, check_pre, map_input, skill_of, writes,
};
use crate::run::{empty_step, now_ms};
use skillhost_scenario::{Node, SkillCall};
use skillhost_store::{RunState, StepRow, state_hash};

pub(crate) async fn run(
    cx: &RunContext<'_>,
    node: &Node,
    call: &SkillCall,
    state: &Arc<RunState>,
) -> Outcome {
    run_call(cx, node, call, state).await.into()
}

async fn run_call(
    cx: &RunContext<'_>,
    node: &Node,
    call: &SkillCall,
    state: &Arc<RunState>,
) -> Result<NodeSuccess, (NodeFailure, Option<StepRow>)> {
    let skill = skill_of(cx, node, call).map_err(|f| (f, None))?;
    let mut vars = base_vars(cx, node, state);
    let input = map_input(node, call, &vars).map_err(|f| (f, None))?;
    check_constraints(node, "input", call.input_constraints.as_deref(), &input)
        .map_err(|f| (f, None))?;
    check_pre(node, &call.pre, &vars).map_err(|f| (f, None))?;

    let plan = CallPlan::new(call, &skill);
    let durable = cx.store.is_some();
    let started_at_ms = now_ms();
    let Attempts {
        report,
        attempt,
        failed,
    } = call_node_skill(cx, &node.id, &skill, &plan, &input).await;
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
    check_constraints(node, "output", call.output_constraints.as_deref(), &output).map_err(
        |mut f| {
            f.attempt = attempt;
            (f, Some(step.clone()))
        },
    )?;
    vars.set_owned("output", output);
    let verified = check_post(node, &call.post, &vars).map_err(|mut f| {
        f.attempt = attempt;
        (f, Some(step.clone()))
    })?;
    // The step row's detail is only ever stored.
    let verified_quotes = (durable && !verified.is_empty()).then(|| Value::Array(verified.clone()));
    vars.set_owned("verified", Value::Array(verified));
    let changes =
        writes(cx, node, &call.writes, &vars, state).map_err(|f| (f, Some(step.clone())))?;
    let files = artifacts(node, &call.artifacts, &vars).map_err(|f| (f, Some(step.clone())))?;
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
        journal: Vec::new(),
    })
}
