//! A node: the part every kind has (id, line, description, the edge leaving
//! it, the `config` its expressions see) and one body per kind
//! ([`NodeBody`]), each parsed by its own module.
//!
//! A body holds exactly what its kind means, so a state the engine cannot
//! run (a map node without `over`, a gate with a skill) cannot be built.
//! Adding a kind is one module here (its body, the keys it reads, its
//! parser), one variant of [`NodeKind`] and [`NodeBody`], an arm in each of
//! [`Node`]'s accessors (`call`, `writes`, `max_visits`, …: none has a
//! fall-through arm, so a kind that forgets one does not compile), and its
//! module in the engine.
//!
//! A kind's parser *takes* the keys it understands out of the
//! [`NodeDecl`](crate::file::NodeDecl); whatever is left was written on a
//! kind that gives it no meaning, and is reported as such
//! ([`codes::FIELD_NOT_ALLOWED`]). Each kind also lists its keys
//! (`KEYS`), used for the hint that says where a key does belong; a test
//! checks that every parser takes exactly its `KEYS`.

pub mod approval;
pub mod end;
pub mod fail;
pub mod gate;
pub mod map;
pub mod skill;
pub mod subgraph;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use toml::Spanned;

use crate::diagnostic::codes;
use crate::file::{ConditionDecl, NodeDecl, WriteDecl};
use crate::parse::{Parser, placeholder};
use crate::{Expr, SkillRef};

pub use approval::{ANSWER_VARS, ApprovalNode, ApprovalTimeout};
pub use fail::FailNode;
pub use gate::GateNode;
pub use map::{DEFAULT_MAP_CONCURRENCY, MapNode};
pub use skill::{
    ArtifactEncoding, ArtifactSpec, CacheSpec, CitationSpec, PostCheck, RetrySpec, SkillCall,
};
pub use subgraph::{MAX_SUBGRAPH_DEPTH, MAX_SUBGRAPH_SCENARIOS, SubgraphNode};

/// The kinds of node, as written in `kind = "…"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    /// Runs a skill once.
    Skill,
    /// Runs a skill once per item of a list, results in input order.
    Map,
    /// Runs no skill: conditions, writes and routing only.
    Gate,
    /// Waits for a person's answer.
    Approval,
    /// Ends the run as failed.
    Fail,
    /// Ends the run as completed.
    End,
    /// Runs another scenario file as a child run.
    Subgraph,
}

impl NodeKind {
    pub const ALL: [NodeKind; 7] = [
        NodeKind::Skill,
        NodeKind::Map,
        NodeKind::Gate,
        NodeKind::Approval,
        NodeKind::Fail,
        NodeKind::End,
        NodeKind::Subgraph,
    ];

    pub fn name(self) -> &'static str {
        match self {
            NodeKind::Skill => "skill",
            NodeKind::Map => "map",
            NodeKind::Gate => "gate",
            NodeKind::Approval => "approval",
            NodeKind::Fail => "fail",
            NodeKind::End => "end",
            NodeKind::Subgraph => "subgraph",
        }
    }

    /// End and fail nodes finish the run and have no outgoing edge.
    pub fn is_terminal(self) -> bool {
        matches!(self, NodeKind::End | NodeKind::Fail)
    }

    /// The keys of a `[[node]]` this kind gives a meaning to, besides `id`,
    /// `kind` and `description`.
    pub fn keys(self) -> &'static [&'static str] {
        match self {
            NodeKind::Skill => skill::KEYS,
            NodeKind::Map => map::KEYS,
            NodeKind::Gate => gate::KEYS,
            NodeKind::Approval => approval::KEYS,
            NodeKind::Fail => fail::KEYS,
            NodeKind::End => end::KEYS,
            NodeKind::Subgraph => subgraph::KEYS,
        }
    }
}

impl std::fmt::Display for NodeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A node of a checked scenario.
#[derive(Debug, Clone)]
pub struct Node {
    pub id: String,
    /// Line of the node's `[[node]]` header.
    pub line: usize,
    pub description: String,
    /// What this kind of node does.
    pub body: NodeBody,
    /// Outgoing edges.
    pub route: Route,
    /// Line of the `[[edge]]` leaving this node.
    pub edge_line: Option<usize>,
    /// What `config` is for this node's expressions: the skill's config
    /// defaults with the scenario's `[config]` over them.
    pub config: Map<String, Value>,
}

