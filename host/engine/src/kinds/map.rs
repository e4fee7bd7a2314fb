//! Map nodes: one call of the node's skill per item of a list, at most
//! `concurrency` at a time on blocking threads, outputs kept in input order.
//!
//! Every finished item is made durable on its own before the node commits, so a
//! crash inside a map re-runs only the items that had not finished.
//!
//! The node's journal is every item's, in item order, whatever order the
//! items finished in, each entry naming its item: every item's call has a
//! journal of its own, which a replay answers that item's call from. An
//! item finished before a crash and reused on resume brings its journal and
//! its attempt from its map item row, so the node's commit holds them all.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::task::JoinSet;

use super::{NodeFailure, NodeSuccess, Outcome};
use crate::call::{
    Attempts, CallPlan, add_usage, call_with_retries, journal_entries, journal_usage,
};
use crate::node::{
    artifacts, base_vars, check_constraints, check_post, check_pre, map_input, skill_of, writes,
};
use crate::run::{empty_step, now_ms};
use crate::{Event, RunContext};
use skillhost_runtime::TokenUsage;
use skillhost_scenario::{MapNode, Node};
use skillhost_store::{JournalEntry, MapItemRow, RunState, StepRow, state_hash};

pub(crate) async fn run(
    cx: &RunContext<'_>,
    node: &Node,
    map: &MapNode,
    state: &Arc<RunState>,
    visit: u32,
    tokens_left: Option<u64>,
) -> Outcome {
    run_items(cx, node, map, state, visit, tokens_left)
        .await
        .into()
}

