//! An approval: the run waits for a person at this node's boundary.
//!
//! Reached without an answer, it evaluates its prompt and says the run
//! waits ([`Outcome::Wait`]); the core records the wait and ends the run
//! loop there, with nothing committed past the checkpoint the run stands
//! at. `host runs answer` records an answer and queues the run again; when
//! it is resumed from that checkpoint, this node finds the answer in the
//! run's wait (`RunLog::decision`) and advances with its writes, its edges
//! seeing it as `answer`. A wait whose deadline passed without an answer
//! goes to `on_timeout` instead, without writes. A replay takes the answer
//! (or the timeout) its step recorded.
//!
//! The answer was checked against the node's shape when it was given
//! (`control.rs`); the decision and who made it are kept in the step's
//! detail (`approval`).

use std::sync::Arc;

use serde_json::{Value, json};

use super::{NodeFailure, NodeSuccess, Outcome, Wait};
use crate::RunContext;
use crate::failure::FailureCode;
use crate::node::{base_vars, writes};
use crate::run::{empty_step, now_ms};
use crate::run_log::Decision;
use skillhost_scenario::{ApprovalNode, Node};
use skillhost_store::RunState;

/// The key of a step's detail that records an approval's decision.
pub(crate) const DETAIL: &str = "approval";

/// Runs the approval node the run reached from checkpoint `at_seq`.
pub(crate) fn run(
    cx: &RunContext<'_>,
    node: &Node,
    approval: &ApprovalNode,
    state: &Arc<RunState>,
    at_seq: u64,
) -> Outcome {
    let decision = cx.log.decision(&node.id, at_seq, now_ms());
    if let (Some(trace), Decision::Answered(_) | Decision::TimedOut(_)) = (&cx.trace, &decision)
        && let Some(wait) = cx.log.wait()
    {
        trace.wait_ended(wait);
    }
    let mut vars = base_vars(cx, node, state);
    let (detail, answer, route) = match decision {
        Decision::Answered(detail) => {
            let answer = Arc::new(detail["answer"].clone());
            vars.set_shared("answer", answer.clone());
            (detail, Some(answer), None)
        }
        Decision::TimedOut(detail) => {
            let Some(timeout) = &approval.timeout else {
                return Outcome::Fail(
                    NodeFailure::new(
                        FailureCode::ApprovalTimeoutWithoutRoute,
                        format!(
                            "node `{}`: the run's wait timed out, but the node has no \
                             `on_timeout` (the scenario changed since it waited)",
                            node.id
                        ),
                    ),
                    None,
                );
            };
            (detail, None, Some(timeout.on_timeout.clone()))
        }
        Decision::Unanswered => return wait(node, approval, &vars),
        Decision::CannotWait => {
            let mut failure = NodeFailure::new(
                FailureCode::ApprovalNeedsDatabase,
                format!(
                    "node `{}` waits for an answer, but this run keeps no checkpoints to \
                     continue from (--durability none)",
                    node.id
                ),
            );
            failure.suggestions =
                vec!["run it with a database (the default, or `--durability normal`)".into()];
            return Outcome::Fail(failure, None);
        }
        Decision::NotRecorded => {
            return Outcome::Fail(
                NodeFailure::new(
                    FailureCode::ApprovalNotRecorded,
                    format!(
                        "node `{}`: the recorded step holds no answer and no timeout to \
                         replay",
                        node.id
                    ),
                ),
                None,
            );
        }
    };
    let changes = match &answer {
        Some(_) => match writes(cx, node, &approval.writes, &vars, state) {
            Ok(changes) => changes,
            Err(failure) => return Outcome::Fail(failure, None),
        },
        None => Vec::new(),
    };
    let mut step = empty_step(cx, node, 1);
    if cx.keeps_records() {
        step.detail = Some(json!({ DETAIL: detail }));
    }
    Outcome::Advance(NodeSuccess {
        answer,
        route,
        ..NodeSuccess::new(changes, step)
    })
}

/// No answer yet: the run waits, showing the prompt.
fn wait(node: &Node, approval: &ApprovalNode, vars: &skillhost_scenario::Vars) -> Outcome {
    let prompt = match approval.prompt.eval(vars) {
        Ok(Value::String(prompt)) => prompt,
        Ok(other) => {
            return Outcome::Fail(
                NodeFailure::new(
                    FailureCode::PromptError,
                    format!(
                        "node `{}`: prompt `{}` gave {other}, not a string",
                        node.id, approval.prompt.source
                    ),
                ),
                None,
            );
        }
        Err(e) => {
            return Outcome::Fail(
                NodeFailure::new(
                    FailureCode::PromptError,
                    format!("node `{}`: prompt: {e}", node.id),
                ),
                None,
            );
        }
    };
    Outcome::Wait(Wait {
        prompt,
        answer_schema: approval.answer_schema.clone(),
        timeout_ms: approval.timeout.as_ref().map(|t| t.after_ms),
    })
}