/// One body per kind of node.
#[derive(Debug, Clone)]
pub enum NodeBody {
    Skill(SkillCall),
    Map(MapNode),
    Gate(GateNode),
    Approval(ApprovalNode),
    Fail(FailNode),
    End,
    Subgraph(SubgraphNode),
}

impl NodeBody {
    pub fn kind(&self) -> NodeKind {
        match self {
            NodeBody::Skill(_) => NodeKind::Skill,
            NodeBody::Map(_) => NodeKind::Map,
            NodeBody::Gate(_) => NodeKind::Gate,
            NodeBody::Approval(_) => NodeKind::Approval,
            NodeBody::Fail(_) => NodeKind::Fail,
            NodeBody::End => NodeKind::End,
            NodeBody::Subgraph(_) => NodeKind::Subgraph,
        }
    }
}

/// An expression of a node, with what it is for (`input.query`, `pre[0]`,
/// `writes[1]`, …) and the variables bound where it runs.
#[derive(Debug)]
pub struct NodeExpr<'a> {
    pub what: String,
    pub expr: &'a Expr,
    pub vars: &'static [&'static str],
}

/// The variables every expression of a node sees.
pub const BASE_VARS: &[&str] = &["input", "state", "config"];
/// A postcondition's: the skill's output too.
pub const OUTPUT_VARS: &[&str] = &["input", "state", "config", "output"];
/// After the postconditions (writes, artifacts): `verified` lists the quotes
/// the citation checks found (source id, quote, character offsets).
pub const AFTER_POST_VARS: &[&str] = &["input", "state", "config", "output", "verified"];

impl Node {
    pub fn kind(&self) -> NodeKind {
        self.body.kind()
    }

    /// End and fail nodes finish the run and have no outgoing edge.
    pub fn is_terminal(&self) -> bool {
        self.kind().is_terminal()
    }

    /// The skill call of a skill or map node.
    pub fn call(&self) -> Option<&SkillCall> {
        match &self.body {
            NodeBody::Skill(call) => Some(call),
            NodeBody::Map(map) => Some(&map.call),
            NodeBody::Gate(_)
            | NodeBody::Approval(_)
            | NodeBody::Fail(_)
            | NodeBody::End
            | NodeBody::Subgraph(_) => None,
        }
    }

    /// The subgraph a subgraph node runs.
    pub fn subgraph(&self) -> Option<&SubgraphNode> {
        match &self.body {
            NodeBody::Subgraph(subgraph) => Some(subgraph),
            NodeBody::Skill(_)
            | NodeBody::Map(_)
            | NodeBody::Gate(_)
            | NodeBody::Approval(_)
            | NodeBody::Fail(_)
            | NodeBody::End => None,
        }
    }

    /// The alias of the skill the node runs (skill and map nodes).
    pub fn skill(&self) -> Option<&str> {
        self.call().map(|call| call.skill.as_str())
    }

    /// The node's writes into state, in file order.
    pub fn writes(&self) -> &[Write] {
        match &self.body {
            NodeBody::Skill(call) | NodeBody::Map(MapNode { call, .. }) => &call.writes,
            NodeBody::Gate(gate) => &gate.writes,
            NodeBody::Approval(approval) => &approval.writes,
            NodeBody::Subgraph(subgraph) => &subgraph.writes,
            NodeBody::Fail(_) | NodeBody::End => &[],
        }
    }

    /// How often the run may reach this node.
    pub fn max_visits(&self) -> Option<u32> {
        match &self.body {
            NodeBody::Skill(call) | NodeBody::Map(MapNode { call, .. }) => call.max_visits,
            NodeBody::Gate(gate) => gate.max_visits,
            NodeBody::Approval(approval) => approval.max_visits,
            NodeBody::Subgraph(subgraph) => subgraph.max_visits,
            NodeBody::Fail(_) | NodeBody::End => None,
        }
    }

