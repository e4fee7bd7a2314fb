//! A skill node: map the input, check it and the preconditions, call the
//! skill (with retries), check the output and the postconditions, turn the
//! result into writes and artifacts.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{NodeFailure, NodeSuccess, Outcome};
use crate::RunContext;
use crate::cache::{self, Lookup};
use crate::call::{Attempts, CallPlan, call_node_skill, journal_entries, usage_detail};
use crate::failure::FailureCode;
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
    tokens_left: Option<u64>,
) -> Outcome {
    run_call(cx, node, call, state, tokens_left).await.into()
}

async fn run_call(
    cx: &RunContext<'_>,
    node: &Node,
    call: &SkillCall,
    state: &Arc<RunState>,
    tokens_left: Option<u64>,
) -> Result<NodeSuccess, (NodeFailure, Option<StepRow>)> {
    let skill = skill_of(cx, node, call).map_err(|f| (f, None))?;
    let mut vars = base_vars(cx, node, state);
    let input = map_input(node, &call.input, &vars).map_err(|f| (f, None))?;
    check_constraints(node, "input", call.input_constraints.as_deref(), &input)
        .map_err(|f| (f, None))?;
    check_pre(node, &call.pre, &vars).map_err(|f| (f, None))?;

    let durable = cx.keeps_records();
    let started_at_ms = now_ms();
    // A cached node first asks the store; a hit stands for the call. A node
    // without `cache` does not even build the lookup.
    let lookup = match call.cache {
        Some(_) => cache::lookup(cx, call, &skill, &input).await,
        None => Lookup::Off,
    };
    let attempts = match &lookup {
        Lookup::Hit(hit) => cache::attempts_of(hit),
        Lookup::Off | Lookup::Miss { .. } => {
            let plan = CallPlan::new(call, &skill, tokens_left, cx.kv.as_ref(), cx.call_trace());
            call_node_skill(cx, &node.id, &skill, &plan, &input).await
        }
    };
    let usage = attempts.usage();
    crate::metered::call_made(cx, call, &attempts.report.denied, usage);
    let Attempts {
        mut report,
        attempt,
        failed,
        ..
    } = attempts;
    // The host calls were made whatever happens to the node now: a failure
    // commits them like a success, and counts their tokens.
    let journal = journal_entries(&node.id, None, std::mem::take(&mut report.journal));
    let failed_after_call = |mut f: NodeFailure, step: &StepRow| {
        f.attempt = attempt;
        f.journal = journal.clone();
        f.usage = usage;
        (f, Some(step.clone()))
    };
    cx.log.record_attempts(&failed).await.map_err(|e| {
        (
            NodeFailure::new(FailureCode::StoreError, e.to_string()),
            None,
        )
    })?;
    if !journal.is_empty() {
        // Held here until the node's commit writes it with the checkpoint.
        skillhost_store::failpoint::hit(|| format!("journaled:{}", node.id));
    }
    cx.emit_logs(&node.id, None, &call.skill, &report.logs);
    if let (Some(trace), Lookup::Off | Lookup::Miss { .. }) = (&cx.trace, &lookup) {
        trace.called(&skill, attempt, &report);
    }
    let mut step = empty_step(cx, node, attempt);
    step.started_at_ms = started_at_ms;
    step.fuel_consumed = Some(report.fuel_consumed);
    step.memory_peak_bytes = Some(report.memory_peak_bytes);
    if durable {
        step.input_hash = Some(state_hash(&input));
        // The last attempt's; the rows of the attempts before it hold theirs.
        step.detail = usage_detail(report.usage);
    }
    let output = match report.result {
        Ok(output) => output,
        Err(e) => {
            let mut failure = NodeFailure::coded(e.code().to_owned(), e.to_string());
            failure.detail =
                json!({ "kind": e.kind(), "skill": e.skill(), "retryable": e.retryable() });
            return Err(failed_after_call(failure, &step));
        }
    };
    if durable {
        step.output_hash = Some(state_hash(&output));
    }
    check_constraints(node, "output", call.output_constraints.as_deref(), &output)
        .map_err(|f| failed_after_call(f, &step))?;
    // Only a call that made no journaled host call is recorded: its output
    // is a function of the key. It is committed only if the node succeeds.
    let cache = match (&lookup, call.cache) {
        (Lookup::Miss { key, .. }, Some(spec)) if journal.is_empty() => {
            Some(cache::entry(key.clone(), &output, spec.ttl_ms))
        }
        _ => None,
    };
    vars.set_owned("output", output);
    let verified = check_post(node, &call.post, &vars).map_err(|f| failed_after_call(f, &step))?;
    // The step row's detail is only ever stored.
    let verified_quotes = (durable && !verified.is_empty()).then(|| Value::Array(verified.clone()));
    vars.set_owned("verified", Value::Array(verified));
    let changes = writes(cx, node, &call.writes, &vars, state).map_err(|mut f| {
        f.journal = journal.clone();
        f.usage = usage;
        (f, Some(step.clone()))
    })?;
    let files = artifacts(node, &call.artifacts, &vars).map_err(|mut f| {
        f.journal = journal.clone();
        f.usage = usage;
        (f, Some(step.clone()))
    })?;
    if durable {
        let mut detail = match step.detail.take() {
            Some(Value::Object(detail)) => detail,
            _ => Map::new(),
        };
        if let Some(verified) = verified_quotes {
            detail.insert("verified_quotes".into(), verified);
        }
        match &lookup {
            Lookup::Hit(hit) => {
                detail.insert("cached".into(), cache::hit_detail(hit));
            }
            Lookup::Miss {
                refused: Some(why), ..
            } => {
                detail.insert("cache_refused".into(), json!(why));
            }
            Lookup::Off | Lookup::Miss { .. } => {}
        }
        if !report.logs.is_empty() {
            detail.insert("logs".into(), json!(report.logs));
        }
        if report.logs_dropped > 0 {
            detail.insert("logs_dropped".into(), json!(report.logs_dropped));
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
        journal,
        logs_dropped: report.logs_dropped,
        usage,
        cache,
        answer: None,
        route: None,
    })
}
