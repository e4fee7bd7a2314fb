//! `kind = "map"`: runs a skill once per item of a list (`over`), at most
//! `concurrency` at a time, outputs in input order. Its call is a skill
//! node's, with `item` and `index` bound in the input mapping.

use super::skill::{self, SkillCall};
use super::{BASE_VARS, NodeContext, NodeExpr};
use crate::Expr;
use crate::diagnostic::codes;
use crate::file::NodeDecl;
use crate::parse::{Parser, placeholder};

/// The keys a map node reads: a skill node's, plus `over` and `concurrency`.
pub const KEYS: &[&str] = &[
    "skill",
    "input",
    "over",
    "concurrency",
    "writes",
    "pre",
    "post",
    "retry",
    "timeout_ms",
    "memory_mb",
    "fuel",
    "max_host_calls",
    "host_call_mb",
    "capabilities",
    "max_visits",
    "artifacts",
    "input_schema",
    "output_schema",
];

pub const DEFAULT_MAP_CONCURRENCY: usize = 4;

/// The variables a map node's input mapping sees.
pub const ITEM_VARS: &[&str] = &["input", "state", "config", "item", "index"];

#[derive(Debug, Clone)]
pub struct MapNode {
    /// The list to map over.
    pub over: Expr,
    /// How many items run at once; at least 1.
    pub concurrency: usize,
    /// The call made for each item.
    pub call: SkillCall,
}

impl MapNode {
    pub(crate) fn expressions<'a>(&'a self, all: &mut Vec<NodeExpr<'a>>) {
        all.push(NodeExpr {
            what: "over".to_string(),
            expr: &self.over,
            vars: BASE_VARS,
        });
        self.call.expressions(ITEM_VARS, all);
    }
}

/// Parses a map node. Without a usable `over` (reported), a stand-in keeps
/// the rest of the node checked; the scenario is rejected either way.
pub(crate) fn parse(p: &mut Parser<'_>, decl: &mut NodeDecl, cx: &NodeContext<'_>) -> MapNode {
    let node = cx.node();
    let call = skill::parse_call(p, decl, cx);
    let concurrency = match decl.concurrency.take() {
        None => DEFAULT_MAP_CONCURRENCY,
        Some(c) if *c.get_ref() >= 1 => *c.get_ref() as usize,
        Some(c) => {
            let line = p.line(&c);
            p.reporter.error(
                line,
                node,
                codes::INVALID_VALUE,
                format!("`concurrency = {}`: it must be at least 1", c.get_ref()),
            );
            DEFAULT_MAP_CONCURRENCY
        }
    };
    let over = match decl.over.take() {
        None => {
            p.reporter.error(
                cx.line,
                node,
                codes::MISSING_OVER,
                "a map node needs `over = \"<CEL list>\"`, e.g. `over = \"state.papers\"`",
            );
            None
        }
        Some(over) => p.expr(node, "`over`", &over),
    };
    MapNode {
        over: over.unwrap_or_else(|| placeholder(cx.line)),
        concurrency,
        call,
    }
}