    /// Every node this one can route to, in edge order (an approval's
    /// `on_timeout` last).
    pub fn successors(&self) -> Vec<&str> {
        let mut next = match &self.route {
            Route::End => Vec::new(),
            Route::Next(next) => vec![next.as_str()],
            Route::Branches {
                branches,
                otherwise,
            } => branches
                .iter()
                .map(|(_, to)| to.as_str())
                .chain(std::iter::once(otherwise.as_str()))
                .collect(),
        };
        if let NodeBody::Approval(ApprovalNode {
            timeout: Some(timeout),
            ..
        }) = &self.body
        {
            next.push(timeout.on_timeout.as_str());
        }
        next
    }

    /// The variables the node's edges see: an approval's see its answer.
    pub fn edge_vars(&self) -> &'static [&'static str] {
        match self.body {
            NodeBody::Approval(_) => ANSWER_VARS,
            NodeBody::Skill(_)
            | NodeBody::Map(_)
            | NodeBody::Gate(_)
            | NodeBody::Fail(_)
            | NodeBody::End
            | NodeBody::Subgraph(_) => BASE_VARS,
        }
    }

    /// Every CEL expression of the node, with what it is for and the
    /// variables it sees, in the order the node evaluates them.
    pub fn expressions(&self) -> Vec<NodeExpr<'_>> {
        let mut all = Vec::new();
        match &self.body {
            NodeBody::Skill(call) => call.expressions(BASE_VARS, &mut all),
            NodeBody::Map(map) => map.expressions(&mut all),
            NodeBody::Gate(gate) => gate.expressions(&mut all),
            NodeBody::Approval(approval) => approval.expressions(&mut all),
            NodeBody::Fail(fail) => fail.expressions(&mut all),
            NodeBody::End => {}
            NodeBody::Subgraph(subgraph) => subgraph.expressions(&mut all),
        }
        if let Route::Branches { branches, .. } = &self.route {
            for (i, (guard, _)) in branches.iter().enumerate() {
                all.push(NodeExpr {
                    what: format!("branches[{i}]"),
                    expr: guard,
                    vars: self.edge_vars(),
                });
            }
        }
        all
    }
}

/// A write into state after a node succeeds. `from` sees `output` (for map
/// nodes, the list of outputs in input order).
#[derive(Debug, Clone)]
pub struct Write {
    pub field: String,
    pub from: Expr,
    pub reducer: Reducer,
    pub line: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reducer {
    /// The field becomes the value.
    Replace,
    /// The field is an array: the value is appended (an array value extends it).
    Append,
    /// The field is an object: the value's keys are set on it (shallow).
    Merge,
}

impl Reducer {
    pub fn name(self) -> &'static str {
        match self {
            Reducer::Replace => "replace",
            Reducer::Append => "append",
            Reducer::Merge => "merge",
        }
    }
}

/// A named condition: `pre`, `post`.
#[derive(Debug, Clone)]
pub struct Condition {
    pub name: String,
    pub expr: Expr,
    /// Shown when the condition is false.
    pub message: String,
}

/// Where a node goes next.
#[derive(Debug, Clone)]
pub enum Route {
    /// No outgoing edge: only end and fail nodes.
    End,
    Next(String),
    /// The first branch whose guard is true wins; else `otherwise`.
    Branches {
        branches: Vec<(Expr, String)>,
        otherwise: String,
    },
}

/// What a kind's parser is given besides the declaration.
pub(crate) struct NodeContext<'a> {
    pub id: &'a str,
    pub line: usize,
    pub skills: &'a BTreeMap<String, SkillRef>,
}

impl NodeContext<'_> {
    pub fn node(&self) -> Option<&str> {
        Some(self.id)
    }
}

