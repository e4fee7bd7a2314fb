//! Map nodes: one call of the node's skill per item of a list, at most
//! `concurrency` at a time on blocking threads, outputs kept in input order.
//!
//! Every finished item is made durable on its own before the node commits
//! (the run log records it, `RunLog::record_item`), so a crash inside a map
//! re-runs only the items that had not finished.
//!
//! The node runs in phases: its items' inputs, the items done before a
//! crash taken back ([`Items::reuse`]), the others called
//! ([`schedule`]), each settled as it finishes ([`Items::settle`]), and the
//! node's result over them all ([`Items::finish`]).
//!
//! The node's journal is every item's, in item order, whatever order the
//! items finished in, each entry naming its item: every item's call has a
//! journal of its own, which a replay answers that item's call from. An
//! item finished before a crash and reused on resume brings its journal and
//! its attempt from its map item row, so the node's commit holds them all;
//! the step rows of its retried attempts were written as it settled, before
//! its row, so it has them too.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::task::JoinSet;

use super::{NodeFailure, NodeSuccess, Outcome};
use crate::call::{
    Attempts, CallPlan, add_usage, call_with_retries, journal_entries, journal_usage,
};
use crate::failure::FailureCode;
use crate::node::{
    artifacts, base_vars, check_constraints, check_post, check_pre, map_input, skill_of, writes,
};
use crate::run::{empty_step, now_ms};
use crate::run_log::ItemDone;
use crate::{Event, RunContext};
use skillhost_runtime::{Skill, TokenUsage};
use skillhost_scenario::{MapNode, Node, SkillCall, Vars};
use skillhost_store::{JournalEntry, RunState, StepRow, state_hash};

/// A failure of the node, with its step row when it got that far.
type Failed = (NodeFailure, Option<StepRow>);

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

/// The node's phases, in order.
async fn run_items(
    cx: &RunContext<'_>,
    node: &Node,
    map: &MapNode,
    state: &Arc<RunState>,
    visit: u32,
    tokens_left: Option<u64>,
) -> Result<NodeSuccess, Failed> {
    let fail = |f: NodeFailure| (f, None);
    let call = &map.call;
    let skill = skill_of(cx, node, call).map_err(fail)?;
    let vars = base_vars(cx, node, state);
    check_pre(node, &call.pre, &vars).map_err(fail)?;
    let inputs = item_inputs(cx, node, map, state, &vars)?;

    let mut items = Items::new(inputs.len());
    items.reuse(cx, node, visit).await.map_err(fail)?;
    // Items run at once, so each is given what was left when the node
    // started; the core judges the node's total against the budget.
    let plan = CallPlan::new(call, &skill, tokens_left, cx.kv.as_ref(), cx.call_trace());
    let started_at_ms = now_ms();
    schedule(cx, node, map, &skill, &plan, &inputs, visit, &mut items).await;
    items.finish(cx, node, call, state, vars, started_at_ms)
}

/// Each item's input, computed up front, so a bad mapping fails before any
/// call.
fn item_inputs(
    cx: &RunContext<'_>,
    node: &Node,
    map: &MapNode,
    state: &Arc<RunState>,
    vars: &Vars,
) -> Result<Vec<Value>, Failed> {
    let fail = |f: NodeFailure| (f, None);
    let call = &map.call;
    let items = match map.over.eval(vars) {
        Ok(Value::Array(items)) => items,
        Ok(other) => {
            return Err(fail(NodeFailure::new(
                FailureCode::MapOverNotAList,
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
                FailureCode::MapOverFailed,
                format!("map node `{}`: `over`: {e}", node.id),
            )));
        }
    };
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
    Ok(inputs)
}

