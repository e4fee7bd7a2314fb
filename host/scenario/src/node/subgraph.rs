//! `kind = "subgraph"`: runs another scenario file as one step, as a child
//! run of its own. Its `input` mapping (CEL over the parent's `input`,
//! `state`, `config`) is the child's run input; its `writes` see `output`,
//! the child's end: `{run_id, status, state, summary}`; with
//! `keep_artifacts = true` the child's artifacts become the parent's too.
//!
//! Here is only the node as written: the child scenario itself is parsed,
//! checked and loaded by the loader (`load.rs`), which also refuses a file
//! that includes itself.

use std::path::PathBuf;

use super::skill::input_mapping;
use super::{
    BASE_VARS, Condition, NodeContext, NodeExpr, OUTPUT_VARS, Write, conditions, max_visits,
    pre_expressions, write_expressions, writes,
};
use crate::Expr;
use crate::diagnostic::codes;
use crate::file::NodeDecl;
use crate::parse::Parser;

/// How many levels subgraphs may nest: a scenario's child is level 1, the
/// child's child level 2, and a subgraph node at level 16 may not run
/// another. The checker refuses a deeper chain of files, and the engine a
/// child run deeper than this, however the run got there.
///
/// Why 16: nothing shipped nests more than one level (the router runs a
/// workflow), and every level is a run of its own, with its own history,
/// loaded scenario and task; a bound this far above any real use keeps a
/// file a scenario controls from making the host load, walk or run an
/// unbounded tree.
pub const MAX_SUBGRAPH_DEPTH: usize = 16;

/// How many child scenarios one scenario's tree may hold: each subgraph
/// node of every level counts (with the children below it), a file run by
/// two nodes twice. A tree of files that include one another is loaded
/// once per file, but a run, `host graph` and a run's recorded components
/// walk every branch, and a few files that each run the next twice expand
/// to millions of them: at most 256.
pub const MAX_SUBGRAPH_SCENARIOS: usize = 256;

/// The keys a subgraph node reads.
pub const KEYS: &[&str] = &[
    "scenario",
    "input",
    "writes",
    "pre",
    "max_visits",
    "keep_artifacts",
];

#[derive(Debug, Clone)]
pub struct SubgraphNode {
    /// `scenario` as written: relative to the parent's file.
    pub written: String,
    /// The child scenario file, made absolute against the parent's directory.
    pub path: PathBuf,
    /// Line of `scenario`.
    pub path_line: usize,
    /// Child input field -> CEL over the parent's `input`, `state`, `config`,
    /// in file order.
    pub input: Vec<(String, Expr)>,
    pub pre: Vec<Condition>,
    /// See `output`: `{run_id, status, state, summary}` of the child.
    pub writes: Vec<Write>,
    pub max_visits: Option<u32>,
    /// `keep_artifacts = true`: the child's artifacts become this run's
    /// too, under their names and media types, committed with this node.
    pub keep_artifacts: bool,
}

impl SubgraphNode {
    pub(crate) fn expressions<'a>(&'a self, all: &mut Vec<NodeExpr<'a>>) {
        for (field, expr) in &self.input {
            all.push(NodeExpr {
                what: format!("input.{field}"),
                expr,
                vars: BASE_VARS,
            });
        }
        pre_expressions(&self.pre, all);
        write_expressions(&self.writes, OUTPUT_VARS, all);
    }
}

pub(crate) fn parse(p: &mut Parser<'_>, decl: &mut NodeDecl, cx: &NodeContext<'_>) -> SubgraphNode {
    let node = cx.node();
    let (written, path_line) = match decl.scenario.take() {
        Some(path) if !path.get_ref().trim().is_empty() => {
            let line = p.line(&path);
            (path.into_inner(), line)
        }
        other => {
            let line = other.as_ref().map_or(cx.line, |path| p.line(path));
            p.reporter.error(
                line,
                node,
                codes::MISSING_SCENARIO,
                "a subgraph node needs `scenario = \"<file>\"`, the scenario it runs, relative \
                 to this file (e.g. `scenario = \"../summary/scenario.toml\"`)",
            );
            (String::new(), line)
        }
    };
    let path = if written.is_empty() {
        PathBuf::new()
    } else {
        p.dir.join(&written)
    };
    SubgraphNode {
        written,
        path,
        path_line,
        input: input_mapping(p, node, decl.input.take()),
        writes: writes(p, node, decl.writes.take()),
        pre: conditions(p, node, decl.pre.take()),
        max_visits: max_visits(p, node, decl.max_visits.take()),
        keep_artifacts: decl
            .keep_artifacts
            .take()
            .is_some_and(|keep| keep.into_inner()),
    }
}