/// Parses one `[[node]]` into a [`Node`] with its route still to come (the
/// edges are read after every node), reporting problems to `p`.
pub(crate) fn parse(
    p: &mut Parser<'_>,
    mut decl: NodeDecl,
    line: usize,
    skills: &BTreeMap<String, SkillRef>,
    scenario_config: &Map<String, Value>,
) -> Node {
    let id = decl.id.get_ref().clone();
    let kind = decl.kind;
    let cx = NodeContext {
        id: &id,
        line,
        skills,
    };
    let body = match kind {
        NodeKind::Skill => NodeBody::Skill(skill::parse(p, &mut decl, &cx)),
        NodeKind::Map => NodeBody::Map(map::parse(p, &mut decl, &cx)),
        NodeKind::Gate => NodeBody::Gate(gate::parse(p, &mut decl, &cx)),
        NodeKind::Approval => NodeBody::Approval(approval::parse(p, &mut decl, &cx)),
        NodeKind::Fail => NodeBody::Fail(fail::parse(p, &mut decl, &cx)),
        NodeKind::End => end::parse(p, &mut decl, &cx),
        NodeKind::Subgraph => NodeBody::Subgraph(subgraph::parse(p, &mut decl, &cx)),
    };
    not_allowed(p, &decl, &id);

    // A skill's config defaults, with the scenario's `[config]` over them.
    let alias = match &body {
        NodeBody::Skill(call) | NodeBody::Map(MapNode { call, .. }) => Some(&call.skill),
        NodeBody::Gate(_)
        | NodeBody::Approval(_)
        | NodeBody::Fail(_)
        | NodeBody::End
        | NodeBody::Subgraph(_) => None,
    };
    let mut config = alias
        .and_then(|alias| skills.get(alias))
        .map(|s| s.config.clone())
        .unwrap_or_default();
    for (key, value) in scenario_config {
        config.insert(key.clone(), value.clone());
    }

    Node {
        id,
        line,
        description: std::mem::take(&mut decl.description),
        body,
        route: Route::End,
        edge_line: None,
        config,
    }
}

/// Reports every key the node's kind did not take: it means nothing there.
fn not_allowed(p: &mut Parser<'_>, decl: &NodeDecl, id: &str) {
    let kind = decl.kind;
    for (key, start) in decl.present_keys() {
        let on = NodeKind::ALL
            .iter()
            .filter(|k| k.keys().contains(&key))
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(", ");
        let line = p.line_at(start);
        p.reporter.error(
            line,
            Some(id),
            codes::FIELD_NOT_ALLOWED,
            format!("`{key}` has no meaning on a {kind} node (only on: {on})"),
        );
    }
}

// ---- parts several kinds share ---------------------------------------------

/// `pre = [...]`: the node's preconditions.
pub(crate) fn conditions(
    p: &mut Parser<'_>,
    node: Option<&str>,
    decls: Option<Spanned<Vec<Spanned<ConditionDecl>>>>,
) -> Vec<Condition> {
    decls
        .map(Spanned::into_inner)
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let c = c.into_inner();
            let name = c.name.unwrap_or_else(|| format!("pre[{i}]"));
            let expr = p.expr(node, &format!("pre `{name}`"), &c.when)?;
            Some(Condition {
                message: c
                    .message
                    .unwrap_or_else(|| format!("`{}` is false", expr.source)),
                name,
                expr,
            })
        })
        .collect()
}

/// `writes = [...]`: what the node writes into state.
pub(crate) fn writes(
    p: &mut Parser<'_>,
    node: Option<&str>,
    decls: Option<Spanned<Vec<Spanned<WriteDecl>>>>,
) -> Vec<Write> {
    decls
        .map(Spanned::into_inner)
        .unwrap_or_default()
        .into_iter()
        .map(|w| {
            let w = w.into_inner();
            let what = format!("write into `{}`", w.field.get_ref());
            // A write whose expression does not compile is kept, so that
            // its field is still checked; the scenario is rejected anyway.
            let from = p
                .expr(node, &what, &w.from)
                .unwrap_or_else(|| placeholder(p.line(&w.from)));
            Write {
                line: p.line(&w.field),
                field: w.field.into_inner(),
                from,
                reducer: w.reducer,
            }
        })
        .collect()
}

/// `max_visits = N`: how often a run may reach the node.
pub(crate) fn max_visits(
    p: &mut Parser<'_>,
    node: Option<&str>,
    decl: Option<Spanned<u32>>,
) -> Option<u32> {
    decl.map(|m| {
        if *m.get_ref() == 0 {
            let line = p.line(&m);
            p.reporter.error(
                line,
                node,
                codes::INVALID_VALUE,
                "`max_visits = 0` would forbid the node; it must be at least 1",
            );
        }
        m.into_inner()
    })
}

