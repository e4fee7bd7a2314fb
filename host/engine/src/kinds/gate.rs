//! A gate: conditions only. Its `pre` must hold; it may write into state;
//! routing is by its edges.

use std::sync::Arc;

use super::{NodeSuccess, Outcome};
use crate::RunContext;
use crate::node::{base_vars, check_pre, writes};
use crate::run::empty_step;
use skillhost_scenario::{GateNode, Node};
use skillhost_store::RunState;

pub(crate) fn run(
    cx: &RunContext<'_>,
    node: &Node,
    gate: &GateNode,
    state: &Arc<RunState>,
) -> Outcome {
    let vars = base_vars(cx, node, state);
    let result = check_pre(node, &gate.pre, &vars)
        .and_then(|()| writes(cx, node, &gate.writes, &vars, state))
        .map(|changes| NodeSuccess::new(changes, empty_step(cx, node, 1)))
        .map_err(|f| (f, None));
    result.into()
}