async fn run_items(
    cx: &RunContext<'_>,
    node: &Node,
    map: &MapNode,
    state: &Arc<RunState>,
    visit: u32,
    tokens_left: Option<u64>,
) -> Result<NodeSuccess, (NodeFailure, Option<StepRow>)> {
    let fail = |f: NodeFailure| (f, None);
    let call = &map.call;
    let skill = skill_of(cx, node, call).map_err(fail)?;
    let mut vars = base_vars(cx, node, state);
    check_pre(node, &call.pre, &vars).map_err(fail)?;
    let items = match map.over.eval(&vars) {
        Ok(Value::Array(items)) => items,
        Ok(other) => {
            return Err(fail(NodeFailure::new(
                "map-over-not-a-list",
                format!(
                    "map node `{}`: `over` ({}) gave {}, not a list",
                    node.id,
                    map.over.source,
                    crate::state::kind(&other)
                ),
            )));
        }
        Err(e) => {
            return Err(fail(NodeFailure::new(
                "map-over-failed",
                format!("map node `{}`: `over`: {e}", node.id),
            )));
        }
    };

    // Inputs are computed up front, so a bad mapping fails before any call.
    let mut inputs = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let mut item_vars = base_vars(cx, node, state);
        item_vars.set("item", item).set("index", &json!(index));
        let input = map_input(node, &call.input, &item_vars).map_err(fail)?;
        check_constraints(node, "input", call.input_constraints.as_deref(), &input).map_err(
            |mut f| {
                f.message = format!("{} (item {index})", f.message);
                (f, None)
            },
        )?;
        inputs.push(input);
    }
    let total = inputs.len();

    let mut outputs: BTreeMap<usize, Value> = BTreeMap::new();
    // By item index, so the node's journal is in item order.
    let mut journals: BTreeMap<usize, Vec<JournalEntry>> = BTreeMap::new();
    // The items whose output came from an attempt after the first (their
    // `wasi:random` seed depends on it): kept in the step for a replay.
    let mut later_attempts: BTreeMap<usize, u32> = BTreeMap::new();
    let mut fuel_total = 0;
    let mut logs_dropped = 0;
    // The completions of items finished before a crash: counted with the
    // node, which commits them.
    let mut reused_usage = TokenUsage::default();
    if let Some(store) = cx.store {
        let done = store
            .map_items(&cx.run_id, &node.id, visit)
            .await
            .map_err(|e| fail(NodeFailure::new("store-error", e.to_string())))?;
        for row in done {
            let index = row.item_index as usize;
            if index < total {
                fuel_total += row.fuel_consumed;
                outputs.insert(index, row.output);
                if !row.journal.is_empty() {
                    reused_usage.add(journal_usage(&row.journal));
                    journals.insert(index, row.journal);
                }
                if row.attempt > 1 {
                    later_attempts.insert(index, row.attempt);
                }
                cx.emit(|| Event::MapItemFinished {
                    run_id: cx.run_id.clone(),
                    node: node.id.clone(),
                    index,
                    total,
                    reused: true,
                });
            }
        }
    }

    // Items run at once, so each is given what was left when the node
    // started; the core judges the node's total against the budget.
    let plan = CallPlan::new(call, &skill, tokens_left, cx.kv.as_ref());
    let started_at_ms = now_ms();
    let mut queue = (0..total)
        .filter(|i| !outputs.contains_key(i))
        .collect::<Vec<_>>()
        .into_iter();
    let mut first_failure: Option<NodeFailure> = None;
    // Every attempt's, and the last attempts' alone (the step row's: the
    // rows of retried attempts hold their own).
    let mut usage = reused_usage;
    let mut step_usage = reused_usage;
    let mut failed_steps = Vec::new();
    let mut running = JoinSet::new();
    loop {
        while running.len() < map.concurrency.max(1) && first_failure.is_none() {
            let Some(index) = queue.next() else { break };
            let (run_id, node_id, skill, plan, input, events, replay) = (
                cx.run_id.clone(),
                node.id.clone(),
                skill.clone(),
                plan.clone(),
                inputs[index].clone(),
                cx.events.clone(),
                cx.replay.clone(),
            );
            running.spawn_blocking(move || {
                let attempts = call_with_retries(
                    &run_id,
                    &node_id,
                    Some(index),
                    &skill,
                    &plan,
                    &input,
                    &*events,
                    replay.as_deref(),
                );
                (index, attempts)
            });
        }
        let Some(joined) = running.join_next().await else {
            break;
        };
        let (index, attempts) = match joined {
            Ok(done) => done,
            Err(e) => {
                first_failure.get_or_insert(NodeFailure::new(
                    "map-item-failed",
                    format!("map node `{}`: an item's thread failed: {e}", node.id),
                ));
                continue;
            }
        };
        usage.add(attempts.usage());
        step_usage.add(attempts.report.usage);
        let Attempts {
            mut report,
            attempt,
            failed,
            ..
        } = attempts;
        failed_steps.extend(failed);
        fuel_total += report.fuel_consumed;
        logs_dropped += report.logs_dropped;
        let journal = journal_entries(&node.id, Some(index), std::mem::take(&mut report.journal));
        if attempt > 1 {
            later_attempts.insert(index, attempt);
        }
        let mut result = report.result.map_err(Some);
        if let Ok(output) = &result
            && let Err(mut f) =
                check_constraints(node, "output", call.output_constraints.as_deref(), output)
        {
            f.message = format!("{} (item {index})", f.message);
            f.attempt = attempt;
            first_failure.get_or_insert(f);
            result = Err(None);
        }
        match result {
            Err(None) => {}
            Ok(output) => {
                if let Some(store) = cx.store {
                    let row = MapItemRow {
                        run_id: cx.run_id.clone(),
                        node_id: node.id.clone(),
                        visit,
                        item_index: index as u32,
                        output_hash: state_hash(&output),
                        output: output.clone(),
                        duration_us: report.duration.as_micros() as u64,
                        fuel_consumed: report.fuel_consumed,
                        // No allocation for an item that journaled nothing.
                        journal: journal.clone(),
                        attempt,
                    };
                    if let Err(e) = store.record_map_item(&row).await {
                        first_failure.get_or_insert(NodeFailure::new("store-error", e.to_string()));
                    }
                    skillhost_store::failpoint::hit(|| format!("map-item:{}:{index}", node.id));
                }
                outputs.insert(index, output);
                cx.emit(|| Event::MapItemFinished {
                    run_id: cx.run_id.clone(),
                    node: node.id.clone(),
                    index,
                    total,
                    reused: false,
                });
            }
            Err(Some(e)) => {
                let mut failure = NodeFailure::new(
                    e.code(),
                    format!("map node `{}`, item {index}: {e}", node.id),
                );
                failure.attempt = attempt;
                failure.detail = json!({ "kind": e.kind(), "skill": e.skill(), "item": index });
                first_failure.get_or_insert(failure);
            }
        }
        // The host calls were made whatever became of the item.
        if !journal.is_empty() {
            journals.insert(index, journal);
        }
    }
    if let Some(store) = cx.store {
        for step in &failed_steps {
            store
                .record_failed_step(step)
                .await
                .map_err(|e| fail(NodeFailure::new("store-error", e.to_string())))?;
        }
    }
    let journal: Vec<JournalEntry> = journals.into_values().flatten().collect();
    let mut step = empty_step(cx, node, 1);
    step.started_at_ms = started_at_ms;
    step.fuel_consumed = Some(fuel_total);
    let item_attempts = (!later_attempts.is_empty()).then(|| {
        Value::Object(
            later_attempts
                .iter()
                .map(|(index, attempt)| (index.to_string(), json!(attempt)))
                .collect(),
        )
    });
    let failed_after_calls = |mut f: NodeFailure, step: &StepRow| {
        f.journal = journal.clone();
        f.usage = usage;
        (f, Some(step.clone()))
    };
    if let Some(failure) = first_failure {
        // The step row is the failing item's last attempt, as its error
        // says; the attempts before it are rows of their own already.
        step.attempt = failure.attempt;
        if let Some(item_attempts) = item_attempts {
            step.detail = Some(json!({ ITEM_ATTEMPTS: item_attempts }));
        }
        if cx.store.is_some() {
            add_usage(&mut step, step_usage);
        }
        return Err(failed_after_calls(failure, &step));
    }

    let output = Value::Array(outputs.into_values().collect());
    if cx.keeps_records() {
        step.output_hash = Some(state_hash(&output));
    }
    vars.set("output", &output);
    let verified = check_post(node, &call.post, &vars).map_err(|f| failed_after_calls(f, &step))?;
    vars.set_owned("verified", Value::Array(verified.clone()));
    let changes =
        writes(cx, node, &call.writes, &vars, state).map_err(|f| failed_after_calls(f, &step))?;
    let files =
        artifacts(node, &call.artifacts, &vars).map_err(|f| failed_after_calls(f, &step))?;
    let mut detail = json!({ "items": total });
    if !verified.is_empty() {
        detail["verified_quotes"] = Value::Array(verified);
    }
    if logs_dropped > 0 {
        detail["logs_dropped"] = json!(logs_dropped);
    }
    if let Some(item_attempts) = item_attempts {
        detail[ITEM_ATTEMPTS] = item_attempts;
    }
    step.detail = Some(detail);
    add_usage(&mut step, step_usage);
    Ok(NodeSuccess {
        changes,
        step,
        fuel_consumed: fuel_total,
        artifacts: files,
        journal,
        logs_dropped,
        usage,
        cache: None,
        answer: None,
        route: None,
    })
}

/// The key of a map step's detail that holds, by item index, the attempt
/// each item's output came from when it was not the first.
pub(crate) const ITEM_ATTEMPTS: &str = "item_attempts";
