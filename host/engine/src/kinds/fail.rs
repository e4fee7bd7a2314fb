//! A fail node: the run ends as failed, with a report of the node that
//! failed (the last error's, else the node the run came from), the handler,
//! the message, every error so far, the partial results and suggestions.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Finish, Outcome};
use crate::RunContext;
use crate::failure::FailureCode;
use crate::node::base_vars;
use crate::run::partial_results;
use skillhost_scenario::{FailNode, Node};
use skillhost_store::RunState;

pub(crate) fn run(
    cx: &RunContext<'_>,
    node: &Node,
    fail: &FailNode,
    state: &Arc<RunState>,
    came_from: &str,
) -> Outcome {
    Outcome::Finish(Finish::Failed(report(cx, node, fail, state, came_from)))
}

/// The report the run ends with.
fn report(
    cx: &RunContext<'_>,
    node: &Node,
    fail: &FailNode,
    state: &Arc<RunState>,
    came_from: &str,
) -> Value {
    let errors = state.get("errors").cloned().unwrap_or(json!([]));
    let last = errors.as_array().and_then(|e| e.last()).cloned();
    let message = match &fail.message {
        Some(expr) => match expr.eval(&base_vars(cx, node, state)) {
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
    let mut suggestions: Vec<Value> = fail.suggestions.iter().map(|s| json!(s)).collect();
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
        "code": last.as_ref().and_then(|l| l.get("code")).cloned().unwrap_or(json!(FailureCode::RoutedToFailure)),
        "message": message,
        "errors": errors,
        "partial_results": partial_results(state),
        "suggestions": suggestions,
    })
}