/// Adds the expressions of `pre`, in order, to `all`.
pub(crate) fn pre_expressions<'a>(pre: &'a [Condition], all: &mut Vec<NodeExpr<'a>>) {
    for (i, c) in pre.iter().enumerate() {
        all.push(NodeExpr {
            what: format!("pre[{i}]"),
            expr: &c.expr,
            vars: BASE_VARS,
        });
    }
}

/// Adds the expressions of `writes`, which see `vars`, to `all`.
pub(crate) fn write_expressions<'a>(
    writes: &'a [Write],
    vars: &'static [&'static str],
    all: &mut Vec<NodeExpr<'a>>,
) {
    for (i, w) in writes.iter().enumerate() {
        all.push(NodeExpr {
            what: format!("writes[{i}]"),
            expr: &w.from,
            vars,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostic::{Lines, Reporter};
    use std::path::PathBuf;

    /// A `[[node]]` with every key the format has, for `kind`.
    fn every_key(kind: &str) -> String {
        format!(
            r#"
[[node]]
id = "n"
kind = "{kind}"
description = "d"
skill = "s"
input = {{ a = "1" }}
over = "[1]"
concurrency = 2
writes = [{{ field = "f", from = "1" }}]
pre = [{{ when = "true" }}]
post = [{{ when = "true" }}]
retry = {{ max_attempts = 2 }}
timeout_ms = 10
memory_mb = 10
fuel = 10
max_host_calls = 10
host_call_mb = 10
capabilities = {{ log = "" }}
max_visits = 2
message = "'m'"
suggestions = ["s"]
artifacts = [{{ name = "a.md", from = "'x'" }}]
input_schema = {{ type = "object" }}
output_schema = {{ type = "object" }}
cache = {{ ttl = "1h" }}
prompt = "'p'"
answer = {{ ok = {{ type = "boolean" }} }}
on_timeout = "n"
scenario = "child.toml"
keep_artifacts = true
"#
        )
    }

    /// Each kind's parser takes exactly the keys the kind lists, so the
    /// "not allowed" errors and their hints agree with what is parsed.
    #[test]
    fn every_kind_takes_exactly_its_keys() {
        #[derive(serde::Deserialize)]
        struct File {
            node: Vec<NodeDecl>,
        }
        for kind in NodeKind::ALL {
            let text = every_key(kind.name());
            let mut decl = toml::from_str::<File>(&text).unwrap().node.remove(0);
            let all: Vec<&str> = decl.present_keys().into_iter().map(|(k, _)| k).collect();
            let mut reporter = Reporter::new(PathBuf::from("t.toml"));
            let mut p = Parser::for_tests(Lines::new(&text), &mut reporter);
            let skills = BTreeMap::new();
            let cx = NodeContext {
                id: "n",
                line: 2,
                skills: &skills,
            };
            match kind {
                NodeKind::Skill => drop(skill::parse(&mut p, &mut decl, &cx)),
                NodeKind::Map => drop(map::parse(&mut p, &mut decl, &cx)),
                NodeKind::Gate => drop(gate::parse(&mut p, &mut decl, &cx)),
                NodeKind::Approval => drop(approval::parse(&mut p, &mut decl, &cx)),
                NodeKind::Fail => drop(fail::parse(&mut p, &mut decl, &cx)),
                NodeKind::End => drop(end::parse(&mut p, &mut decl, &cx)),
                NodeKind::Subgraph => drop(subgraph::parse(&mut p, &mut decl, &cx)),
            }
            let left: Vec<&str> = decl.present_keys().into_iter().map(|(k, _)| k).collect();
            let taken: Vec<&str> = all.iter().copied().filter(|k| !left.contains(k)).collect();
            let mut listed = kind.keys().to_vec();
            listed.sort_unstable();
            let mut taken_sorted = taken.clone();
            taken_sorted.sort_unstable();
            assert_eq!(taken_sorted, listed, "kind {kind}");
        }
    }
}