/// Calls every item without an output yet, at most `concurrency` at a time
/// on blocking threads, settling each as it finishes; after the first
/// failure, starts no more.
#[allow(clippy::too_many_arguments)]
async fn schedule(
    cx: &RunContext<'_>,
    node: &Node,
    map: &MapNode,
    skill: &Arc<Skill>,
    plan: &CallPlan,
    inputs: &[Value],
    visit: u32,
    items: &mut Items,
) {
    let mut queue = (0..items.total)
        .filter(|i| !items.outputs.contains_key(i))
        .collect::<Vec<_>>()
        .into_iter();
    let mut running = JoinSet::new();
    loop {
        while running.len() < map.concurrency.max(1) && items.first_failure.is_none() {
            let Some(index) = queue.next() else { break };
            let (run_id, node_id, skill, plan, input, events, replay) = (
                cx.run_id.clone(),
                node.id.clone(),
                skill.clone(),
                plan.clone(),
                inputs[index].clone(),
                cx.events.clone(),
                cx.log.replay().cloned(),
            );
            running.spawn_blocking(move || {
                let attempts = call_with_retries(
                    &run_id,
                    &node_id,
                    Some(index),
                    &skill,
                    &plan,
                    &input,
                    &events,
                    replay.as_deref(),
                );
                (index, attempts)
            });
        }
        let Some(joined) = running.join_next().await else {
            break;
        };
        match joined {
            Ok((index, attempts)) => {
                items
                    .settle(cx, node, &map.call, visit, index, attempts)
                    .await;
            }
            Err(e) => {
                items.first_failure.get_or_insert(NodeFailure::new(
                    FailureCode::MapItemFailed,
                    format!("map node `{}`: an item's thread failed: {e}", node.id),
                ));
            }
        }
    }
}

/// What the node's items came to so far.
struct Items {
    total: usize,
    outputs: BTreeMap<usize, Value>,
    /// By item index, so the node's journal is in item order.
    journals: BTreeMap<usize, Vec<JournalEntry>>,
    /// The items whose output came from an attempt after the first (their
    /// `wasi:random` seed depends on it): kept in the step for a replay.
    later_attempts: BTreeMap<usize, u32>,
    fuel: u64,
    logs_dropped: u64,
    /// Every attempt's tokens, those of items reused included.
    usage: TokenUsage,
    /// The last attempts' alone (the step row's: the rows of retried
    /// attempts hold their own).
    step_usage: TokenUsage,
    first_failure: Option<NodeFailure>,
}

impl Items {
    fn new(total: usize) -> Self {
        Items {
            total,
            outputs: BTreeMap::new(),
            journals: BTreeMap::new(),
            later_attempts: BTreeMap::new(),
            fuel: 0,
            logs_dropped: 0,
            usage: TokenUsage::default(),
            step_usage: TokenUsage::default(),
            first_failure: None,
        }
    }

    /// Takes the items that finished before a crash, from the run log:
    /// their outputs, journals and attempts, and the completions they made
    /// (counted with the node, which commits them).
    async fn reuse(
        &mut self,
        cx: &RunContext<'_>,
        node: &Node,
        visit: u32,
    ) -> Result<(), NodeFailure> {
        let done = cx
            .log
            .items_done(&cx.run_id, &node.id, visit)
            .await
            .map_err(|e| NodeFailure::new(FailureCode::StoreError, e.to_string()))?;
        for row in done {
            let index = row.item_index as usize;
            if index >= self.total {
                continue;
            }
            self.fuel += row.fuel_consumed;
            self.outputs.insert(index, row.output);
            if !row.journal.is_empty() {
                let usage = journal_usage(&row.journal);
                self.usage.add(usage);
                self.step_usage.add(usage);
                self.journals.insert(index, row.journal);
            }
            if row.attempt > 1 {
                self.later_attempts.insert(index, row.attempt);
            }
            cx.emit(|| Event::MapItemFinished {
                run_id: cx.run_id.clone(),
                node: node.id.clone(),
                index,
                total: self.total,
                reused: true,
            });
        }
        Ok(())
    }

