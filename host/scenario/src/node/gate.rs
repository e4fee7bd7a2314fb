//! `kind = "gate"`: runs no skill. Its preconditions must hold; it may write
//! into state; its edges route.

use super::{
    BASE_VARS, Condition, NodeContext, NodeExpr, Write, conditions, max_visits, pre_expressions,
    write_expressions, writes,
};
use crate::file::NodeDecl;
use crate::parse::Parser;

/// The keys a gate reads.
pub const KEYS: &[&str] = &["writes", "pre", "max_visits"];

#[derive(Debug, Clone)]
pub struct GateNode {
    pub pre: Vec<Condition>,
    pub writes: Vec<Write>,
    pub max_visits: Option<u32>,
}

impl GateNode {
    pub(crate) fn expressions<'a>(&'a self, all: &mut Vec<NodeExpr<'a>>) {
        pre_expressions(&self.pre, all);
        write_expressions(&self.writes, BASE_VARS, all);
    }
}

pub(crate) fn parse(p: &mut Parser<'_>, decl: &mut NodeDecl, cx: &NodeContext<'_>) -> GateNode {
    let node = cx.node();
    GateNode {
        writes: writes(p, node, decl.writes.take()),
        pre: conditions(p, node, decl.pre.take()),
        max_visits: max_visits(p, node, decl.max_visits.take()),
    }
}