    /// Settles item `index`, whose call ended with `attempts`: its output
    /// checked and made durable on its own, or the node's first failure.
    async fn settle(
        &mut self,
        cx: &RunContext<'_>,
        node: &Node,
        call: &SkillCall,
        visit: u32,
        index: usize,
        attempts: Attempts,
    ) {
        crate::metered::call_made(cx, call, &attempts.report.denied, attempts.usage());
        self.usage.add(attempts.usage());
        self.step_usage.add(attempts.report.usage);
        let Attempts {
            mut report,
            attempt,
            failed,
            ..
        } = attempts;
        // Before the item: an item stored and reused after a crash has the
        // rows of its retried attempts already.
        if let Err(e) = cx.log.record_attempts(&failed).await {
            self.first_failure
                .get_or_insert(NodeFailure::new(FailureCode::StoreError, e.to_string()));
        }
        cx.emit_logs(&node.id, Some(index), &call.skill, &report.logs);
        self.fuel += report.fuel_consumed;
        self.logs_dropped += report.logs_dropped;
        let journal = journal_entries(&node.id, Some(index), std::mem::take(&mut report.journal));
        if attempt > 1 {
            self.later_attempts.insert(index, attempt);
        }
        let mut result = report.result.map_err(Some);
        if let Ok(output) = &result
            && let Err(mut f) =
                check_constraints(node, "output", call.output_constraints.as_deref(), output)
        {
            f.message = format!("{} (item {index})", f.message);
            f.attempt = attempt;
            self.first_failure.get_or_insert(f);
            result = Err(None);
        }
        match result {
            Err(None) => {}
            Ok(output) => {
                let recorded = cx
                    .log
                    .record_item(ItemDone {
                        run_id: &cx.run_id,
                        node_id: &node.id,
                        visit,
                        index,
                        output: &output,
                        duration_us: report.duration.as_micros() as u64,
                        fuel_consumed: report.fuel_consumed,
                        journal: &journal,
                        attempt,
                    })
                    .await;
                if let Err(e) = recorded {
                    self.first_failure
                        .get_or_insert(NodeFailure::new(FailureCode::StoreError, e.to_string()));
                }
                self.outputs.insert(index, output);
                cx.emit(|| Event::MapItemFinished {
                    run_id: cx.run_id.clone(),
                    node: node.id.clone(),
                    index,
                    total: self.total,
                    reused: false,
                });
            }
            Err(Some(e)) => {
                let mut failure = NodeFailure::coded(
                    e.code().to_owned(),
                    format!("map node `{}`, item {index}: {e}", node.id),
                );
                failure.attempt = attempt;
                failure.detail = json!({ "kind": e.kind(), "skill": e.skill(), "item": index });
                self.first_failure.get_or_insert(failure);
            }
        }
        // The host calls were made whatever became of the item.
        if !journal.is_empty() {
            self.journals.insert(index, journal);
        }
    }

    /// The node's result over every item: its failure (the first item's
    /// that failed, with every item's journal), or its output through the
    /// postconditions, writes and artifacts.
    fn finish(
        self,
        cx: &RunContext<'_>,
        node: &Node,
        call: &SkillCall,
        state: &Arc<RunState>,
        mut vars: Vars,
        started_at_ms: i64,
    ) -> Result<NodeSuccess, Failed> {
        let Items {
            total,
            outputs,
            journals,
            later_attempts,
            fuel,
            logs_dropped,
            usage,
            step_usage,
            first_failure,
            ..
        } = self;
        let journal: Vec<JournalEntry> = journals.into_values().flatten().collect();
        let mut step = empty_step(cx, node, 1);
        step.started_at_ms = started_at_ms;
        step.fuel_consumed = Some(fuel);
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
            if cx.log.is_durable() {
                add_usage(&mut step, step_usage);
            }
            return Err(failed_after_calls(failure, &step));
        }

        let output = Value::Array(outputs.into_values().collect());
        if cx.keeps_records() {
            step.output_hash = Some(state_hash(&output));
        }
        vars.set("output", &output);
        let verified =
            check_post(node, &call.post, &vars).map_err(|f| failed_after_calls(f, &step))?;
        vars.set_owned("verified", Value::Array(verified.clone()));
        let changes = writes(cx, node, &call.writes, &vars, state)
            .map_err(|f| failed_after_calls(f, &step))?;
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
            fuel_consumed: fuel,
            artifacts: files,
            journal,
            logs_dropped,
            usage,
            cache: None,
            answer: None,
            route: None,
        })
    }
}

/// The key of a map step's detail that holds, by item index, the attempt
/// each item's output came from when it was not the first.
pub(crate) const ITEM_ATTEMPTS: &str = "item_attempts";
